"""The retry rule: capped exponential backoff with ±20% jitter.

delay(attempt) = min(base * 2^(attempt - 1), cap) * uniform(0.8, 1.2)

`attempt` is the attempt that just failed (1 for the first). With the defaults (base 10 s,
cap 1 h) retries come after about 10 s, 20 s, 40 s, 80 s, ... and never more than 72 minutes
apart. The jitter spreads out runs that failed together, so a dependency that comes back is
not hit by all of them in the same second.
"""

import random

JITTER = 0.2  # fraction of the delay, either way


def backoff_seconds(attempt, base, cap, rand=random.random):
    """Seconds to wait before retrying after failed attempt number `attempt`."""
    # The exponent is bounded so that a run with thousands of attempts cannot overflow a float.
    delay = min(base * 2 ** min(attempt - 1, 60), cap)
    return delay * (1 - JITTER + 2 * JITTER * rand())
