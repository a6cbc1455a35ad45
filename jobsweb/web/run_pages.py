"""The runs list with filters, live mode and bulk actions; one run's page and its actions."""

from flask import Blueprint, abort, current_app, flash, redirect, request, url_for
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from . import audit, outage, runlist
from ..core import conflicts
from ..core.database import db
from ..core.errors import InvalidInput, whole_number
from ..core.models import JobAttempt, JobDefinition, JobRun
from ..engine.runs import batch_status, run_actions
from ..engine.jobs import flow
from ..engine.jobs.registry import EXTERNAL_JOB_TYPE
from ..engine.statements import ACTIVE_STATUSES, CANCELLABLE, RETRYABLE, RUN_STATUSES
from ..ops import stats, why_waiting
from ..ops.job_type_names import job_type_names
from .access import role_required, viewer
from .rendering import htmx, render

bp = Blueprint("runs", __name__, url_prefix="/runs")

WAITS = ("queued", "failed", "waiting")  # a run in these has a reason not to be running (why_waiting.py)
BULK_SELECTED_MAX = 1000  # ids one form may name; "everything matching" has no limit


@bp.get("")
def index():
    """Runs, newest first, filtered; the table alone for htmx (filters, pages, live mode)."""
    run_filter = runlist.RunFilter.from_args(request.args)
    before = runlist.number(request.args, "before")
    rows, next_before = runlist.page(run_filter, before, finished_before=runlist.finished_cursor(request.args))
    live = request.args.get("live") == "1" and before is None
    definitions = db.session.execute(select(JobDefinition.id, JobDefinition.name)
                                     .order_by(JobDefinition.name).limit(500)).all()
    return render("runs.html", "partials/_runs_table.html", rows=rows, next_before=next_before,
                  before=before, filter=run_filter, live=live, statuses=RUN_STATUSES,
                  job_types=[] if htmx() else job_type_names(), definitions=definitions,
                  **table_context(run_filter, rows, every_match=runlist.every_match(run_filter, before, next_before)))


def table_context(run_filter, rows, every_match=False):
    """What the runs table (partials/_runs_table.html) needs besides its rows: the chips'
    counts, the links of each row's queue and job type, how many runs the bulk buttons would
    change, why each waiting row is not running, and the paused queues and job types. Also for a batch's members (batch_pages.py).
    `every_match`: the rows are every run the filter matches, whatever their status."""
    # Counted on every answer, live polls too: the table's fragment carries the chips' counts
    # out of band, and its bulk buttons say how many runs they would change.
    if every_match:
        counts = runlist.counts_of(rows, RUN_STATUSES)
    elif run_filter.narrows():
        counts = runlist.filtered_counts(run_filter, RUN_STATUSES, rows)
    else:
        counts = stats.chip_counts(RUN_STATUSES)
    # Each row's queue and job type link to this filter narrowed to them: built once per value,
    # as url_for per row was a tenth of the page's time.
    query = run_filter.args()
    queue_links, job_type_links = ({value: url_for("jobsweb.runs.index", **dict(query, **{name: value}))
                                    for value in {getattr(run, name) for run, _ in rows}}
                                   for name in ("queue", "job_type"))
    # The bulk buttons' confirmations: counted by each action's own condition (runlist.bulk_count).
    to_retry = to_cancel = reported = (0, True)
    if rows and viewer() is not None and viewer().can("operator"):
        page_ids = [run.id for run, _ in rows]
        to_retry = runlist.bulk_count(run_filter, "retry", RETRYABLE, page_ids)
        to_cancel = runlist.bulk_count(run_filter, "cancel", CANCELLABLE, page_ids)
        # Runs reported from outside are never retried (the count above leaves them out): the
        # confirmation says how many are left so. Counted as the chips are, up to their cap, but
        # within the confirmation's budget, as the retry's own count is: with the chips' 10 ms the
        # same question gave the retry's number and "runs reported from outside" for want of time.
        counted = runlist._capped_count(run_filter.conditions() + [JobRun.job_type == EXTERNAL_JOB_TYPE,
                                                                   JobRun.status.in_(RETRYABLE)],
                                        runlist.BULK_COUNT_BUDGET)
        reported = (sum(counted.values()), True) if counted is not None else (0, False)
    return {"counts": counts, "queue_links": queue_links, "job_type_links": job_type_links,
            "total": runlist.total(counts, run_filter),
            "to_retry": to_retry, "reported_to_retry": reported, "to_cancel": to_cancel,
            # Why each queued, retrying or waiting row is not running: one read for the page.
            "why": why_waiting.reasons([run.id for run, _ in rows if run.status in WAITS]),
            # A queued row of a paused queue or job type says so: no worker will take it.
            "paused_queues": set(stats.paused_queues()),
            "paused_types": {job_type for job_type, _ in flow.paused_types()}}


