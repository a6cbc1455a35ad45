"""Job types every jobsweb ships, for demos, smoke tests and benchmarks.

(One more, jobsweb.prune, is retention's: ops/retention.py.)
"""

from .registry import PermanentError, job


@job("jobsweb.noop")
def noop(ctx):
    """Do nothing; the cheapest possible job, for throughput measurements."""
    return None


@job("jobsweb.sleep")
def sleep(ctx):
    """Sleep payload["seconds"] (default 1), stopping early when cancelled."""
    ctx.sleep(float(ctx.payload.get("seconds", 1)))
    return {"slept": ctx.payload.get("seconds", 1)}


@job("jobsweb.async_sleep")
async def async_sleep(ctx):
    """Await payload["seconds"] (default 1) on the worker's event loop, stopping early when asked."""
    await ctx.sleep(float(ctx.payload.get("seconds", 1)))
    return {"slept": ctx.payload.get("seconds", 1)}


@job("jobsweb.fail")
def fail(ctx):
    """Fail the first payload["times"] attempts (every attempt without it); permanent on request."""
    if ctx.payload.get("permanent"):
        raise PermanentError("jobsweb.fail was asked to fail permanently")
    times = ctx.payload.get("times")
    if times is None or ctx.attempt <= int(times):
        raise RuntimeError(f"jobsweb.fail failing on purpose (attempt {ctx.attempt})")
    return {"succeeded_on_attempt": ctx.attempt}

