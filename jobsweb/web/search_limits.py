"""What one search may cost the database (an error text search, and a queue, priority or worker
filter, which no index serves: runlist.RunFilter.reads_many): the newest SEARCH_WINDOW errors, each masked,
whatever it matches; one at a time per person, a few at a time in all, each stopped by the server
past SEARCH_LIMIT_MS.

A search for text no error holds reads every errored run (1-2 s at 300,000 of them): eight
loops of one viewer kept both cores of a small server busy, and /healthz took 3 s (issue 38).
Here each person holds one search at a time and the site SEARCH_SLOTS, through transaction-level
advisory locks (across every web process and thread; released when the request's transaction
ends, however it ends); a search past its limit is cancelled on the server (statement_timeout),
not only given up by the client, whose 5 s round-trip bound would leave it running there.
"""

from werkzeug.exceptions import HTTPException

from . import outage
from ..core.database import db, execute
from .access import viewer
from .rendering import render

# Errors one search reads and masks, every time (error_search.matching): its cost, the same for
# a text that matches no run and one whose stored error thousands hold. 10,000 masked in 0.4-0.7 s
# here (2 cores, loaded), well under SEARCH_LIMIT_MS; older errors are reached with `until`.
SEARCH_WINDOW = 10_000
# Payloads one search for words within their values reads and masks (in Python, as the pages
# mask them, so each is sent to the web process): fewer than errors, masked in the database.
PAYLOAD_WINDOW = 5_000
SEARCH_LIMIT_MS = 3000  # below the request's 5 s round-trip bound (outage.ROUND_TRIP_LIMIT)
SEARCH_SLOTS = 3  # searches at once, all people together: at most this many backends busy on them
RETRY_AFTER = 3  # seconds

# Two-key advisory locks: a key space of their own, apart from the one-key locks of alerts,
# throttle and sync. The first key says what is locked, the second whose search or which slot.
PERSON_LOCKS, SLOT_LOCKS = 0x6A777331, 0x6A777332  # 'jws1', 'jws2'
# The person's lock, then any free slot (EXISTS stops at the first taken). Both are held to the
# transaction's end: the page's statements and its counts all run in it.
TAKE_SEARCH = """
SELECT pg_try_advisory_xact_lock(%(people)s, hashtext(%(who)s))
   AND EXISTS (SELECT FROM generate_series(1, %(slots)s) AS slot WHERE pg_try_advisory_xact_lock(%(slot_locks)s, slot))
"""
LIMIT_SEARCH = "SET LOCAL statement_timeout = %d" % SEARCH_LIMIT_MS


class SearchRefused(HTTPException):
    """A search not run (429: one of yours or SEARCH_SLOTS are running) or stopped (503: past
    SEARCH_LIMIT_MS): the error page saying which and what to do, with Retry-After."""

    def __init__(self, code, title, message):
        super().__init__(message)
        self.code, self.title = code, title

    def get_response(self, environ=None, scope=None):
        db.session.rollback()
        response = render("error.html", "partials/_error.html", code=self.code, title=self.title,
                          message=self.description)
        response.status_code = self.code
        response.headers["Retry-After"] = str(RETRY_AFTER)
        return response


def begin():
    """Before the statements of an error search: take its locks and bound it, or SearchRefused."""
    who = viewer().identity if viewer() else ""  # pages need a viewer: "" is for a host's own use
    taken = execute(TAKE_SEARCH, {"people": PERSON_LOCKS, "who": who, "slots": SEARCH_SLOTS,
                                  "slot_locks": SLOT_LOCKS}).scalar()
    if not taken:
        raise SearchRefused(429, "Search busy", "Another search that reads many runs (an error text, or a queue, "
                            "priority or worker filter) is running, yours or others' (at most one each, "
                            f"{SEARCH_SLOTS} in all). Try again in a moment.")
    execute(LIMIT_SEARCH)


def stopped(exc):
    """SearchRefused for a search the server cancelled past SEARCH_LIMIT_MS, else None."""
    if not outage.stopped(exc):
        return None
    outage.log.warning("a search took longer than %d ms: the database stopped it", SEARCH_LIMIT_MS)
    return SearchRefused(503, "Search took too long",
                         f"Searching the runs took longer than {SEARCH_LIMIT_MS / 1000:g} s, and the database "
                         "stopped it. Narrow it: tick a status, pick a job type or a definition, or set a time "
                         "range, so that fewer runs are read.")
