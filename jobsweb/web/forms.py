"""The admin screen's forms (Flask-WTF). Their CSRF token is checked once for every POST to
jobsweb (access.check_csrf), so the forms do not check it again."""

from flask_wtf import FlaskForm
from markupsafe import Markup
from wtforms import (BooleanField, EmailField, FloatField, HiddenField, IntegerField, PasswordField, SelectField,
                     StringField, TextAreaField)
from wtforms.validators import DataRequired, Length, NumberRange, Optional

from ..core.errors import EMAIL_MAX_CHARS, InvalidInput, clean_text
from ..core.models import ROLES
from ..engine.jobs import registry
from ..engine.jobs.worker_job_types import worker_job_types
from ..scheduling.definitions import (
    DEFAULT_GRACE,
    FAILING_AFTER,
    MAX_GRACE,
    MAX_SECONDS,
    MISFIRE_POLICIES,
    OVERLAP_POLICIES,
)
from ..core.passwords import PASSWORD_MIN_CHARS

# A number field bounded by NumberRange accepts "nan" (every comparison with it is false).
_finite = NumberRange(min=0.001, max=MAX_SECONDS)


class WholeNumberField(IntegerField):
    """IntegerField that refuses a number of more than 18 digits as it reads it: wtforms'
    NumberRange calls math.isnan() on it, which raises OverflowError (a 500) for an int past a
    float's range (a 400-digit max_attempts). Every bound here is far below 18 digits."""

    def process_formdata(self, valuelist):
        if valuelist and len(str(valuelist[0]).strip().lstrip("+-")) > 18:
            self.data = None
            raise ValueError(self.gettext("Not a valid integer value."))
        super().process_formdata(valuelist)


def job_type_choices(current=None):
    """The job type select's options: a blank "choose" first, so that no type (the first in
    alphabetical order was jobsweb.fail) is picked for someone who did not choose one; then the
    job types this process registers and, marked, those only a worker registered (a web process
    often imports no handler); and `current`, a definition's own, kept even if no worker has it
    now, so that its edit opens with it chosen."""
    here = registry.names()
    theirs = [name for name in worker_job_types(in_session=True) if name not in here]
    choices = [(name, name) for name in here] + [(name, f"{name} — a worker's") for name in theirs]
    if current and current not in here and current not in theirs:
        choices.append((current, f"{current} — no worker has it now"))
    return [("", "— choose a job type —")] + sorted(choices)


class Form(FlaskForm):
    """The input-cleaning layer of every form: text with a control character (NUL, or a line
    break outside a text area) gets an error on its own field, before any other check runs."""

    class Meta:
        csrf = False

    def validate(self, extra_validators=None):
        valid = super().validate(extra_validators)
        for field in self:
            if isinstance(field.data, str):
                try:
                    clean_text(field.name, field.data, multiline=isinstance(field, TextAreaField))
                except InvalidInput as exc:
                    field.errors = [*field.errors, exc.message]
                    valid = False
            elif isinstance(field.data, float) and field.data != field.data:
                field.errors = [*field.errors, "must be a number"]
                valid = False
        return valid


class SignInForm(Form):
    email = EmailField("Email", validators=[DataRequired(), Length(max=EMAIL_MAX_CHARS)])
    password = PasswordField("Password", validators=[DataRequired(), Length(max=200)])


class EnqueueForm(Form):
    job_type = SelectField("Job type", validators=[DataRequired()])
    payload = TextAreaField("Payload (JSON object)", default="{}", validators=[Length(max=200_000)])
    # Shown as a datetime-local input, read in the zone the hidden `tz` carries (local_time.py);
    # the span names that zone once static/local-times.js has filled it in, and says UTC before.
    run_at = StringField("Run at", validators=[Optional(), Length(max=64)],
                         description=Markup('Empty: now. Read as <span data-tz-name>UTC</span> time.'))
    tz = HiddenField(validators=[Optional(), Length(max=64)])
    idempotency_key = StringField("Idempotency key", validators=[Optional(), Length(max=200)],
                                  description="Optional: at most one run is created per key.")
    max_attempts = WholeNumberField("Max attempts", validators=[Optional(), NumberRange(min=1, max=1000)],
                                description="Empty: the job type's default.")


