"""Operator actions on runs: retry, cancel and delete, one run or many (the caller commits each
batch); run now and reschedule a queued run.

The statements and the races they guard against are in statements.py (RETRY_RUNS,
CANCEL_WAITING, REQUEST_CANCEL, DELETE_RUNS, RUN_QUEUED_NOW, RESCHEDULE_QUEUED).
"""

from . import reported_runs, statements
from ..core.database import execute


def retry(ids):
    """Queue these runs again now; returns the ids that were retried (the caller commits). Runs
    of external definitions are left alone: no worker could run them."""
    ids = [row.id for row in execute(reported_runs.RETRYABLE_IDS, {"ids": list(ids)})]
    retried = [row.id for row in execute(statements.RETRY_RUNS, {"ids": ids})]
    if retried:
        execute(statements.NOTIFY)  # listening workers start them at commit
    return retried


def cancel(ids):
    """Cancel these runs; returns (cancelled ids, ids whose cancellation was requested)."""
    done = [row.id for row in execute(statements.CANCEL_WAITING, {"ids": list(ids)})]
    requested = [row.id for row in execute(statements.REQUEST_CANCEL, {"ids": list(ids)})]
    return done, requested


def delete(ids):
    """Delete these runs and their attempts, except running ones; returns the deleted rows (id,
    job_type, status)."""
    return execute(statements.DELETE_RUNS, {"ids": list(ids)}).all()


def run_now(run_id):
    """Make a queued run that is due later due now and wake the listening workers; whether it did."""
    if execute(statements.RUN_QUEUED_NOW, {"id": run_id}).first() is None:
        return False
    execute(statements.NOTIFY)  # delivered at the caller's commit
    return True


def reschedule(run_id, run_at):
    """Move a queued run to `run_at`; whether it did (a run no longer queued is left alone)."""
    return execute(statements.RESCHEDULE_QUEUED, {"id": run_id, "run_at": run_at}).first() is not None
