"""GET /healthz and GET /metrics: answered without signing in, for load balancers and scrapers.

/healthz says a status and what is wrong in one word, database or schema; the words (which name
the schema's revisions and its missing objects) go to the log and, for a schema, to a signed-in
viewer. /metrics answers only with `Authorization: Bearer <JOBSWEB_METRICS_TOKEN>`; without that
setting the endpoint does not exist (404).

A new web process checks its database once before it serves (warm_process, from gunicorn's
post_worker_init hook in gunicorn_conf.py), so that its first probe finds a connection open and
the migrations read instead of paying for them inside its budget.
"""

import hmac
import logging
import time
import weakref

from flask import Blueprint, abort, current_app, request
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.exceptions import Forbidden

from ..core.deadlines import CONNECT_TIMEOUT
from ..ops import health, metrics as queue_metrics
from .access import find_viewer
from .outage import ROUND_TRIP_LIMIT

log = logging.getLogger("jobsweb.web")

bp = Blueprint("probes", __name__)

# Seconds /healthz waits for the database before answering 503: under the 2 s that load
# balancers commonly give a probe, with room for the request itself.
HEALTH_BUDGET = 1.5
# Seconds a starting process gives its first check before it serves anyway. That check opens
# the process's first connection and reads the migrations from disk: 1.3 s through a path slow
# to connect, 1.5 s and more on a loaded machine, where the first probe, paying for it inside
# its budget, answered 503 from a healthy database. A check still under way when the process
# serves is shared by the probes that come meanwhile, each answering within HEALTH_BUDGET (a
# database really away is reported as promptly as ever): so the first check has this and a
# probe's budget, a connection's whole timeout and then its statements.
WARM_WAIT = CONNECT_TIMEOUT

_apps = weakref.WeakSet()  # the apps of this process that serve /healthz, for warm_process


@bp.record_once
def _served(state):
    _apps.add(state.app)


def probe(app):
    """The app's health.Probe, made at its first use: one per app and process."""
    found = app.extensions.get("jobsweb_health_probe")
    if found is None:
        found = app.extensions.setdefault("jobsweb_health_probe", health.Probe(app, ROUND_TRIP_LIMIT))
    return found


def warm_process(wait=WARM_WAIT):
    """Check the database of every app of this process that serves /healthz, as its first probe
    would, waiting at most `wait` seconds in all: for a web process about to serve (after a fork,
    never before one: the connection opened stays in the pool). One warning line per app whose
    database is not ready."""
    apps = list(_apps)
    for app in apps:  # every check under way at once: the waits overlap
        probe(app).start()
    until = time.monotonic() + wait
    for app in apps:
        reason = probe(app).problem(max(0.0, until - time.monotonic()))
        if reason is not None:
            log.warning("health check at start: %s (/healthz answers 503 until it passes)", reason)


@bp.get("/healthz")
def healthz():
    """200 when the database answers and its schema is at the migration head, complete (or newer
    than this code, mid-deploy), 503 otherwise, within HEALTH_BUDGET seconds: its reason is
    "database" or "schema", and a signed-in viewer also gets the words as `detail`."""
    checking = probe(current_app._get_current_object())
    reason = checking.problem(HEALTH_BUDGET)
    if checking.changed(reason):
        if reason is None:
            log.info("health check: ok")
        else:
            log.warning("health check: %s (/healthz answers 503 until it passes)", reason)
    if reason is None:
        return {"status": "ok"}
    answer = {"status": "unavailable", "reason": reason.kind}
    if reason.kind == "schema" and _signed_in():
        answer["detail"] = str(reason)
    return answer, 503


def _signed_in():
    """Whether a viewer is signed in. Asked only when the database answered (a schema problem):
    during an outage the look-up would wait for it, and the pages say the outage themselves."""
    try:
        return find_viewer() is not None
    except (Forbidden, SQLAlchemyError):
        return False


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
