"""Worker processes seen by the database."""

from flask import Blueprint
from sqlalchemy import select

from ..db import db
from ..models import JobWorker
from ..web import render

bp = Blueprint("workers", __name__)

SHOWN = 200  # the newest worker processes; stopped ones pile up over deploys


@bp.get("/workers")
def index():
    """Every worker process recently started: id, host, pid, heartbeat, runs done."""
    workers = db.session.scalars(select(JobWorker).order_by(JobWorker.started_at.desc()).limit(SHOWN)).all()
    return render("workers.html", "partials/_workers.html", workers=workers,
                  now=db.session.scalar(select(db.func.now())))
