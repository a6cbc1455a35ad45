"""How a worker stops: SIGTERM and SIGINT only set a flag; the loop then asks the running handlers
to stop, releases the runs it holds that no handler began, and at the deadline releases what
still runs and records what it can.

A run claimed ahead of a free slot (engine/claim_ahead.py) and never begun is released with no
attempt recorded and the claim's attempt given back (a 'released' outcome of FINISH_RUNS): its handler
never ran, so a deploy must not count against it. A run whose handler began and is stopped by
the shutdown is an interrupted attempt (statements.FINISH_RUNS), recorded and given back.

A mixin of Worker (engine/worker.py), whose state this is: `held`, `busy`, `pool`, `pending`,
`lanes`, `link`, `progress_link`, `async_pool`, `listener`, `duties`, `finished`,
`failures`, `stop_requested`, `shutdown_timeout`; `_settle`, `_collect` and `_flush`.
"""

import logging
import signal
import threading
import time

from . import upkeep
from .execution import released
from .link import DatabaseUnavailable

log = logging.getLogger("jobsweb.worker")

# A stopping worker's time to record what it can after its deadline: a few round trips even on a slow
# link, leaving room to exit within the promised 5 s (with 3 s, exits took over 7 s at load 8).
LAST_WRITES_SECONDS = 2.0
WAKE = object()  # put on the finished queue to wake the loop (a signal or a new run arrived)


class Stopping:
    """Worker's shutdown (a mixin: the state is the worker's)."""

    def _stop_held(self, why):
        """At the stop request: release the runs waiting for a thread, ask the others to stop."""
        self._release_waiting()
        for held in self.held.values():
            held.stop()
        if self.held:
            log.info("%s: asked %d running job(s) to stop", why, len(self.held))

    def _release_waiting(self):
        """Take back from the pool the runs no thread has begun, to be released unstarted."""
        withdrawn = self.pool.withdraw()
        for held in withdrawn:
            self.busy -= 1  # counted from its claim on, as if a thread ran it
            self._unstarted(held)
        if withdrawn:
            log.info("released %d run(s) claimed ahead and not started", len(withdrawn))

    def _unstarted(self, held):
        """`held` never began and never will here: it goes back to the queue with no attempt."""
        held.stop(force=True)
        del self.held[held.ctx.run_id]
        self.pending.append(released(held.ctx.run_id, held.ctx.job_type, held.ctx.attempt, self.id))

    def _shut_down(self):
        if self.listener is not None:
            self.listener.stop()
        self._last_writes_until(time.monotonic() + LAST_WRITES_SECONDS)
        try:
            self._settle(start=False)
        except DatabaseUnavailable:
            pass  # its outcomes are pending again: reported below if they still cannot be written
        self._collect(0)  # handlers that ended (or, asked to stop, never began) since the last pass
        self._release_waiting()
        leftover = list(self.held.values())
        self.held.clear()
        for held in leftover:
            held.stop(force=True)  # an async one claimed ahead and not started must now never start
            log.warning("run %d %s: still running at the shutdown deadline; released back to the queue",
                        held.ctx.run_id, held.ctx.job_type)
            outcome = self.failures.interrupted(self.id, held.ctx, "shut down before the run finished")
            outcome.waited = held.waited()
            self.pending.append(outcome)
        try:
            self._flush()
            self.link.fetch(upkeep.WORKER_STOPPED, {"worker": self.id, "done": self.done})
        except DatabaseUnavailable as exc:
            if self.pending:
                log.error("could not record the last %d outcome(s) (%s): their leases will expire and "
                          "another worker will retry them", len(self.pending), exc)
            else:  # no run at risk: only this worker's own row, which ages out with its heartbeat
                log.warning("could not record that worker %s stopped (%s)", self.id, exc)
        for lane in self.lanes:
            lane.stop()
            lane.link.close()
        self.progress_link.close()
        self.async_pool.stop()
        for duty in self.duties:
            duty.stop()
        log.info("worker %s stopped", self.id)

    def _last_writes_until(self, deadline):
        """No round trip lasts past `deadline`: a stopping worker exits on time whatever the path
        to the database does (a trip lost in a blackhole is cut then), and what it could not
        write is left to lease recovery."""
        for lane in self.lanes:
            lane.link.cut_by(deadline)
        self.progress_link.cut_by(deadline)

    def _install_signal_handlers(self):
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {sig: signal.signal(sig, self.request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}

        def restore():
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore

    def request_stop(self, signum=None, frame=None):
        """Signal handler: sets the flag, wakes the loop, and bounds the round trips from now on
        (the loop may itself be waiting on one, which a silent path would hold for its whole
        ROUND_TRIP_TIMEOUT before the loop could set the drain deadline)."""
        self.stop_requested += 1
        drain = self.shutdown_timeout if self.stop_requested == 1 else 0
        self._last_writes_until(time.monotonic() + drain + LAST_WRITES_SECONDS)
        self.finished.put(WAKE)
