"""Queues: each queue's depth, limits and pause; operators pause and resume queues and job
types, admins set limits. Every change is audited."""

from flask import Blueprint, abort, current_app, flash, request, url_for

from . import audit
from ..core.database import db
from ..core.errors import InvalidInput, check_job_type_name
from ..engine.jobs import flow
from ..ops import fleet, job_type_metrics, queue_stats
from ..ops.job_type_names import job_type_names
from .access import role_required
from .rendering import redirect_to, render

bp = Blueprint("queues", __name__)
# Seconds a view spends adding attempts to the rollup (ops/job_type_metrics.py) before it
# answers: the hour not yet counted is joined to its runs instead, so the figure is whole anyway.
SEAL_BUDGET = 0.2
WORKERS_SHOWN = 5  # live workers named in a queue's row; the Workers page has them all


def _page(status=200, **context):
    queues = queue_stats.queues()
    # Which live worker takes which queue (Sidekiq's Busy page), by the Workers page's rule.
    serving = fleet.by_queue(fleet.live_workers(current_app.config), [q.name for q in queues])
    response = render("queues.html", "partials/_queues.html", queues=queues, serving=serving, workers_shown=WORKERS_SHOWN,
                      paused_types=flow.paused_types(), job_types=job_type_names(), **context)
    response.status_code = status
    return response


@bp.get("/queues")
def index():
    """Every queue: due and running runs, oldest wait, limit, rate, paused, attempts in the last
    hour, and the live workers that take its runs."""
    # The attempts finished since the last view are added to the rollup the last hour is read
    # from (short transactions of their own), so the page joins only the newest to their runs.
    job_type_metrics.seal(SEAL_BUDGET)
    return _page()


def _queue_name():
    try:
        return flow.check_queue(request.form.get("queue", ""))
    except InvalidInput as exc:
        abort(400, str(exc))


@bp.post("/queues/pause")
@role_required("operator")
def pause():
    """Leave the queue's runs queued until it is resumed; other queues go on."""
    return _set_paused(_queue_name(), True)


@bp.post("/queues/resume")
@role_required("operator")
def resume():
    """Claim the queue's runs again."""
    return _set_paused(_queue_name(), False)


def _set_paused(name, paused):
    flow.configure_queue(name, paused=paused)
    audit.record("pause" if paused else "resume", "queue", queue=name)
    db.session.commit()
    flash(f"Queue {name} is {'paused' if paused else 'running again'}.")
    return redirect_to(url_for("jobsweb.queues.index"))


@bp.post("/queues/limits")
@role_required("admin")
def limits():
    """Set or clear a queue's concurrency limit and rate (blank: none)."""
    name = _queue_name()
    limit, rate = request.form.get("limit", "").strip(), request.form.get("rate", "").strip()
    try:
        flow.configure_queue(name, limit=limit or None, rate=rate or None)
    except InvalidInput as exc:
        db.session.rollback()
        return _page(422, error=f"Queue {name}: {exc}", form={"queue": name, "limit": limit, "rate": rate})
    audit.record("set_limits", "queue", queue=name, limit=limit or None, rate=rate or None)
    db.session.commit()
    flash(f"Queue {name}: limit {limit or 'none'}, rate {rate or 'none'}.")
    return redirect_to(url_for("jobsweb.queues.index"))


@bp.post("/queues/job-types/pause")
@role_required("operator")
def pause_type():
    """Leave every run of one job type queued ("stop send_invoice now")."""
    return _set_type_paused(True)


@bp.post("/queues/job-types/resume")
@role_required("operator")
def resume_type():
    """Claim the job type's runs again."""
    return _set_type_paused(False)


def _set_type_paused(paused):
    job_type = request.form.get("job_type", "")
    try:
        flow.pause_type(check_job_type_name("job_type", job_type), paused)
    except InvalidInput as exc:
        abort(400, str(exc))
    audit.record("pause_type" if paused else "resume_type", "job_type", job_type=job_type)
    db.session.commit()
    flash(f"Job type {job_type} is {'paused' if paused else 'running again'}.")
    return redirect_to(url_for("jobsweb.queues.index"))
