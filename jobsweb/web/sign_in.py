"""Signing in and out with jobsweb's own users (when the app gave no `authorize`)."""

from urllib.parse import urlsplit

from flask import Blueprint, abort, redirect, request, session, url_for

from ..core.database import db
from .access import SESSION_KEY, access
from .accounts import check_credentials
from .forms import SignInForm
from .rendering import render_template

bp = Blueprint("auth", __name__)


def _safe_next(target):
    """Only a path on this site: never send a person elsewhere after signing in."""
    if not target:
        return None
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return None
    return target


@bp.before_request
def only_without_host_sign_in():
    """With the host's `authorize`, the host signs people in: these pages do not exist."""
    if access().authorize is not None:
        abort(404)


@bp.route("/sign-in", methods=["GET", "POST"])
def sign_in():
    """The sign-in form; a wrong email or password gets one message for both."""
    form = SignInForm()
    error = None
    if form.validate_on_submit():
        user = check_credentials(form.email.data, form.password.data)
        if user is not None:
            session[SESSION_KEY] = user.id
            user.last_sign_in_at = db.func.now()
            db.session.commit()
            return redirect(_safe_next(request.args.get("next")) or url_for("jobsweb.dashboard.index"))
        error = "That email and password do not match an account."
    status = 401 if error else 200
    return render_template("sign_in.html", form=form, error=error), status


@bp.post("/sign-out")
def sign_out():
    """Forget the session (POST, with the CSRF token, so no link can sign a person out)."""
    session.pop(SESSION_KEY, None)
    return redirect(url_for("jobsweb.auth.sign_in"))
