"""Job types for tests/test_signals.py, and receivers of every lifecycle signal that record what
they hear in test_signals: loaded by a worker with JOBSWEB_HANDLERS=tests.job_types,tests.signal_jobs
and TEST_RECORD_SIGNALS=1 (the test process imports the job types alone)."""

import json
import os

from flask import current_app
from sqlalchemy import text

from jobsweb import PermanentError, job, signals
from jobsweb.core.database import db

FAST_RETRY = {"backoff_base": 0.05, "backoff_cap": 0.05}


@job("test.signals.ok")
def ok(ctx):
    return {"ok": ctx.run_id}


@job("test.signals.async_ok")
async def async_ok(ctx):
    return "async"


@job("test.signals.flaky", max_attempts=3, **FAST_RETRY)
def flaky(ctx):
    if ctx.attempt == 1:
        raise ValueError("first attempt fails")
    return "second"


@job("test.signals.doomed", max_attempts=2, **FAST_RETRY)
def doomed(ctx):
    raise ValueError(f"attempt {ctx.attempt} fails")


@job("test.signals.permanent", max_attempts=5)
def permanent(ctx):
    raise PermanentError("no point retrying")


@job("test.signals.waits")
def waits(ctx):
    ctx.sleep(30)  # until an operator cancels it


@job("test.signals.too_slow", timeout=0.5, max_attempts=1)
def too_slow(ctx):
    ctx.sleep(30)  # its timeout asks it to stop: Cancelled


def record(signal, run_id, attempt=None, detail=None):
    # Its own transaction: a handler's db.session may be mid-work (or never commit).
    with db.engine.begin() as conn:
        conn.execute(text("INSERT INTO test_signals (signal, run_id, attempt, detail, app) "
                          "VALUES (:s, :r, :a, :d, :app)"),
                     {"s": signal, "r": run_id, "a": attempt, "d": detail, "app": current_app.name})


def started(app, ctx, **extra):
    record("attempt_started", ctx.run_id, ctx.attempt, ctx.job_type)


def succeeded(app, ctx, result, **extra):
    record("attempt_succeeded", ctx.run_id, ctx.attempt, json.dumps(result))


def failed(app, ctx, exception, permanent, last_attempt, **extra):
    record("attempt_failed", ctx.run_id, ctx.attempt,
           f"{type(exception).__name__}: {exception}; permanent={permanent} last_attempt={last_attempt}")


def retried(app, run_id, job_type, attempt, error_type, error, retry_in, **extra):
    record("run_retried", run_id, attempt, f"{error_type}: {error}; retry_in under 1 s: {0 <= retry_in < 1}")


def dead(app, run_id, job_type, attempt, error_type, error, **extra):
    record("run_dead", run_id, attempt, f"{error_type}: {error}")


def cancelled(app, run_id, job_type, attempt, **extra):
    record("run_cancelled", run_id, attempt, job_type)


def broken(app, **extra):
    raise RuntimeError("a receiver that always raises")


RECEIVERS = {signals.attempt_started: started, signals.attempt_succeeded: succeeded, signals.attempt_failed: failed,
             signals.run_retried: retried, signals.run_dead: dead, signals.run_cancelled: cancelled}

if os.environ.get("TEST_RECORD_SIGNALS") == "1":
    for signal, receiver in RECEIVERS.items():
        signal.connect(broken)  # first: the receivers after it are still called
        signal.connect(receiver)
