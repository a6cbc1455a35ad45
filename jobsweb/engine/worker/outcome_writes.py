"""How the attempts' outcomes are written and logged: FINISH_RUNS' parameters, one log line per
written outcome, and one FINISH_RUNS each when a batch was refused. Apart from execution.py,
which runs the handlers and decides the outcomes."""

import json
import logging

import psycopg

from ...core.logs import run_event
from .. import statements
from ..jobs import signals

# Run events are the worker's lines, whichever module writes them.
log = logging.getLogger("jobsweb.worker")


def finish_params(outcomes):
    """FINISH_RUNS parameters: the outcomes as one JSON array, an object each.

    A success leaves out the keys it has no value for (json_to_recordset reads a missing key as
    NULL, as it reads null; delay and give_up only count for a failure): most runs succeed, and
    their twelve keys were json.dumps's work and the server's parse for five values (issue 55)."""
    rows = []
    for o in outcomes:
        if o.outcome == "succeeded" and o.error is None and o.error_type is None and o.stack is None:
            row = {"id": o.run_id, "attempt": o.attempt, "worker": o.worker, "outcome": "succeeded", "waited": o.waited}
            if o.result is not None:
                row["result"] = o.result
            if o.output is not None:
                row["output"] = o.output
        else:
            row = {"id": o.run_id, "attempt": o.attempt, "worker": o.worker, "outcome": o.outcome, "result": o.result,
                   "error_type": o.error_type, "error": o.error, "stack": o.stack, "delay": o.delay,
                   "give_up": o.give_up, "output": o.output, "waited": o.waited}
        rows.append(row)
    return {"outcomes": json.dumps(rows)}


def log_finished(outcomes, rows, written_before=None):
    """One log line per written outcome; a warning for each the guard rejected, unless
    `written_before(outcomes)` (the ids among them an earlier send of the same finish wrote)
    says it was written all along. Returns the count of attempts this send wrote (a run released
    unstarted is not one)."""
    by_id = {o.run_id: o for o in outcomes}
    unstarted = 0
    for run_id, status, retry_in, seconds in rows:
        o = by_id.pop(run_id)
        fields = dict(run_id=run_id, job_type=o.job_type, attempt=o.attempt, duration=seconds, worker=o.worker)
        if o.outcome == "released":
            unstarted += 1
            run_event(log, logging.INFO, "released", "run %d %s released back to the queue unstarted (attempt %d "
                      "given back)", run_id, o.job_type, o.attempt, run_id=run_id, job_type=o.job_type,
                      attempt=o.attempt, worker=o.worker)
        elif status == "succeeded":
            run_event(log, logging.INFO, "succeeded", "run %d %s succeeded (attempt %d)", run_id, o.job_type,
                      o.attempt, **fields)
        elif status == "failed":
            run_event(log, logging.WARNING, "failed", "run %d %s failed (attempt %d): %s: %s; retry in %.1fs",
                      run_id, o.job_type, o.attempt, o.error_type, o.error, float(retry_in), **fields)
            signals.send(signals.run_retried, run_id=run_id, job_type=o.job_type, attempt=o.attempt,
                         error_type=o.error_type, error=o.error, retry_in=float(retry_in))
        elif status == "dead":
            run_event(log, logging.ERROR, "dead", "run %d %s is dead after attempt %d: %s: %s", run_id,
                      o.job_type, o.attempt, o.error_type, o.error, **fields)
            signals.send(signals.run_dead, run_id=run_id, job_type=o.job_type, attempt=o.attempt,
                         error_type=o.error_type, error=o.error)
        elif status == "cancelled":
            run_event(log, logging.INFO, "cancelled", "run %d %s cancelled (attempt %d)", run_id, o.job_type,
                      o.attempt, **fields)
            signals.send(signals.run_cancelled, run_id=run_id, job_type=o.job_type, attempt=o.attempt)
        else:
            run_event(log, logging.INFO, "released", "run %d %s released back to the queue (attempt %d "
                      "interrupted)", run_id, o.job_type, o.attempt, **fields)
    earlier = written_before(list(by_id.values())) if by_id and written_before is not None else set()
    for o in by_id.values():
        if o.run_id in earlier:
            # Its first send committed and only the answer was lost: written, once.
            run_event(log, logging.INFO, "written", "run %d %s: outcome of attempt %d (%s) was written by its "
                      "first send, whose answer was lost", o.run_id, o.job_type, o.attempt, o.outcome,
                      run_id=o.run_id, job_type=o.job_type, attempt=o.attempt, worker=o.worker)
            continue
        run_event(log, logging.WARNING, "rejected", "run %d %s: outcome of attempt %d rejected: the run is no "
                  "longer held by %s", o.run_id, o.job_type, o.attempt, o.worker, run_id=o.run_id,
                  job_type=o.job_type, attempt=o.attempt, worker=o.worker)
    # Those written before are not counted here: the send that wrote them counted them on
    # job_workers (its WORKER_SEEN committed with them), and this resend's count of them is
    # given back by the worker's next one.
    return len(rows) - unstarted


def finish_each(run, outcomes):
    """Write outcomes one FINISH_RUNS each, after the batch failed: the database refused one of
    them (a value it cannot store). Each that still fails is logged and dropped (its lease runs
    out and lease recovery fails the attempt), so one bad row cannot lose the others' outcomes
    or stop the worker. `run(sql, params)` runs one statement in its own transaction (or
    savepoint) and returns its rows. Returns how many were written."""
    written = 0
    for outcome in outcomes:
        try:
            rows = run(statements.FINISH_RUNS, finish_params([outcome]))
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError):
                raise  # the connection, not the row: the caller handles an outage
            log.error("run %d %s: the outcome of attempt %d could not be written (%s: %s); its lease will "
                      "expire and lease recovery will fail the attempt", outcome.run_id, outcome.job_type,
                      outcome.attempt, type(exc).__name__, str(exc).strip().splitlines()[0] if str(exc) else "")
            continue
        written += log_finished([outcome], rows)
    return written
