"""Who may see and do what on the admin screen: the viewer of each request, roles, the sign-in
gate and CSRF checks, all on jobsweb's blueprint only (a host app's own pages are not touched).

A viewer comes from the host's `authorize` callable when the app gave one (it returns None or
(identity, role)), otherwise from jobsweb's own users and sign-in page.
"""

import time
from dataclasses import dataclass
from functools import wraps
from urllib.parse import urlencode

from flask import abort, current_app, g, redirect, request, session, url_for
from flask_wtf.csrf import CSRFError, validate_csrf
from werkzeug.exceptions import Forbidden
from wtforms import ValidationError

from ..core.database import db
from ..core.errors import EMAIL_MAX_CHARS, InvalidInput, clean_name
from ..core.models import ROLES, User
from .rendering import htmx

SESSION_KEY = "jobsweb_user_id"  # jobsweb's own sign-in, in the app's session
VERSION_KEY = "jobsweb_session_version"  # the user's session_version when this session began
SEEN_KEY = "jobsweb_seen_at"  # Unix time of the session's latest request, for the idle timeout
# What a sign-in or sign-out clears: jobsweb's keys and the CSRF token (Flask-WTF's key), so no
# token or cookie from before is good after. A host's own keys in the session are left alone.
SESSION_KEYS = (SESSION_KEY, VERSION_KEY, SEEN_KEY, "csrf_token")
SEEN_RESOLUTION = 60  # seconds: the idle clock is rewritten at most this often (a new cookie)
# Seconds a form's CSRF token stays good: as long as a session cookie lives, so that a page
# left open overnight still posts (the token is tied to the session anyway).
CSRF_MAX_AGE = 31 * 86400
# The ping URLs (pings.py): scripts on other hosts report with curl, holding only the token in
# the URL. They never read the session (no viewer, no cookie), need no CSRF token, and read at
# most their own cap of a body (guards.limit_request). Only these, by exact endpoint name.
PINGS = {"pings.ping", "pings.ping_start", "pings.ping_fail", "pings.ping_code"}
# Load balancers and scrapers: no viewer is looked up (a probe carrying a session cookie must
# not wait on the users table before its own bounded check).
PROBES = {"probes.healthz", "probes.metrics"}
# Reachable without signing in (local names inside jobsweb's blueprint); /metrics checks its
# own bearer token.
PUBLIC = {"auth.sign_in", "static", "htmx.static", "favicon"} | PROBES | PINGS
UNSAFE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
IDENTITY_MAX_CHARS = EMAIL_MAX_CHARS  # 254: an identity from `authorize` is most often an email


@dataclass(frozen=True)
class Viewer:
    """The person behind a request: their identity (an email, or the host's identity), role and,
    for jobsweb's own users, their id."""

    identity: str
    role: str
    user_id: int | None = None

    def can(self, role):
        """Whether this viewer has `role` or a higher one."""
        return ROLES.index(self.role) >= ROLES.index(role)


@dataclass(frozen=True)
class Access:
    """How one app signs people in to the admin screen."""

    authorize: object = None  # the host's callable, or None for jobsweb's own users
    login_url: str | None = None  # where the host signs people in (JOBSWEB_LOGIN_URL)


def access():
    return current_app.extensions["jobsweb_access"]


def viewer():
    """The viewer of this request (None before the gate ran, or when nobody is signed in)."""
    return g.get("jobsweb_viewer")


def local_endpoint():
    """The request's endpoint inside jobsweb's blueprint ("runs.index"), wherever it is mounted."""
    return (request.endpoint or "").partition(".")[2]


def find_viewer():
    """The viewer from the host's `authorize`, or from jobsweb's own sign-in; None if nobody.
    A 403 when the host's answer denies access or cannot be used (see host_viewer)."""
    authorize = access().authorize
    if authorize is not None:
        return host_viewer(authorize())
    user_id = session.get(SESSION_KEY)
    if not isinstance(user_id, int):
        return None
    user = db.session.get(User, user_id)
    now = int(time.time())
    seen = session.get(SEEN_KEY)
    if (user is None or not user.active or session.get(VERSION_KEY) != user.session_version
            or not isinstance(seen, int) or now - seen > current_app.config["JOBSWEB_SESSION_IDLE_SECONDS"]):
        # Signed out elsewhere, deactivated, password reset, or idle too long: this session is over.
        forget_session()
        return None
    if now - seen >= SEEN_RESOLUTION:
        session[SEEN_KEY] = now
    return Viewer(user.email, user.role, user.id)


