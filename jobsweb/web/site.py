"""The admin screen as one blueprint, `jobsweb`, that an app mounts at any URL prefix.

Every page group is a child blueprint; the CSS and htmx are served under the prefix; error
pages, CSRF checks and the sign-in gate belong to this blueprint only, so a team's own routes,
error pages and request hooks stay as they were.
"""

import functools
import importlib.util
from pathlib import Path

import sqlalchemy as sa
from flask import Blueprint, g, has_request_context, send_from_directory
from flask_wtf.csrf import CSRFError

from . import (
    access,
    audit_pages,
    batch_pages,
    dashboard,
    definition_form,
    definition_pages,
    enqueue_form,
    guards,
    incident_pages,
    metrics_pages,
    outage,
    pings,
    probes,
    queue_pages,
    run_admin_pages,
    run_pages,
    sign_in,
    user_pages,
    worker_pages,
)
from ..core import conflicts
from ..core.database import db
from ..core.package_files import resource
from .rendering import render
from .runlist import BadFilter

PAGES = (probes, sign_in, dashboard, definition_form, definition_pages, enqueue_form, incident_pages, run_pages,
         run_admin_pages, user_pages, worker_pages, queue_pages, metrics_pages, audit_pages, pings, batch_pages)


def _htmx_folder():
    """The static files of the django-js-lib-htmx wheel (plain files; Django is not imported)."""
    spec = importlib.util.find_spec("js_lib_htmx")
    return Path(spec.submodule_search_locations[0]) / "static" / "htmx"


admin = Blueprint("jobsweb", __name__, static_folder=str(resource("static")), static_url_path="/static")
admin.register_blueprint(Blueprint("htmx", __name__, static_folder=_htmx_folder(), static_url_path="/vendor/htmx"))
for page in PAGES:
    admin.register_blueprint(page.bp)


@admin.get("/favicon.ico")
def favicon():
    """The icon browsers ask for at /favicon.ico (pages link favicon.svg; this keeps the log free
    of a 404 on every first visit)."""
    return send_from_directory(resource("static"), "favicon.ico", mimetype="image/vnd.microsoft.icon",
                               max_age=86400)


admin.before_request(guards.require_database)  # first: every other hook may read the database
admin.before_request(outage.bound_waits)  # before any hook that reads the database
admin.teardown_request(outage.end_bounds)
admin.before_request(guards.limit_request)  # first to read: nothing may parse a body over the limit
admin.before_request(guards.check_utf8)  # before the form is read (check_csrf reads it)
admin.before_request(access.check_csrf)
admin.before_request(guards.check_query_and_ids)
admin.before_request(access.require_sign_in)
admin.after_request(guards.add_headers)


def error_page(code, title, message):
    """An error page, or for htmx the error alone, swapped where the answer was expected."""
    response = render("error.html", "partials/_error.html", code=code, title=title, message=message)
    response.status_code = code
    return response


def database_unavailable(exc):
    """The database is down, out of connection slots or silent: a short 503, never a stack
    trace; the next request tries again. A conflict that came back at every run (logged by
    core/conflicts.py) is not an outage and does not say so."""
    if conflicts.kind(exc):
        return outage.conflicted(exc)
    if outage.stopped(exc):  # the database answered: it stopped a read at guards.PAGE_LIMIT_MS
        db.session.rollback()
        outage.log.warning("a page read took longer than %d ms: the database stopped it", guards.PAGE_LIMIT_MS)
        response = error_page(503, "Took too long", guards.too_long())
        response.headers["Retry-After"] = str(outage.RETRY_AFTER)
        return response
    response = error_page(503, "Database unavailable", outage.explain(exc))
    response.headers["Retry-After"] = str(outage.RETRY_AFTER)
    return response


for _error in outage.ERRORS + (conflicts.Conflict,):
    admin.register_error_handler(_error, database_unavailable)


@admin.errorhandler(CSRFError)
def csrf_failed(exc):
    """A missing or stale CSRF token: 400 with words a person can act on."""
    return error_page(400, "This form has expired", f"{exc.description} Reload the page and try again.")


@admin.errorhandler(400)
def bad_request(exc):
    """400 pages (bad filter values and the like) say what was wrong, escaped."""
    return error_page(400, "Bad request", exc.description)


@admin.errorhandler(BadFilter)
def bad_filter(exc):
    return error_page(400, "Bad filter", f"{exc}.")


@admin.errorhandler(413)
def too_large(exc):
    return error_page(413, "Request too large", exc.description)


@admin.errorhandler(401)
def not_signed_in(exc):
    return error_page(401, "Not signed in", exc.description)


@admin.errorhandler(403)
def forbidden(exc):
    return error_page(403, "Not allowed", exc.description)


@admin.errorhandler(404)
def not_found(exc):
    return error_page(404, "Not found", exc.description)


def _committed(session):
    """After any commit in a request: it is no longer one whole transaction (see _run_again)."""
    if has_request_context():
        g.jobsweb_committed = True


def _run_again(view):
    """`view` run again when the database rolled its transaction back for a conflict
    (core/conflicts.py), for conflicts.INTERACTIVE seconds, as long as nothing of the request was
    committed before: then it was rolled back whole and the view, jobsweb's own code, repeats
    nothing. A view that commits several transactions (a bulk action's batches) retries each
    batch itself."""
    @functools.wraps(view)
    def run(*args, **kwargs):
        return conflicts.retried(lambda: view(*args, **kwargs), undo=db.session.rollback,
                                 may_retry=lambda: not g.get("jobsweb_committed"), patience=conflicts.INTERACTIVE)

    return run


def init_app(app, url_prefix, authorize=None):
    """Mount the admin screen on `app` at `url_prefix`; `authorize` is the host's sign-in (see
    access.py), None for jobsweb's own users."""
    app.extensions["jobsweb_access"] = access.Access(authorize, app.config["JOBSWEB_LOGIN_URL"])
    app.register_blueprint(admin, url_prefix=url_prefix or None)
    for endpoint, view in app.view_functions.items():
        if endpoint.startswith(f"{admin.name}."):
            app.view_functions[endpoint] = _run_again(view)
    with app.app_context():
        if not sa.event.contains(db.session, "after_commit", _committed):
            sa.event.listen(db.session, "after_commit", _committed)
        if not sa.event.contains(db.session, "after_begin", guards.limit_statements):
            sa.event.listen(db.session, "after_begin", guards.limit_statements)
