"""Job definitions: list, one definition with its runs, and pause/resume/run now/delete.

The create/edit form and the schedule preview live in definition_form.py.
"""

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from flask import Blueprint, abort, flash, redirect, request, url_for
from sqlalchemy import select

from . import audit, runlist
from ..core.database import db
from ..core.errors import InvalidInput
from ..core.models import JobDefinition, JobRun
from ..ops import alerts, notify, run_history, why_waiting
from ..ops.job_type_names import job_type_names
from ..scheduling import definitions as definition_api
from .access import role_required
from .rendering import redirect_to, render, render_template

bp = Blueprint("definitions", __name__, url_prefix="/definitions")

SEARCH_MAX_CHARS = 200
SHOWN = 500
ERROR_SCAN = 1000  # newest runs of a definition looked through for its last error
# A definition's status on the list, from the rules its incidents open on (alerts.py reads the
# same functions through definitions.problems()); "ok" is none of them.
STATUSES = ("overdue", "failing", "missed", "paused", "ok")


def statuses():
    """{definition id: [status, ...]} of the definitions with a problem now: overdue (its tick did
    not happen, or its run waits past the grace), missed (an external one's newest slot was not
    reported in its grace), failing (its dead runs in a row reached alert_after_failures).
    Paused definitions are the disabled ones; "ok" is an enabled one with none of these."""
    found = {}
    for word, rows in (("overdue", definition_api.overdue()),
                       ("overdue", [d for d, _ in definition_api.stuck()]),
                       ("missed", [d for d, _ in definition_api.unreported()]),
                       ("failing", definition_api.failing())):
        for d in rows:
            if word not in found.setdefault(d.id, []):
                found[d.id].append(word)
    return found


@bp.get("")
def index():
    """Definitions by name with their status, filtered by status, enabled state, kind (external or
    run by jobsweb) and type, searched by name."""
    state = request.args.get("state", "")
    if state not in ("", "enabled", "paused"):
        abort(400, "Bad filter: state must be enabled or paused.")
    status = request.args.get("status", "")
    if status not in ("", *STATUSES):
        abort(400, f"Bad filter: status must be one of {', '.join(STATUSES)}.")
    kind = request.args.get("kind", "")
    if kind not in ("", "external", "run"):
        abort(400, "Bad filter: kind must be external or run.")
    job_type = request.args.get("job_type", "").strip()
    q = request.args.get("q", "").strip()
    if len(q) > SEARCH_MAX_CHARS or len(job_type) > SEARCH_MAX_CHARS:
        abort(400, f"Bad filter: at most {SEARCH_MAX_CHARS} characters.")
    stmt = select(JobDefinition).order_by(JobDefinition.name).limit(SHOWN)
    if state:
        stmt = stmt.where(JobDefinition.enabled.is_(state == "enabled"))
    if kind:
        stmt = stmt.where(JobDefinition.external.is_(kind == "external"))
    if job_type:
        stmt = stmt.where(JobDefinition.job_type == job_type)
    if q:
        stmt = stmt.where(JobDefinition.name.icontains(q, autoescape=True))
    found = statuses()
    if status == "paused":
        stmt = stmt.where(JobDefinition.enabled.is_(False))
    elif status == "ok":
        stmt = stmt.where(JobDefinition.enabled, JobDefinition.id.not_in(list(found)))
    elif status:
        stmt = stmt.where(JobDefinition.id.in_([i for i, words in found.items() if status in words]))
    return render("definitions.html", "partials/_definitions_table.html",
                  definitions=db.session.scalars(stmt).all(), state=state, kind=kind, job_type=job_type, q=q,
                  status=status, statuses=STATUSES, found=found, job_types=job_type_names())


def last_failed_run(definition_id):
    """The definition's newest run that died or waits for its retry, among its last
    ERROR_SCAN runs: the run whose error and stack its page shows. Bounded, so a definition
    with a million successes is not read to the end; index job_runs_definition."""
    recent = (select(JobRun.id).where(JobRun.definition_id == definition_id)
              .order_by(JobRun.id.desc()).limit(ERROR_SCAN))
    return db.session.scalars(
        select(JobRun).where(JobRun.id.in_(recent), JobRun.status.in_(("dead", "failed")))
        .order_by(JobRun.id.desc()).limit(1)).first()


