"""Worker processes seen by the database."""

from flask import Blueprint, current_app
from sqlalchemy import select

from ..core.database import db
from ..core.models import JobWorker
from ..ops import fleet, run_history
from .rendering import render

bp = Blueprint("workers", __name__)

SHOWN = 200  # the newest worker processes; stopped ones pile up over deploys


@bp.get("/workers")
def index():
    """Every worker process recently started: id, host, pid, heartbeat, runs done, what it runs
    now, alive or gone."""
    workers = db.session.scalars(select(JobWorker).order_by(JobWorker.started_at.desc()).limit(SHOWN)).all()
    now = db.session.scalar(select(db.func.now()))
    gone_after = fleet.gone_after(current_app.config)
    rows = [(w, fleet.state(w.stopped_at, (now - w.last_seen_at).total_seconds(), gone_after)) for w in workers]
    held = run_history.current_runs(w.id for w in workers)
    return render("workers.html", "partials/_workers.html", rows=rows, now=now, gone_after=gone_after, held=held)

