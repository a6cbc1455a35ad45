"""GET /healthz and GET /metrics: answered without signing in, for load balancers and scrapers.

/healthz says only a status and a reason. /metrics answers only with `Authorization: Bearer
<JOBSWEB_METRICS_TOKEN>`; without that setting the endpoint does not exist (404).
"""

import hmac

from flask import Blueprint, abort, current_app, request
from prometheus_client import CONTENT_TYPE_LATEST

from ..ops import health, metrics as queue_metrics
from .outage import ROUND_TRIP_LIMIT

bp = Blueprint("probes", __name__)

# Seconds /healthz waits for the database before answering 503: under the 2 s that load
# balancers commonly give a probe, with room for the request itself.
HEALTH_BUDGET = 1.5


@bp.get("/healthz")
def healthz():
    """200 when the database answers and its schema is at the migration head, complete (or newer
    than this code, mid-deploy), 503 with the reason otherwise, within HEALTH_BUDGET seconds."""
    probe = current_app.extensions.get("jobsweb_health_probe")
    if probe is None:
        probe = current_app.extensions.setdefault("jobsweb_health_probe",
                                                  health.Probe(current_app._get_current_object(), ROUND_TRIP_LIMIT))
    reason = probe.problem(HEALTH_BUDGET)
    if reason is not None:
        return {"status": "unavailable", "reason": reason}, 503
    return {"status": "ok"}


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
    body = queue_metrics.exposition(current_app.config)
    return body, 200, {"Content-Type": CONTENT_TYPE_LATEST, "Cache-Control": "no-store"}