def host_viewer(answer):
    """The viewer from an answer of the host's `authorize`:
    - anything falsy (None, False, "", ()): nobody is signed in (to the host's sign-in page);
    - (identity, role), role viewer, operator or admin: that person, with that role;
    - (identity, None): signed in, but not allowed here: a 403 page with no links inside;
    - anything else (a role that is not one of the three, an empty or None identity, not a pair)
      fails closed: a 403, and one error line in the log saying what the host returned.
    `authorize` may also abort(403) itself (the same page)."""
    if not answer:
        return None
    if isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[0], (str, int)) \
            and not isinstance(answer[0], bool) and str(answer[0]).strip():
        identity, role = answer
        refused = unusable_identity(str(identity))
        if refused:
            # Never into the audit log (a 100,000-character identity, or one with CR/LF, was)
            # nor onto the page; the log line shows only its start, escaped.
            current_app.logger.error("authorize() returned an identity %s (%.60r...): access refused",
                                     refused, str(identity))
            abort(403, "The application's sign-in named you in a way jobsweb cannot record, so access "
                       "is refused. The error is in the application's log.")
        if role is None:
            abort(403, f"You are signed in as {identity}, but not allowed to see the job screen.")
        if role in ROLES:
            return Viewer(str(identity), role)
    current_app.logger.error("authorize() returned %.200r; it must return None (nobody signed in), "
                             "(identity, None) (no access) or (identity, role) with a non-empty identity "
                             "and role one of %s: access refused", answer, ", ".join(ROLES))
    abort(403, "The application's sign-in did not say who you are in a way jobsweb can use, "
               "so access is refused. The error is in the application's log.")


def unusable_identity(identity):
    """Why an identity from `authorize` cannot be recorded as who did something, or None: over
    IDENTITY_MAX_CHARS (an email's limit), or holding a control character (a forged log or audit
    line) or a character that hides or reorders text."""
    if len(identity) > IDENTITY_MAX_CHARS:
        return f"of {len(identity)} characters (at most {IDENTITY_MAX_CHARS})"
    try:
        clean_name("identity", identity)
    except InvalidInput:
        return "with a control character"
    return None


def forget_session():
    """Remove jobsweb's sign-in and the CSRF token from the session."""
    for key in SESSION_KEYS:
        session.pop(key, None)
    g.pop("csrf_token", None)


def start_session(user):
    """A fresh session for `user`: nothing from before sign-in (CSRF token included) survives."""
    forget_session()
    session[SESSION_KEY] = user.id
    session[VERSION_KEY] = user.session_version
    session[SEEN_KEY] = int(time.time())


def check_csrf():
    """before_request: every POST to jobsweb carries the CSRF token of the session (a form field,
    or the X-CSRFToken header htmx sends); a host's own routes are not checked."""
    if request.method in UNSAFE_METHODS and local_endpoint() not in PINGS:
        token = request.form.get("csrf_token") or request.headers.get("X-CSRFToken")
        try:
            validate_csrf(token, time_limit=CSRF_MAX_AGE)
        except ValidationError as exc:
            raise CSRFError(exc.args[0]) from None


def warn_if_not_forwarded():
    """Once per process: JOBSWEB_PROXY_HOPS trusts X-Forwarded-For, yet a request came without
    it, so it did not come through that proxy. A client that can do so can also send the header
    itself and choose the address sign-in limits and the audit log see (probes are left out:
    health checkers often reach the app directly)."""
    hops = current_app.config.get("JOBSWEB_PROXY_HOPS")
    # ProxyFix's mark: the standalone app applies it (app.py); inside a host app the setting does nothing.
    if not hops or "werkzeug.proxy_fix.orig" not in request.environ:
        return
    if "X-Forwarded-For" in request.headers or local_endpoint() in PROBES:
        return
    if current_app.extensions.get("jobsweb_not_forwarded_warned"):
        return
    current_app.extensions["jobsweb_not_forwarded_warned"] = True
    current_app.logger.warning(
        "JOBSWEB_PROXY_HOPS is %d, but a request from %s came without X-Forwarded-For: it did not pass "
        "through the proxy. If clients can reach the app without it, they choose the address sign-in "
        "limits count: let only the proxy reach the app, or set JOBSWEB_PROXY_HOPS=0 (warned once)",
        hops, request.remote_addr)


def require_sign_in():
    """before_request: every page but the public ones needs a viewer; without one, the sign-in
    page (or the host's JOBSWEB_LOGIN_URL), or a 401."""
    warn_if_not_forwarded()
    if local_endpoint() in PINGS | PROBES:
        g.jobsweb_viewer = None
        return None
    try:
        g.jobsweb_viewer = find_viewer()
    except Forbidden:
        if local_endpoint() not in PUBLIC:
            raise
        g.jobsweb_viewer = None  # the stylesheet of the 403 page itself, the health check
    if g.jobsweb_viewer is not None or local_endpoint() in PUBLIC:
        return None
    back = request.full_path.rstrip("?") if request.method == "GET" else None
    if access().authorize is None:
        target = url_for("jobsweb.auth.sign_in", next=back)
    elif access().login_url:
        target = access().login_url + ("&" if "?" in access().login_url else "?") + urlencode({"next": back or ""})
    else:
        abort(401, "Sign in to the application first.")
    if htmx():
        # An htmx swap of a sign-in page into a table would be confusing: reload whole.
        return "", 401, {"HX-Redirect": target}
    return redirect(target)


def role_required(role):
    """Views that change things: 403 for a viewer below `role`."""
    assert role in ROLES

    def decorate(view):
        @wraps(view)
        def guarded(*args, **kwargs):
            if not viewer().can(role):
                abort(403, f"This needs the {role} role; you are signed in as {viewer().role}.")
            return view(*args, **kwargs)

        return guarded

    return decorate
