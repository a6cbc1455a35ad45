"""How a worker stops: one deadline, from the moment SIGTERM (or SIGINT) arrives.

The signal handler only sets flags and puts on queues. From that moment: the running handlers
are asked to stop at once (by a thread of this module's, whatever the loop thread is doing: a
round trip on a silent path may hold it until the cut), every wait of the loop ends by the
drain deadline (the shutdown timeout after the signal), and every round trip, the one under
way included, is cut at that deadline plus LAST_WRITES_SECONDS; a duty's pass on a connection
of its own (the alert evaluation) is cut at once. The loop releases the runs it holds that no
handler began; at the drain deadline it gives up the handlers still running; then it writes
what it can, trying again while the database is away and time is left. So the exit comes
within the shutdown timeout and 2 s more on every path to the database: a blackhole, a slow
link, a stopped server, a handler that ignores the stop.

`Stop` is the one keeper of that deadline: the loop's waits, the outage backoff
(engine/worker/outages.py), the last writes and the duties' exit all ask it, so no two clocks can
disagree about when the worker must be gone.
"""

import logging
import queue
import signal
import threading
import time

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
LAST_TRY_SECONDS = 0.1  # a last write needs at least this before the cut: a local round trip takes milliseconds


class HandlerStopper:
    """A daemon thread that asks the running handlers to stop the moment the worker is told to:
    a signal handler may only set flags and put on a SimpleQueue (a lock it took could be one its
    own thread holds), and the loop thread may be inside a round trip that a silent path holds
    until the cut. Before, the handlers heard of a SIGTERM in a blackhole only 12.5 s after it,
    and their drain began then."""

    def __init__(self, running):
        self.running = running  # () -> the held runs, a copy taken in one step (HeldRuns.snapshot)
        self.requests = queue.SimpleQueue()  # SimpleQueue.put is safe to call from a signal handler
        self.thread = None

    def start(self):
        self.thread = threading.Thread(target=self._serve, name="jobsweb-stopper", daemon=True)
        self.thread.start()

    def request(self, why):
        self.requests.put(why)

    def _serve(self):
        while (why := self.requests.get()) is not None:
            # Every held run is asked, those claimed ahead too: a thread that takes one of them
            # from now on hands it back unbegun, to be released (run_handler), instead of starting
            # it before the loop's next pass withdraws the rest (on a loaded machine the two
            # threads began every waiting run in between and none was released). A run the loop
            # starts after this copy is asked by the loop, which asks every held run again.
            asked = sum(held.stop() and held.began is not None for held in self.running())
            if asked:
                log.info("%s: asked %d running job(s) to stop", why, asked)

    def stop(self):
        if self.thread is not None:
            self.requests.put(None)
            self.thread.join()


class Stop:
    """A worker's stop: the signals, the handler stopper, and the single deadline every wait
    consults.

    `links` are cut at the last writes' bound (no round trip outlasts it), `duties` are cut at
    the signal, and `wake` wakes the loop; `clock` is time.monotonic (a test's fake one aside).
    """

    def __init__(self, shutdown_timeout, *, running, links, duties, wake, clock=time.monotonic):
        self.shutdown_timeout = shutdown_timeout
        self.links = links
        self.duties = duties
        self.wake = wake
        self.clock = clock
        self.stopper = HandlerStopper(running)
        self.signals = 0  # SIGTERM/SIGINT received
        self.drain_until = None  # clock() by which running handlers must end (set by the signal)
        self.cut_at = None  # clock() after which no round trip lasts: the last writes' bound

    # -- what the other parts ask --------------------------------------------------------

    def requested(self):
        """How many times the worker was told to stop (0: it was not)."""
        return self.signals

    def drain_deadline(self):
        """clock() by which running handlers must end, or None while no stop was requested."""
        return self.drain_until

    def last_writes_by(self):
        """clock() after which no round trip lasts, or None while the worker is not stopping."""
        return self.cut_at

    def last_try_by(self):
        """clock() after which a last write is not worth sending: its round trip would be cut."""
        return self.cut_at - LAST_TRY_SECONDS

    def exit_by(self):
        """clock() by which the duties have stopped too (the last writes' bound and EXIT_SECONDS)."""
        return self.cut_at + EXIT_SECONDS

    def bound(self, until):
        """`until` (a clock() time), or sooner when a stopping worker must act before it: no wait
        outlasts the drain deadline while handlers may still run, nor, after it, the last try of
        the last writes."""
        if self.drain_until is None:
            return until
        return min(until, self.drain_until if self.clock() < self.drain_until else self.last_try_by())

    # -- starting and stopping -----------------------------------------------------------

    def install(self):
        """Start the handler stopper and take SIGTERM and SIGINT (on the main thread). Returns the
        function that gives them back and ends the stopper."""
        self.stopper.start()
        if threading.current_thread() is not threading.main_thread():
            return self.stopper.stop
        previous = {sig: signal.signal(sig, self.request) for sig in (signal.SIGTERM, signal.SIGINT)}

        def restore():
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.stopper.stop()

        return restore

    def request(self, signum=None, frame=None):
        """Signal handler: the stop's one deadline starts now (a second signal: the drain ends
        now). The handlers are asked to stop, the loop is woken, and the round trips are bounded
        from now on, the one under way included (the loop may be waiting on it)."""
        self.signals += 1
        now = self.clock()
        self.drain_until = now + self.shutdown_timeout if self.signals == 1 else now
        self._cut_by(self.drain_until + LAST_WRITES_SECONDS)
        for duty in self.duties:
            duty.cut(now)  # a duty's pass is given up at once: the loop is wanted for the drain
        self.stopper.request("worker is shutting down")
        self.wake()

    def on_its_own(self):
        """A worker that stops on its own (a tick with nothing left, --max-runtime) bounds its
        last writes from now; after a signal, the bound set then holds."""
        if self.drain_until is None:
            self._cut_by(self.clock() + LAST_WRITES_SECONDS)

    def _cut_by(self, deadline):
        """No round trip lasts past `deadline`: a stopping worker exits on time whatever the path
        to the database does (a trip lost in a blackhole is cut then), and what it could not
        write is left to lease recovery."""
        self.cut_at = deadline if self.cut_at is None else min(self.cut_at, deadline)
        for link in self.links:
            link.cut_by(self.cut_at)
