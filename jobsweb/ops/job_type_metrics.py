"""Per job type metrics over the last hour, day or week: attempts, failures, p50/p95 duration,
p95 wait from due to start, and attempts per interval for a chart.

Read from job_attempts at each view, a week is most of a million-run table. So attempts are
rolled up into job_type_metrics (migration 0019_job_metrics) by minute and by hour, with
cumulative histograms under BOUNDS, and a view first adds the attempts finished since the last
one (`seal`): a range scan of index job_attempts_finished_outcome. Percentiles are read from the
histograms, as Prometheus's histogram_quantile does: within a bucket they are interpolated, so
a figure is within a factor of 1.5 of the exact one.

The wait is known only for a run's last attempt: a failed attempt moves the run's run_at to its
retry time, so the wait of the attempts before is gone. It is counted for runs that ended
(succeeded, dead, cancelled) when their attempt is rolled up, and so those waits (`waited`) are
also how many runs ended: the page's Runs, beside its attempts (a run that failed twice and then
succeeded is one run and three attempts; the page once called 577 attempts "577 runs" for 406).
"""

import time
from dataclasses import dataclass
from datetime import timedelta

from ..core.database import db, execute
from ..engine.jobs.registry import EXTERNAL_JOB_TYPE

# Upper bounds (seconds) of the histograms' buckets, 1 ms to a day, each 1.5 times the last (as
# Sidekiq's metrics); +Inf is implied. Changing them starts the rollup over.
BOUNDS = tuple(round(0.001 * 1.5 ** k, 6) for k in range(46))
# Attempts younger than this are left for the next view: an attempt's finished_at is its
# transaction's start, and FINISH_RUNS commits within milliseconds, so one that commits after
# its time was sealed would need a transaction open this long (it would be missed here only).
SETTLE = "10 seconds"
# How long rows are kept: minutes for the hour's page, hours for the day's and the week's.
KEEP = {"minute": "2 hours", "hour": "8 days"}


@dataclass(frozen=True)
class Window:
    key: str  # as in the query string
    words: str
    span: str  # which rows: 'minute' or 'hour'
    bars: int  # the chart's bars
    step: timedelta  # each bar's interval

    @property
    def length(self):
        return self.bars * self.step


WINDOWS = {w.key: w for w in (
    Window("1h", "the last hour", "minute", 60, timedelta(minutes=1)),
    Window("24h", "the last 24 hours", "hour", 24, timedelta(hours=1)),
    Window("7d", "the last 7 days", "hour", 42, timedelta(hours=4)),
)}
SPAN_LENGTH = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1)}


def _cumulative(position):
    """Counts under each bound, from rows grouped by their bucket's `position` (width_bucket)."""
    return ", ".join(f"coalesce(sum(n) FILTER (WHERE {position} <= {k}), 0)" for k in range(len(BOUNDS)))


ENSURE_STATE = "INSERT INTO job_type_metrics_state (id) VALUES (1) ON CONFLICT (id) DO NOTHING"

# The rollup's state: `pending` when attempts finished since it was sealed (index
# job_attempts_finished_outcome), so a view with nothing to add writes nothing. Read first
# without a lock; then, to add, locked: one view at a time adds attempts, and SKIP LOCKED lets
# the others read what is there rather than wait behind it. No row older than the longest window
# is kept, so a first view (or one after weeks without any) starts a week back.
STATE = """
SELECT sealed_until, bounds = CAST(%(bounds)s AS float8[]) AS current,
       EXISTS (SELECT 1 FROM job_attempts
               WHERE finished_at >= greatest(sealed_until, now() - CAST(%(hour_keep)s AS interval))
                 AND finished_at < now() - CAST(%(settle)s AS interval)) AS pending,
       now() - CAST(%(settle)s AS interval) AS cutoff,
       now() - CAST(%(hour_keep)s AS interval) AS oldest_hour,
       now() - CAST(%(minute_keep)s AS interval) AS oldest_minute
FROM job_type_metrics_state WHERE id = 1 {lock}
"""