class UserForm(Form):
    email = EmailField("Email", validators=[DataRequired(), Length(max=EMAIL_MAX_CHARS)])
    role = SelectField("Role", choices=list(ROLES),
                       description="Viewers read; operators also act on runs; admins also manage "
                                   "definitions and users.")
    password = PasswordField("Password", validators=[DataRequired(), Length(max=200)],
                             description=f"At least {PASSWORD_MIN_CHARS} characters, not a common one; "
                                         "tell it to them another way.")


class DefinitionForm(Form):
    """A job definition; names match the arguments of definitions.define() (issue 3), so an
    InvalidInput from it lands on the field it names."""

    name = StringField("Name", validators=[DataRequired(), Length(max=200)])
    # Not DataRequired: an external definition has none (define() refuses a missing one otherwise).
    job_type = SelectField("Job type", validators=[Optional()])
    external = BooleanField("External: jobsweb watches it, never runs it",
                            description="Its crontab line (flask jobs exec) or script (its ping URL) reports each "
                                        "run; a slot not reported within the grace is missed. No job type needed.")
    schedule = StringField("Schedule", validators=[DataRequired(), Length(max=200)],
                           description="Cron (0 6 * * 1-5), a macro (@daily, @hourly) or @every 10m")
    timezone = SelectField("Timezone", default="UTC")
    payload = TextAreaField("Payload (JSON object)", default="{}", validators=[Length(max=200_000)])
    max_attempts = WholeNumberField("Max attempts", validators=[Optional(), NumberRange(min=1, max=1000)],
                                description="Empty: the job type's default.")
    queue = StringField("Queue", validators=[Optional(), Length(max=100)],
                        description="Empty: the job type's queue, or default. Created on first use.")
    priority = StringField("Priority", validators=[Optional(), Length(max=10)],
                           description="-1000 to 1000, smaller runs first. Empty: the job type's, or 0.")
    backoff_base = FloatField("Retry delay base (s)", validators=[Optional(), _finite])
    backoff_cap = FloatField("Retry delay cap (s)", validators=[Optional(), _finite])
    timeout = FloatField("Timeout (s)", validators=[Optional(), _finite],
                         description="Empty: the job type's timeout, if any.")
    overlap = SelectField("If the previous run is still going", default="skip", choices=list(OVERLAP_POLICIES),
                          description="skip this slot · queue it after · allow both")
    misfire = SelectField("After downtime", default="latest", choices=list(MISFIRE_POLICIES),
                          description="run the latest missed slot · run all · skip them")
    grace_seconds = WholeNumberField("Grace (s)", default=DEFAULT_GRACE, validators=[Optional(), NumberRange(min=0, max=MAX_GRACE)],
                                 description="How late a slot may be before it counts as overdue.")
    alert_after_failures = WholeNumberField("Alert after (dead runs)", default=FAILING_AFTER,
                                        validators=[Optional(), NumberRange(min=1, max=1000)],
                                        description="1: alert on every dead run.")
    max_duration = WholeNumberField("Max duration (s)", validators=[Optional(), NumberRange(min=1, max=7 * 86400)],
                                description="Longer opens a 'slow' incident. Empty: 3× the p95 of its last 20 "
                                            "successful runs, at least 60 s.")
    alert_webhook_url = StringField("Alert webhook URL", validators=[Optional(), Length(max=2000)],
                                    description="Empty: the default (JOBSWEB_ALERT_WEBHOOK_URL).")
    alert_email_to = StringField("Alert emails", validators=[Optional(), Length(max=2000)],
                                 description="Comma-separated. Empty: the default (JOBSWEB_ALERT_EMAIL_TO).")
