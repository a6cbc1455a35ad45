"""The state of the queue as Prometheus metrics (GET /metrics, web/probes.py, serves them).

A collector that queries the database at scrape time, instead of counters kept in memory:
gunicorn's worker processes (and every `flask run-jobs`) then agree, whichever one answers.
"""

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from . import fleet, queue_stats, stats
from ..core.database import db, execute
from ..engine.runs import batch_status
from ..scheduling import definitions
from .alerts import INCIDENT_KINDS
from .durations import BOUNDS
from .durations import histogram as durations_histogram

WORKERS_SHOWN_DAYS = 1  # stopped or gone worker processes drop out of the gauges after this

# Worker processes still running (not stopped cleanly) and seen lately; age of the last heartbeat.
WORKER_HEARTBEATS = """
SELECT id, extract(epoch FROM now() - last_seen_at)::float8 FROM job_workers
WHERE stopped_at IS NULL AND last_seen_at > now() - make_interval(days => %(days)s)
"""


# Incidents (alerts.py) not yet resolved, by kind: overdue, failing, dead.
OPEN_INCIDENTS = "SELECT kind, count(*) FROM jobsweb_alert_incidents WHERE resolved_at IS NULL GROUP BY kind"


class DatabaseCollector:
    """Reads every metric from the database when Prometheus scrapes."""

    def __init__(self, config):
        self.gone_after = fleet.gone_after(config)

    def collect(self):
        runs = GaugeMetricFamily("jobsweb_runs", "Runs by status (finished statuses estimated on "
                                 "large tables).", labels=["status"])
        for status, (n, _exact) in sorted(stats.status_counts().items()):
            runs.add_metric([status], n)
        yield runs

        due, oldest, paused = execute(stats.DUE_NOW).one()
        yield GaugeMetricFamily("jobsweb_due_runs", "Runs due now and waiting for a worker.", value=due)
        yield GaugeMetricFamily("jobsweb_due_runs_paused", "Runs due now in a paused queue or of a paused "
                                "job type: waiting for a resume, not for a worker.", value=paused)
        yield GaugeMetricFamily("jobsweb_oldest_due_seconds", "How long the oldest due run has waited.",
                                value=float(oldest or 0))

        unknown = GaugeMetricFamily("jobsweb_due_runs_unknown_type", "Due runs of a job type and queue "
                                    "that no worker seen in the last hour handles: nothing will run them (runs "
                                    "held by a pause are counted in jobsweb_due_runs_paused instead).",
                                    labels=["job_type", "queue"])
        for (job_type, queue), n in sorted(stats.unknown_due_types().items()):
            unknown.add_metric([job_type, queue], n)
        yield unknown

        late = {d.id for d in definitions.overdue()} | {d.id for d, _ in definitions.unreported()}
        yield GaugeMetricFamily("jobsweb_definitions_overdue", "Enabled definitions past their slot "
                                "and grace with nothing queued or running (external ones: not reported).",
                                value=len(late))
        yield GaugeMetricFamily("jobsweb_definitions_failing", "Definitions whose last runs ended dead "
                                "(their alert threshold, default "
                                f"{definitions.FAILING_AFTER}, or more in a row).",
                                value=len(definitions.failing()))

        durations = HistogramMetricFamily("jobsweb_attempt_duration_seconds", "How long attempts ran "
                                          "(succeeded or failed), by job type.", labels=["job_type"])
        for job_type, (count, total, cumulative) in sorted(durations_histogram().items()):
            buckets = [(floatToGoString(bound), n) for bound, n in zip(BOUNDS, cumulative)]
            durations.add_metric([job_type], buckets + [("+Inf", count)], float(total))
        yield durations

        ages = GaugeMetricFamily("jobsweb_worker_heartbeat_age_seconds", "Seconds since each running "
                                 "worker process last heartbeated.", labels=["worker"])
        alive = gone = 0
        for worker, age in execute(WORKER_HEARTBEATS, {"days": WORKERS_SHOWN_DAYS}):
            ages.add_metric([worker], age)
            if fleet.state(None, age, self.gone_after) == "alive":
                alive += 1
            else:
                gone += 1
        yield ages
        workers = GaugeMetricFamily("jobsweb_workers", "Worker processes by state: alive, or gone "
                                    f"(no heartbeat for {fleet.GONE_AFTER_LEASES} lease periods without stopping).", labels=["state"])
        workers.add_metric(["alive"], alive)
        workers.add_metric(["gone"], gone)
        yield workers

        depth = GaugeMetricFamily("jobsweb_queue_depth", "Runs due now and waiting, by queue.", labels=["queue"])
        running = GaugeMetricFamily("jobsweb_queue_running", "Runs running, by queue.", labels=["queue"])
        paused = GaugeMetricFamily("jobsweb_queue_paused", "1 when the queue is paused.", labels=["queue"])
        for queue in queue_stats.queues(with_throughput=False):
            depth.add_metric([queue.name], queue.due)
            running.add_metric([queue.name], queue.running)
            paused.add_metric([queue.name], int(queue.paused))
        yield from (depth, running, paused)

        yield GaugeMetricFamily("jobsweb_batches_open", "Batches with members not yet ended.",
                                value=batch_status.open_batches())

        incidents = GaugeMetricFamily("jobsweb_incidents_open", "Open alert incidents, by kind.",
                                      labels=["kind"])
        open_by_kind = dict(execute(OPEN_INCIDENTS).all())
        for kind in INCIDENT_KINDS:
            incidents.add_metric([kind], open_by_kind.get(kind, 0))
        yield incidents


def exposition(config):
    """Every metric in the Prometheus text format, read in one transaction that is then rolled back."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(config))
    try:
        return generate_latest(registry)
    finally:
        db.session.rollback()  # read-only: end the transaction the queries opened

