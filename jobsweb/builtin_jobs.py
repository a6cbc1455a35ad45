"""Job types every jobsweb ships, for demos, smoke tests and benchmarks."""

from . import prune as retention
from .handlers import PermanentError, job


@job("jobsweb.noop")
def noop(ctx):
    """Do nothing; the cheapest possible job, for throughput measurements."""
    return None


@job("jobsweb.sleep")
def sleep(ctx):
    """Sleep payload["seconds"] (default 1), stopping early when cancelled."""
    ctx.sleep(float(ctx.payload.get("seconds", 1)))
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


@job("jobsweb.prune", max_attempts=3)
def prune(ctx):
    """Delete finished runs past their retention (JOBSWEB_RETAIN_*), a small batch at a time."""
    pruned, workers = retention.prune(stop=ctx.raise_if_cancelled)
    return {"deleted": {p.status: p.runs for p in pruned},
            "attempts": sum(p.attempts for p in pruned), "workers": workers}
