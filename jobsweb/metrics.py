"""GET /metrics: the state of the queue in the Prometheus text format.

A collector that queries the database at scrape time, instead of counters kept in memory:
gunicorn's worker processes (and every `flask run-jobs`) then agree, whichever one answers.
Answers only with `Authorization: Bearer <JOBSWEB_METRICS_TOKEN>`; without that setting the
endpoint does not exist (404).
"""

import hmac

from flask import Blueprint, abort, current_app, request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString
from sqlalchemy import text

from . import definitions, stats
from .db import db
from .durations import BOUNDS
from .durations import histogram as durations_histogram

bp = Blueprint("metrics", __name__)

WORKERS_SHOWN_DAYS = 1  # stopped or gone worker processes drop out of the gauges after this

# Worker processes still running (not stopped cleanly) and seen lately; age of the last heartbeat.
WORKER_HEARTBEATS = text("""
SELECT id, extract(epoch FROM now() - last_seen_at)::float8 FROM job_workers
WHERE stopped_at IS NULL AND last_seen_at > now() - make_interval(days => :days)
""")


# Incidents (alerts.py) not yet resolved, by kind: overdue, failing, dead.
OPEN_INCIDENTS = text("SELECT kind, count(*) FROM alert_incidents WHERE resolved_at IS NULL GROUP BY kind")


class DatabaseCollector:
    """Reads every metric from the database when Prometheus scrapes."""

    def __init__(self, lease_seconds):
        self.gone_after = 2 * lease_seconds

    def collect(self):
        runs = GaugeMetricFamily("jobsweb_runs", "Runs by status (finished statuses estimated on "
                                 "large tables).", labels=["status"])
        for status, (n, _exact) in sorted(stats.status_counts().items()):
            runs.add_metric([status], n)
        yield runs

        due, oldest = db.session.execute(stats.DUE_NOW).one()
        yield GaugeMetricFamily("jobsweb_due_runs", "Runs due now and waiting for a worker.", value=due)
        yield GaugeMetricFamily("jobsweb_oldest_due_seconds", "How long the oldest due run has waited.",
                                value=float(oldest or 0))

        unknown = GaugeMetricFamily("jobsweb_due_runs_unknown_type", "Due runs of job types that no "
                                    "worker seen in the last hour handles: nothing will run them.",
                                    labels=["job_type"])
        for job_type, n in sorted(stats.unknown_due_types().items()):
            unknown.add_metric([job_type], n)
        yield unknown

        yield GaugeMetricFamily("jobsweb_definitions_overdue", "Enabled definitions past their slot "
                                "and grace with nothing queued or running.", value=len(definitions.overdue()))
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
        for worker, age in db.session.execute(WORKER_HEARTBEATS, {"days": WORKERS_SHOWN_DAYS}):
            ages.add_metric([worker], age)
            alive, gone = (alive + 1, gone) if age <= self.gone_after else (alive, gone + 1)
        yield ages
        workers = GaugeMetricFamily("jobsweb_workers", "Worker processes by state: alive, or gone "
                                    "(no heartbeat for 2 lease periods without stopping).", labels=["state"])
        workers.add_metric(["alive"], alive)
        workers.add_metric(["gone"], gone)
        yield workers

        incidents = GaugeMetricFamily("jobsweb_incidents_open", "Open alert incidents, by kind.",
                                      labels=["kind"])
        open_by_kind = dict(db.session.execute(OPEN_INCIDENTS).all())
        for kind in ("overdue", "failing", "dead"):
            incidents.add_metric([kind], open_by_kind.get(kind, 0))
        yield incidents


def _authorised():
    """Whether the request carries the metrics token (compared in constant time)."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    expected = current_app.config["JOBSWEB_METRICS_TOKEN"]
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), expected.encode())


@bp.get("/metrics")
def metrics():
    """The metrics in the Prometheus text format, for a scraper holding the token."""
    if not current_app.config["JOBSWEB_METRICS_TOKEN"]:
        abort(404)
    if not _authorised():
        return "A valid bearer token is needed.\n", 401, {"WWW-Authenticate": 'Bearer realm="metrics"',
                                                           "Content-Type": "text/plain"}
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(current_app.config["JOBSWEB_LEASE_SECONDS"]))
    try:
        body = generate_latest(registry)
    finally:
        db.session.rollback()  # read-only: end the transaction the queries opened
    return body, 200, {"Content-Type": CONTENT_TYPE_LATEST, "Cache-Control": "no-store"}


def init_app(app):
    app.register_blueprint(bp)
