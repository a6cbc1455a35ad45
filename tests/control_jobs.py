"""Job types for the per-call delay, Retry and wait-inside-a-handler tests (test_handler_retry.py,
test_wait_inside_handler.py): loaded by a worker with JOBSWEB_HANDLERS=tests.job_types,tests.control_jobs
(the test process imports them too: enqueue checks them, drain() and inline mode run them)."""

from datetime import timedelta

from jobsweb import Retry, enqueue, get_run, job


@job("test.control.retry_later", max_attempts=2)
def retry_later(ctx):
    """Asks for a retry `in` seconds from now (a number, or {"minutes": m} for a timedelta)."""
    wanted = ctx.payload["in"]
    raise Retry(timedelta(**wanted) if isinstance(wanted, dict) else wanted, ctx.payload.get("reason"))


@job("test.control.async_retry_later", max_attempts=2)
async def async_retry_later(ctx):
    ctx.retry(ctx.payload["in"], "async and rate limited")


@job("test.control.retry_listed_permanent", max_attempts=3, permanent=[Exception])
def retry_listed_permanent(ctx):
    """Every exception is permanent here, but a Retry still asks for a retry."""
    raise Retry(ctx.payload["in"])


@job("test.control.retry_once", max_attempts=3)
def retry_once(ctx):
    if ctx.attempt == 1:
        raise Retry(ctx.payload["in"])
    return {"attempt": ctx.attempt}


@job("test.control.waits_for_a_run", max_attempts=1)
def waits_for_a_run(ctx):
    """Enqueues a no-op and waits for it: what deadlocks a worker whose only slot this holds."""
    child = enqueue("jobsweb.noop")
    ended = get_run(child).wait(timeout=ctx.payload.get("timeout", 5),
                                allow_inside_job=ctx.payload.get("allow", False))
    return {"child": child, "status": ended.status}


@job("test.control.async_waits_for_a_run", max_attempts=1)
async def async_waits_for_a_run(ctx):
    child = enqueue("jobsweb.noop")
    ended = get_run(child).wait(timeout=ctx.payload.get("timeout", 5))
    return {"child": child, "status": ended.status}