# When the CHUNK-th attempt from :since finished (index job_attempts_finished_outcome): a round
# trip of the rollup reads about CHUNK attempts however many finished in an hour. NULL: fewer
# are left.
CHUNK = 20_000
TICK = timedelta(microseconds=1)  # timestamptz's resolution
CHUNK_END = """
SELECT finished_at FROM job_attempts WHERE finished_at >= %(since)s ORDER BY finished_at OFFSET %(chunk)s LIMIT 1
"""

FORGET = "DELETE FROM job_type_metrics"
START_OVER = "UPDATE job_type_metrics_state SET sealed_until = NULL, bounds = %(bounds)s WHERE id = 1"

# An attempt that ran to an end: succeeded or failed (interrupted and cancelled ones say nothing
# of how long the job takes). What is counted beside the rollup's rows (ops/queue_stats.py's
# newest attempts) must be counted the same way.
RAN_TO_AN_END = "a.outcome IN ('succeeded', 'failed') AND a.started_at IS NOT NULL"

# Attempts that ran to an end finished in [since, until), added to their minute's or hour's row
# (UTC) of their job type and queue (the queue for the Queues page, ops/queue_stats.py). Runs
# reported from outside all have job type jobsweb.external: each definition's are kept apart as
# 'jobsweb.external:<definition id>' (EXTERNAL_KEY), shown by its name; a deleted one's stay
# under jobsweb.external.
# Index job_attempts_finished_outcome finds them; each joins its run by primary key. They are
# first grouped by the histogram buckets their duration and wait fall in (width_bucket: how many
# bounds are at most the value), so the cumulative counts are summed over a few groups, not over
# every attempt.
ROLL_UP = f"""
INSERT INTO job_type_metrics AS m (span, bucket, job_type, queue, runs, failures, durations, waited, waits)
SELECT %(span)s, bucket, job_type, queue, sum(n), sum(failed), ARRAY[{_cumulative("d")}]::bigint[],
       coalesce(sum(n) FILTER (WHERE w IS NOT NULL), 0), ARRAY[{_cumulative("w")}]::bigint[]
FROM (
    SELECT date_trunc(%(span)s, a.finished_at, 'UTC') AS bucket,
           CASE WHEN r.job_type = %(external)s AND r.definition_id IS NOT NULL
                THEN r.job_type || ':' || r.definition_id ELSE r.job_type END AS job_type, r.queue,
           width_bucket(extract(epoch FROM a.finished_at - a.started_at)::float8, CAST(%(bounds)s AS float8[])) AS d,
           width_bucket(wait.seconds, CAST(%(bounds)s AS float8[])) AS w,
           count(*) AS n, count(*) FILTER (WHERE a.outcome = 'failed') AS failed
    FROM job_attempts a
    JOIN job_runs r ON r.id = a.run_id
    LEFT JOIN LATERAL (SELECT extract(epoch FROM a.started_at - r.run_at)::float8 AS seconds
                       WHERE r.attempts = a.attempt AND r.status IN ('succeeded', 'dead', 'cancelled')) wait ON true
    WHERE {RAN_TO_AN_END} AND a.finished_at >= %(since)s AND a.finished_at < %(until)s
    GROUP BY 1, 2, 3, 4, 5
) grouped
GROUP BY bucket, job_type, queue
ON CONFLICT (span, bucket, job_type, queue) DO UPDATE SET
    runs = m.runs + excluded.runs,
    failures = m.failures + excluded.failures,
    durations = ARRAY(SELECT x.a + x.b FROM unnest(m.durations, excluded.durations) WITH ORDINALITY AS x(a, b, n)
                      ORDER BY x.n),
    waited = m.waited + excluded.waited,
    waits = ARRAY(SELECT x.a + x.b FROM unnest(m.waits, excluded.waits) WITH ORDINALITY AS x(a, b, n) ORDER BY x.n)
"""

PRUNE = """
DELETE FROM job_type_metrics WHERE (span = 'minute' AND bucket < %(oldest_minute)s)
                                OR (span = 'hour' AND bucket < %(oldest_hour)s)
"""

DEFINITION_NAMES = "SELECT id, name FROM job_definitions WHERE id = ANY(%(ids)s::bigint[])"

SEAL = "UPDATE job_type_metrics_state SET sealed_until = %(until)s WHERE id = 1"
SEALED = "SELECT sealed_until FROM job_type_metrics_state WHERE id = 1"

