"""Text that jobs wrote, as the pages show it: errors, stack traces and output (a handler's log
lines, a command's output, a ping's body), with secrets masked and terminal controls removed.

Stored text stays as it came: this is for display. The rule itself is core/masking.py's, the one
every reader of jobsweb's text goes through (docs/MASKING.md); this module is the pages' name for
it, and the runs list's error search's (web/error_search.py), which masks in SQL with the same
steps, so a search matches the text exactly as the page shows it.
"""

from ..core.masking import MASK, is_secret, masked, shown, sql_steps, without_controls

__all__ = ["MASK", "is_secret", "masked", "search_masks", "shown", "without_controls"]


def search_masks(words):
    """[(PostgreSQL regular expression, replacement, flags), ...]: applied in order with
    regexp_replace to an error, they give the text shown() gives, the one the search may match."""
    return sql_steps(words)
