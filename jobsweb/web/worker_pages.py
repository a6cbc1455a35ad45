"""Worker processes seen by the database; operators quiet a worker (it finishes what it holds and
claims nothing more, as Sidekiq's quiet) and resume it. Every change is audited."""

from flask import Blueprint, abort, current_app, flash, request, url_for
from sqlalchemy import select, update

from . import audit
from ..core.database import db
from ..core.errors import InvalidInput, clean_name
from ..core.models import JobWorker
from ..ops import fleet, run_history
from .access import role_required, viewer
from .rendering import redirect_to, render

bp = Blueprint("workers", __name__)

SHOWN = 200  # the newest worker processes; stopped ones pile up over deploys
WORKER_ID_MAX_CHARS = 300


@bp.get("/workers")
def index():
    """Every worker process recently started: id, host, pid, heartbeat, runs done, what it runs
    now, its queues, alive, quiet or gone; `?worker=ID` shows that one worker, however old (the
    link from an attempt or a "why not running" sentence)."""
    only = request.args.get("worker")
    query = select(JobWorker).order_by(JobWorker.started_at.desc()).limit(SHOWN)
    if only is not None:
        query = query.where(JobWorker.id == only)
    workers = db.session.scalars(query).all()
    if only is not None and not workers:
        abort(404, f"There is no worker {only!r}.")
    now = db.session.scalar(select(db.func.now()))
    gone_after = fleet.gone_after(current_app.config)
    rows = [(w, fleet.state(w.stopped_at, (now - w.last_seen_at).total_seconds(), gone_after)) for w in workers]
    held = run_history.current_runs(w.id for w in workers)
    return render("workers.html", "partials/_workers.html", rows=rows, now=now, gone_after=gone_after, held=held,
                  only=only)


@bp.post("/workers/quiet")
@role_required("operator")
def quiet():
    """Quiet a worker: at its next heartbeat (a third of its lease) it stops claiming, finishes the
    runs it holds, and stays up doing nothing until resumed or stopped."""
    return _set_quiet(True)


@bp.post("/workers/resume")
@role_required("operator")
def resume():
    """Let a quieted worker claim again, at its next heartbeat."""
    return _set_quiet(False)


def _set_quiet(quiet):
    worker_id = request.form.get("worker", "")
    # A NUL was a 500 (PostgreSQL text cannot hold one); no worker id is longer than a host name
    # (255 bytes at most) and its ":pid:hex" tail.
    try:
        clean_name("worker", worker_id)
    except InvalidInput as exc:
        abort(400, f"{exc}.")
    if len(worker_id) > WORKER_ID_MAX_CHARS:
        abort(400, f"worker: must be at most {WORKER_ID_MAX_CHARS} characters, got {len(worker_id)}.")
    # Only a worker still running: a stopped or gone one would never read it, and the page
    # would say it is quiet.
    changed = db.session.execute(
        update(JobWorker)
        .where(JobWorker.id == worker_id, JobWorker.stopped_at.is_(None))
        .values(quiet_at=db.func.now() if quiet else None, quiet_by=viewer().identity if quiet else None)
    ).rowcount
    if not changed:
        abort(404, f"worker {worker_id!r} is not a running worker")
    audit.record("quiet" if quiet else "resume", "worker", worker=worker_id)
    db.session.commit()
    flash(f"Worker {worker_id} is {'quieted: it finishes what it holds and claims nothing more' if quiet else 'claiming again'}"
          " from its next heartbeat.")
    return redirect_to(url_for("jobsweb.workers.index"))
