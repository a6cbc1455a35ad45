"""How a worker backs off in an outage: one step at a time, one log line each, and one line once
the database has answered again.

The backoff doubles while the worker runs (0.5 s up to 30 s), so that a long outage costs a
connect attempt now and then. A stopping worker has a deadline instead (engine/worker/stop.py): its
steps go back to the first one, and none ends past the deadline, so a database that comes back
inside the stop window is reached within half a second and gets the last outcomes. With the
doubling kept, a server back 6.8 s after SIGTERM was not tried again before the stop gave up.
"""

import logging
import time

from ..link import Conflicted, SchemaIncomplete

log = logging.getLogger("jobsweb.worker")

RECONNECT_FIRST_DELAY = 0.5  # seconds; doubled after each failed reconnect
RECONNECT_MAX_DELAY = 30.0  # seconds


class Outages:
    """A worker's outage state: the next backoff step, when the outage began, and whether a claim
    may have committed unseen. `stop` (engine/worker/stop.py) bounds every step; `links` are the
    connections whose answers end an outage; `clock` is time.monotonic (a test's fake one aside)."""

    def __init__(self, stop, links, clock=time.monotonic):
        self.stop = stop
        self.links = links
        self.clock = clock
        self.delay = RECONNECT_FIRST_DELAY  # seconds: the next step, while not stopping
        self.since = None  # clock() of the first failure of the outage under way
        self.in_doubt = False  # the connection broke: a claim may have committed unseen
        self.said_stopping = False  # the stopping steps' line was logged
        # A schema outage (engine/link.py SchemaIncomplete): the database answers every other
        # statement, so an answer does not end it; it keeps its own doubling and its one line.
        self.schema_delay = RECONNECT_FIRST_DELAY
        self.schema_said = None  # the text of the schema error last logged
        self.schema_failed_at = None  # clock() of the last one

    def step(self, exc, until=None):
        """One backoff step after `exc`: clock() when it ends (by `until` at the latest, and never
        past the stop's deadline), or None when the database answered (a conflict rolled the
        transaction back whole: logged by core/conflicts.py; no outage, no backoff, no claim in
        doubt, the outcomes are sent again)."""
        if isinstance(exc, Conflicted):
            return None
        now = self.clock()
        self.in_doubt = True
        delay = self._schema_delay(exc, now) if isinstance(exc, SchemaIncomplete) else self._outage_delay(exc, now)
        end = self.stop.bound(now + delay)
        return end if until is None else min(end, until)

    def _outage_delay(self, exc, now):
        """The next step of an outage, in seconds: the first one again once stopping."""
        if self.since is None:
            self.since = now
        if self.stop.requested():
            if not self.said_stopping:
                self.said_stopping = True
                log.warning("database unavailable (%s); stopping: trying again every %.1fs until the stop deadline",
                            exc, RECONNECT_FIRST_DELAY)
            return RECONNECT_FIRST_DELAY
        delay = self.delay
        self.delay = min(self.delay * 2, RECONNECT_MAX_DELAY)
        log.warning("database unavailable (%s); trying again in %.1fs", exc, delay)
        return delay

    def _schema_delay(self, exc, now):
        """The next step after a statement met a function or table the schema lacks: one line per
        error (each step logged one, with "available again" between them, as the heartbeat
        answered: four lines a second until `flask jobs migrate`), and steps doubling up to the cap."""
        self.schema_failed_at = now
        if str(exc) != self.schema_said:
            self.schema_said = str(exc)
            log.warning("%s; trying again with a growing pause, up to %.0fs", exc, RECONNECT_MAX_DELAY)
        delay = RECONNECT_FIRST_DELAY if self.stop.requested() else self.schema_delay
        self.schema_delay = min(self.schema_delay * 2, RECONNECT_MAX_DELAY)
        return delay

    def claims_in_doubt(self):
        """Whether a connection broke since the claims were last settled (LOST_CLAIMS is due)."""
        return self.in_doubt

    def claims_settled(self):
        self.in_doubt = False

    def answered(self):
        """After an outage, once the database has answered again (a pass may have had nothing to
        send): one line that says it is over, and the next outage backs off from the first step."""
        if self.schema_failed_at is not None and self.clock() - self.schema_failed_at > 2 * RECONNECT_MAX_DELAY:
            self.schema_delay, self.schema_said, self.schema_failed_at = RECONNECT_FIRST_DELAY, None, None
        if self.since is not None:
            answered = [at for link in self.links if (at := link.answered_at) is not None]
            if not answered or max(answered) < self.since:
                return
            log.info("database available again after %.1fs", self.clock() - self.since)
            self.since = None
        self.delay = RECONNECT_FIRST_DELAY
