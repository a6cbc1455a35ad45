"""Ping URLs, Healthchecks-style, for scripts jobsweb does not run: `curl <prefix>/ping/<token>`
reports a run of the external definition holding that token (scheduling/reports.py).

GET or POST /ping/<token> records a succeeded run, /start a running one (closed by
the next end ping), /fail a dead one, /<0-255> one ended with that exit code. A POST body is
the attempt's output, cut at BODY_MAX_BYTES. The token is the only credential: no sign-in, no
session, no CSRF token (access.PINGS); answers are short plain text, and an unknown token is a
bare 404 that says nothing of why. While the database is unavailable a ping answers 503
"Not recorded: ..." (curl --retry tries again on a 503), never a 500. Admins give a definition
a new token on its page. HEAD records nothing (405): previewers send it to look at a URL.
"""

import re

from flask import Blueprint, abort, flash, request, url_for
from werkzeug.wsgi import get_input_stream

from . import audit, outage
from ..core.database import db
from ..core.models import JobDefinition
from ..scheduling import definitions, reports
from .access import role_required
from .rendering import redirect_to

bp = Blueprint("pings", __name__)

BODY_MAX_BYTES = 10 * 1024
# Tokens are secrets.token_urlsafe: 32 characters of this alphabet. Anything else is unknown
# without a look-up, and never reaches PostgreSQL (a NUL there is an error, a 500) nor a log
# line (a decoded %0a in it would forge one); longer than 100 characters is unknown too.
TOKEN = re.compile(r"[A-Za-z0-9_-]{1,100}")
METHODS = ["GET", "POST"]
CUT_NOTE = f"\n[cut: the body was over {BODY_MAX_BYTES // 1024} KB]"


def _text(body, status, **headers):
    return body, status, {"Content-Type": "text/plain; charset=utf-8", "Cache-Control": "no-store", **headers}


def _body():
    """The first BODY_MAX_BYTES of a POST body as text (None without one); what follows is never read."""
    if request.method != "POST":
        return None
    # Not request.stream: it refuses (413) a body over MAX_CONTENT_LENGTH, which the standalone
    # app sets and a host may; a ping's is cut instead, and the rest is never read.
    stream, data = get_input_stream(request.environ, max_content_length=None), b""
    while len(data) <= BODY_MAX_BYTES and (chunk := stream.read(BODY_MAX_BYTES + 1 - len(data))):
        data += chunk  # a read may return less than asked (one network read)
    if not data:
        return None
    text = data[:BODY_MAX_BYTES].decode("utf-8", "replace").replace("\x00", "\\x00")
    return text + CUT_NOTE if len(data) > BODY_MAX_BYTES else text


def _report(token, event, code=None):
    # HEAD is never a ping: link previewers and crawlers send it to see what a URL is, and a
    # pasted URL must not report runs (they GET it too, which does count: the README says so).
    if request.method == "HEAD":
        return _text("", 405, Allow=", ".join(METHODS))
    if not TOKEN.fullmatch(token):
        return _text("", 404)
    output = _body()
    try:
        answer = reports.ping(token, event, code, output)
        if answer.status == 200:
            db.session.commit()
            return _text("OK\n", 200)
    except outage.ERRORS as exc:
        # A script's curl should retry (its --retry does on a 503), not read a page of HTML.
        return _text(f"Not recorded: {outage.reason(exc)}. Try again in a moment.\n", 503,
                     **{"Retry-After": str(outage.RETRY_AFTER)})
    db.session.rollback()
    if answer.status == 429:
        return _text("Too many pings: at most about one a second.\n", 429, **{"Retry-After": str(answer.retry_after)})
    return _text("", 404)


@bp.route("/ping/<token>", methods=METHODS)
def ping(token):
    """A run of the token's definition succeeded."""
    return _report(token, "success")


@bp.route("/ping/<token>/start", methods=METHODS)
def ping_start(token):
    """A run of the token's definition started; the next end ping closes it."""
    return _report(token, "start")


@bp.route("/ping/<token>/fail", methods=METHODS)
def ping_fail(token):
    """A run of the token's definition failed."""
    return _report(token, "fail")


@bp.route("/ping/<token>/<int:code>", methods=METHODS)
def ping_code(token, code):
    """A run of the token's definition ended with exit code `code` (0: succeeded)."""
    if code > 255:
        return _text("An exit code is 0 to 255.\n", 400)
    return _report(token, "code", code)


@bp.post("/definitions/<int:definition_id>/ping-token")
@role_required("admin")
def regenerate(definition_id):
    """Give the definition a new ping URL; the old one answers 404 from now on."""
    definition = db.get_or_404(JobDefinition, definition_id, description=f"There is no definition {definition_id}.")
    if not definition.external:
        abort(400, "Only an external definition has a ping URL.")
    definitions.regenerate_token(definition)
    audit.record("regenerate_ping_token", "definition", definition_id)
    db.session.commit()
    flash(f"{definition.name} has a new ping URL; the old one no longer works.")
    return redirect_to(url_for("jobsweb.definitions.detail", definition_id=definition_id))
