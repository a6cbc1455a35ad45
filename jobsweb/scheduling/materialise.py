"""Turning due schedule slots into runs, exactly once, at the start of every worker tick.

One transaction per batch of due definitions: lock them (DUE_DEFINITIONS, SKIP LOCKED), work
out in Python which slots are due and what becomes of each (with schedule.fire_times, which
the admin form's preview uses too), then insert the runs of the whole batch in one statement
(INSERT_SLOTS) and advance every definition's next_run_at in another (ADVANCE_DEFINITIONS),
sent together. Two workers ticking in the same second lock disjoint definitions, and the
unique (definition_id, scheduled_for) refuses a slot that exists already.

Which slots run:
- every slot up to the database's now() is due; all but the newest were missed (no tick
  happened between them and now);
- misfire 'latest' runs the newest due slot; 'all' runs each due slot, at most CATCH_UP_LIMIT
  per tick; 'skip' runs the newest only if it is no more than grace_seconds late;
- overlap 'skip' runs nothing while a run of the definition is queued or running, 'queue'
  creates the run but it waits for the previous one (after_run_id), 'allow' just runs.
Every slot that does not run still gets a row, 'missed' or 'skipped', with the reason.

External definitions (jobsweb watches them, never runs them: scheduling/reports.py) never get a
queued run. Their slots are reported by `flask jobs exec` or a ping, which moves next_run_at on;
a slot still pending grace_seconds after it fell due is found here and becomes 'missed' (or
'skipped' while a reported run of overlap policy 'skip' is still running).
"""

import logging
from datetime import timedelta, timezone

from psycopg.rows import dict_row

from ..core.errors import InvalidInput
from ..engine.statements import INSERT_SLOTS
from ..engine.worker.duties import Duty
from .schedule import Schedule, local_time

log = logging.getLogger("jobsweb.materialise")

# Definitions materialised per transaction (one INSERT, one UPDATE); the rest next pass. At 100,
# round trips and commits were a sixth of a 10,000-definition backlog's time; 500 still keeps
# a pass to ~50 ms, so the worker's claims wait little behind it.
DEFINITIONS_PER_TICK = 500
CATCH_UP_LIMIT = 20  # runs misfire policy 'all' creates for one definition in one tick
SLOT_ROWS_LIMIT = 50  # 'missed' rows written one per slot; older ones share a summary row
SLOT_SCAN_LIMIT = 10_000  # due slots counted one by one after an outage; beyond, "at least"
# After a pass that found no due slot, the next one waits this long: a worker draining its
# queue loops every few milliseconds and need not look for due slots each time, while a slot
# (whole seconds, schedule.MIN_EVERY) is still materialised within a quarter second. A pass
# that found work repeats at once, so a backlog of due definitions is not slowed down.
IDLE_INTERVAL = 0.25  # seconds

# Definitions with a slot due, locked for the rest of the materialising transaction. SKIP
# LOCKED: a definition another worker is materialising is its business; when that worker
# commits, next_run_at has moved past now() and the row no longer matches. `active` is the
# newest run of the definition that will still execute, for the overlap policy: looked up
# only for the `limit` definitions locked, not for every due one before the LIMIT (with
# 10,000 due, that lookup was most of a tick's time). Ordered by next_run_at alone, so that
# the index hands over the oldest due rows and the scan stops at `limit`: a tie-break on id
# made PostgreSQL read and sort every due definition first.
# An external definition is due only once its pending slot is past the grace: until then a
# report may still come (it is read among the due rows of the index, and left).
# Uses indexes job_definitions_due and job_runs_definition_active.
DUE_DEFINITIONS = """
SELECT d.id, d.job_type, d.payload, d.schedule, d.timezone, d.max_attempts, d.misfire_policy,
       d.overlap_policy, d.grace_seconds, d.next_run_at, d.timeout_seconds, d.lease_seconds,
       d.backoff_base, d.backoff_cap, d.external, active.id AS active_id, active.status AS active_status,
       now() AS now
FROM (
    SELECT * FROM job_definitions
    WHERE enabled AND next_run_at <= now()
      AND (NOT external OR next_run_at <= now() - make_interval(secs => grace_seconds))
    ORDER BY next_run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) d
LEFT JOIN LATERAL (
    SELECT r.id, r.status FROM job_runs r
    WHERE r.definition_id = d.id AND r.status IN ('queued', 'running', 'failed')
    ORDER BY r.id DESC
    LIMIT 1
) active ON true
ORDER BY d.next_run_at, d.id
"""

