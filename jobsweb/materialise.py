"""Turning due schedule slots into runs, exactly once, at the start of every worker tick.

One transaction per tick: lock the due definitions (DUE_DEFINITIONS, SKIP LOCKED), work out
in Python which slots are due and what becomes of each (croniter and zoneinfo live here, not
in SQL), insert one run per slot and advance next_run_at. Two workers ticking in the same
second lock disjoint definitions, and the unique (definition_id, scheduled_for) refuses a
slot that exists already.

Which slots run:
- every slot up to the database's now() is due; all but the newest were missed (no tick
  happened between them and now);
- misfire 'latest' runs the newest due slot; 'all' runs each due slot, at most CATCH_UP_LIMIT
  per tick; 'skip' runs the newest only if it is no more than grace_seconds late;
- overlap 'skip' runs nothing while a run of the definition is queued or running, 'queue'
  creates the run but it waits for the previous one (after_run_id), 'allow' just runs.
Every slot that does not run still gets a row, 'missed' or 'skipped', with the reason.
"""

import logging
from datetime import timedelta

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from . import queries
from .errors import InvalidInput
from .schedule import Schedule

log = logging.getLogger("jobsweb.materialise")

DEFINITIONS_PER_TICK = 100  # definitions materialised per transaction; the rest next tick
CATCH_UP_LIMIT = 20  # runs misfire policy 'all' creates for one definition in one tick
SLOT_ROWS_LIMIT = 50  # 'missed' rows written one per slot; older ones share a summary row
SLOT_SCAN_LIMIT = 10_000  # due slots counted one by one after an outage; beyond, "at least"


class Conflict(Exception):
    """A guarded write changed no row: roll the whole materialisation back."""


def materialise_due(link, limit=DEFINITIONS_PER_TICK):
    """Create the runs of every due slot; return how many definitions were advanced."""
    return link.in_transaction(lambda conn: _materialise(conn, limit))


def _materialise(conn, limit):
    """The body of materialise_due, inside its transaction on psycopg connection `conn`."""
    with conn.cursor(row_factory=dict_row) as cur:
        definitions = cur.execute(queries.DUE_DEFINITIONS, {"limit": limit}).fetchall()
    advanced = []
    logged = []
    # One pipeline: the INSERTs and UPDATEs of every definition go out together instead of
    # one round trip each; their results are checked once the pipeline has synced.
    with conn.pipeline():
        for d in definitions:
            try:
                schedule = Schedule(d["schedule"], d["timezone"])
            except InvalidInput as exc:
                # Written behind the API's back; left due, so the definition shows as overdue.
                log.error("definition %d: cannot materialise: %s", d["id"], exc)
                continue
            slots, next_run_at, missed = plan(d, schedule)
            logged += _write(conn, d, slots)
            advanced.append((d, conn.execute(queries.ADVANCE_DEFINITION, {
                "id": d["id"], "due_at": d["next_run_at"], "next_run_at": next_run_at, "missed": missed,
            })))
    for d, cur in advanced:
        if cur.rowcount != 1:
            raise Conflict(f"definition {d['id']} changed while it was locked for materialising")
    for d, slot, status, reason, cur in logged:
        _log_slot(d, slot, status, reason, cur.fetchone())
    return len(advanced)


def plan(d, schedule):
    """([(slot, status, reason)], next_run_at, missed count) for a due definition row `d`."""
    now = d["now"]
    due, next_run_at, more = _due_slots(d["next_run_at"], schedule, now)
    newest = due[-1]
    late = now - newest > timedelta(seconds=d["grace_seconds"])
    policy = d["misfire_policy"]
    if policy == "all":
        run = due[-CATCH_UP_LIMIT:]
        dropped = due[:-CATCH_UP_LIMIT]
        why = f"misfire policy 'all' catches up at most {CATCH_UP_LIMIT} slots at a time"
    elif policy == "skip":
        run = [] if late else [newest]
        dropped = due if late else due[:-1]
        why = "misfire policy 'skip' drops slots that were missed"
    else:
        run = [newest]
        dropped = due[:-1]
        why = f"misfire policy 'latest' ran only the slot of {_clock(newest, schedule)}"

    tz_now = _clock(now, schedule)
    slots = [(slot, "missed", f"no tick between {_clock(slot, schedule)} and {tz_now}; {why}")
             for slot in dropped[-SLOT_ROWS_LIMIT:]]
    older = len(dropped) - SLOT_ROWS_LIMIT + more
    if older > 0:
        first = dropped[0]
        slots.insert(0, (first, "missed",
                         f"no tick between {_clock(first, schedule)} and {tz_now}; this row stands for "
                         f"{'at least ' if more else ''}{older} slots from then on; {why}"))
    slots += [(slot, "queued", None) for slot in run]
    return slots, next_run_at, len(dropped) + more


def _due_slots(first, schedule, now):
    """(due slots up to SLOT_SCAN_LIMIT, first slot after now, count of due slots not listed)."""
    due = [first]
    for slot in schedule.fire_times(first):
        if slot > now:
            return due, slot, 0
        if len(due) == SLOT_SCAN_LIMIT:
            # A long outage of a frequent schedule: stop counting, resume at the next slot.
            return due, schedule.next_after(now), 1
        due.append(slot)


def _write(conn, d, slots):
    """Insert the planned slots, applying the overlap policy to those that should run.

    Returns (d, slot, status, reason, cursor) for each slot whose result is read later; a
    queued slot's id is read at once only when a later queued slot must wait for it.
    """
    active_id, active_status = d["active_id"], d["active_status"]
    later = []
    for i, (slot, status, reason) in enumerate(slots):
        after = None
        if status == "queued" and active_id is not None:
            if d["overlap_policy"] == "skip":
                status, reason = "skipped", f"previous run {active_id} still {active_status}"
            elif d["overlap_policy"] == "queue":
                after = active_id
        cur = conn.execute(queries.INSERT_SLOT, {
            "definition_id": d["id"], "job_type": d["job_type"], "payload": Jsonb(d["payload"]),
            "status": status, "max_attempts": d["max_attempts"], "scheduled_for": slot,
            "reason": reason, "after_run_id": after, "timeout_seconds": d["timeout_seconds"],
            "lease_seconds": d["lease_seconds"], "backoff_base": d["backoff_base"],
            "backoff_cap": d["backoff_cap"],
        })
        chained = (status == "queued" and d["overlap_policy"] != "allow"
                   and any(s[1] == "queued" for s in slots[i + 1:]))
        if not chained:
            later.append((d, slot, status, reason, cur))
            continue
        row = cur.fetchone()
        _log_slot(d, slot, status, reason, row)
        if row is not None:
            active_id, active_status = row[0], "queued"
    return later


def _log_slot(d, slot, status, reason, row):
    if row is None:
        log.warning("definition %d: slot %s already exists; not created again", d["id"], slot)
    elif status == "queued":
        log.info("definition %d: run %d queued for slot %s", d["id"], row[0], slot.isoformat())
    else:
        log.warning("definition %d: slot %s %s: %s", d["id"], slot.isoformat(), status, reason)


def _clock(moment, schedule):
    """A time as people at the definition read it: 2026-03-29 06:00 CEST."""
    return moment.astimezone(schedule.tz).strftime("%Y-%m-%d %H:%M %Z")
