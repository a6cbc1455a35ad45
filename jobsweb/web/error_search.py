"""The runs list's error search: the text it may match (the error masked in SQL) and the search
texts it refuses (those holding what the pages mask), and the runs a search lists (`matching`):
a run is listed only if its masked error holds the text, so the list cannot confirm a masked
secret one character at a time (issue 38), and every search reads and masks the same runs, so
its cost cannot either (issue 53)."""

import json

from flask import current_app
from sqlalchemy import case, cast, func, select
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql.util import ClauseAdapter

from ..core.database import db
from ..core.masking import CONTROL_STEPS, words_pattern
from ..core.models import JobRun
from .rendering import mask_secrets
from .search_limits import PAYLOAD_WINDOW, SEARCH_WINDOW
from .shown_text import MASK, masked, search_masks, without_controls


def searchable_error():
    """The run's error as the search may read it: masked in SQL by shown_text.search_masks, which
    hide at least what the pages hide. Masked in the statement, not in a stored copy: the mask
    words are a setting, which a stored copy would freeze.

    Each group of steps is skipped where it cannot change the error (skipped_unless): the steps
    are regexp_replace passes over the whole text, ten of them, and most errors hold neither a
    control character nor a mask word nor a URL. Which errors skip depends on the stored errors
    alone, never on the text searched for, so a search's cost still tells nothing of what it
    matches (issue 53, M2). At 10,000,000 runs, 4 in 10 errors holding a token=, the statement
    masking the window's 10,000 errors went from 465 to 227 ms (median of 12; 264 to 154 fastest)
    on a loaded machine: key=value's pass alone was a third of it (issue 55, item 3)."""
    words = tuple(current_app.config["JOBSWEB_MASK_KEYS"] or ())
    steps = search_masks(words)
    controls = {pattern for pattern, _ in CONTROL_STEPS}
    text = skipped_unless(JobRun.last_error, [step for step in steps if step[0] in controls], [])
    return skipped_unless(text, [step for step in steps if step[0] not in controls], [words_pattern(words)])


def skipped_unless(text, steps, needed):
    """`text` through `steps` (regexp_replace, in order) where one of them can match it, else as it
    is. Whether one can is one regular expression: the patterns `needed` (each step whose pattern
    holds one of them matches only where it does: a mask word) and the other steps' own patterns.
    Sound whatever the steps are: where no step matches the text, each leaves it as it is, so the
    next sees the same text and matches nowhere either."""
    needed = [pattern for pattern in needed if pattern]
    test = [f"(?:{pattern})" for pattern in needed]
    test += [f"(?:{pattern})" for pattern, _, _ in steps if not any(n in pattern for n in needed)]
    if not steps:
        return text
    replaced = text
    for pattern, replacement, flags in steps:
        replaced = func.regexp_replace(replaced, pattern, replacement, flags)
    return case((text.regexp_match("|".join(test)), replaced), else_=text)


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