# Move a batch of definitions past the slots just materialised. Guarded by the slot each was
# due at, so a definition edited since it was read (impossible under the row lock, but cheap
# to check) is never advanced from stale data: RETURNING names the definitions that moved.
ADVANCE_DEFINITIONS = """
UPDATE job_definitions d
SET next_run_at = a.next_run_at, missed_count = d.missed_count + a.missed
FROM unnest(%(ids)s::bigint[], %(due_ats)s::timestamptz[], %(next_run_ats)s::timestamptz[],
            %(missed)s::int[]) AS a(id, due_at, next_run_at, missed)
WHERE d.id = a.id AND d.next_run_at = a.due_at
RETURNING d.id
"""


class Conflict(Exception):
    """A guarded write changed no row: roll the whole materialisation back."""


def duty():
    """Materialising as a worker duty: again at once after a pass that found work."""
    return Duty("materialise", lambda link: materialise_due(link) > 0, every=IDLE_INTERVAL, after_work=0)


def materialise_due(link, limit=DEFINITIONS_PER_TICK):
    """Create the runs of every due slot; return how many definitions were advanced."""
    return link.in_transaction(lambda conn: _materialise(conn, limit))


def _materialise(conn, limit):
    """The body of materialise_due, inside its transaction on psycopg connection `conn`."""
    with conn.cursor(row_factory=dict_row) as cur:
        definitions = cur.execute(DUE_DEFINITIONS, {"limit": limit}).fetchall()
    planned = []  # (definition id, slot, status, reason, after_run_id, chain): INSERT_SLOTS rows
    advances = []  # (definition id, due at, next_run_at, missed): ADVANCE_DEFINITIONS rows
    for d in definitions:
        try:
            schedule = Schedule(d["schedule"], d["timezone"])
        except InvalidInput as exc:
            # Written behind the API's back; left due, so the definition shows as overdue.
            log.error("definition %d: cannot materialise: %s", d["id"], exc)
            continue
        if d["external"]:
            slots, next_run_at, missed = plan_unreported(d, schedule)
            planned += [(d["id"], slot, status, reason, None, None) for slot, status, reason in slots]
        else:
            slots, next_run_at, missed = plan(d, schedule)
            planned += _overlap(d, slots)
        advances.append((d["id"], d["next_run_at"], next_run_at, missed))
    if not advances:
        return 0
    # Both statements in one round trip, each with one array per column; the commit follows.
    with conn.pipeline():
        inserted = conn.execute(INSERT_SLOTS, dict(zip(
            ("definition_ids", "slots", "statuses", "reasons", "after_run_ids", "chains"),
            map(list, zip(*planned)))))
        advanced = conn.execute(ADVANCE_DEFINITIONS, dict(zip(
            ("ids", "due_ats", "next_run_ats", "missed"), map(list, zip(*advances)))))
    moved = {row[0] for row in advanced.fetchall()}
    for definition_id, *_ in advances:
        if definition_id not in moved:
            raise Conflict(f"definition {definition_id} changed while it was locked for materialising")
    # Keyed in UTC on both sides: psycopg returns scheduled_for in the session's TimeZone, and
    # a time in the second pass of a repeated hour (fold=1) is never == to the same instant in
    # another zone (PEP 495), and hashes as its first pass.
    created = {(row[1], row[2].astimezone(timezone.utc)): row for row in inserted.fetchall()}
    for definition_id, slot, *_ in planned:
        _log_slot(definition_id, slot, created.get((definition_id, slot.astimezone(timezone.utc))))
    return len(advances)


