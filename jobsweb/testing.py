"""Helpers for the tests of an app that uses jobsweb: `create_schema()` and `empty_tables()` for
the test database (or the `jobsweb_tables` fixture of jobsweb.pytest_plugin), run what is due
with `drain()`, and see what was enqueued with `enqueued()`. Tests on SQLite use inline mode
instead (JOBSWEB_INLINE=true, engine/enqueue/inline.py): no tables, each handler runs as it is enqueued.

drain() is a worker without threads or a separate process: on its own connection, it
materialises due schedule slots, then claims and finishes runs one at a time with the
worker's own statements (CLAIM_RUNS, FINISH_RUNS) and outcome rules (execution.Failures),
calling each handler in this thread (an `async def` one on a fresh event loop). So retries,
dead runs, idempotency keys and schedules behave as they do in production. What it cannot do is stop a handler: timeouts and
cancellation are not enforced.
"""

import time
from dataclasses import dataclass

from flask import current_app
from sqlalchemy import select

from .core import schema
from .core.database import db, libpq_url, require_postgresql
from .core.models import JobRun
from .engine.runs import batch_status
from .engine.jobs import registry
from .engine import statements, upkeep
from .engine.worker.async_execution import run_async_handler, run_coroutine
from .engine.worker.execution import Failures, Held, run_handler
from .engine.worker.outcome_writes import finish_params, log_finished
from .engine.link import Link
from .engine.jobs.registry import JobContext
from .engine.worker.loop import worker_id
from .scheduling.materialise import materialise_due

RETRY_WAIT = 1.0  # seconds: drain() waits for a retry due within this long (see there)
MAX_RUNS = 1000  # attempts one drain() makes before it decides a job keeps enqueuing itself

# Seconds until the next retry of a job type this process handles is due (NULL: none waits).
NEXT_RETRY = """
SELECT extract(epoch FROM min(run_at) - now()) FROM job_runs
WHERE status = 'failed' AND job_type = ANY(%(job_types)s)
"""


_migrated = set()  # the databases create_schema() brought to this version in this process


def create_schema():
    """Create jobsweb's tables in the current app's database (the test database), or upgrade
    them to this version: `flask jobs migrate` for tests (db.create_all() does not make them).
    Once per database in a process."""
    require_postgresql(from_code=True)
    url = db.engine.url.render_as_string(hide_password=False)
    if url not in _migrated:
        schema.upgrade()
        _migrated.add(url)


def empty_tables():
    """Delete every row of jobsweb's tables in the current app's database, between tests (the
    app's db.drop_all() or its own truncation does not reach them); the app's tables are left."""
    require_postgresql(from_code=True)
    names = ", ".join(sorted(schema.tables() - {schema.VERSION_TABLE}))
    with db.engine.begin() as conn:
        conn.exec_driver_sql(f"TRUNCATE {names} RESTART IDENTITY")


@dataclass
class Ran:
    """One attempt drain() made: the status FINISH_RUNS wrote, and what the handler returned or raised."""

    run_id: int
    job_type: str
    attempt: int
    status: str  # succeeded | failed (a retry is due later) | dead | cancelled | rejected
    result: object = None
    error: str | None = None  # "ErrorType: message" of a failed attempt


