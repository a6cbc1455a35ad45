"""Operator actions on runs: retry, cancel and delete, one run or many (the caller commits each
batch); run now and reschedule a queued run.

The statements and the races they guard against are in action_statements.py (RETRY_RUNS,
CANCEL_WAITING, REQUEST_CANCEL, CANCEL_BEFORE_DELETE, DELETE_RUNS, RUN_QUEUED_NOW,
RESCHEDULE_QUEUED).

A cancel, a delete or a retry also changes the runs that wait for these (the trigger
job_runs_workflow, migrations 0024_seams and 0026_retry_seams): 100,000 of them take seconds. A
caller that gives up after a while (a web request) says so first with `limit_on_server`, so
that the server stops the statement and releases its locks instead of going on after the
caller has gone.

Each takes `conn`: the connection of the transaction to act in (jobsweb.cancel() and retry() from
code, engine/runs/run_control.py); without it, db.session's (the admin screen, the commands).
"""

from collections import namedtuple

from sqlalchemy import func, select, text
from sqlalchemy.exc import OperationalError

from ...core.database import db, execute
from ...core.models import JobRun
from ..statements import ENDED_NOTIFY, NOTIFY
from . import action_statements

Deleted = namedtuple("Deleted", "id job_type status")  # status: the run's before the delete
# A run a retry left alone for waiting for `after_id`, which ended `after_status`; whether that
# run's retry revives it (its reason names that run).
WaitsForFailed = namedtuple("WaitsForFailed", "id after_id after_status revived_by_its_retry")

# The rest of the caller's transaction is cut by the server after this many milliseconds.
LIMIT_ON_SERVER = "SELECT set_config('statement_timeout', %(ms)s, true)"


def _ms(seconds):
    """`seconds` as statement_timeout's text: whole milliseconds, at least 1 (0 would mean none)."""
    return str(max(1, round(seconds * 1000)))


def limit_on_server(seconds):
    """Every later statement of the caller's transaction is stopped by the server past `seconds`
    (SET LOCAL statement_timeout): psycopg then raises QueryCanceled, and nothing was changed."""
    execute(LIMIT_ON_SERVER, {"ms": _ms(seconds)})


def _run(conn, statement, params=None):
    return execute(statement, params) if conn is None else conn.exec_driver_sql(statement, params)


def retry(ids, conn=None):
    """Queue these runs again now; returns the ids that were retried (the caller commits). Runs
    of external definitions are left alone: no worker could run them; so are runs that wait for
    a run ended dead or cancelled that is not among these (waits_for_failed says which)."""
    retried = [row.id for row in _run(conn, action_statements.RETRY_RUNS, {"ids": list(ids)})]
    if retried:
        _run(conn, NOTIFY)  # listening workers start them at commit
    return retried


def waits_for_failed(ids, conn=None):
    """Of these runs, those a retry leaves alone because a run they wait for ended dead or
    cancelled (and was not retried with them): {id: WaitsForFailed}, for the pages to say why."""
    return {row.id: WaitsForFailed(*row)
            for row in _run(conn, action_statements.WAITS_FOR_FAILED, {"ids": list(ids)})}


def cancel(ids, conn=None):
    """Cancel these runs; returns (cancelled ids, ids whose cancellation was requested)."""
    done = [row.id for row in _run(conn, action_statements.CANCEL_WAITING, {"ids": list(ids)})]
    requested = [row.id for row in _run(conn, action_statements.REQUEST_CANCEL, {"ids": list(ids)})]
    if done:
        # Run.wait() of these, and of the runs waiting below them the trigger cancelled, returns
        # at commit (one notification for the whole transaction, however many runs).
        _run(conn, ENDED_NOTIFY)
    return done, requested


def delete(ids):
    """Delete these runs and their attempts, except running ones; returns the deleted runs
    (Deleted: id, job_type, status before). Each one deleted before it ended is cancelled first,
    in this transaction, so that what waits for it is cancelled and its batch counts it.

    Two statements rather than a BEFORE DELETE trigger: such a trigger may not update the row
    being deleted (PostgreSQL refuses: "tuple to be deleted was already modified"), so it would
    repeat the cancel's work on dependents and batches that the workflow trigger already does
    for a cancel, and it would run for retention's deletes too, which only delete ended runs."""
    ids = list(ids)
    was = dict(execute(action_statements.CANCEL_BEFORE_DELETE, {"ids": ids}).all())
    deleted = [Deleted(row.id, row.job_type, was.get(row.id, row.status))
               for row in execute(action_statements.DELETE_RUNS, {"ids": ids})]
    if deleted:
        execute(ENDED_NOTIFY)  # a Run.wait() of one of them ends at commit: RunNotFound
    return deleted


def run_now(run_id):
    """Make a queued run that is due later due now and wake the listening workers; whether it did."""
    if execute(action_statements.RUN_QUEUED_NOW, {"id": run_id}).first() is None:
        return False
    execute(NOTIFY)  # delivered at the caller's commit
    return True


def reschedule(run_id, run_at):
    """Move a queued run to `run_at`; whether it did (a run no longer queued is left alone)."""
    return execute(action_statements.RESCHEDULE_QUEUED, {"id": run_id, "run_at": run_at}).first() is not None


QUERY_CANCELED = "57014"  # the SQLSTATE of a statement stopped by statement_timeout
# A budget for the rest of a savepoint; the limit it replaces, which the read within it sets back.
BUDGET = "SELECT current_setting('statement_timeout'), set_config('statement_timeout', %(ms)s, true)"


def within_budget(value, budget):
    """The one value of the scalar select `value`, read within `budget` seconds on the server, or
    None past it. Read in a savepoint, rolled back: a stopped read leaves the caller's
    transaction as it was. The read sets the caller's limit back itself (a statement's timeout
    is fixed as it starts): the ROLLBACK TO SAVEPOINT after it ran under the budget, and a
    loaded server stopped that too, a 503 for the whole runs page (make test at load 8)."""
    savepoint = db.session.begin_nested()
    try:
        [(limit, _)] = execute(BUDGET, {"ms": _ms(budget)}).all()
        found, _ = db.session.execute(select(value.scalar_subquery(),
                                             func.set_config("statement_timeout", limit, True))).one()
        return found
    except OperationalError as exc:
        if getattr(exc.orig, "sqlstate", None) != QUERY_CANCELED:
            raise
        return None  # its subtransaction's abort set the limit back
    finally:
        savepoint.rollback()


def count_changed(action, where, cap, budget, floor_ids=()):
    """How many of the runs matching `where` the bulk `action` ("retry", "cancel", "delete") would
    change, by the very condition its statements change them by (action_statements.CHANGES):
    (n, True) exact; (cap, "at least") past `cap` runs; past `budget` seconds, (those of
    `floor_ids`, the runs a page shows, that it would change, "at least"). Read in a savepoint,
    rolled back (within_budget)."""
    changed = text(action_statements.CHANGES[action])
    capped = select(JobRun.id).where(*where, changed).limit(cap + 1).subquery()
    n = within_budget(select(func.count()).select_from(capped), budget)
    if n is not None:
        return (n, True) if n <= cap else (cap, "at least")
    floor = db.session.scalar(select(func.count()).where(JobRun.id.in_(list(floor_ids)), changed)) if floor_ids else 0
    return floor, "at least"
