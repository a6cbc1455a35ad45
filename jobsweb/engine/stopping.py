"""How a worker stops: one deadline, from the moment SIGTERM (or SIGINT) arrives.

The signal handler only sets flags and puts on queues. From that moment: the running handlers
are asked to stop at once (by a thread of this module's, whatever the loop thread is doing: a
round trip on a silent path may hold it until the cut), every wait of the loop ends by the
drain deadline (the shutdown timeout after the signal), and every round trip, the one under
way included, is cut at that deadline plus LAST_WRITES_SECONDS; a duty's pass on a connection
of its own (the alert evaluation) is cut at once. The loop releases the runs it
holds that no handler began; at the drain deadline it gives up the handlers still running; then
it writes what it can, trying again while the database is away and time is left. So the exit
comes within the shutdown timeout and 2 s more on every path to the database: a blackhole, a
slow link, a stopped server, a handler that ignores the stop.

A run claimed ahead of a free slot (engine/claim_ahead.py) and never begun is released with no
attempt recorded and the claim's attempt given back (a 'released' outcome of FINISH_RUNS): its handler
never ran, so a deploy must not count against it. A run whose handler began and is stopped by
the shutdown is an interrupted attempt (statements.FINISH_RUNS), recorded and given back.

A mixin of Worker (engine/worker.py), whose state this is: `held`, `busy`, `pool`, `pending`,
`lanes`, `link`, `progress_link`, `async_pool`, `listener`, `duties`, `finished`,
`failures`, `stop_requested`, `shutdown_timeout`, `reconnect_delay`; `_settle`, `_collect`,
`_flush` and `_backoff_step`.
"""

import logging
import queue
import signal
import threading
import time

from . import upkeep
from .execution import released
from .link import MIN_CONNECT_TIMEOUT, DatabaseUnavailable

log = logging.getLogger("jobsweb.worker")

# A stopping worker's time to record what it can after its drain deadline (outcomes of handlers
# that ended before it were written meanwhile): a round trip or two. The promise is the shutdown
# timeout and 2 s (docs/REFERENCE.md): the rest is for the signal handler to run (psycopg looks
# every 0.1 s; 0.4 s late measured with seven workers on two cores), the watchdog's cut (0.1 s)
# and the exit itself (closing connections, ending threads, the interpreter's exit: 0.2 s at
# rest, 0.56 s at load 11).
LAST_WRITES_SECONDS = 0.75
WAKE = object()  # put on the finished queue to wake the loop (a signal or a new run arrived)
EXIT_SECONDS = 0.25  # of the exit's half second, what the duties may take to stop after the last writes


class HandlerStopper:
    """A daemon thread that asks the running handlers to stop the moment the worker is told to:
    a signal handler may only set flags and put on a SimpleQueue (a lock it took could be one its
    own thread holds), and the loop thread may be inside a round trip that a silent path holds
    until the cut. Before, the handlers heard of a SIGTERM in a blackhole only 12.5 s after it,
    and their drain began then."""

    def __init__(self, held):
        self.held = held  # the worker's dict of held runs, read here and changed by the loop
        self.requests = queue.SimpleQueue()  # SimpleQueue.put is safe to call from a signal handler
        self.thread = None

    def start(self):
        self.thread = threading.Thread(target=self._serve, name="jobsweb-stopper", daemon=True)
        self.thread.start()

    def request(self, why):
        self.requests.put(why)

    def _serve(self):
        while (why := self.requests.get()) is not None:
            # dict.copy() is one step under the GIL: the loop may add or remove runs meanwhile,
            # and iterating the dict itself would then fail. A run it starts after this copy is
            # asked by the loop, which asks every held run again once it sees the stop.
            asked = sum(held.stop() for held in self.held.copy().values() if held.began is not None)
            if asked:
                log.info("%s: asked %d running job(s) to stop", why, asked)

    def stop(self):
        if self.thread is not None:
            self.requests.put(None)
            self.thread.join()


class Stopping:
    """Worker's shutdown (a mixin: the state is the worker's)."""

    def _stop_held(self):
        """When the loop sees the stop request: release the runs waiting for a thread; ask every
        other held run to stop. The stopper thread has usually asked the running ones already;
        under load the loop may come first (its path did not hold it), and then it is the one
        that says so."""
        self._release_waiting()
        # Every held run is asked; those whose handler began, and that it asked first, are counted.
        asked = sum(held.stop() and held.began is not None for held in self.held.values())
        if asked:
            log.info("worker is shutting down: asked %d running job(s) to stop", asked)

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
        if self.drain_until is None:
            # A worker that stops on its own (a tick with nothing left, --max-runtime) bounds its
            # last writes from now; after a signal, the bound set then holds.
            self._last_writes_until(time.monotonic() + LAST_WRITES_SECONDS)
        try:
            self._settle(start=False)
        except DatabaseUnavailable:
            pass  # its outcomes are pending again: written below if the database comes back in time
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
        self._write_last()
        for lane in self.lanes:
            lane.stop()
            lane.link.close()
        self.progress_link.close()
        self.async_pool.stop()
        self.stopper.stop()
        until = self.link.cut_at + EXIT_SECONDS
        for duty in self.duties:
            duty.stop(until)
        log.info("worker %s stopped", self.id)

    def _write_last(self):
        """Write the pending outcomes and this worker's stop, trying again (one backoff step at a
        time) while the database is away and the last writes' bound leaves time to reconnect: a
        server that restarts within it gets them, and lease recovery need not run those
        handlers again. With no outcome pending, one try: only this worker's own row is at stake,
        and it ages out with its heartbeat."""
        while True:
            try:
                self._flush()
                self.link.fetch(upkeep.WORKER_STOPPED, {"worker": self.id, "done": self.done})
                return
            except DatabaseUnavailable as exc:
                left = self.link.cut_at - time.monotonic()
                if self.pending and left >= MIN_CONNECT_TIMEOUT:
                    until = self._backoff_step(exc, self.link.cut_at - MIN_CONNECT_TIMEOUT)
                    while (wait := until - time.monotonic()) > 0:
                        self._collect(wait)  # a second signal (WAKE) shortens the bound: look again
                        until = min(until, self.link.cut_at - MIN_CONNECT_TIMEOUT)
                    continue
                if self.pending:
                    log.error("could not record the last %d outcome(s) (%s): their leases will expire and "
                              "another worker will retry them", len(self.pending), exc)
                else:
                    log.warning("could not record that worker %s stopped (%s)", self.id, exc)
                return

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
        """Signal handler: the stop's one deadline starts now (a second signal: the drain ends
        now). The handlers are asked to stop, the loop is woken, and the round trips are bounded
        from now on, the one under way included (the loop may be waiting on it)."""
        self.stop_requested += 1
        now = time.monotonic()
        self.drain_until = now + self.shutdown_timeout if self.stop_requested == 1 else now
        self._last_writes_until(self.drain_until + LAST_WRITES_SECONDS)
        for duty in self.duties:
            duty.cut(now)  # a duty's pass is given up at once: the loop is wanted for the drain
        self.stopper.request("worker is shutting down")
        self.finished.put(WAKE)
