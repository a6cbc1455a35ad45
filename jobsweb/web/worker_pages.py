"""Worker processes seen by the database; operators quiet a worker (it finishes what it holds and
claims nothing more, as Sidekiq's quiet), resume it, or stop it (it exits as on SIGTERM, as
Sidekiq's stop). Every change is audited."""

from flask import Blueprint, abort, current_app, flash, request, url_for
from sqlalchemy import select, true, update

from . import audit
from ..core.database import db
from ..core.errors import InvalidInput, clean_name
from ..core.models import JobWorker
from ..engine import upkeep
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


@bp.post("/workers/stop")
@role_required("operator")
def stop():
    """Ask a worker to stop as on SIGTERM (Sidekiq's Stop): it claims nothing more, finishes what
    it holds within its shutdown timeout and exits; a supervisor that restarts it starts a new
    worker. Only a worker that reads the request (one of 0034_worker_stop or later: it wrote its
    concurrency)."""
    worker_id = _worker_from_form()
    _change(worker_id, "stop", JobWorker.concurrency.is_not(None),
            stop_requested_at=db.func.coalesce(JobWorker.stop_requested_at, db.func.now()),
            stop_requested_by=db.func.coalesce(JobWorker.stop_requested_by, viewer().identity))
    flash(f"Worker {worker_id} is asked to stop: it finishes what it holds and exits.")
    return redirect_to(url_for("jobsweb.workers.index"))


def _set_quiet(quiet):
    worker_id = _worker_from_form()
    _change(worker_id, "quiet" if quiet else "resume", true(),
            quiet_at=db.func.now() if quiet else None, quiet_by=viewer().identity if quiet else None)
    flash(f"Worker {worker_id} is {'quieted: it finishes what it holds and claims nothing more' if quiet else 'claiming again'}"
          " from its next heartbeat.")
    return redirect_to(url_for("jobsweb.workers.index"))


def _worker_from_form():
    worker_id = request.form.get("worker", "")
    # A NUL was a 500 (PostgreSQL text cannot hold one); no worker id is longer than a host name
    # (255 bytes at most) and its ":pid:hex" tail.
    try:
        clean_name("worker", worker_id)
    except InvalidInput as exc:
        abort(400, f"{exc}.")
    if len(worker_id) > WORKER_ID_MAX_CHARS:
        abort(400, f"worker: must be at most {WORKER_ID_MAX_CHARS} characters, got {len(worker_id)}.")
    return worker_id


def _change(worker_id, action, condition, **values):
    """Set `values` on a running worker's row, audited as `action`, and tell it (a listening
    worker reads its row at once; another at its next heartbeat). Only a worker still running:
    a stopped or gone one would never read it, and the page would say it is quiet or stopping."""
    changed = db.session.execute(
        update(JobWorker).where(JobWorker.id == worker_id, JobWorker.stopped_at.is_(None), condition).values(**values)
    ).rowcount
    if not changed:
        abort(404, f"worker {worker_id!r} is not a running worker" + (
            " that can be stopped from here (started before 0034_worker_stop: stop its process)" if action == "stop" else ""))
    audit.record(action, "worker", worker=worker_id)
    db.session.connection().exec_driver_sql(upkeep.TELL_WORKER, {"worker": worker_id})
    db.session.commit()
