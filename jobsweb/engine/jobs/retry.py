"""The retry rule: capped exponential backoff with ±20% jitter.

delay(attempt) = min(base * 2^(attempt - 1), cap) * uniform(0.8, 1.2)

`attempt` is the attempt that just failed (1 for the first). With the defaults (base 10 s,
cap 1 h) retries come after about 10 s, 20 s, 40 s, 80 s, ... and never more than 72 minutes
apart. The jitter spreads out runs that failed together, so a dependency that comes back is
not hit by all of them in the same second.
"""

import math
import random

JITTER = 0.2  # fraction of the delay, either way
MAX_DELAY = 7 * 86400.0  # seconds: the longest retry delay anything may ask for
DEFAULT_DELAY = 10.0  # seconds, when a stored base or cap is not a usable number


def bounded(seconds):
    """A delay in 0..MAX_DELAY whatever was stored: a base or cap of inf, NaN or 1e300 once made
    FINISH_RUNS overflow PostgreSQL's timestamps and stopped every worker."""
    try:
        seconds = float(seconds)
    except (TypeError, ValueError):
        return DEFAULT_DELAY
    if math.isnan(seconds):
        return DEFAULT_DELAY
    return min(max(seconds, 0.0), MAX_DELAY)


def backoff_seconds(attempt, base, cap, rand=random.random):
    """Seconds to wait before retrying after failed attempt number `attempt` (at most MAX_DELAY,
    jitter included: never a value a timestamp cannot hold)."""
    base, cap = bounded(base), bounded(cap)
    # The exponent is bounded so that a run with thousands of attempts cannot overflow a float.
    delay = min(base * 2 ** min(max(attempt, 1) - 1, 60), cap)
    return min(delay * (1 - JITTER + 2 * JITTER * rand()), MAX_DELAY)