def plan(d, schedule):
    """([(slot, status, reason)], next_run_at, missed count) for a due definition row `d`."""
    now = d["now"]
    due, next_run_at, more = due_slots(d["next_run_at"], schedule, now)
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
        why = f"misfire policy 'latest' ran only the slot of {local_time(newest, schedule.tz)}"

    slots = missed_rows(dropped, more, schedule, "no tick between {slot} and {now}", now, why)
    slots += [(slot, "queued", None) for slot in run]
    return slots, next_run_at, len(dropped) + more


def plan_unreported(d, schedule):
    """([(slot, status, reason)], next_run_at, missed count) for a due external definition row
    `d`: every slot past its grace with no report is missed; next_run_at is the oldest slot still
    within it (a report may still come for it)."""
    now, grace = d["now"], d["grace_seconds"]
    due, next_run_at, more = due_slots(d["next_run_at"], schedule, now - timedelta(seconds=grace))
    # Not "between {slot} and {now}": a grace under a minute read "between 13:49 UTC and 13:49 UTC".
    slots = missed_rows(due, more, schedule, f"not reported within its grace ({grace} s) of {{slot}}", now,
                        "external: its crontab line or script reports each run")
    if d["active_status"] == "running" and d["overlap_policy"] == "skip":
        slots = [(slot, "skipped", f"previous run {d['active_id']} still running") for slot, _, _ in slots]
    return slots, next_run_at, len(due) + more


def missed_rows(dropped, more, schedule, words, now, why):
    """[(slot, 'missed', reason)] for the slots `dropped` (and `more` not listed): one row each
    for the newest SLOT_ROWS_LIMIT, one summary row for the older ones. `words` is formatted
    with the slot and `now` in the schedule's timezone."""
    tz_now = local_time(now, schedule.tz)
    slots = [(slot, "missed", f"{words.format(slot=local_time(slot, schedule.tz), now=tz_now)}; {why}")
             for slot in dropped[-SLOT_ROWS_LIMIT:]]
    older = len(dropped) - SLOT_ROWS_LIMIT + more
    if older > 0:
        first = dropped[0]
        slots.insert(0, (first, "missed", f"{words.format(slot=local_time(first, schedule.tz), now=tz_now)}; "
                                          f"this row stands for {'at least ' if more else ''}{older} slots from "
                                          f"then on; {why}"))
    return slots


def due_slots(first, schedule, now):
    """(due slots up to SLOT_SCAN_LIMIT, first slot after now, count of due slots not listed)."""
    due = [first]
    for slot in schedule.fire_times(first):
        if slot > now:
            return due, slot, 0
        if len(due) == SLOT_SCAN_LIMIT:
            # A long outage of a frequent schedule: stop counting, resume at the next slot.
            return due, schedule.next_after(now), 1
        due.append(slot)


def _overlap(d, slots):
    """Apply the definition's overlap policy to its planned slots: rows for INSERT_SLOTS.

    The run the definition has already (active_id) is known here; a slot that follows another
    queued slot of this batch depends on that run's id, not known before the insert, so it
    goes as a chain and INSERT_SLOTS decides it (see there).
    """
    active_id, active_status, policy = d["active_id"], d["active_status"], d["overlap_policy"]
    rows = []
    first_queued = True
    for slot, status, reason in slots:
        after, chain = None, None
        if status == "queued" and policy != "allow":
            if active_id is not None and policy == "skip":
                status, reason = "skipped", f"previous run {active_id} still {active_status}"
            elif policy == "queue":
                after, chain = active_id, None if first_queued else "queue"
            elif not first_queued:
                chain = "skip"
            first_queued = False
        rows.append((d["id"], slot, status, reason, after, chain))
    return rows


def _log_slot(definition_id, slot, row):
    """Log one planned slot: `row` is what INSERT_SLOTS returned for it, None if it existed."""
    if row is None:
        log.warning("definition %d: slot %s already exists; not created again", definition_id, slot)
    elif row[3] == "queued":
        log.info("definition %d: run %d queued for slot %s", definition_id, row[0], slot.isoformat())
    else:
        log.warning("definition %d: slot %s %s: %s", definition_id, slot.isoformat(), row[3], row[4])
