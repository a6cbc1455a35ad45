"""Operator actions on runs: retry and cancel, one run or many, in short batches.

They race with workers claiming and finishing the same runs, so each is one guarded UPDATE
whose WHERE names the statuses it may act on; READ COMMITTED re-checks that WHERE after
waiting for a worker's row lock, so a run a worker claimed meanwhile is left alone (and, for
cancel, gets a cancellation request instead).
"""

from sqlalchemy import text

from . import queries
from .db import db

# failed/dead/cancelled -> queued, due now. Attempts and job_attempts stay as history; the
# next claim records attempt n+1. The status guard leaves a run a worker just claimed alone.
RETRY_RUNS = text("""
UPDATE job_runs
SET status = 'queued', run_at = now(), locked_by = NULL, locked_until = NULL,
    finished_at = NULL, cancel_requested_at = NULL, updated_at = now()
WHERE id = ANY(:ids) AND status IN ('failed', 'dead', 'cancelled')
RETURNING id
""")

# queued/failed -> cancelled at once: no worker holds them.
CANCEL_WAITING = text("""
UPDATE job_runs
SET status = 'cancelled', finished_at = now(), updated_at = now()
WHERE id = ANY(:ids) AND status IN ('queued', 'failed')
RETURNING id
""")

# running: ask the holder to stop. Its heartbeat (queries.EXTEND_LEASES) sees the request and
# sets the handler's cancellation flag; FINISH_RUNS then ends the run cancelled. Runs after
# CANCEL_WAITING in the same transaction, so a run claimed between the two is caught here.
REQUEST_CANCEL = text("""
UPDATE job_runs
SET cancel_requested_at = now(), updated_at = now()
WHERE id = ANY(:ids) AND status = 'running' AND cancel_requested_at IS NULL
RETURNING id
""")

RETRYABLE = ("failed", "dead", "cancelled")
CANCELLABLE = ("queued", "failed", "running")


def retry(ids):
    """Queue these runs again now; returns the ids that were retried (the caller commits)."""
    retried = [row.id for row in db.session.execute(RETRY_RUNS, {"ids": list(ids)})]
    if retried:
        db.session.execute(text(queries.NOTIFY))  # listening workers start them at commit
    return retried


def cancel(ids):
    """Cancel these runs; returns (cancelled ids, ids whose cancellation was requested)."""
    done = [row.id for row in db.session.execute(CANCEL_WAITING, {"ids": list(ids)})]
    requested = [row.id for row in db.session.execute(REQUEST_CANCEL, {"ids": list(ids)})]
    return done, requested
