"""The runs list's error search: the text it may match (the error masked in SQL) and the search
texts it refuses (those holding what the pages mask), and the runs a search lists (`matching`):
a run is listed only if its masked error holds the text, so the list cannot confirm a masked
secret one character at a time (issue 38), and every search reads and masks the same runs, so
its cost cannot either (issue 53)."""

import json

from flask import current_app
from sqlalchemy import cast, func, select
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql.util import ClauseAdapter

from ..core.database import db
from ..core.models import JobRun
from .rendering import mask_secrets
from .search_limits import PAYLOAD_WINDOW, SEARCH_WINDOW
from .shown_text import MASK, masked, search_masks, without_controls


def searchable_error():
    """The run's error as the search may read it: masked in SQL by shown_text.search_masks, which
    hide at least what the pages hide. Masked in the statement, not in a stored copy: the mask
    words are a setting, which a stored copy would freeze, and only runs whose stored error
    already holds the text are masked (a few), not every errored run."""
    text = JobRun.last_error
    for pattern, replacement, flags in search_masks(current_app.config["JOBSWEB_MASK_KEYS"]):
        text = func.regexp_replace(text, pattern, replacement, flags)
    return text


def refusal(text):
    """Why the runs list may not search for `text` (None: it may): it holds the mask, or a value
    the pages mask (key=value, a URL's password), which the list would otherwise confirm by
    showing the run."""
    if MASK[0] in text:
        return f"the error text to search for holds the mask ({MASK}): search for the words around it"
    if masked(text, current_app.config["JOBSWEB_MASK_KEYS"]) != text:
        return ("the error text to search for holds a masked value (key=value, a URL's password): "
                "search for the words around it")
    return None


def matching(where, text="", words=""):
    """[(id, status), ...] of the runs a search lists, newest first: of the newest SEARCH_WINDOW
    runs matching `where` that have an error (for `text`) and a payload (for `words`), those
    whose masked error holds `text` and one of whose payload values, as the pages show them
    (secret keys' values masked), holds `words`.

    Every error of the window is masked and matched, whatever the text: a search's cost is the
    window's, never the number of runs whose stored error holds the text. Matching the stored
    error first (cheap) and masking only those was an oracle by time: with 50,000 runs sharing a
    secret, a right guess masked 50,000 errors and answered 503 in 3 s, a wrong one 200 in 0.1-0.4
    s, and a viewer read the secret in 187 requests (issue 53, M2). Likewise every payload of the
    window is read and masked in Python (rendering.mask_secrets, the pages' own masking), never
    only those whose stored payload holds the words."""
    return [(row.id, row.status) for row in db.session.execute(matching_statement(where, text, words))
            if not words or _holds(row.payload, words)]


def matching_statement(where, text, words=""):
    """The statement of `matching`: the window, with its errors matched in SQL."""
    window = select(JobRun.id, JobRun.status, JobRun.last_error, JobRun.payload).where(*where)
    if text:  # through index job_runs_errored
        window = window.where(JobRun.last_error.isnot(None))
    if words:
        window = window.where(JobRun.payload != cast({}, JSONB))
    window = window.order_by(JobRun.id.desc()).limit(PAYLOAD_WINDOW if words else SEARCH_WINDOW).subquery("window")
    statement = select(window.c.id, window.c.status, *([window.c.payload] if words else [])).order_by(window.c.id.desc())
    if text:
        # The LIMIT keeps the match out of the window's scan: PostgreSQL masks each of its rows.
        statement = statement.where(ClauseAdapter(window).traverse(searchable_error()).icontains(text, autoescape=True))
    return statement


def _holds(payload, words):
    """Whether one of the payload's values, as the pages show it, holds `words` (any case)."""
    wanted = words.casefold()
    return any(wanted in without_controls(value).casefold()
               for value in _values(mask_secrets(payload, current_app.config["JOBSWEB_MASK_KEYS"])))


def _values(value):
    if isinstance(value, dict):
        return [found for item in value.values() for found in _values(item)]
    if isinstance(value, list):
        return [found for item in value for found in _values(item)]
    return [value if isinstance(value, str) else json.dumps(value)]
