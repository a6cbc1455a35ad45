"""Conflicts: a transaction PostgreSQL rolled back because another got in its way.

SQLSTATE 40001 (serialization_failure: what every statement risks where a team set
`default_transaction_isolation = serializable`, and what SKIP LOCKED claims meet there often)
and 40P01 (deadlock_detected) say nothing of the database's health: it answered, at once, and
rolled the whole transaction back. The cure is to run that transaction again. So they are
not outages: no "database unavailable" line, no lease left to run out meanwhile.

`retried` is the one place that runs a transaction again, for the worker's Link
(engine/link.py), the admin screen's requests (web/site.py), `flask jobs exec`
(ops/command_runs.py), `flask jobs runs cancel/retry` and jobsweb.cancel/retry. What it is given
must be a whole transaction of jobsweb's own SQL, begun inside it: the failed attempt was rolled
back whole, so running it again repeats nothing. A handler's own work (its effects) is never
inside one.

Two policies. The worker's (the default): TRIES quick runs, then the error, which its Link turns
into Conflicted and the worker takes back at its next trip; its loop must not sleep here. An
operator's (`patience=INTERACTIVE`: the CLI, the admin screen, jobsweb.cancel/retry): runs again
with a growing, jittered wait for a few seconds, then Conflict, whose words say to try again,
never that the database is unreachable.

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

# Seconds an operator's action keeps running its transaction again. A bulk cancel of 40 runs
# during a drain under serializable meets each of three workers' claims and finishes, which
# commit every few milliseconds: 8 quick tries (0.14 s at most) gave up on 3 of 12 CLI actions
# and 7 of 12 of the screen's (issue 51). Backing off gives the workers' trips room to commit
# between two runs; 5 s covers a busy drain's worst stretches, and stays well inside what a
# person at a prompt waits and a web request may take (web/outage.py: 15 s per round trip).
INTERACTIVE = 5.0
BACKOFF_FIRST = 0.01  # seconds: the first wait's ceiling; each next one doubles it...
BACKOFF_CAP = 0.5  # seconds: ...up to this. Each wait is between half its ceiling and all of it
# (random: two actions that met do not meet again at the same step).
GAVE_UP = "conflict with concurrent work, try again"  # what every entry point says once it gives up

# A test's fake time aside, time.monotonic and time.sleep (read at each call).
clock = time.monotonic
sleep = time.sleep


class Conflict(Exception):
    """A transaction met a conflict at every run for `patience` seconds: given up, nothing of it
    changed. Its words begin with GAVE_UP; `runs` and `seconds` say how hard it was tried. Never
    run again by an enclosing retried(): its own patience is spent."""

    def __init__(self, state, exc, runs, seconds):
        self.sqlstate_met, self.runs, self.seconds = state, runs, seconds
        super().__init__(f"{GAVE_UP} ({KINDS[state]} at every run: {runs} over {seconds:.1f} s; "
                         f"{first_line(exc)})")


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

    def note(self, state, exc, given_up=None, again="at once"):
        """Count one conflict; log it if its kind's last line is a minute old. `given_up`: after
        how many runs the transaction was given up (None: it runs again, `again`)."""
        now = self.clock()
        key = (state, given_up is not None)  # a transaction given up is its own line: it failed, unlike the others
        with self.lock:
            self.since[key] = self.since.get(key, 0) + 1
            last = self.logged_at.get(key)
            if last is not None and now - last < LOG_EVERY:
                return
            count, self.since[key], self.logged_at[key] = self.since[key], 0, now
        first = first_line(exc)
        if given_up is not None:
            log.warning("%s (%s): transaction given up after %d run(s); %d given up in the last %g s at most",
                        KINDS[state], first, given_up, count, LOG_EVERY)
        else:
            log.warning("%s (%s): transaction run again %s; %d conflict(s) of this kind in the last %g s "
                        "at most, each run again", KINDS[state], first, again, count, LOG_EVERY)


tally = _Tally()


def first_line(exc):
    """The server's words (not a wrapper's), first line."""
    exc = _driver_error(exc) or exc
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _wait(attempt):
    """The wait after the `attempt`-th run of a patient retried()."""
    ceiling = min(BACKOFF_CAP, BACKOFF_FIRST * 2 ** (attempt - 1))
    return random.uniform(ceiling / 2, ceiling)


def retried(transaction, undo=None, may_retry=None, patience=None):
    """transaction() run again while it meets a conflict; what it returns. `undo()` is called
    before each new run (a session's rollback); `may_retry()`, if given, may say no (something
    was committed before: not a whole transaction). Any other error is raised.

    Without `patience` (the worker's policy): again at once, after a wait of a few ms, TRIES
    runs at most; the last conflict is raised. With `patience` seconds (INTERACTIVE): again
    after a growing, jittered wait (_wait) while the patience lasts, the last run at its end;
    then Conflict."""
    started = clock()
    attempt = 0
    while True:
        attempt += 1
        try:
            return transaction()
        except Exception as exc:
            state = kind(exc)
            if state is None or isinstance(exc, Conflict):
                raise
            if patience is None:
                wait = random.uniform(0, JITTER * attempt)
                last = attempt == TRIES
            else:
                wait = min(_wait(attempt), max(0.0, started + patience - clock()))
                last = wait <= 0
            last = last or (may_retry is not None and not may_retry())
            tally.note(state, exc, given_up=attempt if last else None,
                       again="at once" if patience is None else "after a short wait")
            if last and patience is not None:
                raise Conflict(state, exc, attempt, clock() - started) from exc
            if last:
                raise
            if undo is not None:
                undo()
            sleep(wait)
