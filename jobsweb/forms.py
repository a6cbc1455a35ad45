"""The admin screen's forms (Flask-WTF: each carries its CSRF token)."""

from flask_wtf import FlaskForm
from wtforms import EmailField, IntegerField, PasswordField, SelectField, StringField, TextAreaField
from wtforms.validators import DataRequired, Length, NumberRange, Optional


class SignInForm(FlaskForm):
    email = EmailField("Email", validators=[DataRequired(), Length(max=254)])
    password = PasswordField("Password", validators=[DataRequired(), Length(max=200)])


class EnqueueForm(FlaskForm):
    job_type = SelectField("Job type", validators=[DataRequired()])
    payload = TextAreaField("Payload (JSON object)", default="{}", validators=[Length(max=200_000)])
    run_at = StringField("Run at", validators=[Optional(), Length(max=64)],
                         description="Empty: now. Or an ISO 8601 time with its offset, e.g. 2026-11-21T06:00:00+01:00")
    idempotency_key = StringField("Idempotency key", validators=[Optional(), Length(max=200)],
                                  description="Optional: at most one run is created per key.")
    max_attempts = IntegerField("Max attempts", validators=[Optional(), NumberRange(min=1, max=1000)],
                                description="Empty: the job type's default.")


class UserForm(FlaskForm):
    email = EmailField("Email", validators=[DataRequired(), Length(max=254)])
    role = SelectField("Role", choices=["viewer", "operator", "admin"],
                       description="Viewers read; operators also act on runs; admins also manage "
                                   "definitions and users.")
    password = PasswordField("Password", validators=[DataRequired(), Length(min=8, max=200)],
                             description="At least 8 characters; tell it to them another way.")
