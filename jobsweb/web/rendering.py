"""How pages answer: jobsweb's own template environment, the page-or-fragment helper, redirects
after a POST, and the template filters that turn times, durations, schedules and payloads into
words.

The templates render in a Jinja environment of jobsweb's own, not the app's: inside a team's
app, its `base.html`, its filters and its globals stay its own, and jobsweb's never mix in.
"""

import json
import re
import shlex
import sys
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

from flask import current_app, g, get_flashed_messages, make_response, redirect, request, url_for
from flask_wtf.csrf import generate_csrf
from htmx_flask.requests import HtmxHeaders
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape

from ..core.errors import InvalidInput
from ..core.package_files import resource
from ..core.time_words import relative_words, seconds_words
from ..ops.alerts import KIND_LABELS
from ..scheduling.schedule import Schedule
from .charts import bar_marks, hour_chart, run_chart
from .shown_text import MASK, is_secret, shown, without_controls

STATUS_WORDS = {
    "waiting": "Waiting", "queued": "Queued", "running": "Running", "succeeded": "Succeeded", "failed": "Failed, will retry",
    "dead": "Dead", "cancelled": "Cancelled",
}
# A run's Result card without a result: "yet" only while it may still get one.
RESULT_WORDS = {
    "queued": "No result yet.", "running": "No result yet.", "failed": "No result yet: it will be retried.",
    "dead": "No result: the run died without one.", "cancelled": "No result: the run was cancelled.",
    "skipped": "No result: the run was skipped.", "missed": "No result: the run never ran.",
}


def htmx():
    """The htmx headers of the current request (true when htmx sent it).

    Read here rather than through htmx-flask's extension, which replaces the whole app's
    request class."""
    return HtmxHeaders(request.headers)


def render_template(name, **context):
    """One of jobsweb's templates, rendered in its own environment for the current request."""
    return templates().get_template(name).render(viewer=g.get("jobsweb_viewer"), **context)


def render(page, fragment, **context):
    """Render the whole `page`, or only `fragment` for an htmx request.

    The page includes the same fragment, so both answers show the same markup; Vary keeps a
    cache from serving one in place of the other.
    """
    template = fragment if htmx() and not htmx().boosted else page
    response = make_response(render_template(template, **context))
    response.vary.add("HX-Request")
    return response


def external_url(endpoint, **values):
    """An absolute URL of `endpoint` for a person to copy elsewhere (a crontab line): on
    JOBSWEB_BASE_URL when it is set, as notifications' links are (ops/notify.py), never on the
    request's Host header, which the client chooses."""
    base = current_app.config["JOBSWEB_BASE_URL"]
    if not base:
        return url_for(endpoint, _external=True, **values)
    parts = urlsplit(base)
    adapter = current_app.url_map.bind(parts.netloc, script_name=parts.path or "/", url_scheme=parts.scheme)
    return adapter.build(endpoint, values, force_external=True)


def flask_command(args):
    """`flask --app NAME ARGS` to copy, NAME the app serving the page: the module that made it
    (its import name), where `--app` finds the app or its create_app, whether it is the
    standalone app (`jobsweb`) or a team's (`hello`, `myapp`). Not FLASK_APP: `--app` overrides
    it, so the serving process's FLASK_APP may name another app."""
    name = current_app.import_name
    if name == "__main__":  # `python hello.py`: the file that was run is the module
        name = Path(getattr(sys.modules["__main__"], "__file__", None) or name).stem
    return f"flask --app {shlex.quote(name)} {args}"


def redirect_to(url):
    """After a successful POST: a redirect, or for htmx a full page load of `url`.

    (htmx's request would follow a 302 silently and swap the next page into the form.)
    """
    if htmx():
        return "", 204, {"HX-Redirect": url}
    return redirect(url)


def secret_keys(value, words):
    """The masked keys of a payload, at any depth."""
    if isinstance(value, dict):
        return [key for key in value if is_secret(key, words)] + [
            found for item in value.values() for found in secret_keys(item, words)]
    if isinstance(value, list):
        return [found for item in value for found in secret_keys(item, words)]
    return []


def mask_secrets(value, words):
    """A copy of a payload with the values of secret-looking keys replaced, at any depth."""
    if isinstance(value, dict):
        return {key: MASK if is_secret(key, words) else mask_secrets(item, words) for key, item in value.items()}
    if isinstance(value, list):
        return [mask_secrets(item, words) for item in value]
    return value


def restore_secrets(edited, stored, words):
    """The edited payload with each masked value still equal to MASK put back from the stored
    one, so that an edit form showing masked secrets does not overwrite them with the mask."""
    if not isinstance(edited, dict) or not isinstance(stored, dict):
        return edited
    out = {}
    for key, item in edited.items():
        if is_secret(key, words) and item == MASK and key in stored:
            out[key] = stored[key]
        else:
            out[key] = restore_secrets(item, stored.get(key), words)
    return out


def pretty_json(value, words=()):
    """Indented JSON with secrets masked; Jinja escapes it like any other text."""
    return json.dumps(mask_secrets(value, words), indent=2, sort_keys=True, ensure_ascii=False)


PAYLOAD_LINE_CHARS = 120