@bp.post("/bulk")
@role_required("operator")
def bulk():
    """Retry or cancel the selected runs, or every run matching the filter, in batches."""
    action, _, scope = request.form.get("action", "").partition("-")
    if action not in ("retry", "cancel") or scope not in ("", "all"):
        abort(400, "Bad action: choose retry or cancel.")
    run_filter = runlist.RunFilter.from_args(request.form)
    if scope == "all":
        statuses = RETRYABLE if action == "retry" else CANCELLABLE
        batches = runlist.matching_ids_in_batches(run_filter, statuses,
                                                  current_app.config["JOBSWEB_BULK_BATCH"])
        scope = "matching"
    else:
        raw = request.form.getlist("ids")
        if not raw:
            # Back to the same filtered list with the words, not an error page that loses it.
            flash(f"No runs are ticked: tick the runs to {action}, or use \"{action.capitalize()} all "
                  "matching\" for every run the filter matches.")
            return redirect(url_for("jobsweb.runs.index", **run_filter.args()))
        try:
            if len(raw) > BULK_SELECTED_MAX:
                raise InvalidInput("ids", f"at most {BULK_SELECTED_MAX} runs at once")
            batches = [[whole_number("ids", r) for r in raw]]
        except InvalidInput as exc:
            abort(400, f"Bad selection: {exc}.")
        scope = "selected"
    changed = requested = considered = waiting = 0
    try:
        for ids in batches:
            # One short transaction per batch, run again whole if it met a conflict (a worker
            # claimed or finished one of these runs at the same moment), for seconds if need be:
            # core/conflicts.py.
            if action == "retry":
                retried, waits = conflicts.retried(lambda ids=ids: _retry_batch(ids), undo=db.session.rollback,
                                                   patience=conflicts.INTERACTIVE)
                changed += len(retried)
                waiting += len(waits)
            else:
                done, asked = conflicts.retried(lambda ids=ids: _cancel_batch(ids), undo=db.session.rollback,
                                                patience=conflicts.INTERACTIVE)
                changed, requested = changed + len(done), requested + len(asked)
            considered += len(ids)
    except conflicts.Conflict as exc:
        db.session.rollback()
        if considered:  # the batches before it stay changed: audited as such
            audit.record(f"bulk_{action}", "runs", None, scope=scope, filter=run_filter.args(),
                         changed=changed, cancel_requested=requested, stopped=str(exc))
            db.session.commit()
        return outage.conflicted(exc, "The batches before it stay done: " + bulk_message(action, changed, requested)
                                 if considered else "")
    except OperationalError as exc:
        if not outage.stopped(exc):
            raise
        db.session.rollback()
        if considered:  # the batches before it stay changed: audited as such
            audit.record(f"bulk_{action}", "runs", None, scope=scope, filter=run_filter.args(),
                         changed=changed, cancel_requested=requested, stopped=True)
            db.session.commit()
        return outage.gave_up(f"{'Retrying' if action == 'retry' else 'Cancelling'} a batch of these runs",
                              "none of that batch was changed",
                              bulk_message(action, changed, requested) + " " if considered else "")
    left = considered - changed - requested - waiting
    audit.record(f"bulk_{action}", "runs", None, scope=scope, filter=run_filter.args(),
                 changed=changed, cancel_requested=requested, left=left + waiting,
                 waiting_for_failed=waiting)
    db.session.commit()
    verb = "Retried" if action == "retry" else "Cancelled"
    message = f"{verb} {changed} of {_runs(considered)} {'that match' if scope == 'matching' else 'ticked'}."
    if requested:
        message += f" Asked {_runs(requested)} running to stop."
    if waiting:
        # Retried, they would wait for ever: retrying the run they wait for revives them.
        message += f" {waiting:,} left alone: they wait for a run that ended dead or cancelled."
    if left:
        # Said, not skipped silently: "Retried 37 runs" while 39 matched read as a lost two.
        message += (f" {_runs(left)} left as they were: " + (
            "reported from outside, jobsweb cannot run them again." if action == "retry" and scope == "matching"
            else "only failed, dead or cancelled runs of jobsweb's own job types can be retried."
            if action == "retry" else "only queued, failed or running runs can be cancelled."))
    flash(message)
    return redirect(url_for("jobsweb.runs.index", **run_filter.args()))


def _runs(n):
    return f"{n:,} run{'s' * (n != 1)}"


def bulk_message(action, changed, requested, what="run", where=""):
    """What a retry or cancel of many runs did: "Cancelled 3 runs. Asked 1 running run to stop." """
    verb = "Retried" if action == "retry" else "Cancelled"
    message = f"{verb} {changed} {what}{'s' * (changed != 1)}{where}."
    if requested:
        message += f" Asked {requested} running {what}{'s' * (requested != 1)} to stop."
    return message


