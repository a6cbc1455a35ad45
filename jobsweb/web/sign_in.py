"""Signing in and out."""

from urllib.parse import urlsplit

from flask import Blueprint, redirect, render_template, request, url_for
from flask_login import login_user, logout_user

from ..core.database import db
from .accounts import check_credentials
from .forms import SignInForm

bp = Blueprint("auth", __name__)


def _safe_next(target):
    """Only a path on this site: never send a person elsewhere after signing in."""
    if not target:
        return None
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return None
    return target


@bp.route("/sign-in", methods=["GET", "POST"])
def sign_in():
    """The sign-in form; a wrong email or password gets one message for both."""
    form = SignInForm()
    error = None
    if form.validate_on_submit():
        user = check_credentials(form.email.data, form.password.data)
        if user is not None:
            login_user(user)
            user.last_sign_in_at = db.func.now()
            db.session.commit()
            return redirect(_safe_next(request.args.get("next")) or url_for("dashboard.index"))
        error = "That email and password do not match an account."
    status = 401 if error else 200
    return render_template("sign_in.html", form=form, error=error), status


@bp.post("/sign-out")
def sign_out():
    """Forget the session (POST, with the CSRF token, so no link can sign a person out)."""
    logout_user()
    return redirect(url_for("auth.sign_in"))