CURRENT_BUCKET = "SELECT date_trunc(%(span)s, now(), 'UTC')"

# What the figures are grouped by: each job type (the default), or each queue (as Oban Web's
# queues view); both are columns of every row, so either costs the same. {key} is one of these.
BY = ("job_type", "queue")

# The window's rows (primary key: span, then bucket), summed per job type or queue.
TOTALS = """
SELECT {key}, sum(runs)::bigint, sum(failures)::bigint, sum(waited)::bigint
FROM job_type_metrics WHERE span = %(span)s AND bucket >= %(since)s
GROUP BY {key}
"""

# The same rows' histograms, added element by element: (job type or queue, position, durations, waits).
HISTOGRAMS = """
SELECT m.{key}, h.n, sum(h.duration)::bigint, sum(h.wait)::bigint
FROM job_type_metrics m, unnest(m.durations, m.waits) WITH ORDINALITY AS h(duration, wait, n)
WHERE m.span = %(span)s AND m.bucket >= %(since)s
GROUP BY m.{key}, h.n
"""

# Attempts per bar of the chart, empty bars included, for one job type or queue, or all (NULL).
CHART = """
SELECT b.start, coalesce(sum(m.runs - m.failures), 0)::bigint, coalesce(sum(m.failures), 0)::bigint
FROM generate_series(CAST(%(since)s AS timestamptz), CAST(%(last)s AS timestamptz),
                     CAST(%(step)s AS interval)) AS b(start)
LEFT JOIN job_type_metrics m
       ON m.span = %(span)s AND m.bucket >= b.start AND m.bucket < b.start + CAST(%(step)s AS interval)
      AND (CAST(%(chosen)s AS text) IS NULL OR m.{key} = %(chosen)s)
GROUP BY b.start
ORDER BY b.start
"""

# Attempts per bar of each of the busiest `limit` queues (or job types), empty bars included: the
# chart's separate series. The window's rows (primary key: span, bucket), read once per series.
SERIES = """
WITH top AS (
    SELECT {key} AS name FROM job_type_metrics WHERE span = %(span)s AND bucket >= %(since)s
    GROUP BY {key} ORDER BY sum(runs) DESC, {key} LIMIT %(limit)s
)
SELECT t.name, b.start, coalesce(sum(m.runs), 0)::bigint
FROM top t
CROSS JOIN generate_series(CAST(%(since)s AS timestamptz), CAST(%(last)s AS timestamptz),
                           CAST(%(step)s AS interval)) AS b(start)
LEFT JOIN job_type_metrics m
       ON m.span = %(span)s AND m.bucket >= b.start AND m.bucket < b.start + CAST(%(step)s AS interval)
      AND m.{key} = t.name
GROUP BY t.name, b.start
ORDER BY t.name, b.start
"""
SERIES_SHOWN = 6  # the chart's lines: more would not be told apart


def seal(budget):
    """Add the attempts finished since the last view to the rollup, CHUNK at a time, one short
    transaction each, for about `budget` seconds at most; the time up to which attempts are
    counted (None: nothing yet)."""
    stop_at = time.monotonic() + budget
    args = {"bounds": list(BOUNDS), "settle": SETTLE, "hour_keep": KEEP["hour"], "minute_keep": KEEP["minute"]}
    while True:
        state = execute(STATE.format(lock=""), args).first()
        if state is None:
            execute(ENSURE_STATE)
            db.session.commit()
            continue
        if state.current and not state.pending:
            return state.cutoff
        state = execute(STATE.format(lock="FOR UPDATE SKIP LOCKED"), args).first()
        if state is None:  # another view is adding them
            db.session.rollback()
            return execute(SEALED).scalar()
        sealed_until = state.sealed_until
        if not state.current:
            execute(FORGET)
            execute(START_OVER, {"bounds": list(BOUNDS)})
            sealed_until = None
        since = max(sealed_until or state.oldest_hour, state.oldest_hour)
        # Through the instant of the CHUNK-th attempt: a batch's finish shares one now(), and a
        # chunk ending inside it would leave the rest of the batch for the next.
        last = execute(CHUNK_END, {"since": since, "chunk": CHUNK - 1}).scalar()
        until = state.cutoff if last is None else min(last + TICK, state.cutoff)
        execute(ROLL_UP, {"span": "hour", "since": since, "until": until, "bounds": list(BOUNDS),
                          "external": EXTERNAL_JOB_TYPE})
        execute(ROLL_UP, {"span": "minute", "since": max(since, state.oldest_minute), "until": until,
                          "bounds": list(BOUNDS), "external": EXTERNAL_JOB_TYPE})
        execute(PRUNE, {"oldest_minute": state.oldest_minute, "oldest_hour": state.oldest_hour})
        execute(SEAL, {"until": until})
        db.session.commit()
        if until == state.cutoff or time.monotonic() > stop_at:
            return until


