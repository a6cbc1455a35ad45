"""Signing in and out with jobsweb's own users (when the app gave no `authorize`)."""

from urllib.parse import urlsplit

from flask import Blueprint, abort, redirect, request, url_for

from . import audit
from ..core.database import db
from ..core.models import User
from .access import access, forget_session, start_session, viewer
from .accounts import check_credentials, end_sessions, find_user
from .forms import SignInForm
from .rendering import render_template
from .throttle import DEVICE_COOKIE, DEVICE_DAYS, WINDOW, Attempt, new_device_cookie

bp = Blueprint("auth", __name__)


def _safe_next(target):
    """Only a path on this site: never send a person elsewhere after signing in."""
    if not target:
        return None
    parts = urlsplit(target)
    # A backslash or a control character can turn a path into another host in some browsers.
    if (parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//")
            or "\\" in target or any(ord(c) < 32 or ord(c) == 127 for c in target)):
        return None
    return target


@bp.before_request
def only_without_host_sign_in():
    """With the host's `authorize`, the host signs people in: these pages do not exist."""
    if access().authorize is not None:
        abort(404)


@bp.route("/sign-in", methods=["GET", "POST"])
def sign_in():
    """The sign-in form; a wrong email or password gets one message for both. Each sign-in,
    wrong password and limit reached is audited (throttle.py says what the limits are)."""
    form = SignInForm()
    error = None
    if form.validate_on_submit():
        attempt = Attempt.of(form.email.data, request.remote_addr, request.cookies.get(DEVICE_COOKIE))
        verdict = attempt.reserve()
        if verdict.wait:
            wait = verdict.wait
            message = (f"Too many wrong passwords for this account: try again in {wait} second{'s' * (wait > 1)}."
                       if verdict.slowed else
                       f"Too many wrong passwords from this address: try again in "
                       f"{(wait + 59) // 60} minute{'s' * (wait > 60)}.")
            return render_template("sign_in.html", form=form, error=message), 429, {"Retry-After": str(wait)}
        user = check_credentials(form.email.data, form.password.data)
        if user is not None:
            attempt.succeeded(verdict)
            start_session(user)
            user.last_sign_in_at = db.func.now()
            audit.record_for(user.id, user.email, "sign_in", "user", user.id, address=attempt.address)
            db.session.commit()
            response = redirect(_safe_next(request.args.get("next")) or url_for("jobsweb.dashboard.index"))
            # Sent back to this page only: what lets this browser past the limits others trip.
            response.set_cookie(DEVICE_COOKIE, new_device_cookie(user.email), max_age=DEVICE_DAYS * 86400,
                                path=url_for("jobsweb.auth.sign_in"), secure=request.is_secure, httponly=True,
                                samesite="Strict")
            return response
        # The failure was recorded by reserve(); what is left is to say who tried.
        known = find_user(attempt.email)
        target = known.id if known is not None else None
        audit.record_for(None, attempt.email, "sign_in_failed", "user", target, address=attempt.address)
        for limit in verdict.reaches:
            audit.record_for(None, attempt.email, "sign_in_limited", "user", target, address=attempt.address,
                             limit=limit, minutes=WINDOW // 60)
        db.session.commit()
        error = "That email and password do not match an account."
    status = 401 if error else 422 if form.errors else 200
    return render_template("sign_in.html", form=form, error=error), status


@bp.post("/sign-out")
def sign_out():
    """End this user's sessions, everywhere (POST, with the CSRF token, so no link can sign a
    person out): a copy of the cookie is no good after."""
    if viewer() is not None and viewer().user_id is not None:
        end_sessions(db.session.get(User, viewer().user_id))
        db.session.commit()
    forget_session()
    return redirect(url_for("jobsweb.auth.sign_in"))
