"""Flow control: queue names, priorities and unique keys checked; queue limits and pauses set.

The claim (statements.CLAIM_RUNS) enforces what is stored here, for every worker at once.
A queue gets its job_queues row on first use; a queue without one is unlimited and unpaused.
"""

import logging
import re

from ...core.database import execute
from ...core.errors import InvalidInput, fits_integer, has_nul

DEFAULT_QUEUE = "default"
QUEUE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
PRIORITY_RANGE = (-1000, 1000)  # smaller runs first
UNIQUE_KEY_MAX_CHARS = 200
# Each start inside a rate's window is kept on the queue's row and read by every claim of it:
# 1000000/1 would make that row megabytes, rewritten at each claim.
RATE_MAX_STARTS = 10_000
UNSET = object()  # a setting left as it is

log = logging.getLogger("jobsweb.worker")

# Create the queue or change the settings given; NULL parameters with their `set_` flag off
# leave a setting alone. The claim reads rate_starts only inside the current window, so a new
# rate starts from an empty window.
CONFIGURE_QUEUE = """
INSERT INTO job_queues AS q (name, concurrency_limit, rate_limit, rate_seconds, paused)
VALUES (%(name)s, %(limit)s, %(rate_limit)s, %(rate_seconds)s, coalesce(%(paused)s, false))
ON CONFLICT (name) DO UPDATE SET
    concurrency_limit = CASE WHEN %(set_limit)s THEN excluded.concurrency_limit ELSE q.concurrency_limit END,
    rate_limit = CASE WHEN %(set_rate)s THEN excluded.rate_limit ELSE q.rate_limit END,
    rate_seconds = CASE WHEN %(set_rate)s THEN excluded.rate_seconds ELSE q.rate_seconds END,
    rate_starts = CASE WHEN %(set_rate)s THEN '{}' ELSE q.rate_starts END,
    paused = coalesce(%(paused)s, q.paused),
    updated_at = now()
RETURNING name, concurrency_limit, rate_limit, rate_seconds, paused
"""

ENSURE_QUEUE = "INSERT INTO job_queues (name) VALUES (%(name)s) ON CONFLICT DO NOTHING"
PAUSE_TYPE = "INSERT INTO job_paused_types (job_type) VALUES (%(job_type)s) ON CONFLICT DO NOTHING"
RESUME_TYPE = "DELETE FROM job_paused_types WHERE job_type = %(job_type)s"
PAUSED_TYPES = "SELECT job_type, paused_at FROM job_paused_types ORDER BY job_type"


def check_queue(name):
    """The queue name, or InvalidInput: 1-100 letters, digits and _ . : - (None: 'default')."""
    if name is None:
        return DEFAULT_QUEUE
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
        raise InvalidInput("queue", f"must be 1 to 100 letters, digits or _ . : -, got {name!r}")
    return name


def check_priority(value):
    """The priority as an int in -1000..1000 (smaller runs first), or InvalidInput.

    Text (from a form or the CLI) is parsed; None means 0.
    """
    if value is None or value == "":
        return 0
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise InvalidInput("priority", f"must be a whole number, got {value!r}") from None
    low, high = PRIORITY_RANGE
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidInput("priority", f"must be a whole number from {low} to {high}, got {value!r}")
    return value


def check_unique_key(key):
    if key is None:
        return None
    if not isinstance(key, str) or not key.strip():
        raise InvalidInput("unique_key", "must be a non-empty string")
    if len(key) > UNIQUE_KEY_MAX_CHARS:
        raise InvalidInput("unique_key", f"must be at most {UNIQUE_KEY_MAX_CHARS} characters, got {len(key)}")
    if has_nul(key):
        raise InvalidInput("unique_key", "contains the NUL character, which PostgreSQL cannot store")
    return key


def check_limit(value):
    """A concurrency limit: a whole number of at least 1 (text is parsed)."""
    try:
        limit = int(value) if isinstance(value, str) else value
    except ValueError:
        limit = None
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise InvalidInput("limit", f"must be a whole number of at least 1, got {value!r}")
    fits_integer("limit", limit)  # job_queues.concurrency_limit is an integer column
    return limit


def parse_rate(text):
    """'N/SECONDS' (at most N starts in any SECONDS seconds) as (N, SECONDS), or InvalidInput."""
    match = re.fullmatch(r"\s*(\d{1,9})\s*/\s*(\d{1,9})\s*", text) if isinstance(text, str) else None
    if not match or int(match[1]) < 1 or int(match[2]) < 1:
        raise InvalidInput("rate", f"must be N/SECONDS with whole numbers of at least 1 "
                                   f"(5/1: five starts a second), got {text!r}")
    if int(match[1]) > RATE_MAX_STARTS:
        raise InvalidInput("rate", f"may allow at most {RATE_MAX_STARTS} starts per window, got {text!r} (for "
                                   "more, give the queue no rate, or a concurrency limit)")
    return int(match[1]), int(match[2])


