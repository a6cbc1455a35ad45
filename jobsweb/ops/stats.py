"""What the dashboard shows, each from a query an index keeps small on a million-run table."""

from datetime import timedelta

from flask import current_app

from ..core.database import execute
from ..engine.statements import ACTIVE_STATUSES, RUN_STATUSES

# Below this many rows an exact count is cheap; above it, finished statuses are estimated.
EXACT_COUNT_LIMIT = 100_000

# Active runs are a small set; index job_runs_status_id answers this with an index-only scan.
ACTIVE_COUNTS = """
SELECT status, count(*) FROM job_runs WHERE status IN ('queued', 'running', 'failed') GROUP BY status
"""

ALL_COUNTS = "SELECT status, count(*) FROM job_runs GROUP BY status"

# Finished runs are most of a big table: estimated from the planner's statistics (ANALYZE,
# autovacuum) instead of counted.
ESTIMATED_COUNTS = """
SELECT v.status, round(c.reltuples * v.freq)::bigint
FROM pg_class c
JOIN pg_stats s ON s.schemaname = current_schema() AND s.tablename = 'job_runs' AND s.attname = 'status'
CROSS JOIN unnest(s.most_common_vals::text::text[], s.most_common_freqs) AS v(status, freq)
WHERE c.oid = 'job_runs'::regclass
"""

TABLE_ESTIMATE = "SELECT reltuples::bigint FROM pg_class WHERE oid = 'job_runs'::regclass"

# A run of job_runs that no worker may take because a person paused its queue or job type
# (the claim leaves them out the same way). Both paused lists are a few rows, hashed once.
HELD_BY_A_PAUSE = ("(queue IN (SELECT name FROM job_queues WHERE paused) "
                   "OR job_type IN (SELECT job_type FROM job_paused_types))")

# Uses index job_runs_claimable: due runs waiting for a worker, and how long the oldest waited;
# apart, the due runs held by a pause (the dashboard blamed the workers for those).
DUE_NOW = f"""
SELECT count(*) FILTER (WHERE NOT held),
       extract(epoch FROM now() - min(run_at) FILTER (WHERE NOT held)),
       count(*) FILTER (WHERE held)
FROM (SELECT run_at, {HELD_BY_A_PAUSE} AS held
      FROM job_runs WHERE status IN ('queued', 'failed') AND run_at <= now()) due
"""

PAUSED_QUEUES = "SELECT name FROM job_queues WHERE paused ORDER BY name"

# Queued (or failed, retrying) runs whose time has not come: not "waiting" for a worker, but
# not nothing either (the dashboard said "1 Queued" and "Nothing is waiting" at once). Index
# job_runs_claimable, as DUE_NOW.
DUE_LATER = """
SELECT count(*), min(run_at) FROM job_runs WHERE status IN ('queued', 'failed') AND run_at > now()
"""

# Due runs by job type (index job_runs_claimable). Workers claim only the types they have a
# handler for, so a run of a type none of them knows (a typo in an INSERT, a handler module
# missing from JOBSWEB_HANDLERS) would otherwise wait silently forever.
# Due runs by job type, for the types that no worker seen within :window seconds handles
# (job_workers.job_types; NULL is a worker from before 0008, which may handle anything).
# A worker that exits between cron ticks still counts: crontab mode has no worker alive most
# of the time. Groups first, so the NOT EXISTS runs once per job type, not per run. Runs of a
# paused queue or job type are left out: they wait for a person, and the dashboard says so
# (DUE_NOW counts them apart), rather than blaming the workers for them.
UNHANDLED_WINDOW = 3600  # seconds: workers seen this recently say which job types are handled
UNHANDLED_DUE = f"""
SELECT due.job_type, due.queue, due.n FROM (
    SELECT job_type, queue, count(*) AS n FROM job_runs
    WHERE status IN ('queued', 'failed') AND run_at <= now() AND NOT {HELD_BY_A_PAUSE}
    GROUP BY job_type, queue
) due
WHERE NOT EXISTS (
    SELECT 1 FROM job_workers w
    WHERE w.last_seen_at > now() - make_interval(secs => %(window)s)
      AND (w.job_types IS NULL OR due.job_type = ANY (w.job_types))
      AND (w.queues IS NULL OR due.queue = ANY (w.queues))
)
"""

# Running runs whose lease ran out and that lease recovery has not failed yet: their worker
# stopped heartbeating. Uses index job_runs_running.
RUNS_PAST_LEASE = """
SELECT id, job_type, locked_by, locked_until FROM job_runs
WHERE status = 'running' AND locked_until < now() ORDER BY locked_until LIMIT 10
"""

# Uses index job_runs_status_id; the definition's name for runs reported from outside, whose
# job type (jobsweb.external) says nothing.
RECENT_DEAD = """
SELECT r.id, r.job_type, r.error_type, r.last_error, r.finished_at, coalesce(d.name, r.deleted_definition) AS definition
FROM (SELECT id, job_type, error_type, last_error, finished_at, definition_id, deleted_definition FROM job_runs
      WHERE status = 'dead' ORDER BY id DESC LIMIT 8) r
LEFT JOIN job_definitions d ON d.id = r.definition_id
ORDER BY r.id DESC
"""

