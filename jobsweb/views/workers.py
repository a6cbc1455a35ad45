"""Worker processes seen by the database."""

from flask import Blueprint, current_app
from sqlalchemy import select

from ..db import db
from ..models import JobWorker
from ..web import render

bp = Blueprint("workers", __name__)

SHOWN = 200  # the newest worker processes; stopped ones pile up over deploys


@bp.get("/workers")
def index():
    """Every worker process recently started: id, host, pid, heartbeat, runs done, alive or gone."""
    workers = db.session.scalars(select(JobWorker).order_by(JobWorker.started_at.desc()).limit(SHOWN)).all()
    now = db.session.scalar(select(db.func.now()))
    # Gone: no heartbeat for 2 lease periods. Heartbeats come every third of a lease, so a live
    # worker is never that late; by then its runs' leases have expired and others retry them.
    gone_after = 2 * current_app.config["JOBSWEB_LEASE_SECONDS"]
    rows = [(w, state(w, now, gone_after)) for w in workers]
    return render("workers.html", "partials/_workers.html", rows=rows, now=now, gone_after=gone_after)


def state(worker, now, gone_after):
    """'stopped' (exited cleanly), 'gone' (stopped heartbeating) or 'alive'."""
    if worker.stopped_at is not None:
        return "stopped"
    return "gone" if (now - worker.last_seen_at).total_seconds() > gone_after else "alive"
