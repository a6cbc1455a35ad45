"""The runs list's error search: the text it may match (the error masked in SQL) and the search
texts it refuses (those holding what the pages mask). A run is listed only if both its stored
error and that masked error hold the text (web/runlist.py), so the list cannot confirm a masked
secret one character at a time (issue 38)."""

from flask import current_app
from sqlalchemy import func

from ..core.models import JobRun
from .shown_text import MASK, masked, search_masks


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
