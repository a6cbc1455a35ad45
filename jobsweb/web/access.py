"""Who may see and do what: Flask-Login sessions, roles, and the sign-in gate on every page."""

from functools import wraps

from flask import abort, redirect, request, url_for
from flask_login import LoginManager, current_user

from ..core.database import db
from ..core.models import ROLES, User

login_manager = LoginManager()
login_manager.login_view = "auth.sign_in"
login_manager.login_message = None  # the sign-in page says enough

# Reachable without signing in; everything else redirects to the sign-in page.
# /metrics checks its own bearer token.
PUBLIC_ENDPOINTS = {"auth.sign_in", "probes.healthz", "probes.metrics", "static", "htmx.static"}


@login_manager.user_loader
def load_user(user_id):
    return db.session.get(User, int(user_id))


def role_required(role):
    """Views that change things: 403 for a signed-in user below `role`."""
    assert role in ROLES

    def decorate(view):
        @wraps(view)
        def guarded(*args, **kwargs):
            if not current_user.can(role):
                abort(403, f"This needs the {role} role; you are signed in as {current_user.role}.")
            return view(*args, **kwargs)

        return guarded

    return decorate


def require_sign_in():
    """before_request: every page but the public ones needs a signed-in user."""
    if request.endpoint in PUBLIC_ENDPOINTS or current_user.is_authenticated:
        return None
    if request.endpoint is None:
        return None  # a 404 stays a 404
    sign_in = url_for("auth.sign_in", next=request.full_path.rstrip("?") if request.method == "GET" else None)
    if request.htmx:
        # An htmx swap of a sign-in page into a table would be confusing: reload whole.
        return "", 401, {"HX-Redirect": sign_in}
    return redirect(sign_in)


def init_app(app):
    login_manager.init_app(app)
    app.before_request(require_sign_in)
