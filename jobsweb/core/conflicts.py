"""Conflicts: a transaction PostgreSQL rolled back because another got in its way.

SQLSTATE 40001 (serialization_failure: what every statement risks where a team set
`default_transaction_isolation = serializable`, and what SKIP LOCKED claims meet there often)
and 40P01 (deadlock_detected) say nothing of the database's health: it answered, at once, and
rolled the whole transaction back. The cure is to run that transaction again, now. So they are
not outages: no backoff, no "database unavailable" line, no lease left to run out meanwhile.

`retried` is the one place that runs a transaction again, for the worker's Link
(engine/link.py), the admin screen's requests (web/site.py) and `flask jobs exec`
(ops/command_runs.py). What it is given must be a whole transaction of jobsweb's own SQL, begun
inside it: the failed attempt was rolled back whole, so running it again repeats nothing. A
handler's own work (its effects) is never inside one.

One log line per kind per LOG_EVERY at most: under serializable a busy worker meets several a
second, each harmless once run again.
"""

import logging
import random
import threading
import time

log = logging.getLogger("jobsweb.conflicts")

KINDS = {"40001": "serialization failure", "40P01": "deadlock"}  # SQLSTATE -> what the log calls it
TRIES = 8  # runs of one transaction at most: the first and 7 more
JITTER = 0.005  # seconds; the n-th retry waits a random time up to n times this, so two
# transactions that met do not meet again in the same step
LOG_EVERY = 60.0  # seconds between two log lines of one kind


def _driver_error(exc):
    """The conflict among `exc` and what it wraps (SQLAlchemy's .orig, a __cause__), or None."""
    seen = 0
    while exc is not None and seen < 5:
        if getattr(exc, "sqlstate", None) in KINDS:
            return exc
        exc = getattr(exc, "orig", None) or exc.__cause__
        seen += 1
    return None


def kind(exc):
    """The KINDS key (SQLSTATE) of `exc` if it is a conflict or wraps one, else None."""
    found = _driver_error(exc)
    return None if found is None else found.sqlstate


class _Tally:
    """Conflicts met since the last line of each kind, and when that line was written."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.lock = threading.Lock()
        self.logged_at = {}  # (sqlstate, given up) -> self.clock() of its last line
        self.since = {}  # (sqlstate, given up) -> conflicts met since that line (this one included)

    def note(self, state, exc, given_up=None):
        """Count one conflict; log it if its kind's last line is a minute old. `given_up`: after
        how many runs the transaction was given up (None: it runs again)."""
        now = self.clock()
        key = (state, given_up is not None)  # a transaction given up is its own line: it failed, unlike the others
        with self.lock:
            self.since[key] = self.since.get(key, 0) + 1
            last = self.logged_at.get(key)
            if last is not None and now - last < LOG_EVERY:
                return
            count, self.since[key], self.logged_at[key] = self.since[key], 0, now
        exc = _driver_error(exc) or exc  # the server's words, not a wrapper's
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if given_up is not None:
            log.warning("%s (%s): transaction given up after %d run(s); %d given up in the last %g s at most",
                        KINDS[state], first, given_up, count, LOG_EVERY)
        else:
            log.warning("%s (%s): transaction run again at once; %d conflict(s) of this kind in the last %g s "
                        "at most, each run again", KINDS[state], first, count, LOG_EVERY)


tally = _Tally()


def retried(transaction, undo=None, may_retry=None):
    """transaction() run again at once (after a short random wait) while it meets a conflict,
    TRIES times at most; what it returns. `undo()` is called before each new run (a session's
    rollback); `may_retry()`, if given, may say no (something was committed before: not a whole
    transaction). Any other error, or the last conflict, is raised."""
    for attempt in range(1, TRIES + 1):
        try:
            return transaction()
        except Exception as exc:
            state = kind(exc)
            if state is None:
                raise
            last = attempt == TRIES or (may_retry is not None and not may_retry())
            tally.note(state, exc, given_up=attempt if last else None)
            if last:
                raise
            if undo is not None:
                undo()
            time.sleep(random.uniform(0, JITTER * attempt))
    raise AssertionError("unreachable")
