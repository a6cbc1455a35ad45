"""Who may sign in: users, their passwords and roles, and the demo admin `flask dev` makes on a
first run."""

import secrets
from functools import cache

from sqlalchemy import func, select
from werkzeug.security import check_password_hash, generate_password_hash

from ..core.database import db
from ..core.errors import EMAIL_MAX_CHARS, InvalidInput, clean_name, clean_text
from ..core.models import ROLES, User
from ..core.passwords import check_password

DEMO_EMAIL = "admin@example.com"


@cache
def _dummy_hash():
    """Hashed on first use, not at import: every worker and CLI command imports this module.

    A password check for an unknown email verifies against it, so response time does not
    tell which emails have accounts.
    """
    return generate_password_hash("not a real password")


def _end_transaction():
    """Commit the session's transaction before a password is hashed or checked: scrypt takes
    ~0.1 s of CPU, seconds on a starved one, and a transaction left open through it held its
    snapshot and locks, and was ended by the server's idle_in_transaction_session_timeout (a 10 s
    one ended create_user's). What came before is reads (the page's viewer, the user looked up);
    committed, not rolled back, so that a caller's earlier writes are never lost."""
    db.session.commit()


def find_user(email):
    """The user with this email, compared without case, or None."""
    return db.session.scalar(select(User).where(func.lower(User.email) == email.strip().lower()))


def check_credentials(email, password):
    """The active user with this email and password, or None. The password is checked with no
    transaction open (_end_transaction)."""
    user = find_user(email)
    stored, active = (user.password_hash, user.active) if user is not None else (None, False)
    _end_transaction()
    if stored is None:
        check_password_hash(_dummy_hash(), password)
        return None
    return user if check_password_hash(stored, password) and active else None


def end_sessions(user):
    """End every session of `user`, wherever its cookie is (the caller commits)."""
    user.session_version = User.session_version + 1


def set_active(user, active):
    """Deactivate (no sign-in, every session ended) or reactivate a user; the caller commits."""
    user.active = active
    if not active:
        end_sessions(user)


def reset_password(user, password):
    """A new password; every session of the user ends. The caller commits (what the session held
    before is committed first: the password is hashed with no transaction open)."""
    check_password(password)
    _end_transaction()
    user.password_hash = generate_password_hash(password)
    end_sessions(user)


def user_by_email(email):
    """The user with this email, or InvalidInput naming `email`."""
    user = find_user(clean_text("email", email))
    if user is None:
        raise InvalidInput("email", f"no user has the email {email!r}")
    return user


def create_user(email, password, role):
    """Add a user to the session (the caller commits, with its audit entry if any; what the
    session held before is committed first: the password is hashed with no transaction open).

    InvalidInput names the field when the email is taken or the input is unusable.
    """
    email = clean_name("email", email.strip())
    if "@" not in email or len(email) > EMAIL_MAX_CHARS or any(c.isspace() for c in email):
        raise InvalidInput("email", f"{email!r} is not an email address")
    if role not in ROLES:
        raise InvalidInput("role", f"must be one of {', '.join(ROLES)}, got {role!r}")
    check_password(password)
    _end_transaction()
    password_hash = generate_password_hash(password)
    if find_user(email) is not None:
        raise InvalidInput("email", f"a user with email {email} already exists")
    user = User(email=email, password_hash=password_hash, role=role)
    db.session.add(user)
    db.session.flush()  # assigns user.id
    return user


def ensure_demo_admin():
    """With no user at all, add an admin (a newcomer can try everything) with a random password;
    return (email, password). The caller commits."""
    if db.session.scalar(select(func.count()).select_from(User)):
        return None
    password = secrets.token_urlsafe(16)
    create_user(DEMO_EMAIL, password, "admin")
    return DEMO_EMAIL, password
