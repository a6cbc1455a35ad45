"""Enqueue an ad-hoc run of a registered job type."""

from flask import Blueprint, current_app, flash, url_for
from wtforms import StringField
from wtforms.validators import Length, Optional

from . import audit
from ..core.database import db
from ..core.errors import InvalidInput
from ..engine.enqueue.enqueuing import enqueue, parse_delay, parse_payload
from .access import role_required, viewer
from .forms import EnqueueForm, job_type_choices
from .local_time import read_local, viewer_zone
from .rendering import redirect_to, render

bp = Blueprint("enqueue", __name__)


class DelayedEnqueueForm(EnqueueForm):
    """The enqueue form with a delay beside Run at, read as `flask jobs enqueue --delay` reads
    it and handed to enqueue(delay=): due that long after the database's now(), whatever the
    viewer's clock says."""

    delay = StringField("Delay", validators=[Optional(), Length(max=32)],
                        description="Empty: none. Seconds (30), or 90s, 5m, 2h, 1d; not with Run at.")


@bp.route("/enqueue", methods=["GET", "POST"])
@role_required("operator")
def form():
    """The form; errors come back in place (the form alone for htmx), success opens the run."""
    form = DelayedEnqueueForm()
    form.job_type.choices = job_type_choices()
    if form.validate_on_submit():
        try:
            run_at = (read_local("run_at", form.run_at.data, viewer_zone(form.tz.data))
                      if form.run_at.data else None)
            delay = parse_delay(form.delay.data) if (form.delay.data or "").strip() else None
            run_id = enqueue(
                form.job_type.data,
                parse_payload(form.payload.data or "{}", current_app.config["JOBSWEB_MAX_PAYLOAD_BYTES"]),
                run_at=run_at,
                delay=delay,
                idempotency_key=form.idempotency_key.data or None,
                max_attempts=form.max_attempts.data, session=db.session)
        except InvalidInput as exc:
            getattr(form, exc.field).errors.append(exc.message)
        else:
            audit.record("enqueue", "run", run_id, job_type=form.job_type.data)
            db.session.commit()
            flash(f"Run {run_id} enqueued by {viewer().identity}.")
            return redirect_to(url_for("jobsweb.runs.detail", run_id=run_id))
    status = 422 if form.errors else 200
    response = render("enqueue.html", "partials/_enqueue_form.html", form=form)
    response.status_code = status
    return response
