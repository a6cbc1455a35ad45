"""Create and edit job definitions, with a live preview of the schedule.

The form's fields are scheduling.definitions.define()'s arguments, and the preview is
Schedule.describe() and next_fire_times().
"""

import json
import zoneinfo
from datetime import UTC
from functools import cache

from flask import Blueprint, current_app, flash, request, url_for

from . import audit
from ..core.database import db
from ..core.errors import InvalidInput
from ..core.models import JobDefinition
from ..engine.enqueue.enqueuing import parse_payload
from ..scheduling import definitions
from ..scheduling.schedule import Schedule, next_fire_times
from .access import role_required
from .forms import DefinitionForm, job_type_choices
from .rendering import mask_secrets, redirect_to, render, restore_secrets

bp = Blueprint("definition_form", __name__, url_prefix="/definitions")

PREVIEW_FIRE_TIMES = 5


@cache
def timezones():
    """Every IANA zone name, UTC first."""
    return ["UTC"] + sorted(zoneinfo.available_timezones() - {"UTC"})


def _form(definition=None):
    form = DefinitionForm(obj=None)
    # Its own job type stays chosen, even one no worker registered lately: saving a change of its
    # grace alone must not need a choice the form did not offer. An external one has none to show.
    current = definition.job_type if definition is not None and not definition.external else None
    form.job_type.choices = job_type_choices(current)
    form.timezone.choices = timezones()
    if definition is not None and request.method == "GET":
        for field in ("name", "job_type", "schedule", "timezone", "max_attempts", "backoff_base",
                      "backoff_cap", "grace_seconds", "alert_after_failures", "alert_webhook_url",
                      "alert_email_to", "queue", "priority", "external"):
            getattr(form, field).data = getattr(definition, field)
        # Masked like on every other page; _save puts the stored secrets back.
        form.payload.data = json.dumps(mask_secrets(definition.payload, _mask_words()), indent=2, sort_keys=True)
        form.timeout.data = definition.timeout_seconds
        form.max_duration.data = definition.max_duration_seconds
        form.overlap.data = definition.overlap_policy
        form.misfire.data = definition.misfire_policy
    return form


def _mask_words():
    return current_app.config["JOBSWEB_MASK_KEYS"]


def preview(schedule, timezone):
    """(words, next fire times, error) for the schedule preview."""
    try:
        words = Schedule(schedule, timezone).describe()
        return words, next_fire_times(schedule, timezone, PREVIEW_FIRE_TIMES), None
    except InvalidInput as exc:
        return None, [], exc.message


@bp.get("/preview")
def schedule_preview():
    """The schedule in words and its next fire times in its timezone, or the error (htmx)."""
    schedule = request.args.get("schedule", "")[:200]
    timezone = request.args.get("timezone", "UTC")[:100]
    words, times, error = preview(schedule, timezone) if schedule.strip() else (None, [], None)
    return render("partials/_schedule_preview.html", "partials/_schedule_preview.html",
                  words=words, times=times, error=error)


# The form's fields that are define()'s arguments of the same name (payload and name aside).
ARGUMENTS = ("job_type", "schedule", "timezone", "max_attempts", "overlap", "misfire", "grace_seconds", "timeout",
             "backoff_base", "backoff_cap", "alert_after_failures", "alert_webhook_url", "alert_email_to",
             "queue", "priority", "max_duration", "external")


def _arguments(form, definition):
    """define()'s arguments from the form. A field WTForms refused, or left empty, is left out
    (define()'s default), so that define()'s own checks still run on every other field."""
    arguments = {"job_type": None, "schedule": None}  # required: None is refused, naming them
    for name in ARGUMENTS:
        field = getattr(form, name)
        value = field.data.strip() if isinstance(field.data, str) else field.data
        if not field.errors and value not in (None, ""):
            arguments[name] = value
    if arguments.get("external"):
        arguments["job_type"] = None  # an external definition has none: jobsweb does not run it
    arguments["name"] = definition.name if definition else (None if form.name.errors else form.name.data)
    return arguments


def _save(form, definition=None):
    """define() from the form, or None with every error on the field it names (all of them at
    once, with the form's own: fixing one to be told of the next was slow going)."""
    arguments = _arguments(form, definition)
    payload = None
    try:
        payload = parse_payload(form.payload.data or "{}", current_app.config["JOBSWEB_MAX_PAYLOAD_BYTES"])
        if definition is not None:
            payload = restore_secrets(payload, definition.payload, _mask_words())
    except InvalidInput as exc:
        form.payload.errors.append(exc.message)
    refused = {name for name, field in form._fields.items() if field.errors}
    for exc in definitions.input_errors(**arguments, payload=payload):
        field = {"n": "schedule"}.get(exc.field, exc.field)
        # A field the form refused already (a required one left empty) says so once.
        if field not in refused and getattr(form, field, None) is not None:
            getattr(form, field).errors.append(exc.message)
        elif getattr(form, field, None) is None:
            form.name.errors.append(exc.message)
    if form.errors:
        db.session.rollback()
        return None
    return definitions.define(**arguments, payload=payload)


def _page(form, definition):
    words, times, error = preview(form.schedule.data, form.timezone.data) if form.schedule.data else (None, [], None)
    # A refused schedule's error is shown under its field; the preview does not say it again.
    refused = bool(form.schedule.errors)
    response = render("definition_form.html", "partials/_definition_form.html", form=form,
                      definition=definition, words=words, times=times, error=None if refused else error,
                      refused=refused)
    response.status_code = 422 if form.errors else 200
    return response


@bp.route("/new", methods=["GET", "POST"])
@role_required("admin")
def create():
    """A new definition; errors come back in place."""
    form = _form()
    if form.is_submitted():
        form.validate()
        if form.name.data and not form.name.errors and db.session.scalar(db.select(JobDefinition.id)
                                                .where(JobDefinition.name == form.name.data.strip())):
            form.name.errors.append("is taken: another definition has this name")
        if (saved := _save(form)) is not None:
            audit.record("create", "definition", saved.id, schedule=saved.schedule)
            db.session.commit()
            # In UTC to the second, which the page's flash shows in the viewer's zone (local_times),
            # as the definition page it leads to shows the same time.
            next_run = saved.next_run_at.astimezone(UTC)
            flash(f"{saved.name} is defined; next run {next_run:%Y-%m-%d %H:%M:%S} UTC.")
            return redirect_to(url_for("jobsweb.definitions.detail", definition_id=saved.id))
    return _page(form, None)


@bp.route("/<int:definition_id>/edit", methods=["GET", "POST"])
@role_required("admin")
def edit(definition_id):
    """Change a definition (not its name); an unchanged schedule keeps its pending slot."""
    definition = db.get_or_404(JobDefinition, definition_id, description=f"There is no definition {definition_id}.")
    form = _form(definition)
    form.name.data = definition.name
    if form.is_submitted():
        form.validate()
        before = audit.settings_of(definition)
        if (saved := _save(form, definition)) is not None:
            audit.record("edit", "definition", saved.id, name=saved.name, changes=audit.changes(before, saved))
            db.session.commit()
            flash(f"{saved.name} is saved.")
            return redirect_to(url_for("jobsweb.definitions.detail", definition_id=saved.id))
    return _page(form, definition)