def quantile(cumulative, total, q):
    """The q-quantile (seconds) of `total` values from their cumulative counts under BOUNDS,
    interpolated within its bucket; None without values, inf when above the last bound."""
    if not total:
        return None
    rank = q * total
    below, lower = 0, 0.0
    for count, bound in zip(cumulative, BOUNDS):
        if count >= rank:
            return lower + (bound - lower) * (rank - below) / (count - below)
        below, lower = count, bound
    return float("inf")


@dataclass
class JobTypeFigures:
    job_type: str
    attempts: int  # that ran to an end (succeeded or failed)
    failures: int  # failed attempts
    p50: float | None
    p95: float | None
    wait_p95: float | None
    runs: int = 0  # runs that ended: their last attempt is among the attempts
    definition_id: int | None = None  # an external definition's runs (job_type is EXTERNAL_KEY's)
    name: str | None = None  # how the page names it: that definition's name, else the job type

    @property
    def shown(self):
        return self.name or self.job_type

    @property
    def failure_rate(self):
        """Failed attempts per attempt."""
        return self.failures / self.attempts if self.attempts else 0.0


def figures(window, by="job_type"):
    """Each job type's (or, `by` "queue", each queue's) JobTypeFigures over `window` (a Window) as
    far as the rollup has counted, and the window's start. A queue's figures carry its name as
    their job_type."""
    key = _key(by)
    since = execute(CURRENT_BUCKET, {"span": window.span}).scalar() + SPAN_LENGTH[window.span] - window.length
    args = {"span": window.span, "since": since}
    histograms = {}
    for job_type, n, durations, waits in execute(HISTOGRAMS.format(key=key), args):
        pair = histograms.setdefault(job_type, ([0] * len(BOUNDS), [0] * len(BOUNDS)))
        pair[0][n - 1], pair[1][n - 1] = durations, waits
    out = []
    externals = {}
    for job_type, attempts, failures, waited in execute(TOTALS.format(key=key), args):
        durations, waits = histograms[job_type]
        out.append(JobTypeFigures(job_type, attempts, failures, quantile(durations, attempts, 0.5),
                                  quantile(durations, attempts, 0.95), quantile(waits, waited, 0.95), runs=waited))
        prefix, _, definition_id = job_type.partition(":")
        if key == "job_type" and prefix == EXTERNAL_JOB_TYPE and definition_id.isdigit():
            externals[int(definition_id)] = out[-1]
    if externals:
        for definition_id, name in execute(DEFINITION_NAMES, {"ids": list(externals)}):
            externals[definition_id].definition_id, externals[definition_id].name = definition_id, name
    return out, since


def chart(window, since, chosen=None, by="job_type"):
    """(bar start, succeeded, failed) for each of the window's bars, oldest first: of every
    attempt, or of the job type (or queue, `by`) `chosen`."""
    return execute(CHART.format(key=_key(by)), {"span": window.span, "since": since,
                                                "last": since + window.length - window.step,
                                                "step": window.step, "chosen": chosen}).all()


def series(window, since, by="queue", limit=SERIES_SHOWN):
    """{queue (or job type): [attempts per bar, oldest first]} of the `limit` busiest over the window."""
    out = {}
    for name, _, attempts in execute(SERIES.format(key=_key(by)), {
            "span": window.span, "since": since, "last": since + window.length - window.step,
            "step": window.step, "limit": limit}):
        out.setdefault(name, []).append(attempts)
    return out


def _key(by):
    if by not in BY:  # a column name put into the SQL: only ours
        raise ValueError(f"metrics are grouped by one of {BY}, not {by!r}")
    return by
