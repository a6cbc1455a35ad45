"""Deleting runs (one, the ticked ones, or all that match the filter; admin), and running a
queued run now or at another time (operator). Each asks first where it cannot be undone, is
audited, and leaves running runs alone."""

from flask import Blueprint, abort, current_app, flash, redirect, request, url_for
from sqlalchemy import BigInteger, any_, bindparam, func, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.exc import OperationalError

from . import audit, outage, runlist
from ..core import conflicts
from ..core.database import db
from ..core.errors import InvalidInput, whole_number
from ..core.models import JobAttempt, JobRun
from ..engine.enqueue import dependencies
from ..engine.runs import run_actions
from ..engine.statements import DELETABLE
from .access import role_required
from .local_time import read_local, viewer_zone, zone_name
from .rendering import render_template
from .run_pages import BULK_SELECTED_MAX

bp = Blueprint("run_admin", __name__, url_prefix="/runs")

AUDITED_IDS = 100  # the ids a bulk delete's audit entry lists; the count covers them all
NOT_ENDED = ("waiting", "queued", "failed")  # deleted as a cancel first (run_actions.delete)


def _run_or_404(run_id):
    return db.get_or_404(JobRun, run_id, description=f"There is no run {run_id}.")


@bp.route("/<int:run_id>/delete", methods=["GET", "POST"])
@role_required("admin")
def delete(run_id):
    """Ask first (GET), then delete the run and its attempts (POST); never a running run."""
    run = _run_or_404(run_id)
    if request.method == "GET":
        attempts = db.session.scalar(select(func.count()).where(JobAttempt.run_id == run_id))
        below, members = _what_else([JobRun.id == run_id])
        return render_template("run_delete.html", run=run, attempts=attempts, below=below, members=members)
    job_type = run.job_type  # the row is gone after the commit
    try:
        outage.limit_action()  # a run not ended is cancelled first, and what waits for it with it
        deleted = run_actions.delete([run_id])
    except OperationalError as exc:
        if not outage.stopped(exc):
            raise
        return outage.gave_up(f"Deleting run {run_id}", "nothing was deleted or cancelled")
    if not deleted:
        db.session.rollback()
        flash(f"Run {run_id} is running: a running run is not deleted. Cancel it, then delete it.", "run:running")
        return redirect(url_for("jobsweb.runs.detail", run_id=run_id))
    audit.record("delete", "run", run_id, job_type=job_type, status=deleted[0].status)
    db.session.commit()
    flash(f"Run {run_id} ({job_type}) was deleted with its attempts.")
    return redirect(url_for("jobsweb.runs.index"))


def _selected_ids():
    raw = request.form.getlist("ids")
    try:
        if len(raw) > BULK_SELECTED_MAX:
            raise InvalidInput("ids", f"at most {BULK_SELECTED_MAX} runs at once")
        return sorted({whole_number("ids", r) for r in raw}, reverse=True)
    except InvalidInput as exc:
        abort(400, f"Bad selection: {exc}.")


# The confirmation page of a delete counts what it will delete by the delete's own condition
# (run_actions.count_changed), exactly up to DELETE_COUNT_CAP runs within DELETE_COUNT_BUDGET (a
# page of its own, asked for once: longer than the runs list's), else "at least" so many.
DELETE_COUNT_CAP = 100_000
DELETE_COUNT_BUDGET = 1.0  # seconds


def _to_delete(where, ids=()):
    """(runs the delete would delete among those matching `where`, True or "at least")."""
    return run_actions.count_changed("delete", where, DELETE_COUNT_CAP, DELETE_COUNT_BUDGET, ids)


def _running(where):
    """Running runs among those matching `where`, which a delete keeps (index job_runs_running)."""
    return db.session.scalar(select(func.count()).where(*where, JobRun.status == "running"))


def _what_else(where):
    """What deleting the runs matching `where` does besides, as its page says first: (the waiting
    runs that are cancelled with them, down the graph; how many of them are members of open
    batches, which count them as cancelled). A member not ended is one of an open batch."""
    not_ended = [*where, JobRun.status.in_(NOT_ENDED)]
    roots = db.session.scalars(select(JobRun.id).where(*not_ended, JobRun.awaited)).all()

    def also_deleted(ids):
        return set(db.session.scalars(select(JobRun.id).where(
            JobRun.id == any_(bindparam("below", ids, type_=ARRAY(BigInteger))), *where)))

    members = db.session.scalar(select(func.count()).where(
        *not_ended, JobRun.batch_id.is_not(None), JobRun.batch_callback.is_(None)))
    return dependencies.cancelled_below(roots, also_deleted), members