def configure_queue(name, *, limit=UNSET, rate=UNSET, paused=None):
    """Create queue `name` or change what is given: limit (int or None for none), rate
    ('N/SECONDS', (N, SECONDS) or None for none), paused (bool). Returns the queue's row.

    Runs in db.session's transaction; the caller commits.
    """
    name = check_queue(name)
    if limit is not UNSET and limit is not None:
        limit = check_limit(limit)
    if isinstance(rate, str):
        rate = parse_rate(rate)
    elif rate is not UNSET and rate is not None:
        rate = parse_rate(f"{rate[0]}/{rate[1]}")
    rate_limit, rate_seconds = rate if rate not in (UNSET, None) else (None, None)
    params = {"name": name, "limit": None if limit is UNSET else limit, "set_limit": limit is not UNSET,
              "rate_limit": rate_limit, "rate_seconds": rate_seconds, "set_rate": rate is not UNSET,
              "paused": paused}
    return execute(CONFIGURE_QUEUE, params).first()


def ensure_queue(name):
    """Create queue `name`'s row unless it exists (unlimited, unpaused); caller commits."""
    execute(ENSURE_QUEUE, {"name": check_queue(name)})


def pause_type(job_type, paused=True):
    """Pause (or resume) every run of `job_type`: the claim leaves them queued. Caller commits."""
    if not isinstance(job_type, str) or not job_type or has_nul(job_type):
        raise InvalidInput("job_type", "must be a job type's name")
    execute(PAUSE_TYPE if paused else RESUME_TYPE, {"job_type": job_type})


def paused_types():
    """(job_type, paused_at) of every paused job type."""
    return execute(PAUSED_TYPES).all()

# Before a one-shot worker (a cron tick) exits with nothing claimed: the limited queues that
# hold due runs it could take, and in how many seconds each frees a start (0: a concurrency
# slot, which frees whenever a run ends, so the worker polls; else when the oldest start in a
# full rate window leaves it). A limit only delays its runs, so the tick waits for them (up to
# --max-runtime); a paused queue or job type waits for a person, so it is not listed.
# Serves LimitWait; each EXISTS reads job_runs_queue_claimable.
LIMITED_DUE = """
SELECT q.name, greatest(coalesce(extract(epoch FROM (
           SELECT min(t) + make_interval(secs => q.rate_seconds) - clock_timestamp()
           FROM unnest(q.rate_starts) t
           WHERE t > clock_timestamp() - make_interval(secs => q.rate_seconds)
           HAVING count(*) >= q.rate_limit)), 0), 0)::float8 AS seconds
FROM job_queues q
WHERE NOT q.paused AND coalesce(q.concurrency_limit, q.rate_limit) IS NOT NULL
  AND (%(queues)s::text[] IS NULL OR q.name = ANY(%(queues)s::text[]))
  AND EXISTS (SELECT 1 FROM job_runs r
              WHERE r.queue = q.name AND r.status IN ('queued', 'failed') AND r.run_at <= now()
                AND r.job_type = ANY(%(job_types)s::text[])
                AND NOT EXISTS (SELECT 1 FROM job_paused_types p WHERE p.job_type = r.job_type))
ORDER BY q.name
"""


class LimitWait:
    """What a one-shot worker (a cron tick) that found nothing to claim waits for: the limits
    that only delay due runs it could take. Says so in the log once a wait."""

    def __init__(self, queues, max_runtime, poll_interval):
        self.queues = queues
        self.max_runtime = max_runtime
        self.poll_interval = poll_interval
        self.waiting = False

    def seconds(self, link, job_types):
        """None when no such run waits; else how long to wait before claiming again."""
        queues = link.fetch(LIMITED_DUE, {"queues": self.queues, "job_types": job_types})
        if not queues:
            self.waiting = False
            return None
        if not self.waiting:
            self.waiting = True
            log.info("due runs wait for a limit of queue%s %s; waiting for it%s", "s" if len(queues) > 1 else "",
                     ", ".join(name for name, _ in queues),
                     f" (at most until --max-runtime {self.max_runtime:g}s)" if self.max_runtime else "")
        # A full rate window frees a start at a known time; a concurrency slot whenever some run
        # ends, which only a poll sees.
        return min([seconds for _, seconds in queues if seconds > 0] + [self.poll_interval])
