"""Job types whose handlers run in a child process the worker ends (cancel="terminate"), for
tests/test_cancel_terminate.py: loaded by a worker with JOBSWEB_HANDLERS=tests.job_types,tests.terminate_jobs.

Each records the pid it runs in (test_executions, committed at once), so that a test can tell
the child from the worker and see the child gone."""

import ctypes
import logging
import os
import signal
import time

from flask import current_app
from sqlalchemy import text

from jobsweb import PermanentError, Retry, job
from jobsweb.core.database import db


def record_pid(ctx):
    db.session.execute(text("INSERT INTO test_executions (run_id, pid) VALUES (:r, :p)"),
                       {"r": ctx.run_id, "p": os.getpid()})
    db.session.commit()


@job("test.terminate.spin", cancel="terminate", max_attempts=1)
def spin(ctx):
    """Loop for ever on the CPU, never looking at ctx.cancelled."""
    record_pid(ctx)
    while True:
        pass


@job("test.terminate.deaf", cancel="terminate", max_attempts=1)
def deaf(ctx):
    """Ignore SIGTERM and sleep for ever: only SIGKILL ends it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    record_pid(ctx)
    while True:
        time.sleep(0.05)


@job("test.terminate.overrun", cancel="terminate", timeout=3, max_attempts=2)
def overrun(ctx):
    """Outlive its 3 s timeout on every attempt, never looking at ctx.cancelled."""
    record_pid(ctx)
    while True:
        time.sleep(0.05)


@job("test.terminate.crash", cancel="terminate", max_attempts=2)
def crash(ctx):
    """Die without an answer: a segfault, or os._exit(3)."""
    record_pid(ctx)
    if ctx.payload["how"] == "segfault":
        ctypes.string_at(0)
    os._exit(3)


@job("test.terminate.polite", cancel="terminate", max_attempts=3)
def polite(ctx):
    """Sleep until asked to stop (ctx.sleep raises Cancelled): a shutdown's request reaches the child."""
    record_pid(ctx)
    ctx.sleep(60)


@job("test.terminate.works", cancel="terminate", max_attempts=3, permanent=[KeyError])
def works(ctx):
    """What a handler in a child can do and say: fail as asked by payload["fail"] (on its first
    attempt for a retry), else report progress, extend its lease and return what it saw."""
    record_pid(ctx)
    fail = ctx.payload.get("fail")
    if fail == "value" and ctx.attempt == 1:
        raise ValueError("no good on attempt 1")
    if fail == "permanent":
        raise PermanentError("retrying cannot help")
    if fail == "listed":
        raise KeyError("listed in permanent=")
    if fail == "retry" and ctx.attempt == 1:
        raise Retry(3600, "rate limited")
    if fail == "result":
        return {"not json": {1, 2}}
    logging.getLogger("tests.terminate").info("working on run %d in pid %d", ctx.run_id, os.getpid())
    ctx.progress(0.5, "half way", data={"done": 1})
    return {"pid": os.getpid(), "attempt": ctx.attempt, "payload": ctx.payload, "app": current_app.name,
            "lease_extended": ctx.extend_lease(120), "cancelled": ctx.cancelled, "batch": ctx.batch}