@bp.post("/delete")
@role_required("admin")
def bulk_delete():
    """Delete the ticked runs, or every run matching the filter, except running ones: first a
    page that says how many (posted back with `confirmed`), then the deletion, in batches."""
    scope = request.form.get("action", "")
    if scope not in ("delete", "delete-all"):
        abort(400, "Bad action: choose delete or delete-all.")
    run_filter = runlist.RunFilter.from_args(request.form)
    back = url_for("jobsweb.runs.index", **run_filter.args())
    if scope == "delete":
        ids = _selected_ids()
        if not ids:
            flash("No runs are ticked: tick the runs to delete, or use \"Delete all matching\" for every run the "
                  "filter matches.")
            return redirect(back)
        where = [JobRun.id.in_(ids)]
    else:
        ids = None
        where = run_filter.conditions()
    if request.form.get("confirmed") != "yes":
        deletable, exact = _to_delete(where, ids or ())
        below, members = _what_else(where)
        return render_template("runs_delete.html", scope=scope, ids=ids, query=run_filter.args(), back=back,
                               deletable=deletable, exact=exact is True, running=_running(where), below=below,
                               members=members)
    batches = [ids] if ids is not None else runlist.matching_ids_in_batches(
        run_filter, DELETABLE, current_app.config["JOBSWEB_BULK_BATCH"])
    deleted, by_type = [], {}
    try:
        for batch in batches:
            # One short transaction per batch, run again whole if it met a conflict (a worker
            # claimed or finished one of these runs at the same moment), for seconds if need be:
            # core/conflicts.py.
            rows = conflicts.retried(lambda batch=batch: _delete_batch(batch), undo=db.session.rollback,
                                     patience=conflicts.INTERACTIVE)
            for row in rows:
                deleted.append(row.id)
                by_type[row.job_type] = by_type.get(row.job_type, 0) + 1
    except conflicts.Conflict as exc:
        db.session.rollback()
        if deleted:  # the batches before it stay deleted: audited as such
            _audit_bulk_delete(ids, run_filter, deleted, by_type, running=None)
        return outage.conflicted(exc, f"{len(deleted):,} runs were deleted before it." if deleted else "")
    except OperationalError as exc:
        if not outage.stopped(exc):
            raise
        db.session.rollback()
        if deleted:  # the batches before it stay deleted: audited as such
            _audit_bulk_delete(ids, run_filter, deleted, by_type, running=None)
        return outage.gave_up("Deleting a batch of these runs", "nothing of that batch was deleted or cancelled",
                              f"{len(deleted):,} runs were deleted before it. " if deleted else "")
    running = _running(where)
    _audit_bulk_delete(ids, run_filter, deleted, by_type, running)
    message = f"Deleted {len(deleted)} run{'s' * (len(deleted) != 1)}."
    if running:
        message += f" {running} running run{'s were' if running != 1 else ' was'} not deleted."
    flash(message)
    return redirect(back)


def _delete_batch(ids):
    """Delete the runs `ids` in one committed transaction; the rows deleted."""
    outage.limit_action()
    rows = run_actions.delete(ids)
    db.session.commit()
    return rows


def _audit_bulk_delete(ids, run_filter, deleted, by_type, running):
    """Audit and commit a bulk delete; `running`: the running runs kept (None: it was stopped)."""
    audit.record("bulk_delete", "runs", None, scope="selected" if ids is not None else "matching",
                 filter=run_filter.args(), deleted=len(deleted), job_types=by_type,
                 ids=deleted[:AUDITED_IDS], kept_running=running)
    db.session.commit()


@bp.post("/<int:run_id>/run-now")
@role_required("operator")
def run_now(run_id):
    """Make a queued run that is due later due now; listening workers are woken at commit."""
    run = _run_or_404(run_id)
    due, status = run.run_at, run.status
    if run_actions.run_now(run_id):
        audit.record("run_now", "run", run_id, was_due=due.isoformat())
        return _back_to(run_id, f"Run {run_id} is due now.", "queued")
    return _back_to(run_id, f"Run {run_id} is {status}{' and due already' if status == 'queued' else ''}: "
                            "only a queued run due later can be run now.", status)


def _back_to(run_id, message, status):
    """Commit, and back to the run's page with `message`, shown while the run is `status`."""
    db.session.commit()
    flash(message, f"run:{status}")
    return redirect(url_for("jobsweb.runs.detail", run_id=run_id))


@bp.post("/<int:run_id>/reschedule")
@role_required("operator")
def reschedule(run_id):
    """Move a queued run to another time, typed in the viewer's zone (the hidden `tz` field)."""
    run = _run_or_404(run_id)
    raw = request.form.get("run_at", "").strip()
    try:
        if not raw:
            raise InvalidInput("run_at", "is required: the date and time the run is due")
        zone = viewer_zone(request.form.get("tz"))
        when = read_local("run_at", raw, zone)
    except InvalidInput as exc:
        abort(400, f"{exc}.")
    now = db.session.scalar(select(func.now()))
    if when <= now:
        abort(400, f"run_at: {raw} is not in the future; to run it at once, use Run now.")
    due, status = run.run_at, run.status
    if run_actions.reschedule(run_id, when):
        audit.record("reschedule", "run", run_id, was_due=due.isoformat(), due=when.isoformat())
        # Said in the viewer's zone, also when the time was typed with an offset of its own.
        return _back_to(run_id, f"Run {run_id} is due {when.astimezone(zone).strftime('%Y-%m-%d %H:%M')} "
                                f"{zone_name(zone) or 'UTC'}.", "queued")
    return _back_to(run_id, f"Run {run_id} is {status}: only a queued run can be rescheduled.", status)
