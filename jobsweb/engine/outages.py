"""How a worker waits out an outage: one backoff step at a time, one log line each, handlers
finishing meanwhile; and one line once the database has answered again."""

import logging
import time

from .link import Conflicted

log = logging.getLogger("jobsweb.worker")

RECONNECT_FIRST_DELAY = 0.5  # seconds; doubled after each failed reconnect
RECONNECT_MAX_DELAY = 30.0  # seconds


class OutageWaits:
    """The Worker's outage waits (a mixin). Needs: `reconnect_delay`, `unavailable_since`,
    `claims_in_doubt`, `stop_requested`, `drain_until`, `held`, `lanes`, and `_collect`."""

    def _wait_for_database(self, exc):
        """Wait out one backoff step (handlers keep finishing meanwhile), at most until a
        stopping worker's drain deadline, whenever its signal came. A stop request cuts it short
        only once nothing is held: waiting nowhere, a stopping worker spun on the dead
        connection, a log line each pass, and never exited."""
        if isinstance(exc, Conflicted):
            # The database answered and rolled the transaction back whole (logged by
            # core/conflicts.py): no outage, no backoff, no claim in doubt; the next pass sends
            # the outcomes again.
            return
        self.claims_in_doubt = True
        if self.unavailable_since is None:
            self.unavailable_since = time.monotonic()
        deadline = self._backoff_step(exc, self.drain_until)
        was_stopping = self.stop_requested
        while (left := deadline - time.monotonic()) > 0:
            if self.stop_requested and (not self.held or self.stop_requested > was_stopping):
                return  # the loop starts draining (or stops) now
            self._collect(left)  # handlers keep finishing; their outcomes wait in self.pending

    def _backoff_step(self, exc, until=None):
        """Log the outage and take the next backoff step: time.monotonic() when it ends (at
        `until` at the latest)."""
        log.warning("database unavailable (%s); trying again in %.1fs", exc, self.reconnect_delay)
        deadline = time.monotonic() + self.reconnect_delay
        if until is not None:
            deadline = min(deadline, until)
        self.reconnect_delay = min(self.reconnect_delay * 2, RECONNECT_MAX_DELAY)
        return deadline

    def _database_back(self):
        """After an outage, once the database has answered again (a pass may have had nothing to
        send): one line that says it is over, and the next outage backs off from the first step."""
        if self.unavailable_since is not None:
            answered = [at for lane in self.lanes if (at := lane.link.answered_at) is not None]
            if not answered or max(answered) < self.unavailable_since:
                return
            log.info("database available again after %.1fs", time.monotonic() - self.unavailable_since)
            self.unavailable_since = None
        self.reconnect_delay = RECONNECT_FIRST_DELAY
