"""Inline mode (JOBSWEB_INLINE=true), for a host's tests on SQLite, like RQ's is_async=False:
enqueue() checks its input as always, then runs the handler at once, in the caller's thread and
app context, and keeps the run in memory for jobsweb.get_run() instead of in the database.

What differs from a worker: one attempt, no retries (an exception, a Retry too, is logged and
the run is dead); a run_at or delay is not waited for; no timeout, lease, cancellation, queue, priority, rate limit, schedule or idempotency
key; the handler runs before enqueue() returns, inside the caller's transaction (with
session=db.session too), not after its commit.
"""

import asyncio
import itertools
import json
import logging
import threading
import traceback
from datetime import datetime, timezone

from flask import current_app

from ..jobs import registry
from ..runs.run_status import INLINE_RUNS
from ..worker.async_execution import run_coroutine
from ..worker.execution import check_result

log = logging.getLogger("jobsweb.inline")

_ids = itertools.count(1)
_lock = threading.Lock()


async def _awaited(job, ctx):
    """An async handler, awaited as the worker's event loop does: its `await ctx.sleep()` works."""
    ctx._cancel_waker = asyncio.Event()
    with registry.handler_running(ctx):  # this task's own context (run_coroutine may use a thread)
        return await job.func(ctx)


def active(config):
    return config["JOBSWEB_INLINE"]


def run(job_type, payload, max_attempts):
    """Run the handler of `job_type` now; the new run's id (get_run(id) has its outcome)."""
    with _lock:
        run_id = next(_ids)
    now = datetime.now(timezone.utc)
    record = {"id": run_id, "job_type": job_type, "status": "running", "attempts": 1, "max_attempts": max_attempts,
              "progress": None, "progress_note": None, "progress_at": None, "progress_data": None, "result": None,
              "last_error": None, "error_type": None, "traceback": None, "created_at": now, "run_at": now,
              "started_at": now, "finished_at": None}
    current_app.extensions.setdefault(INLINE_RUNS, {})[run_id] = record

    def report_progress(ctx, progress, note, data):
        record.update(progress=progress, progress_note=note, progress_data=data, progress_at=datetime.now(timezone.utc))

    job = registry.get(job_type)
    ctx = registry.JobContext(run_id, job_type, payload, 1, max_attempts,
                              _extend_lease=lambda ctx, seconds=None: True, _report_progress=report_progress)
    try:
        if job.is_async:
            result = check_result(run_coroutine(_awaited(job, ctx)))
        else:
            with registry.handler_running(ctx):  # Run.wait() refuses here as in a worker
                result = check_result(job.func(ctx))
        ctx.flush_progress()
        # As stored and read back by a worker: JSON (a tuple comes back a list).
        record.update(status="succeeded", result=json.loads(json.dumps(result)),
                      progress=None if record["progress"] is None else 1.0)  # as FINISH_RUNS does
    except Exception as exc:  # noqa: BLE001 - recorded on the run, as a worker would
        ctx.flush_progress()
        log.exception("inline run %d %s failed", run_id, job_type)
        record.update(status="dead", last_error=str(exc), error_type=type(exc).__name__,
                      traceback=traceback.format_exc())
    record["finished_at"] = datetime.now(timezone.utc)
    return run_id
