"""Incidents: what is wrong now, what was, and whether the notifications got out."""

from flask import Blueprint, flash, url_for
from sqlalchemy import select

from . import audit
from ..core.database import db
from ..core.models import AlertDelivery, AlertIncident
from ..ops import alerts, notify
from .access import role_required, viewer
from .rendering import redirect_to, render

bp = Blueprint("incidents", __name__)

HISTORY = 100  # resolved incidents shown, newest first
DELIVERIES = 50  # newest notifications shown


@bp.get("/incidents")
def index():
    """Open incidents, recent history and delivery status; htmx refreshes the body."""
    history = db.session.scalars(
        select(AlertIncident).where(AlertIncident.resolved_at.is_not(None))
        .order_by(AlertIncident.id.desc()).limit(HISTORY)).all()
    deliveries = db.session.scalars(
        select(AlertDelivery).order_by(AlertDelivery.id.desc()).limit(DELIVERIES)).all()
    return render("incidents.html", "partials/_incidents.html", open_incidents=alerts.open_incidents(),
                  history=history, deliveries=deliveries, routes=notify.routes(),
                  pending=any(d.status == "pending" for d in deliveries),
                  now=db.session.scalar(select(db.func.now())), redact=notify.redact)


@bp.post("/incidents/test")
@role_required("operator")
def send_test():
    """Queue a test notification on every default channel; the next alert pass sends it."""
    queued = notify.queue_test(viewer().identity)
    if not queued:
        db.session.rollback()
        flash("No alert channel is configured: set JOBSWEB_ALERT_WEBHOOK_URL, or JOBSWEB_ALERT_EMAIL_TO "
              "and JOBSWEB_SMTP_HOST.")
        return redirect_to(url_for("jobsweb.incidents.index"))
    audit.record("send_test_alert", "alerts", channels=[c for c, _ in notify.routes()])
    db.session.commit()
    flash(f"Test alert queued on {queued} channel{'s' if queued != 1 else ''}; the next alert pass (a worker's or a web process's) sends it.")
    return redirect_to(url_for("jobsweb.incidents.index"))