# Hourly buckets from :since to the current hour by the database clock, empty hours included;
# each hour is a range scan of index job_attempts_finished_outcome, index-only because no
# column outside it is read (an empty hour's NULL outcome matches neither FILTER).
HOURLY_OUTCOMES = """
SELECT h.hour,
       count(*) FILTER (WHERE a.outcome = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE a.outcome = 'failed') AS failed
FROM generate_series(greatest(CAST(%(since)s AS timestamptz), date_trunc('hour', now()) - interval '23 hours'),
                     date_trunc('hour', now()), interval '1 hour') AS h(hour)
LEFT JOIN job_attempts a ON a.finished_at >= h.hour AND a.finished_at < h.hour + interval '1 hour'
GROUP BY h.hour
ORDER BY h.hour
"""

CHART_HOURS = 24
CURRENT_HOUR = "SELECT date_trunc('hour', now())"


def status_counts():
    """{status: (count, exact?)}: exact for active runs, estimated for finished ones on big tables."""
    if execute(TABLE_ESTIMATE).scalar() < EXACT_COUNT_LIMIT:
        return {status: (n, True) for status, n in execute(ALL_COUNTS)}
    counts = {status: (n, False) for status, n in execute(ESTIMATED_COUNTS)
              if status not in ACTIVE_STATUSES}
    counts.update({status: (n, True) for status, n in execute(ACTIVE_COUNTS)})
    return counts


# The runs list's status chips: each status counted exactly up to CHIP_COUNT_CAP rows by an
# index scan of job_runs_status_id that stops there (LIMIT), so the statement reads at most
# 9 x 10,001 index entries whatever the table's size. A status past the cap shows the planner's
# estimate (ESTIMATED_COUNTS) instead: counting a million succeeded runs exactly takes ~100 ms.
# Each status is written into the statement, not passed: the planner then reads that status's
# own frequency in the statistics, and one a status absent from them has is ~0, so its count
# reads job_runs_status_id (no entries: microseconds). Passed as a parameter (a correlated
# subquery over unnest), every status was planned at the table's 1/n_distinct: with statistics
# that saw 3 statuses or fewer, the usual shape, that is a third of the table per status, and
# the planner walked the primary key looking for each absent status's 10,001 runs, reading the
# whole table: 13.2 s per view at 1.3M runs (issue 53, M3), 2 ms once the statistics showed 4.
# ORDER BY r.id keeps a sequential scan out when updates have cleared the visibility map.
CHIP_COUNT_CAP = 10_000


def capped_counts(statuses):
    """The statement counting each of `statuses` (RUN_STATUSES, never user text) up to the cap."""
    return " UNION ALL ".join(
        f"SELECT '{status}', (SELECT count(*) FROM (SELECT 1 FROM job_runs r WHERE r.status = '{status}' "
        f"ORDER BY r.id LIMIT {CHIP_COUNT_CAP + 1}) capped)" for status in statuses if status in RUN_STATUSES)


def chip_counts(statuses):
    """{status: (count, exact?)}: exact up to CHIP_COUNT_CAP, estimated beyond (at least the cap)."""
    counts = {status: (n, True) for status, n in execute(capped_counts(statuses))}
    over = [status for status, (n, _) in counts.items() if n > CHIP_COUNT_CAP]
    if over:
        estimates = dict(execute(ESTIMATED_COUNTS).all())
        for status in over:
            counts[status] = (max(estimates.get(status, 0), CHIP_COUNT_CAP), False)
    return counts


def paused_queues():
    """Names of the paused queues, sorted."""
    return execute(PAUSED_QUEUES).scalars().all()


def unknown_due_types():
    """{(job_type, queue): due runs} for due runs that no recently seen worker handles: none
    registered the job type, or none takes runs from the queue (run-jobs --queues)."""
    return {(job_type, queue): n for job_type, queue, n in execute(UNHANDLED_DUE, {"window": UNHANDLED_WINDOW})}


def hourly_chart():
    """24 hourly buckets, oldest first: (hour, succeeded, failed).

    An hour that has ended no longer changes (attempts are written with the database's now()),
    so its counts are kept per app: a refresh counts only the current hour and any hour not
    yet seen, instead of a whole day of attempts (hundreds of thousands at a few a second).
    """
    done = current_app.extensions.setdefault("jobsweb_chart_hours", {})
    now_hour = execute(CURRENT_HOUR).scalar()
    hours = [now_hour - timedelta(hours=n) for n in range(CHART_HOURS - 1, -1, -1)]
    since = next((h for h in hours[:-1] if h not in done), now_hour)
    fresh = {row.hour: tuple(row) for row in execute(HOURLY_OUTCOMES, {"since": since})}
    for hour in list(done):
        if hour < hours[0]:
            del done[hour]
    done.update((hour, row) for hour, row in fresh.items() if hour < now_hour)
    return [fresh.get(hour) or done[hour] for hour in hours]


def overview():
    """The dashboard's counts, queue depth, problems and chart, as one dict for the template (the
    page adds the pauses and the live workers: ops/queue_stats.py, ops/fleet.py)."""
    due, oldest, held = execute(DUE_NOW).one()
    later, next_due = execute(DUE_LATER).one()
    return {
        "later": later,
        "next_due": next_due,
        "counts": status_counts(),
        "due": due,
        "held": held,
        "oldest_due_seconds": float(oldest) if oldest is not None else None,
        "expired": execute(RUNS_PAST_LEASE).all(),
        "unknown_types": unknown_due_types(),
        "dead": execute(RECENT_DEAD).all(),
        "chart": hourly_chart(),
    }