def payload_line(value):
    """A payload on one line as pretty() shows it (secrets masked, no controls), cut at
    PAYLOAD_LINE_CHARS: a row of the runs list."""
    line = without_controls(json.dumps(mask_secrets(value, current_app.config["JOBSWEB_MASK_KEYS"]),
                                       ensure_ascii=False, separators=(", ", ": ")))
    return line if len(line) <= PAYLOAD_LINE_CHARS else line[:PAYLOAD_LINE_CHARS - 1] + "…"


def masked_detail(detail):
    """An audit entry's detail as pages show it: the values of secret-looking keys masked at
    any depth, and its text as job_text shows text (key=value secrets, URL passwords)."""
    words = current_app.config["JOBSWEB_MASK_KEYS"]

    def mask(value):
        if isinstance(value, dict):
            return {key: MASK if is_secret(key, words) else mask(item) for key, item in value.items()}
        if isinstance(value, list):
            return [mask(item) for item in value]
        return shown(value, words) if isinstance(value, str) else value

    return mask(detail or {})


def detail_value(value):
    """One value of an audit entry's detail in words ("tz Europe/Berlin, status dead or failed")
    rather than Python's repr of the dicts and lists it holds; empty values left out."""
    if isinstance(value, dict):
        return ", ".join(f"{key.replace('_', ' ')} {detail_value(item)}" for key, item in value.items()
                         if item not in (None, "", [], {}))
    if isinstance(value, (list, tuple)):
        return " or ".join(detail_value(item) for item in value)
    return str(value)


def time_ago(moment, now=None):
    """'3 min ago' / 'in 2 h': how far a time is from now, in words (core/time_words.py)."""
    if moment is None:
        return "—"
    now = now or datetime.now(timezone.utc)
    return relative_words((now - moment).total_seconds())


def when(moment, exact=False):
    """A time as a <time> element: its text is UTC to the second, which static/local-times.js
    turns into the viewer's own zone ("3 min ago", the exact local time on hover); without
    JavaScript the UTC text stays, labelled as such. `exact`: the local time is in the text as
    well ("3 min ago · 14:05:09"), for the pages about one thing, where a phone has no hover."""
    if moment is None:
        return "—"
    utc = moment.astimezone(timezone.utc)
    # Joined with escape() rather than Markup.format, whose Formatter took half of this
    # function's time (two calls per row of the runs list).
    return Markup(f'<time datetime="{escape(utc.isoformat())}" data-local{" data-exact" if exact else ""} '
                  f'title="{escape(time_ago(moment))}">{escape(utc.strftime("%Y-%m-%d %H:%M:%S"))} UTC</time>')


UTC_IN_TEXT = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC")


def local_times(text):
    """Text written for notifications, with each "2026-11-25 12:10:00 UTC" in it shown like the
    page's other times (the viewer's zone, how long ago, the exact time)."""
    def one(match):
        moment = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
        return str(when(moment, exact=True))
    return Markup(UTC_IN_TEXT.sub(one, str(escape(text))))


def ago(moment, now=None):
    """A time as a <time> element whose text is how far it is from now ('3 min ago'), with the
    UTC time on hover; static/local-times.js keeps the words fresh and puts the hover in the
    viewer's zone."""
    if moment is None:
        return "—"
    utc = moment.astimezone(timezone.utc)
    return Markup('<time datetime="{}" data-local title="{} UTC">{}</time>').format(
        utc.isoformat(), utc.strftime("%Y-%m-%d %H:%M:%S"), time_ago(moment, now))


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


def pretty(value):
    """A payload as indented JSON with the keys JOBSWEB_MASK_KEYS names masked (and the controls
    json.dumps leaves, C1 and bidirectional overrides, removed)."""
    return without_controls(pretty_json(value, current_app.config["JOBSWEB_MASK_KEYS"]))


def job_text(text):
    """An error, stack trace or output as pages show it (shown_text): secrets masked, no controls."""
    return shown(text, current_app.config["JOBSWEB_MASK_KEYS"])


# The one way a template prints what a job or a person wrote (a payload, result, error, stack,
# output, progress note, audit detail): each masks secrets (shown_text). tests/test_template_masking.py
# reads every template and fails on such a value printed through anything else, or on `tojson`
# and `safe`, which print as they are.
MASKING_FILTERS = ("pretty", "job_text", "payload_line", "masked_detail")


@cache
def templates():
    """jobsweb's Jinja environment: its templates folder, its filters, Flask's request globals."""
    env = Environment(loader=FileSystemLoader(resource("templates")), autoescape=select_autoescape(["html"]))
    env.globals.update(url_for=url_for, external_url=external_url, get_flashed_messages=get_flashed_messages, request=request,
                       csrf_token=generate_csrf, STATUS_WORDS=STATUS_WORDS, RESULT_WORDS=RESULT_WORDS,
                       describe_schedule=describe_schedule, hour_chart=hour_chart, bar_marks=bar_marks,
                       run_chart=run_chart, flask_command=flask_command,
                       utc_now=lambda: datetime.now(timezone.utc))  # whether a time is past yet
    env.filters.update(when=when, time_ago=ago, duration=duration, seconds_words=seconds_words,
                       pretty=pretty, job_text=job_text, payload_line=payload_line, masked_detail=masked_detail,
                       local_times=local_times,
                       detail_value=detail_value, incident_kind=lambda kind: KIND_LABELS.get(kind, kind),
                       shell_quote=shlex.quote)  # shell_quote: copy-ready command lines
    return env
