"""The runs list's filter values as read from a query string or a POSTed form: each checked, and
refused with BadFilter (a 400 naming the field) when it cannot be used. Also the audit and
metrics pages' text filters."""

from datetime import datetime

from flask import current_app

from ..core.errors import InvalidInput, clean_text, whole_number
from ..engine.enqueue.enqueuing import parse_payload
from . import error_search
from .local_time import read_local
from .rendering import secret_keys
from .shown_text import MASK

TEXT_MAX_CHARS = 200


class BadFilter(ValueError):
    """A filter value that cannot be used; the message says which and why (shown as a 400)."""


def text_filter(args, name, words=None, max_chars=TEXT_MAX_CHARS):
    """A text filter (also the POSTed filter of a bulk action, and the audit page's): at most
    max_chars, no control character; BadFilter naming it (`words`, or its name) otherwise."""
    value = args.get(name, "").strip()
    if len(value) > max_chars:
        raise BadFilter(f"{words or name} is longer than {max_chars} characters")
    try:
        return clean_text(name, value)
    except InvalidInput as exc:
        raise BadFilter(str(exc)) from None


def error_text(args):
    """The error text to search for; BadFilter when error_search refuses it."""
    text = text_filter(args, "q", "the error text to search for")
    if text and (why := error_search.refusal(text)):
        raise BadFilter(why)
    return text


def payload_filter(args):
    """The payload filter: a JSON object the run's payload must contain, e.g. {"invoice_id": 812}
    (a dict), or words to find within its values as the pages show them, e.g. acme (a str: see
    error_search.matching); None when empty (every payload contains the empty object, so it
    would filter nothing)."""
    raw = text_filter(args, "payload", "the payload filter")
    if not raw:
        return None
    if not raw.startswith(("{", "[")):
        if MASK[0] in raw:
            raise BadFilter(f"payload filter: the words to find hold the mask ({MASK}): search for the words "
                            "around it")
        return raw
    try:
        # The payload's own rules (finite numbers, no NUL, depth): what no payload can hold,
        # jsonb would refuse with an error (a 500), and could never match anyway.
        value = parse_payload(raw, TEXT_MAX_CHARS * 6)
    except InvalidInput as exc:
        raise BadFilter(f"payload filter: {exc.message}; write a JSON object such as "
                        '{"invoice_id": 812}') from None
    # A masked value is shown to nobody, so nobody may search by it: the list would confirm a
    # guessed password by showing the run.
    hidden = secret_keys(value, current_app.config["JOBSWEB_MASK_KEYS"])
    if hidden:
        raise BadFilter(f"payload filter: {hidden[0]!r} is a masked key (JOBSWEB_MASK_KEYS), so its value "
                        "cannot be searched for")
    return value or None


def optional(args, name, check):
    """A query-string value through `check`, None when empty; BadFilter saying why it is refused."""
    raw = args.get(name, "").strip()
    if not raw:
        return None
    try:
        return check(raw)
    except InvalidInput as exc:
        raise BadFilter(str(exc)) from None


def sort_arg(args):
    sort = args.get("sort", "").strip()
    if sort not in ("", "finished"):
        raise BadFilter(f"sort {sort[:40]!r} is not 'finished' (by finish time) or empty (newest first)")
    return sort


def finished_cursor(args):
    """The finish time of a page's last run (`finished_before`), for the next page sorted by
    finish time; None when not given; BadFilter when not an ISO time with its offset."""
    raw = args.get("finished_before", "").strip()
    if not raw:
        return None
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise BadFilter(f"finished_before must be an ISO time with its offset, got {raw[:40]!r}")
    return moment


def number(args, name):
    """A positive whole number from the query string (a run or definition id, a page cursor)."""
    return optional(args, name, lambda raw: whole_number(name, raw))


def time_arg(args, name, zone):
    """A date-time from a datetime-local input (read in the viewer's `zone`) or ISO 8601 with an
    offset; BadFilter naming it otherwise."""
    raw = args.get(name, "").strip()
    if not raw:
        return None
    try:
        return read_local(name, raw, zone)
    except InvalidInput as exc:
        raise BadFilter(str(exc)) from None


def time_range(args, zone):
    """(since, until) from the query string; BadFilter when since is not before until."""
    since, until = time_arg(args, "since", zone), time_arg(args, "until", zone)
    if since and until and since >= until:
        # Refused, not read: no index serves an empty range, and the planner, expecting a few
        # runs, walked the whole table in id order to fill the page (issue 53, L1).
        raise BadFilter(f"since ({args.get('since', '').strip()[:40]}) is not before until "
                        f"({args.get('until', '').strip()[:40]}): no run was created in that range")
    return since, until
