"""The Batches page (open and finished batches, newest first, with their members by status and
their callbacks' states), and a batch's page: its counts as a bar, its members (the runs list's
table, filtered to it), its callback runs; retry its failed members, cancel the rest."""

from flask import Blueprint, abort, current_app, flash, redirect, request, url_for
from sqlalchemy.exc import OperationalError

from . import audit, outage, runlist
from ..core import conflicts
from ..core.database import db, execute
from ..engine.enqueue.workflows import LABEL_MAX_CHARS
from ..engine.runs import batch_status, run_actions
from ..engine.statements import CANCELLABLE, RETRYABLE, RUN_STATUSES
from .access import role_required
from .rendering import render
from .run_pages import bulk_message, table_context

bp = Blueprint("batches", __name__, url_prefix="/batches")

MEMBERS_PAGE = 25
BATCHES_PAGE = 50
BATCH_STATES = {"": None, "open": "finished_at IS NULL", "finished": "finished_at IS NOT NULL"}

# A page of batches, newest first (keyset on the primary key; open ones through index
# job_batches_open), each with its members by status (index job_runs_batch, index only) and its
# callback runs (job_runs_batch_callbacks), newest first.
BATCHES = """
SELECT b.id, b.label, b.on_finish, b.on_success, b.members, b.pending, b.created_at, b.finished_at,
       coalesce((SELECT jsonb_object_agg(status, n) FROM (
                     SELECT status, count(*) AS n FROM job_runs
                     WHERE batch_id = b.id AND batch_callback IS NULL GROUP BY status) c), '{{}}') AS counts,
       coalesce((SELECT jsonb_agg(jsonb_build_object('id', r.id, 'callback', r.batch_callback, 'status', r.status)
                                  ORDER BY r.id DESC)
                 FROM job_runs r WHERE r.batch_id = b.id AND r.batch_callback IS NOT NULL), '[]') AS callbacks
FROM job_batches b
WHERE {state} AND (CAST(%(before)s AS bigint) IS NULL OR b.id < %(before)s)
  AND (CAST(%(label)s AS text) IS NULL OR b.label ILIKE %(label)s)
ORDER BY b.id DESC
LIMIT %(limit)s
"""


@bp.get("")
def index():
    """Batches, newest first, open or finished or both, searched by label: members by status,
    callbacks' states."""
    state = request.args.get("state", "")
    if state not in BATCH_STATES:
        abort(400, "Bad filter: state must be open or finished.")
    q = request.args.get("q", "").strip()
    if len(q) > LABEL_MAX_CHARS:
        abort(400, f"Bad filter: q (a label) must be at most {LABEL_MAX_CHARS} characters.")
    before = runlist.number(request.args, "before")
    # A part of the label, any case; % and _ in it are themselves.
    pattern = "%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" if q else None
    rows = execute(BATCHES.format(state=BATCH_STATES[state] or "true"),
                   {"before": before, "limit": BATCHES_PAGE + 1, "label": pattern}).all()
    next_before = rows[BATCHES_PAGE - 1].id if len(rows) > BATCHES_PAGE else None
    return render("batches.html", "partials/_batches.html", batches=rows[:BATCHES_PAGE], state=state, q=q,
                  before=before, next_before=next_before, statuses=RUN_STATUSES)


def _batch_or_404(batch_id):
    state = batch_status.get_batch(batch_id)
    if state is None:
        abort(404, f"There is no batch {batch_id}.")
    return state


@bp.get("/<int:batch_id>")
def detail(batch_id):
    """One batch: counts by status, progress, its callbacks and a page of its members."""
    state = _batch_or_404(batch_id)
    member_filter = runlist.RunFilter.from_args(request.args)
    member_filter.batch_id = batch_id
    before = runlist.number(request.args, "before")
    rows, next_before = runlist.page(member_filter, before, size=MEMBERS_PAGE)
    bar, x = [], 0.0
    for status in RUN_STATUSES:
        if n := state.counts.get(status):
            width = 100 * n / max(state.members, 1)
            bar.append({"status": status, "count": n, "x": round(x, 3), "width": round(width, 3)})
            x += width
    # What Retry and Cancel would change, by their own statuses, from the counts just read.
    retryable, cancellable = (sum(state.counts.get(s, 0) for s in statuses) for statuses in (RETRYABLE, CANCELLABLE))
    return render("batch.html", "partials/_batch.html", batch=state, bar=bar, rows=rows, next_before=next_before,
                  retryable=retryable, cancellable=cancellable, running=state.counts.get("running", 0),
                  before=before, filter=member_filter, live=False, audit_entries=audit.entries_for("batch", batch_id),
                  **table_context(member_filter, rows, every_match=runlist.every_match(member_filter, before, next_before)))


def _act(batch_id, action):
    _batch_or_404(batch_id)
    statuses = RETRYABLE if action == "retry" else CANCELLABLE
    ids = batch_status.batch_members(batch_id, statuses)
    size = current_app.config["JOBSWEB_BULK_BATCH"]
    changed, requested = [], []
    try:
        # JOBSWEB_BULK_BATCH members per transaction, as the runs list's bulk actions: each member's
        # end updates the batch's row, and 100,000 updates of one row in one transaction walk an
        # ever longer chain of its versions (minutes); each transaction is bounded on the server,
        # and run again whole if it met a conflict, for seconds if need be (core/conflicts.py).
        for start in range(0, len(ids), size):
            done, asked = conflicts.retried(lambda part=ids[start:start + size]: _act_on(action, part),
                                            undo=db.session.rollback, patience=conflicts.INTERACTIVE)
            changed += done
            requested += asked
    except conflicts.Conflict as exc:
        db.session.rollback()
        if changed or requested:
            _audit(batch_id, action, changed, requested)
        return outage.conflicted(exc, "The steps before it stay done: " + bulk_message(
            action, len(changed), len(requested), "member") if changed or requested else "")
    except OperationalError as exc:
        if not outage.stopped(exc):
            raise
        db.session.rollback()
        if changed or requested:
            _audit(batch_id, action, changed, requested)
        return outage.gave_up(f"{'Retrying' if action == 'retry' else 'Cancelling'} the members of batch {batch_id}",
                              "the members of its last step were not changed",
                              bulk_message(action, len(changed), len(requested), "member") + " " if changed else "")
    _audit(batch_id, action, changed, requested)
    flash(bulk_message(action, len(changed), len(requested), "member", f" of batch {batch_id}"))
    return redirect(url_for("jobsweb.batches.detail", batch_id=batch_id))


def _act_on(action, ids):
    """Retry or cancel the members `ids` in one committed transaction; (those changed, those asked to stop)."""
    outage.limit_action()
    done, asked = (run_actions.retry(ids), []) if action == "retry" else run_actions.cancel(ids)
    db.session.commit()
    return done, asked


def _audit(batch_id, action, changed, requested):
    audit.record(f"batch_{action}", "batch", batch_id, changed=len(changed), cancel_requested=len(requested))
    db.session.commit()


@bp.post("/<int:batch_id>/retry")
@role_required("operator")
def retry(batch_id):
    """Queue the batch's failed, dead and cancelled members again (a finished batch reopens)."""
    return _act(batch_id, "retry")


@bp.post("/<int:batch_id>/cancel")
@role_required("operator")
def cancel(batch_id):
    """Cancel every member of the batch not yet ended; ask the workers of running ones to stop."""
    return _act(batch_id, "cancel")