def drain(*, retry_wait=RETRY_WAIT, max_runs=MAX_RUNS):
    """Run every due run in this process, with the current app, until nothing is due; what ran,
    one Ran per attempt, in order.

    Due schedule slots are materialised first. A failed run whose retry comes due within
    `retry_wait` seconds is waited for and run again (set JOBSWEB_BACKOFF_BASE and _CAP to
    small values in tests so that retries run until the run succeeds or is dead); later
    retries and runs enqueued for later are left queued. Runs must be committed to be seen.
    Each handler runs in a fresh app context of the current app, as in the worker.
    On an app whose database is not PostgreSQL, ConfigError before anything connects.
    """
    require_postgresql(from_code=True)
    app = current_app._get_current_object()
    config = app.config
    failures = Failures.from_config(config)
    worker = f"drain:{worker_id()}"
    lease = config["JOBSWEB_LEASE_SECONDS"]
    link = Link(libpq_url(db.engine))
    ran = []
    stalled = False  # the last claim found nothing although a retry was due already
    try:
        while True:
            while materialise_due(link):
                pass
            rows = link.fetch(statements.CLAIM_RUNS, {"worker": worker, "lease": lease,
                                                      "job_types": registry.names(), "queues": None, "limit": 1,
                                                      "free": 1})
            if not rows:
                [(wait,)] = link.fetch(NEXT_RETRY, {"job_types": registry.names()})
                # A retry due already but not claimed twice running waits on something else (a
                # run it is queued behind, another worker's lock): nothing more is due here.
                if wait is None or wait > retry_wait or (wait <= 0 and stalled):
                    return ran
                stalled = wait <= 0
                time.sleep(max(float(wait), 0))  # the run's backoff, chosen by the settings
                continue
            stalled = False
            if len(ran) >= max_runs:
                link.fetch(statements.FINISH_RUNS, finish_params([failures.interrupted(
                    worker, _context(link, worker, *rows[0][:6]), "drain() stopped")]))
                raise RuntimeError(f"drain() made {max_runs} attempts and runs are still due: "
                                   "does a job enqueue itself, or a schedule fire every second?")
            ran.append(_run(app, link, failures, worker, lease, *rows[0]))
    finally:
        link.close()


def _context(link, worker, run_id, job_type, payload, attempt, max_attempts, definition_id):
    def extend_lease(ctx, seconds=None):
        return bool(link.fetch(upkeep.EXTEND_LEASES, {
            "worker": worker, "ids": [ctx.run_id], "attempts": [ctx.attempt],
            "leases": [float(seconds or current_app.config["JOBSWEB_LEASE_SECONDS"])]}))

    return JobContext(run_id, job_type, payload, attempt, max_attempts, definition_id, _extend_lease=extend_lease,
                      _report_progress=lambda ctx, *said: upkeep.report_progress(link, worker, ctx, *said),
                      _read_batch=lambda run_id: batch_status.batch_of_run(link.fetch, run_id))


def _run(app, link, failures, worker, lease, run_id, job_type, payload, attempt, max_attempts,
         definition_id, run_timeout, run_lease, backoff_base, backoff_cap, priority, run_at):
    """One claimed attempt, as Worker._start and the pool do it, finished with FINISH_RUNS."""
    ctx = _context(link, worker, run_id, job_type, payload, attempt, max_attempts, definition_id)
    held = Held(ctx, registry.get(job_type), max(run_lease or 0, lease), None, run_timeout,
                (backoff_base, backoff_cap), order=(priority, run_at, run_id))
    finished = run_coroutine(run_async_handler(app, held)) if held.job.is_async else run_handler(app, held)
    outcome = failures.outcome_of(worker, finished, stopping=False)
    rows = link.fetch(statements.FINISH_RUNS, finish_params([outcome]))
    log_finished([outcome], rows)
    status = rows[0][1] if rows else "rejected"  # the lease expired and another worker took it
    error = f"{outcome.error_type}: {outcome.error}" if outcome.error else None
    return Ran(run_id, job_type, attempt, status, outcome.result, error)


def enqueued(job_type=None):
    """The payloads of the queued runs (of `job_type`: a name or a @job), oldest first.

    Read in db.session, so runs enqueued with session=db.session show before the commit.
    """
    require_postgresql(from_code=True)
    stmt = select(JobRun.payload).where(JobRun.status == "queued").order_by(JobRun.id)
    if job_type is not None:
        stmt = stmt.where(JobRun.job_type == getattr(job_type, "name", job_type))
    return list(db.session.scalars(stmt))
