"""The worker: a thin loop around tick(), which claims due runs for a bounded pool of threads.

The loop thread alone talks to the database for claims, heartbeats and completions; handler
threads only run handlers and report back. So no database session is ever held open across
a job's own work, and completions that arrive together are written in one statement.

The queue core knows nothing of schedules, alerts or lease recovery: whoever builds a worker
hands it those as duties (commands.build_worker), as Oban hands plugins to its queues.
"""

import logging
import os
import queue
import secrets
import socket
import time

from . import registry, upkeep, workflows
from ..core.logs import flush_events, run_event
from .async_execution import AsyncPool
from .claim_ahead import ClaimAhead
from .execution import Deadlines, Failures, Held, Outcome, Pool, log_finished, released
from .flow import LimitWait
from .held_leases import LeaseHolder
from .link import DatabaseUnavailable, Link
from .outages import RECONNECT_FIRST_DELAY, OutageWaits
from .registry import JobContext
from .round_trips import Lane, Trip, TripKeeper
from .stopping import WAKE, HandlerStopper, Stopping
from .wakeup import Listener

log = logging.getLogger("jobsweb.worker")

# Outcomes this many or more go out on a lane of their own, while the claim goes on the other:
# a busy worker's finishes then keep one backend busy and its claims the other. Fewer ride
# with the claim, in its one commit: a quiet worker uses one connection.
FINISH_APART = 64


