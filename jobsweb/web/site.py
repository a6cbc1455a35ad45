"""The admin screen's app-wide plumbing: extensions, session cookies, error pages, the htmx
files, template filters and every page's blueprint."""

import importlib.util
from pathlib import Path

from flask import Blueprint, request
from flask.sessions import SecureCookieSessionInterface
from flask_wtf.csrf import CSRFError, CSRFProtect
from htmx_flask import Htmx
from werkzeug.middleware.proxy_fix import ProxyFix

from . import (access, dashboard, definition_form, definition_pages, enqueue_form, incident_pages, probes, queue_pages,
               run_pages, sign_in, user_pages, worker_pages)
from .rendering import STATUS_WORDS, describe_schedule, duration, pretty_json, render, seconds_words, time_ago, when
from .runlist import BadFilter

csrf = CSRFProtect()
htmx = Htmx()
PAGES = (probes, sign_in, dashboard, definition_form, definition_pages, enqueue_form, incident_pages, run_pages,
         user_pages, worker_pages, queue_pages)


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
    """Everything the admin screen needs on `app`, its pages included."""
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

    access.init_app(app)
    for page in PAGES:
        app.register_blueprint(page.bp)
