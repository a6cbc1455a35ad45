"""Worker processes as the database sees them (job_workers): alive, gone or stopped.

A worker heartbeats every third of its lease, so one silent for GONE_AFTER_LEASES leases is
gone (killed, frozen, its host lost), never merely slow: by then its runs' leases have expired
and other workers retry them. This is the one liveness rule: the Workers page, /metrics, the
dashboard's workers, the Queues page's workers and "why is it not running" (why_waiting.py) all
judge by it, in Python (`state`) or in SQL (`LIVE`, the same comparison).
"""

from ..core.database import execute

GONE_AFTER_LEASES = 2

# `state`'s "alive" in SQL, on a job_workers row: not stopped and heard from within
# %(gone_after)s seconds (gone_after()), the boundary included as `state` includes it.
LIVE = "(stopped_at IS NULL AND last_seen_at >= now() - make_interval(secs => %(gone_after)s))"

# The live workers by id, with the runs each holds now (index
# job_runs_running); job_workers has a row per process started, most of them stopped, and is
# read once.
LIVE_WORKERS = f"""
SELECT w.id, w.host, w.pid, w.last_seen_at, w.runs_done, w.queues, w.job_types, w.quiet_at, w.quiet_by,
       w.concurrency, w.stop_requested_at, coalesce(h.n, 0) AS running
FROM job_workers w
LEFT JOIN (SELECT locked_by, count(*) AS n FROM job_runs WHERE status = 'running' GROUP BY locked_by) h
       ON h.locked_by = w.id
WHERE {LIVE}
ORDER BY w.id
"""


def gone_after(config):
    """Seconds without a heartbeat after which a worker that did not stop counts as gone."""
    return GONE_AFTER_LEASES * config["JOBSWEB_LEASE_SECONDS"]


def state(stopped_at, heartbeat_age, gone_after_seconds):
    """'stopped' (exited cleanly), 'gone' (stopped heartbeating) or 'alive'."""
    if stopped_at is not None:
        return "stopped"
    return "gone" if heartbeat_age > gone_after_seconds else "alive"


def live_workers(config):
    """The workers alive now (the Workers page's rule), each with `running`: the runs it holds."""
    return execute(LIVE_WORKERS, {"gone_after": gone_after(config)}).all()


def by_queue(workers, queue_names):
    """{queue name: [the workers of `workers` that take runs from it]}: a worker started
    without --queues (queues NULL) takes every queue."""
    return {name: [w for w in workers if w.queues is None or name in w.queues] for name in queue_names}
