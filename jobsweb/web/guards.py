"""Limits and headers for every request to jobsweb's blueprint (never the host app's routes):
request size, UTF-8 text without control characters in query strings and forms, ids that fit a
bigint, and the security headers of each answer."""

import re
from urllib.parse import parse_qsl

from flask import abort, current_app, g, has_request_context, request
from werkzeug.wsgi import LimitedStream

from ..core.database import require_postgresql
from ..core.errors import BIGINT_MAX, ConfigError, InvalidInput, clean_text
from .access import PINGS, local_endpoint
from .outage import ROUND_TRIP_LIMIT

# No inline script or style anywhere (confirm.js replaces onclick); nothing may frame the screen.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
NOT_UTF8 = re.compile("[\udc80-\udcff]")  # parse_qsl's surrogateescape of a byte no UTF-8 text holds
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def require_database():
    """before_request, first: jobsweb's pages on a database other than PostgreSQL answer one plain
    500 naming the setting (logged once per request), instead of an error from deeper down."""
    try:
        require_postgresql()
    except ConfigError as exc:
        current_app.logger.error("%s", exc)
        return str(exc), 500, {"Content-Type": "text/plain; charset=utf-8"}


def limit_request():
    """before_request, first: refuse a body over JOBSWEB_MAX_REQUEST_BYTES before anything parses
    it (a 50 MB anonymous POST was parsed before the CSRF check refused it), and cap what the
    form parser reads when no length was sent. A ping reads only the start of its body and cuts
    the rest (a script piping a long log must still be recorded): it is left to do so.

    The cap wraps the request's input rather than setting request.max_content_length, which has
    no setter before Werkzeug 3.1 (on Flask 3.0 every page was a 500); nothing has read the body
    yet, and the host's MAX_CONTENT_LENGTH for its own routes is left as it is."""
    if local_endpoint() in PINGS:
        return
    limit = current_app.config["JOBSWEB_MAX_REQUEST_BYTES"]
    if request.content_length is not None and request.content_length > limit:
        abort(413, f"The request is over the limit of {limit} bytes.")
    request.environ["wsgi.input"] = LimitedStream(request.environ["wsgi.input"], limit, is_max=True)
    request.max_form_memory_size = limit


def check_utf8():
    """before_request, after limit_request and before anything reads the form: the query string
    and a form's body are UTF-8. Werkzeug reads other bytes as U+FFFD, so `caf%E9` and `caf%E8`
    were one idempotency key; a 400 naming the field instead. A ping's body is its own to read."""
    sources = [request.environ.get("QUERY_STRING", "")]
    if request.mimetype == "application/x-www-form-urlencoded" and local_endpoint() not in PINGS:
        sources.append(request.get_data(cache=True).decode("latin-1"))  # the form is parsed from this copy
    for source in sources:
        for name, value in parse_qsl(source, keep_blank_values=True, errors="surrogateescape"):
            if NOT_UTF8.search(name + value):
                field = NOT_UTF8.sub("\ufffd", name)
                abort(400, f"{field}: is not UTF-8 text (percent-encoded bytes that no text encodes).")


def check_query_and_ids():
    """before_request: query-string text has no control characters, and every id in the URL fits
    a bigint (a larger one made PostgreSQL raise, a 500): a 400 or 404 naming the field."""
    for name, value in request.args.items(multi=True):
        try:
            clean_text(name, name)
            clean_text(name, value)
        except InvalidInput as exc:
            abort(400, f"Bad query string: {exc}.")
    for name, value in (request.view_args or {}).items():
        if isinstance(value, int) and value > BIGINT_MAX:
            abort(404, f"There is no {name.removesuffix('_id')} {value}.")


def add_headers(response):
    """after_request: the security headers, on every answer of the blueprint."""
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    return response


# Every statement of a page is stopped by the server a little before the client gives up on it
# (outage.ROUND_TRIP_LIMIT): a page read cut on the client only went on on the server, a
# status count at 1.3M runs ~25 s a view, and 8 viewers' loops piled up 26 such backends (issue
# 53). Actions and searches set their own limit later in their transaction (SET LOCAL wins).
PAGE_LIMIT_MS = round((ROUND_TRIP_LIMIT - 0.5) * 1000)
LIMIT_PAGE = "SELECT set_config('statement_timeout', %s, true)"


def limit_statements(session, transaction, connection):
    """after_begin of the session: each transaction begun in a request of the blueprint (which
    outage.bound_waits marks) is bounded on the server to PAGE_LIMIT_MS a statement; a host's own
    routes and a worker's transactions are left as they are."""
    if has_request_context() and g.get("jobsweb_bounds") is not None:
        connection.exec_driver_sql(LIMIT_PAGE, (str(PAGE_LIMIT_MS),))


def too_long():
    """The 503 page's words for a page read the server stopped at PAGE_LIMIT_MS."""
    return (f"Reading this page took longer than {PAGE_LIMIT_MS / 1000:g} s, and the database stopped it. Narrow "
            "it (tick a status, pick a job type or a time range) or try again in a moment.")
