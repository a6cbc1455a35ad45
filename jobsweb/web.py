"""The admin screen's plumbing: extensions, the page-or-fragment helper, filters, htmx files."""

import importlib.util
import json
from datetime import datetime, timezone
from pathlib import Path

from flask import Blueprint, make_response, redirect, render_template, request
from flask.sessions import SecureCookieSessionInterface
from flask_wtf.csrf import CSRFError, CSRFProtect
from htmx_flask import Htmx
from markupsafe import Markup
from werkzeug.middleware.proxy_fix import ProxyFix

from .errors import InvalidInput
from .runlist import BadFilter
from .schedule import Schedule

csrf = CSRFProtect()
htmx = Htmx()

STATUS_WORDS = {
    "queued": "Queued", "running": "Running", "succeeded": "Succeeded", "failed": "Failed, will retry",
    "dead": "Dead", "cancelled": "Cancelled",
}
MASK = "••••••"


def render(page, fragment, **context):
    """Render the whole `page`, or only `fragment` for an htmx request.

    The page includes the same fragment, so both answers show the same markup; Vary keeps a
    cache from serving one in place of the other.
    """
    template = fragment if request.htmx and not request.htmx.boosted else page
    response = make_response(render_template(template, **context))
    response.vary.add("HX-Request")
    return response


def redirect_to(url):
    """After a successful POST: a redirect, or for htmx a full page load of `url`.

    (htmx's request would follow a 302 silently and swap the next page into the form.)
    """
    if request.htmx:
        return "", 204, {"HX-Redirect": url}
    return redirect(url)


def mask_secrets(value, words):
    """A copy of a payload with the values of secret-looking keys replaced, at any depth."""
    if isinstance(value, dict):
        return {key: MASK if any(word in str(key).lower() for word in words) else mask_secrets(item, words)
                for key, item in value.items()}
    if isinstance(value, list):
        return [mask_secrets(item, words) for item in value]
    return value


def pretty_json(value, words=()):
    """Indented JSON with secrets masked; Jinja escapes it like any other text."""
    return json.dumps(mask_secrets(value, words), indent=2, sort_keys=True, ensure_ascii=False)


def time_ago(moment, now=None):
    """'3 min ago' / 'in 2 h': how far a time is from now, in words."""
    if moment is None:
        return "—"
    now = now or datetime.now(timezone.utc)
    seconds = (now - moment).total_seconds()
    amount = seconds_words(abs(seconds))
    return f"in {amount}" if seconds < 0 else f"{amount} ago"


def seconds_words(seconds):
    """A number of seconds as '45 s', '12 min', '3 h'."""
    for limit, size, unit in ((60, 1, "s"), (3600, 60, "min"), (86400, 3600, "h"), (None, 86400, "d")):
        if limit is None or seconds < limit:
            return f"{int(seconds // size)} {unit}"


def when(moment):
    """A time as UTC, with seconds, in a <time> element that says how long ago it was."""
    if moment is None:
        return "—"
    utc = moment.astimezone(timezone.utc)
    return Markup('<time datetime="{}" title="{}">{}</time>').format(
        utc.isoformat(), time_ago(moment), utc.strftime("%Y-%m-%d %H:%M:%S"))


def duration(start, end):
    """Seconds between two times, in words ('1.2 s', '3 min 4 s')."""
    if start is None or end is None:
        return "—"
    seconds = (end - start).total_seconds()
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


def describe_schedule(definition):
    """A definition's schedule in words, or None when it has none (or one written invalid in SQL)."""
    try:
        return Schedule(definition.schedule, definition.timezone).describe()
    except InvalidInput:
        return None


class SessionInterface(SecureCookieSessionInterface):
    """Session cookies marked Secure whenever the request came over HTTPS."""

    def get_cookie_secure(self, app):
        return super().get_cookie_secure(app) or request.is_secure


def _htmx_folder():
    """The static files of the django-js-lib-htmx wheel (plain files; Django is not imported)."""
    spec = importlib.util.find_spec("js_lib_htmx")
    return Path(spec.submodule_search_locations[0]) / "static" / "htmx"


def _error(code, title, message):
    """An error page, or for htmx the error alone, swapped where the answer was expected."""
    response = render("error.html", "partials/_error.html", code=code, title=title, message=message)
    response.status_code = code
    return response


def csrf_failed(exc):
    """A missing or stale CSRF token: 400 with words a person can act on."""
    return _error(400, "This form has expired", f"{exc.description} Reload the page and try again.")


def bad_request(exc):
    """400 pages (bad filter values and the like) say what was wrong, escaped."""
    return _error(400, "Bad request", exc.description)


def bad_filter(exc):
    return _error(400, "Bad filter", f"{exc}.")


def not_found(exc):
    return _error(404, "Not found", exc.description)


def forbidden(exc):
    return _error(403, "Not allowed", exc.description)


def init_app(app):
    hops = app.config["JOBSWEB_PROXY_HOPS"]
    if hops:
        # Behind a PaaS router: the client's address, scheme (https, for Secure cookies) and host
        # come from the X-Forwarded-* headers the last `hops` proxies set, and only from them.
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops, x_host=hops)
    # Lax: the cookie is not sent on cross-site POSTs (CSRF tokens are the other half).
    app.config["SESSION_COOKIE_SAMESITE"] = app.config.get("SESSION_COOKIE_SAMESITE") or "Lax"
    app.config["SESSION_COOKIE_HTTPONLY"] = True
    app.config.setdefault("WTF_CSRF_TIME_LIMIT", None)  # valid for the session, not an hour
    app.session_interface = SessionInterface()
    csrf.init_app(app)
    htmx.init_app(app)
    app.register_blueprint(Blueprint("htmx", __name__, static_folder=_htmx_folder(),
                                     static_url_path="/vendor/htmx"))
    app.register_error_handler(CSRFError, csrf_failed)
    app.register_error_handler(400, bad_request)
    app.register_error_handler(BadFilter, bad_filter)
    app.register_error_handler(403, forbidden)
    app.register_error_handler(404, not_found)
    app.add_template_filter(when)
    app.add_template_filter(time_ago)
    app.add_template_filter(duration)
    app.add_template_filter(seconds_words)
    app.add_template_global(STATUS_WORDS, "STATUS_WORDS")
    app.add_template_global(describe_schedule)

    @app.template_filter("pretty")
    def pretty(value):
        return pretty_json(value, app.config["JOBSWEB_MASK_KEYS"])