def worker_id():
    """host:pid:random, so two containers that both run as pid 1 still differ."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Worker(LeaseHolder, TripKeeper, OutageWaits, Stopping):
    def __init__(self, app, conninfo, *, concurrency, poll_interval, shutdown_timeout,
                 max_runtime=None, forever=False, duties=(), queues=None, listen_conninfo=None):
        config = app.config
        self.app = app
        self.link = Link(conninfo)
        # Handlers' ctx.progress() writes, on a connection of their own (made at the first one),
        # so that they never wait on, nor hold up, the claim and finish round trips.
        self.progress_link = Link(conninfo)
        self.id = worker_id()
        self.concurrency = concurrency
        self.queues = list(queues) if queues else None  # None: every queue
        self.poll_interval = poll_interval
        self.shutdown_timeout = shutdown_timeout
        self.max_runtime = max_runtime
        self.forever = forever
        # Only a --forever worker waits for new runs; a one-shot one exits when idle.
        self.listen = forever and config["JOBSWEB_LISTEN"]
        self.listen_conninfo = listen_conninfo or conninfo  # a direct connection when the link is pooled
        self.listener = None
        self.lease = config["JOBSWEB_LEASE_SECONDS"]
        # A third of the lease: two heartbeats can fail before another worker may take over.
        self.heartbeat_every = self.lease / 3
        self.default_timeout = config["JOBSWEB_DEFAULT_TIMEOUT"]
        self.failures = Failures.from_config(config)
        self.duties = list(duties)
        self.finished = queue.SimpleQueue()  # SimpleQueue.put is safe to call from a signal handler
        self.held: dict[int, Held] = {}
        self.deadlines = Deadlines()  # of the held runs that have a timeout
        self.busy = 0  # pool threads inside a handler, including ones this worker gave up on
        self.pending: list[Outcome] = []  # attempts that ended and are not yet written
        self.done = 0  # runs written since job_workers.runs_done was last updated
        self.stop_requested = 0  # SIGTERM/SIGINT received
        self.drain_until = None  # time.monotonic() by which running handlers must end (set by the signal)
        self.quiet = False  # an operator quieted it (read at each heartbeat): it claims nothing
        self.stopper = HandlerStopper(self.held)
        self.more_due = False  # the last claim took as many runs as it asked for: more may be waiting
        self.limit_wait = LimitWait(self.queues, max_runtime, poll_interval)  # a tick waits for limits
        self.claim_size = ClaimAhead()
        self.reconnect_delay = RECONNECT_FIRST_DELAY
        self.unavailable_since = None  # time.monotonic() of the first failure of an outage
        self.claims_in_doubt = False  # the connection broke: a claim may have committed unseen
        # Finish-and-claim trips (round_trips.py) go out on two lanes: claims on the worker's link,
        # many outcomes at once on a connection of their own, opened when first used.
        self.lanes = (Lane(self.link, self.finished.put, "jobsweb-claims"),
                      Lane(Link(conninfo), self.finished.put, "jobsweb-finishes"))
        self.returned = []  # trips the lanes handed back, not yet taken
        # Threads for sync handlers and an event loop for async ones, each started when first needed.
        self.pool = Pool(app, concurrency, self.finished.put)
        self.async_pool = AsyncPool(app, concurrency, self.finished.put)

    # -- the loop -----------------------------------------------------------------------

    def run(self):
        """Work until nothing is due (or until stopped, with forever), then shut down cleanly."""
        # Signal handlers first: a worker that is in job_workers always stops cleanly on SIGTERM
        # (registered first, a SIGTERM in between killed it and left its row looking alive).
        self.stopper.start()
        restore = self._install_signal_handlers()
        try:
            registered = self._register()
        except BaseException:
            restore()
            self.stopper.stop()
            raise
        if not registered:
            restore()
            self.stopper.stop()
            return 0
        if self.listen:
            self.listener = Listener(self.listen_conninfo, lambda: self.finished.put(WAKE)).start()
        log.info("worker %s started: concurrency %d, lease %gs%s%s", self.id, self.concurrency,
                 self.lease, ", forever" if self.forever else "",
                 f", queues {','.join(self.queues)}" if self.queues else "")
        started = time.monotonic()
        next_beat = started + self.heartbeat_every
        draining = False
        try:
            while True:
                now = time.monotonic()
                # Set by the signal handler: the deadline counts from the signal, not from now.
                drain_until = self.drain_until
                if drain_until is not None and not draining:
                    draining = True
                    self._stop_held()
                out_of_time = self.max_runtime is not None and now - started >= self.max_runtime
                claiming = drain_until is None and not out_of_time and not self.quiet
                # Quiet, a --forever worker stays up with nothing to do, heartbeating (its row
                # says it is quiet; resumed, it claims again): exiting, it would be restarted by
                # its supervisor as a new worker that claims.
                idling = self.quiet and self.forever and drain_until is None and not out_of_time
                found = False
                try:
                    self._expire_timeouts()
                    if claiming:
                        found = self.tick()  # sends pending outcomes together with its claim
                    else:
                        self._flush()
                    if now >= next_beat:
                        self._heartbeat()
                        next_beat = now + self.heartbeat_every
                    self._database_back()
                except DatabaseUnavailable as exc:
                    self._wait_for_database(exc)
                    if self.drain_until is not None and (not self.held or time.monotonic() >= self.drain_until):
                        break  # stopping: the last writes try again while time is left
                    continue
                if drain_until is not None and (not self.held or now >= drain_until):
                    break
                wait = self._wait_seconds(now, next_beat, drain_until, claiming)
                if not self.held and not idling and (not claiming or (not found and not self.forever)):
                    try:
                        delay = self.limit_wait.seconds(self.link, registry.names()) if claiming else None
                    except DatabaseUnavailable as exc:
                        self._wait_for_database(exc)
                        continue
                    if delay is None:
                        break
                    if self.max_runtime is not None:
                        delay = min(delay, started + self.max_runtime - now)
                    wait = min(wait, max(delay, 0))
                flush_events()  # this pass's run events, in one write
                self._collect(wait)
        finally:
            self._shut_down()
            restore()
        return 0

    def _register(self):
        """Add this worker to job_workers; False if it was stopped before it could.

        A --forever worker waits for the database with backoff, as it does mid-run: started
        while PostgreSQL restarts, it would otherwise exit and its supervisor crash-loop it.
        One cron tick fails fast instead, so that a wrong DATABASE_URL is reported at once.
        """
        while not self.stop_requested:
            try:
                self.link.fetch(upkeep.REGISTER_WORKER,
                                {"worker": self.id, "host": socket.gethostname(), "pid": os.getpid(),
                                 "job_types": registry.names(), "queues": self.queues})
                self._database_back()
                return True
            except DatabaseUnavailable as exc:
                if not self.forever:
                    raise
                self._wait_for_database(exc)
        return False

    def tick(self):
        """One pass: the duties that are due (in the order given), then take back the round trips
        that came back and send the next: a claim for the free slots (and the runs to hold
        ahead) with the pending outcomes, or those alone on the other lane when they are many
        (FINISH_APART). The runs they brought start while PostgreSQL works on the next.

        Returns whether it found work (or still waits for a trip to come back).
        """
        did_work = False
        now = time.monotonic()
        # Before claiming, so that a slot a duty materialised is claimed in this same tick.
        for duty in self.duties:
            if now >= duty.next_at:
                self._flush()
                found = duty.run(self.link)
                did_work = did_work or found
                duty.next_at = now + (duty.after_work if found and duty.after_work is not None else duty.every)
        if self.claims_in_doubt:
            self._settle()
            self._release_lost_claims()
        trips = self._take_back()
        claimed = sum(len(trip.claimed_rows()) for trip in trips)
        # A claim that came back short is sent again at the loop's next pass (a handler's
        # return, a wake-up or the poll interval), as before; after a full one, at once.
        may_claim = self.more_due or not any(trip.limit for trip in trips)
        claims, finishes = self.lanes
        if len(self.pending) >= FINISH_APART and finishes.trip is None:
            self._send(finishes, 0, self.busy)
        if claims.trip is None:
            held = self.busy + claimed  # runs held or landing now
            limit = self.claim_size.limit(self.concurrency, held, now) if may_claim else 0
            if limit or self.pending:
                self._send(claims, limit, held)  # with the outcomes still pending, in its one commit
        for trip in trips:
            self._land(trip)
        return did_work or bool(claimed) or self._under_way() > 0

    def _wait_seconds(self, now, next_beat, drain_until, claiming):
        """How long the loop may sleep before it has something to do."""
        if claiming and self.more_due and self.lanes[0].trip is None and \
                self.claim_size.limit(self.concurrency, self.busy, now) > 0:
            return 0
        wake = [next_beat]
        if (deadline := self.deadlines.next(self.held)) is not None:
            wake.append(deadline)
        if drain_until is not None:
            wake.append(drain_until)
        wait = min(wake) - now
        if claiming and self.busy < self.concurrency:
            wait = min(wait, self.poll_interval)
        return max(wait, 0)

    # -- runs starting and ending --------------------------------------------------------

    def read_batch(self, run_id):
        """JobContext.batch, called from a handler thread: the batch of run `run_id`."""
        return workflows.batch_of_run(self.link.fetch, run_id)

    def _start(self, run_id, job_type, payload, attempt, max_attempts, definition_id,
               run_timeout, run_lease, backoff_base, backoff_cap, priority, run_at, landed=None):
        job = registry.get(job_type)
        ctx = JobContext(run_id, job_type, payload, attempt, max_attempts, definition_id,
                         _extend_lease=self.extend_lease, _report_progress=self.report_progress,
                         _read_batch=self.read_batch)
        # A definition's own settings (copied onto its runs) come before the job type's.
        timeout = run_timeout or job.timeout or self.default_timeout
        deadline = time.monotonic() + timeout if timeout else None
        # A definition may lengthen the lease, never shorten it: heartbeats come every third
        # of this worker's lease, and a shorter one would expire between two of them.
        self.held[run_id] = Held(ctx, job, max(run_lease or 0, self.lease), deadline, timeout,
                                 (backoff_base, backoff_cap), landed=landed, order=(priority, run_at, run_id))
        self.deadlines.add(run_id, self.held[run_id])
        self.busy += 1
        # DEBUG: one INFO line per run, when it ends (its duration says when it started).
        run_event(log, logging.DEBUG, "started", "run %d %s started (attempt %d of %d)", run_id, job_type,
                  attempt, max_attempts, run_id=run_id, job_type=job_type, attempt=attempt, worker=self.id)
        if not job.is_async:
            return self.held[run_id]  # the caller hands a batch's to the pool at once
        self.async_pool.submit(self.held[run_id])
        return None

    def _collect(self, wait):
        """Take what handler threads reported, waiting up to `wait` seconds for the first."""
        try:
            items = [self.finished.get(timeout=wait) if wait is None or wait > 0 else self.finished.get_nowait()]
        except queue.Empty:
            return
        while not self.finished.empty():  # only this thread takes from it
            items.append(self.finished.get_nowait())
        self.woken = self.woken or any(item is WAKE for item in items)
        for item in items:
            if isinstance(item, Trip):
                self.returned.append(item)
            elif item is not WAKE:
                self._handler_returned(item)

    def _handler_returned(self, finished):
        self.busy -= 1
        self.claim_size.finished(1, time.monotonic())
        held = finished.held
        ctx = held.ctx
        if self.held.get(ctx.run_id) is not held:
            # Timed out or lease lost: the attempt was already finished without this result.
            log.warning("run %d %s: attempt %d returned after this worker gave it up; result ignored",
                        ctx.run_id, ctx.job_type, ctx.attempt)
            return
        if not finished.begun and self.stop_requested:
            self._unstarted(held)  # it waited for a thread and saw the stop request first
            return
        del self.held[ctx.run_id]
        self.pending.append(self.failures.outcome_of(self.id, finished, stopping=bool(self.stop_requested)))

    def _expire_timeouts(self):
        for run_id in self.deadlines.due(self.held, time.monotonic()):
            held = self.held.pop(run_id)
            held.stop(force=True)
            log.warning("run %d %s: attempt %d timed out after %gs", run_id, held.ctx.job_type,
                        held.ctx.attempt, held.timeout)
            outcome = self.failures.failed(self.id, held.job, held.ctx, "timeout",
                                           f"timed out after {held.timeout:g} seconds", backoff=held.backoff)
            outcome.waited = held.waited()
            self.pending.append(outcome)

    # -- writing to the database ---------------------------------------------------------

    def _flush(self):
        """Write every pending outcome now, once the trips under way (if any) are back."""
        self._settle()
        if self.pending:
            outcomes, self.pending = self.pending, []
            trip = Trip.build(self, outcomes, 0, self.busy)
            self.lanes[0].run(trip)
            self._check(trip)
            self._land(trip)

    def _land(self, trip, start=True):
        """Log the outcomes a trip wrote and start the runs it claimed (with start, and unless the
        worker is stopping: then they go back to the queue, never started)."""
        if trip.outcomes:
            self.done += log_finished(trip.outcomes, trip.finished_rows())
        threaded = []
        for row in trip.claimed_rows():
            if start and not self.stop_requested:
                # Only a run claimed ahead (no slot free as it lands) counts the time it waits for
                # one: a run with a slot starts now, and its started_at stays the claim's, the time
                # a limited queue's rate window counts (such a queue gives no runs ahead).
                landed = trip.back_at if self.busy >= self.concurrency else None
                if (held := self._start(*row, landed=landed)) is not None:
                    threaded.append(held)
            else:
                run_id, job_type, _, attempt = row[:4]
                self.pending.append(released(run_id, job_type, attempt, self.id))
        if threaded:
            self.pool.submit(threaded)
