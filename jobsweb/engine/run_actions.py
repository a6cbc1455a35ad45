"""Operator actions on runs: retry and cancel, one run or many (the caller commits each batch).

The statements and the races they guard against are in statements.py (RETRY_RUNS,
CANCEL_WAITING, REQUEST_CANCEL).
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