def in_zone(moment, zone):
    """`moment` as a date and wall-clock time in `zone` ("Thu 3 Dec 2026, 23:30"), or None: the
    browser shows the viewer's own time beside it, and a definition's slots are in its zone."""
    try:
        local = moment.astimezone(ZoneInfo(zone)) if moment else None
    except (ZoneInfoNotFoundError, ValueError):
        return None
    return local and f"{local:%a} {local.day} {local:%b %Y, %H:%M}"


def _definition_or_404(definition_id):
    return db.get_or_404(JobDefinition, definition_id, description=f"There is no definition {definition_id}.")


@bp.get("/<int:definition_id>")
def detail(definition_id):
    """A definition, its latest runs (keyset pages like the runs list) and its audit entries."""
    definition = _definition_or_404(definition_id)
    before = runlist.number(request.args, "before")
    rows, next_before = runlist.page(runlist.RunFilter(definition_id=definition_id), before, size=25)
    history = run_history.definition_history(definition_id)
    why = why_waiting.reasons([run.id for run, _ in rows if run.status in ("queued", "failed", "waiting")])
    return render("definition.html", "partials/_definition_runs.html", definition=definition,
                  rows=rows, next_before=next_before, before=before, history=history, why=why,
                  # Its oldest run on the page that is not running, and why: said under its facts.
                  held=min(why.items()) if why else None,
                  history_size=run_history.HISTORY_SIZE, success_rate=run_history.success_rate(history),
                  audit_entries=audit.entries_for("definition", definition_id),
                  open_incidents=alerts.open_incidents(definition_id), failed_run=last_failed_run(definition_id),
                  next_in_zone=in_zone(definition.next_run_at, definition.timezone),
                  alert_routes=notify.routes(definition.alert_webhook_url, definition.alert_email_to), redact=notify.redact)


@bp.post("/<int:definition_id>/pause")
@role_required("operator")
def pause(definition_id):
    """Stop scheduling new runs; queued runs stay."""
    return _set_enabled(definition_id, False)


@bp.post("/<int:definition_id>/resume")
@role_required("operator")
def resume(definition_id):
    """Schedule runs again."""
    return _set_enabled(definition_id, True)


def _set_enabled(definition_id, enabled):
    definition = _definition_or_404(definition_id)
    # resume recomputes next_run_at, so slots that fell while paused are not owed.
    (definition_api.resume if enabled else definition_api.pause)(definition.name)
    audit.record("resume" if enabled else "pause", "definition", definition_id)
    db.session.commit()
    flash(f"{definition.name} is {'enabled' if enabled else 'paused'}.")
    return redirect_to(url_for("jobsweb.definitions.detail", definition_id=definition_id))


@bp.post("/<int:definition_id>/run-now")
@role_required("operator")
def run_now(definition_id):
    """Enqueue one run of this definition, due now, and open it."""
    definition = _definition_or_404(definition_id)
    try:
        run_id = definition_api.run_now(definition.name)  # copies timeout, lease and backoff too
    except InvalidInput as exc:  # an external definition: jobsweb does not run it
        abort(400, exc.message)
    audit.record("run_now", "definition", definition_id, run_id=run_id)
    db.session.commit()
    flash(f"Run {run_id} of {definition.name} enqueued.")
    return redirect_to(url_for("jobsweb.runs.detail", run_id=run_id))


@bp.route("/<int:definition_id>/delete", methods=["GET", "POST"])
@role_required("admin")
def delete(definition_id):
    """Ask first (GET), then delete (POST); its runs stay as history without a definition."""
    definition = _definition_or_404(definition_id)
    if request.method == "GET":
        return render_template("definition_delete.html", definition=definition)
    audit.record("delete", "definition", definition_id, name=definition.name)
    definition_api.delete(definition)
    db.session.commit()
    flash(f"{definition.name} was deleted; its runs are kept.")
    return redirect(url_for("jobsweb.definitions.index"))
