"""Runs reported from outside: `flask jobs exec` (ops/command_runs.py) and ping URLs
(web/pings.py) record runs of a definition that jobsweb does not execute.

Every report locks its definition first (LOCK_BY_NAME / LOCK_BY_TOKEN), so reports of one
definition take turns and each sees what the previous one committed: the overlap check of two
execs started together, the slot a report counts for and the ping rate limit are all decided
in the database, whichever process or host the reports come from.

Slots. An external definition's next_run_at is its oldest slot not yet reported. A report
counts for the newest slot due by now (or due within EARLY_SECONDS, so that a cron host whose
clock runs a little ahead still reports its slot); older slots it leaves behind get 'missed'
rows, and next_run_at moves to the slot after. Slots no report comes for are made 'missed' by
materialise.plan_unreported once their grace is over. A definition jobsweb runs itself keeps
its slots for the worker: a report of it is a run outside the schedule, like "run now".

The caller commits (the report and its slot bookkeeping commit together).
"""

import logging
from dataclasses import dataclass
from datetime import timedelta

from ..core.database import execute
from ..core.errors import InvalidInput
from ..engine.runs import reported_runs
from ..engine.runs.reported_runs import PING_HOLDER
from ..engine.statements import INSERT_SLOTS
from .materialise import ADVANCE_DEFINITIONS, due_slots, missed_rows
from .schedule import Schedule, local_time

log = logging.getLogger("jobsweb.reports")

# A report this early still counts for the coming slot (at most a quarter of its period): a cron
# host's clock a little ahead of the database's. More would take a slow run's late report for
# the next slot's.
EARLY_SECONDS = 10
# Pings: at most PING_BURST runs created per PING_WINDOW seconds and definition, so about one
# ping a second sustained, PING_BURST at once (a retry loop in a script, a few starts).
PING_BURST = 10
PING_WINDOW = 10  # seconds
PING_SCAN = 200  # newest runs of the definition read to count its reports (see RECENT_REPORTS)
MIN_PING_LEASE = 60  # seconds a /start run waits for its end when the definition has no timeout


@dataclass(frozen=True)
class Started:
    """A reported run: running (the reporter goes on) or skipped (it must not start)."""

    run_id: int
    status: str
    reason: str | None
    slot: object  # the scheduled slot it counts for (a datetime), or None


@dataclass(frozen=True)
class PingAnswer:
    """What a ping came to: its HTTP status, and for a 429 the seconds to wait."""

    status: int
    retry_after: int = 0


def lock(name=None, token=None):
    """The definition named `name` (or holding ping token `token`), locked for this transaction;
    a mapping of its columns and the database's now, or None."""
    if name is not None:
        return execute(reported_runs.LOCK_BY_NAME, {"name": name}).mappings().first()
    return execute(reported_runs.LOCK_BY_TOKEN, {"token": token}).mappings().first()


def start(d, holder, lease, skip_if_running):
    """Record a run of the locked definition `d` started by `holder`, holding it for `lease`
    seconds; 'skipped' instead when `skip_if_running` and a run of it is still running."""
    slot = _report_slot(d)
    row = execute(reported_runs.START_REPORTED, {
        "definition_id": d["id"], "holder": holder, "lease": lease, "slot": slot,
        "skip_if_running": skip_if_running}).first()
    return Started(row.id, row.status, row.reason, slot)


def finish(run_id, holder, status, error_type=None, error=None, output=None):
    """Record how the reported run ended ('succeeded' or 'dead'); False if it had already ended
    (its lease ran out and lease recovery recorded it dead)."""
    assert status in ("succeeded", "dead")
    return execute(reported_runs.FINISH_REPORTED, {
        "run_id": run_id, "holder": holder, "status": status, "error_type": error_type, "error": error,
        "output": output}).first() is not None


def start_exec(name, holder, lease):
    """The run of `flask jobs exec NAME`: running, or skipped while one of NAME is running
    (overlap 'skip' and 'queue' both skip: a crontab line cannot wait; 'allow' runs side by side)."""
    d = lock(name=name)
    if d is None:
        raise InvalidInput("name", f"no job definition is called {name!r}")
    return start(d, holder, lease, skip_if_running=d["overlap_policy"] != "allow")


def ping(token, event, code=None, output=None):
    """Record a ping: `event` 'start', 'success', 'fail', or 'code' with exit `code`. An end
    closes the run the last /start opened, or is a run of its own. 404 for an unknown token,
    429 past the rate limit (nothing is written then)."""
    d = lock(token=token)
    if d is None:
        return PingAnswer(404)
    count, wait = execute(reported_runs.RECENT_REPORTS, {"definition_id": d["id"], "window": PING_WINDOW,
                                                         "scan": PING_SCAN}).first()
    if count >= PING_BURST:
        return PingAnswer(429, max(1, int(wait or 1)))
    open_run = execute(reported_runs.OPEN_PING_RUN, {"definition_id": d["id"]}).scalar()
    lease = d["timeout_seconds"] or max(d["grace_seconds"], MIN_PING_LEASE)
    if event == "start":
        if open_run is not None:
            finish(open_run, PING_HOLDER, "dead", "no_end", "a new /start came before this run's end was reported")
        start(d, PING_HOLDER, lease, skip_if_running=False)
        return PingAnswer(200)
    if event == "code":
        status = "succeeded" if code == 0 else "dead"
        error_type, error = (None, None) if code == 0 else ("exit_code", f"exit code {code}")
    else:
        status = "succeeded" if event == "success" else "dead"
        error_type, error = (None, None) if event == "success" else ("failed", "the script reported a failure")
    if open_run is None:
        open_run = start(d, PING_HOLDER, lease, skip_if_running=False).run_id
    finish(open_run, PING_HOLDER, status, error_type, error, output)
    return PingAnswer(200)


def _report_slot(d):
    """The slot a report now counts for (None: none), with 'missed' rows for older pending
    slots and next_run_at moved past it, for an enabled external definition `d`."""
    if not (d["external"] and d["enabled"] and d["next_run_at"] and d["schedule"]):
        return None
    try:
        schedule = Schedule(d["schedule"], d["timezone"])
    except InvalidInput as exc:  # stored behind the API's back: record the run, count no slot
        log.error("definition %d: cannot read its schedule: %s", d["id"], exc)
        return None
    first, now = d["next_run_at"], d["now"]
    early = min(timedelta(seconds=EARLY_SECONDS), (schedule.next_after(first) - first) / 4)
    if first > now + early:
        return None  # nothing due: a run outside the schedule
    due, next_run_at, more = due_slots(first, schedule, now + early)
    slot = due[-1]
    missed = missed_rows(due[:-1], more, schedule, "not reported between {slot} and {now}", now,
                         f"the report at {local_time(now, schedule.tz)} counted for the slot of "
                         f"{local_time(slot, schedule.tz)}")
    if missed:
        execute(INSERT_SLOTS, dict(zip(
            ("definition_ids", "slots", "statuses", "reasons", "after_run_ids", "chains"),
            map(list, zip(*[(d["id"], s, status, reason, None, None) for s, status, reason in missed])))))
    moved = execute(ADVANCE_DEFINITIONS, {"ids": [d["id"]], "due_ats": [first], "next_run_ats": [next_run_at],
                                          "missed": [len(due) - 1 + more]}).first()
    assert moved is not None, "the definition is locked by this transaction"
    return slot
