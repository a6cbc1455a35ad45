"""The attempt duration histogram of /metrics, counted by the database, read cheaply.

Counting every attempt at every scrape would read all of job_attempts each time (0.8 s at
300,000 attempts), and pruning would make the counts fall. So attempts are counted once into
job_duration_totals when they are older than SETTLE (migration 0007_retention), and a scrape
adds only the attempts finished since: a range scan of index job_attempts_finished_outcome.

An attempt's finished_at is its transaction's start, and FINISH_RUNS commits within
milliseconds, so an attempt that commits after its minute has been sealed would need a
transaction held open for SETTLE: the totals would miss it, and nothing else goes wrong.
"""


from ..core.database import db, execute

# Upper bounds (seconds) of the buckets; +Inf is implied. Changing them starts the totals over.
BOUNDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
# Attempts older than this are added to the totals; a scrape joins the younger ones to their
# runs. Ten seconds, as the metrics page's rollup (ops/job_type_metrics.py): five minutes of
# attempts (1,500 in the benchmark) were 8 ms of a 25 ms scrape on PostgreSQL 15 under autovacuum.
SETTLE = "10 seconds"

_COUNTS = ", ".join(f"count(*) FILTER (WHERE d.seconds <= {bound})" for bound in BOUNDS)

# Attempts that ran (succeeded or failed: timeouts and lost leases included; interrupted and
# cancelled ones say nothing about how long the job takes), finished in [since, until), by job
# type: count, sum of seconds, and the cumulative count under each bound. None: open-ended.
WINDOW = f"""
SELECT r.job_type, count(*), coalesce(sum(d.seconds), 0), ARRAY[{_COUNTS}]::bigint[]
FROM job_attempts a
JOIN job_runs r ON r.id = a.run_id
CROSS JOIN LATERAL (SELECT extract(epoch FROM a.finished_at - a.started_at)::float8 AS seconds) d
WHERE a.outcome IN ('succeeded', 'failed') AND a.started_at IS NOT NULL
  AND a.finished_at >= coalesce(CAST(%(since)s AS timestamptz), '-infinity')
  AND a.finished_at < coalesce(CAST(%(until)s AS timestamptz), 'infinity')
GROUP BY r.job_type
"""

ENSURE_STATE = "INSERT INTO job_metrics_state (id) VALUES (1) ON CONFLICT (id) DO NOTHING"

# One scrape at a time advances the totals; the others wait a moment on this row lock and then
# find nothing left to add. sealed_until NULL: nothing counted yet.
STATE = """
SELECT sealed_until, bounds, now() - CAST(%(settle)s AS interval) FROM job_metrics_state
WHERE id = 1 FOR UPDATE
"""

FORGET_TOTALS = "DELETE FROM job_duration_totals"
START_OVER = "UPDATE job_metrics_state SET sealed_until = NULL, bounds = %(bounds)s WHERE id = 1"

ADD_TOTALS = """
INSERT INTO job_duration_totals AS t (job_type, buckets, count, sum_seconds)
VALUES (%(job_type)s, %(buckets)s, %(count)s, %(sum)s)
ON CONFLICT (job_type) DO UPDATE SET
    buckets = ARRAY(SELECT x.a + x.b FROM unnest(t.buckets, excluded.buckets) WITH ORDINALITY AS x(a, b, n)
                    ORDER BY x.n),
    count = t.count + excluded.count,
    sum_seconds = t.sum_seconds + excluded.sum_seconds
"""

SEAL = "UPDATE job_metrics_state SET sealed_until = %(until)s WHERE id = 1"

# A first scrape of a long history (10,000,000 attempts: 15-20 s) passed the page's limit on the
# server (web/guards.py, 4.5 s) every time, so nothing was ever sealed and /metrics answered 503
# for good. A scrape seals the attempts from where the last one stopped up to the finished_at of
# the SEAL_AT_MOST + 1st after it (each attempt counted once: [since, until)), so always some and
# about that many; until the totals have caught up with the cutoff it reports them alone, which
# only grow, as Prometheus's counters must.
SEAL_AT_MOST = 200_000
SEAL_UNTIL = """
SELECT coalesce(
    (SELECT finished_at FROM job_attempts
     WHERE finished_at > coalesce(CAST(%(since)s AS timestamptz), '-infinity') AND finished_at < %(cutoff)s
     ORDER BY finished_at OFFSET %(at_most)s LIMIT 1),
    %(cutoff)s)
"""

TOTALS = "SELECT job_type, count, sum_seconds, buckets FROM job_duration_totals"


def _seal():
    """Add attempts older than SETTLE to the totals (SEAL_AT_MOST of them), in one short
    transaction; return how far they are sealed and whether that is the cutoff."""
    execute(ENSURE_STATE)
    sealed_until, bounds, cutoff = execute(STATE, {"settle": SETTLE}).one()
    if bounds is None or tuple(bounds) != BOUNDS:
        execute(FORGET_TOTALS)
        execute(START_OVER, {"bounds": list(BOUNDS)})
        sealed_until = None
    if sealed_until is None or sealed_until < cutoff:
        until = execute(SEAL_UNTIL, {"since": sealed_until, "cutoff": cutoff, "at_most": SEAL_AT_MOST}).scalar()
        for job_type, count, total, buckets in execute(
                WINDOW, {"since": sealed_until, "until": until}):
            execute(ADD_TOTALS, {"job_type": job_type, "buckets": buckets, "count": count,
                                            "sum": total})
        execute(SEAL, {"until": until})
        sealed_until = until
    db.session.commit()
    return sealed_until, sealed_until >= cutoff


def histogram():
    """{job_type: (count, sum of seconds, [cumulative count per bound])} over every attempt so far
    (over those sealed so far while the totals catch up with a long history)."""
    sealed_until, caught_up = _seal()
    out = {job_type: (count, total, list(buckets)) for job_type, count, total, buckets in execute(TOTALS)}
    if not caught_up:
        return out
    for job_type, count, total, buckets in execute(WINDOW, {"since": sealed_until, "until": None}):
        old_count, old_total, old_buckets = out.get(job_type, (0, 0.0, [0] * len(BOUNDS)))
        out[job_type] = (old_count + count, old_total + total, [a + b for a, b in zip(old_buckets, buckets)])
    return out
