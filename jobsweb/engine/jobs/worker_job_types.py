"""The job types the workers run, as the database knows them: a standalone web process often
imports none of the handlers (JOBSWEB_HANDLERS on the worker only), yet its forms, its
filters, enqueue() and define() take the job types a live worker registered when it started
(job_workers.job_types). Which workers count is said here once, for all of them."""

from dataclasses import dataclass

from ...core.database import db, execute, require_postgresql

# A worker seen within the last week: one stopped for a deploy still counts, one retention is
# about to delete (not seen for days) does not. job_workers holds a few rows: no index.
WORKER_JOB_TYPES = """
SELECT DISTINCT unnest(job_types) FROM job_workers
WHERE last_seen_at > now() - interval '7 days'
"""


@dataclass(frozen=True)
class Unregistered:
    """What enqueue's and define()'s checks read of a job type this process does not register
    (one only a worker imports, or an external definition's): the defaults, since its handler's
    own max_attempts, queue and priority are not known here."""

    max_attempts: int | None = None
    queue: str = "default"
    priority: int = 0


def worker_job_types(in_session=False):
    """Sorted names of the job types a worker seen in the last week registered.

    `in_session`: read in db.session's transaction, for a page that reads the database there
    anyway. Otherwise on a connection of its own, returned at once: enqueue() without session=
    would leave db.session idle in a transaction for as long as the caller's app context lasts.
    A page must not take that second connection: each of gunicorn's threads would then hold
    two, past the WEB_THREADS + 1 a process is sized for (DEPLOY.md's connection budget)."""
    require_postgresql(from_code=True)  # a host on SQLite: this, not "no such function: unnest"
    if in_session:
        return sorted(name for (name,) in execute(WORKER_JOB_TYPES))
    with db.engine.connect() as conn:
        return sorted(name for (name,) in conn.exec_driver_sql(WORKER_JOB_TYPES))
