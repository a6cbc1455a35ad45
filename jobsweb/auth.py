"""Who may see and do what: Flask-Login sessions, roles, and the sign-in gate on every page."""

from functools import cache, wraps

from flask import abort, redirect, request, url_for
from flask_login import LoginManager, current_user
from sqlalchemy import func, select
from werkzeug.security import check_password_hash, generate_password_hash

from .db import db
from .errors import InvalidInput
from .models import ROLES, User

login_manager = LoginManager()
login_manager.login_view = "auth.sign_in"
login_manager.login_message = None  # the sign-in page says enough

# Reachable without signing in; everything else redirects to the sign-in page.
# /metrics checks its own bearer token.
PUBLIC_ENDPOINTS = {"auth.sign_in", "health.healthz", "metrics.metrics", "static", "htmx.static"}

@cache
def _dummy_hash():
    """Hashed on first use, not at import: every worker and CLI command imports this module.

    A password check for an unknown email verifies against it, so response time does not
    tell which emails have accounts.
    """
    return generate_password_hash("not a real password")


@login_manager.user_loader
def load_user(user_id):
    return db.session.get(User, int(user_id))


def find_user(email):
    return db.session.scalar(select(User).where(func.lower(User.email) == email.strip().lower()))


def check_credentials(email, password):
    """The user with this email and password, or None."""
    user = find_user(email)
    if user is None:
        check_password_hash(_dummy_hash(), password)
        return None
    return user if check_password_hash(user.password_hash, password) else None


def create_user(email, password, role):
    """Add a user to the session (the caller commits, with its audit entry if any).

    InvalidInput names the field when the email is taken or the input is unusable.
    """
    email = email.strip()
    if "@" not in email or len(email) > 254:
        raise InvalidInput("email", f"{email!r} is not an email address")
    if role not in ROLES:
        raise InvalidInput("role", f"must be one of {', '.join(ROLES)}, got {role!r}")
    if len(password) < 8:
        raise InvalidInput("password", "must have at least 8 characters")
    if find_user(email) is not None:
        raise InvalidInput("email", f"a user with email {email} already exists")
    user = User(email=email, password_hash=generate_password_hash(password), role=role)
    db.session.add(user)
    db.session.flush()  # assigns user.id
    return user


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