def _tell(status, now, then):
    """Flash what a run's action did, twice: `now` ("Run 8 is queued again."), shown while the
    run is still `status`, and `then` ("Run 8 was queued again"), shown with the run's new
    status once a worker has moved it on. The run's panel picks one (partials/_run.html) and
    its refreshes drop both: a message never contradicts the panel below it."""
    flash(now, f"run:{status}")
    flash(then, f"run-was:{status}")


def _run_or_404(run_id):
    return db.get_or_404(JobRun, run_id, description=f"There is no run {run_id}.")


@bp.get("/<int:run_id>")
def detail(run_id):
    """One run: payload, result, attempts timeline, last stack trace, audit entries."""
    run = _run_or_404(run_id)
    attempts = db.session.scalars(select(JobAttempt).where(JobAttempt.run_id == run_id)
                                  .order_by(JobAttempt.attempt.desc())).all()
    definition = db.session.get(JobDefinition, run.definition_id) if run.definition_id else None
    dependencies = batch_status.dependencies(run_id)
    # Why it is not running, and why each run it waits for is not: two batched reads.
    why = why_waiting.reasons([run_id] + [d.id for d in dependencies["waits_for"]])
    return render("run.html", "partials/_run.html", run=run, attempts=attempts, definition=definition,
                  why=why.pop(run_id, None), awaited_why=why,
                  audit_entries=audit.entries_for("run", run_id), dependencies=dependencies,
                  # The page polls while its run may still change.
                  active=run.status in ACTIVE_STATUSES or run.status == "waiting", retryable=RETRYABLE,
                  cancellable=CANCELLABLE)


@bp.post("/<int:run_id>/retry")
@role_required("operator")
def retry(run_id):
    """Queue a failed, dead or cancelled run again, due now; its attempts stay as history."""
    run = _run_or_404(run_id)
    try:
        outage.limit_action()  # a retry revives what the run's end cancelled
        retried = run_actions.retry([run_id])
    except OperationalError as exc:
        if not outage.stopped(exc):
            raise
        return outage.gave_up(f"Retrying run {run_id}", "it was not retried")
    if retried:
        audit.record("retry", "run", run_id, previous_status=run.status)
        _tell("queued", f"Run {run_id} is queued again.", f"Run {run_id} was queued again")
    elif run.job_type == EXTERNAL_JOB_TYPE:
        flash(f"Run {run_id} was reported from outside: jobsweb cannot run it again.")
    elif blocker := run_actions.waits_for_failed([run_id]).get(run_id):
        after = blocker.after_id
        _tell(run.status, f"Run {run_id} waits for run {after}, which ended {blocker.after_status}: " + (
            f"retry that one and {run_id} waits for it again." if blocker.revived_by_its_retry else
            f"retry both at once from the runs list and {run_id} waits for {after}'s new attempt."),
            f"Run {run_id} waits for run {after}, which ended {blocker.after_status}, and was not retried")
    else:
        _tell(run.status, f"Run {run_id} is {run.status}: only failed, dead or cancelled runs can be retried.",
              f"Run {run_id} was {run.status}, and could not be retried")
    db.session.commit()
    return redirect(url_for("jobsweb.runs.detail", run_id=run_id))


@bp.post("/<int:run_id>/cancel")
@role_required("operator")
def cancel(run_id):
    """Cancel a queued or failed run; ask the worker of a running one to stop."""
    run = _run_or_404(run_id)
    previous = run.status
    try:
        outage.limit_action()  # a cancel also cancels every run waiting below this one
        done, requested = run_actions.cancel([run_id])
    except OperationalError as exc:
        if not outage.stopped(exc):
            raise
        return outage.gave_up(f"Cancelling run {run_id}", "nothing was cancelled")
    if done:
        audit.record("cancel", "run", run_id, previous_status=previous)
        _tell("cancelled", f"Run {run_id} is cancelled.", f"Run {run_id} was cancelled")
    elif requested:
        audit.record("request_cancel", "run", run_id, previous_status=previous)
        _tell("running", f"Run {run_id} is running: its worker was asked to stop it.",
              f"Run {run_id}'s worker was asked to stop it")
    else:
        _tell(previous, f"Run {run_id} is {previous}: there is nothing to cancel.",
              f"Run {run_id} was {previous}, with nothing to cancel")
    db.session.commit()
    return redirect(url_for("jobsweb.runs.detail", run_id=run_id))


def _retry_batch(ids):
    """Retry the runs `ids` in one committed transaction; (those retried, those that wait for a failed run)."""
    outage.limit_action()
    retried = run_actions.retry(ids)
    waits = run_actions.waits_for_failed(set(ids).difference(retried))
    db.session.commit()
    return retried, waits


def _cancel_batch(ids):
    """Cancel the runs `ids` in one committed transaction; (those cancelled, those asked to stop)."""
    outage.limit_action()
    done, asked = run_actions.cancel(ids)
    db.session.commit()
    return done, asked
