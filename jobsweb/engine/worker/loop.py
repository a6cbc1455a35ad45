"""The worker: a thin loop around tick(), which claims due runs for a bounded pool of threads.

The loop thread alone talks to the database for claims, heartbeats and completions; handler
threads only run handlers and report back. So no database session is ever held open across
a job's own work, and completions that arrive together are written in one statement.

The loop is composed of parts, each owning its state and reached only through its methods:
`HeldRuns` (the runs held and their handlers), `Claimer` (how much to claim), `Trips` (the
finish-and-claim round trips and the outcomes not yet written), `Leases` (heartbeats, progress,
lost claims), `Stop` (signals and the one deadline) and `Outages` (the backoff, bounded by that
deadline). docs/ARCHITECTURE.md draws them and their calls.

The queue core knows nothing of schedules, alerts or lease recovery: whoever builds a worker
hands it those as duties (commands.build_worker), as Oban hands plugins to its queues.
"""

import logging
import os
from functools import partial
import queue
import secrets
import socket
import time

from ...core.logs import flush_events
from .. import upkeep
from ..jobs import registry
from ..jobs.flow import LimitWait
from ..jobs.registry import JobContext
from ..link import DatabaseUnavailable, Link
from ..runs import batch_status
from .claimer import Claimer
from .execution import Failures, released
from .held_runs import BEGAN_AFTER, HeldRuns
from .leases import Leases
from .outages import Outages
from .round_trips import Trip, Trips
from .stop import WAKE, Stop
from .wakeup import CANCEL, DueAt, Listener

log = logging.getLogger("jobsweb.worker")

# Outcomes this many or more go out on a lane of their own, while the claim goes on the other:
# a busy worker's finishes then keep one backend busy and its claims the other. Fewer ride
# with the claim, in its one commit: a quiet worker uses one connection.
FINISH_APART = 64


def worker_id():
    """host:pid:random, so two containers that both run as pid 1 still differ."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Worker:
    def __init__(self, app, conninfo, *, concurrency, poll_interval, shutdown_timeout,
                 max_runtime=None, forever=False, duties=(), queues=None, listen_conninfo=None):
        config = app.config
        self.app = app
        # The worker's connections: claims, heartbeats and the duties' passes on `link`; many
        # outcomes at once on `finish_link` (round_trips.py: its second lane); handlers'
        # ctx.progress() writes on `progress_link`. The last two are opened when first used.
        self.link, self.finish_link, self.progress_link = Link(conninfo), Link(conninfo), Link(conninfo)
        self.id = worker_id()
        self.concurrency = concurrency
        self.queues = list(queues) if queues else None  # None: every queue
        self.poll_interval = poll_interval
        self.max_runtime = max_runtime
        self.forever = forever
        # Only a --forever worker waits for new runs; a one-shot one exits when idle.
        self.listen = forever and config["JOBSWEB_LISTEN"]
        self.listen_conninfo = listen_conninfo or conninfo  # a direct connection when the link is pooled
        self.listener = None
        self.lease = lease = config["JOBSWEB_LEASE_SECONDS"]
        # A third of the lease: two heartbeats can fail before another worker may take over.
        self.heartbeat_every = lease / 3
        self.duties = list(duties)
        self.finished = queue.SimpleQueue()  # SimpleQueue.put is safe to call from a signal handler
        self.quiet = False  # an operator quieted it (read at each heartbeat): it claims nothing
        # An operator cancelled a run this worker holds (wakeup.py heard it): the heartbeat that
        # tells its handler is due now, not in up to a third of the lease.
        self.beat_now = False
        self.limit_wait = LimitWait(self.queues, max_runtime, poll_interval)  # a tick waits for limits
        self.held = HeldRuns(app, self.id, concurrency=concurrency, lease=lease,
                             default_timeout=config["JOBSWEB_DEFAULT_TIMEOUT"], failures=Failures.from_config(config),
                             report=self.finished.put, context=self._context)
        self.claimer = Claimer(self.id, concurrency=concurrency, lease=lease, queues=self.queues)
        self.trips = Trips(self.id, self.link, self.finish_link, self.finished.put)
        self.leases = Leases(self.held, self.link, self.progress_link, self.id, lease)
        self.stop = Stop(shutdown_timeout, running=self.held.snapshot, duties=self.duties,
                         links=[self.link, self.finish_link, self.progress_link], wake=lambda: self.finished.put(WAKE))
        self.outages = Outages(self.stop, [self.link, self.finish_link])

    # -- the loop -----------------------------------------------------------------------

    def run(self):
        """Work until nothing is due (or until stopped, with forever), then shut down cleanly."""
        # Signal handlers first: a worker that is in job_workers always stops cleanly on SIGTERM
        # (registered first, a SIGTERM in between killed it and left its row looking alive).
        restore = self.stop.install()
        try:
            registered = self._register()
        except BaseException:
            restore()
            raise
        if not registered:
            restore()
            return 0
        if self.listen:
            self.listener = Listener(self.listen_conninfo, self.finished.put, worker=self.id).start()
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
                drain_until = self.stop.drain_deadline()
                if drain_until is not None and not draining:
                    draining = True
                    self.trips.add(self.held.stop_all())
                out_of_time = self.max_runtime is not None and now - started >= self.max_runtime
                claiming = drain_until is None and not out_of_time and not self.quiet
                # Quiet, a --forever worker stays up with nothing to do, heartbeating (its row
                # says it is quiet; resumed, it claims again): exiting, it would be restarted by
                # its supervisor as a new worker that claims.
                idling = self.quiet and self.forever and drain_until is None and not out_of_time
                found = False
                try:
                    self.trips.add(self.held.timed_out(time.monotonic()))
                    if claiming:
                        found = self.tick()  # sends pending outcomes together with its claim
                    else:
                        self._flush()
                    if now >= next_beat or self.beat_now:
                        self.beat_now = False
                        self._heartbeat()
                        next_beat = now + self.heartbeat_every
                    self.outages.answered()
                except DatabaseUnavailable as exc:
                    self._wait_for_database(exc)
                    drain_until = self.stop.drain_deadline()
                    if drain_until is not None and (not self.held or time.monotonic() >= drain_until):
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
        while not self.stop.requested():
            try:
                self.link.fetch(upkeep.REGISTER_WORKER,
                                {"worker": self.id, "host": socket.gethostname(), "pid": os.getpid(),
                                 "job_types": registry.names(), "queues": self.queues,
                                 "concurrency": self.concurrency})
                self.outages.answered()
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
        self._give_back_lost_claims()
        trips = self._take_back()
        claimed = sum(len(trip.claimed_rows()) for trip in trips)
        if self.trips.pending_count() >= FINISH_APART and self.trips.finish_lane_free():
            self.trips.send_finishes()
        if self.trips.claim_lane_free():
            held = self.held.taken() + claimed  # runs held or landing now
            limit = self.claimer.limit(held, now, came_back=trips)
            began = self.held.began_ahead(now)  # runs claimed ahead that began: lease recovery charges them
            if limit or self.trips.pending_count() or began[0]:
                # With the outcomes still pending, in its one commit.
                self.trips.send_claim(self.claimer.params(limit, held) if limit else None, began)
        for trip in trips:
            self._land(trip)
        return did_work or bool(claimed) or self.trips.under_way() > 0

    def _wait_seconds(self, now, next_beat, drain_until, claiming):
        """How long the loop may sleep before it has something to do."""
        # First: a run this worker knows of falls due (then it claims at once) or will (then it
        # claims at that time, not at the poll).
        due = self.claimer.next_due(now) if claiming else None
        if claiming and self.trips.claim_lane_free() and self.claimer.at_once(self.held.taken(), now):
            return 0
        wake = [next_beat]
        if (deadline := self.held.next_deadline()) is not None:
            wake.append(deadline)
        if due is not None:
            wake.append(due)
        if drain_until is not None:
            wake.append(drain_until)
        wait = min(wake) - now
        if claiming and self.held.taken() < self.concurrency:
            wait = min(wait, self.poll_interval)
        if claiming and self.held.awaits_beginning():
            wait = min(wait, BEGAN_AFTER)  # tick() says which runs claimed ahead began
        return max(wait, 0)

    def _heartbeat(self):
        """Extend the held runs' leases and mark this worker seen (quieted, resumed or stopped?)."""
        self.leases.heartbeat()
        quiet, stop_asked_by = self.trips.seen()
        if stop_asked_by is not None and not self.stop.requested():
            log.info("worker %s asked to stop from the admin screen by %s: stopping as on SIGTERM (finishing "
                     "the %d run(s) it holds within its shutdown timeout)", self.id, stop_asked_by, len(self.held))
            self.stop.request()
        if quiet != self.quiet:
            self.quiet = quiet
            if quiet:
                log.info("worker %s quieted from the admin screen: finishing the %d run(s) it holds, "
                         "claiming nothing more", self.id, len(self.held))
            else:
                log.info("worker %s resumed from the admin screen: claiming again", self.id)

    # -- runs starting and ending --------------------------------------------------------

    def _context(self, run_id, job_type, payload, attempt, max_attempts, definition_id):
        """A held run's JobContext, whose lease, progress and batch calls come to this worker."""
        return JobContext(run_id, job_type, payload, attempt, max_attempts, definition_id,
                          _extend_lease=self.leases.extend, _report_progress=self.leases.report_progress,
                          _read_batch=partial(batch_status.batch_of_run, self.link.fetch))

    def _collect(self, wait):
        """Take what handler threads reported, waiting up to `wait` seconds for the first."""
        try:
            items = [self.finished.get(timeout=wait) if wait is None or wait > 0 else self.finished.get_nowait()]
        except queue.Empty:
            return
        while not self.finished.empty():  # only this thread takes from it
            items.append(self.finished.get_nowait())
        if any(item is WAKE for item in items):
            self.claimer.woke()
        self.beat_now = self.beat_now or any(item is CANCEL for item in items)
        for item in items:
            if isinstance(item, Trip):
                self.trips.came_back(item)
            elif isinstance(item, DueAt):
                self.claimer.due_at(item.when)
            elif item is not WAKE and item is not CANCEL:
                self.claimer.finished(1, time.monotonic())
                if (outcome := self.held.returned(item, stopping=bool(self.stop.requested()))) is not None:
                    self.trips.add([outcome])

    # -- writing to the database ---------------------------------------------------------

    def _flush(self):
        """Write every pending outcome, lost claims' give-backs too, once the trips under way are back."""
        self._settle()
        self._give_back_lost_claims()
        if (trip := self.trips.write_now()) is not None:
            self._land(trip)

    def _give_back_lost_claims(self):
        """After a broken connection, give back what a claim took unseen (LOST_CLAIMS), stopping or not."""
        if self.outages.claims_in_doubt():
            self._settle()
            self.trips.add(self.leases.lost_claims(self.held.ids() + self.trips.pending_ids(),
                                                   self.trips.lately_written()))
            self.outages.claims_settled()

    def _settle(self, start=True):
        """Wait for the trips under way, if any, and take them back (start: their runs start).
        A stopping worker's trips end by its cut (engine/link.py: its connects and answers are
        waited for no later than that, so no lane holds a link's lock past it)."""
        while self.trips.awaited():
            self._collect(None)  # handlers' outcomes meanwhile wait with the trips' pending ones
        for trip in self._take_back(start):
            self._land(trip, start)

    def _take_back(self, start=True):
        """The trips the lanes handed back, checked, for the caller to land. If one failed for the
        database's sake, the others are landed (start: their runs start) before that is raised."""
        trips, unavailable = self.trips.take_back()
        if unavailable is not None:
            for trip in trips:
                if trip.error is None:
                    self._land(trip, start)
            raise unavailable
        self.claimer.came_back(trips)
        return trips

    def _land(self, trip, start=True):
        """Log the outcomes a trip wrote and start the runs it claimed (with start, and unless the
        worker is stopping: then they go back to the queue, never started)."""
        for due in self.trips.written(trip):
            self.claimer.due_at(due)
        rows = trip.claimed_rows()
        if start and not self.stop.requested():
            self.held.start(rows, trip.back_at, trip.free())
        else:
            self.trips.add([released(run_id, job_type, attempt, self.id)
                            for run_id, job_type, _, attempt, *_ in rows])

    def _wait_for_database(self, exc):
        """Wait out one backoff step (handlers keep finishing meanwhile), which ends by a stopping
        worker's drain deadline (Outages asks Stop). A stop request cuts it short only once
        nothing is held: waiting nowhere, a stopping worker spun on the dead connection, a log
        line each pass, and never exited."""
        if (until := self.outages.step(exc)) is None:
            return
        was_stopping = self.stop.requested()
        while (left := until - time.monotonic()) > 0:
            if self.stop.requested() and (not self.held or self.stop.requested() > was_stopping):
                return  # the loop starts draining (or stops) now
            self._collect(left)  # handlers keep finishing; their outcomes wait in the trips' pending

    # -- stopping ------------------------------------------------------------------------

    def _shut_down(self):
        if self.listener is not None:
            self.listener.stop()
        self.stop.on_its_own()
        try:
            self._settle(start=False)
        except DatabaseUnavailable:
            pass  # its outcomes are pending again: written below if the database comes back in time
        self._collect(0)  # handlers that ended (or, asked to stop, never began) since the last pass
        self.trips.add(self.held.release_waiting())
        self.trips.add(self.held.give_up_all())
        self._write_last()
        self.trips.stop()
        for link in (self.link, self.finish_link, self.progress_link):
            link.close()
        self.held.close()
        until = self.stop.exit_by()
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
                self.trips.stopped()
                return
            except DatabaseUnavailable as exc:
                if self.trips.pending_count() and self.stop.last_try_by() > time.monotonic():
                    until = self.outages.step(exc, until=self.stop.last_try_by())
                    while until is not None and (wait := until - time.monotonic()) > 0:
                        self._collect(wait)  # a second signal (WAKE) shortens the bound: look again
                        until = min(until, self.stop.last_try_by())
                    continue
                if self.trips.pending_count():
                    ids = self.trips.pending_ids()
                    log.error("could not record the last %d outcome(s) (%s): run(s) %s stay running until their "
                              "leases expire (lease %gs), then lease recovery takes them", len(ids), exc,
                              ", ".join(map(str, ids)), self.lease)
                else:
                    log.warning("could not record that worker %s stopped (%s)", self.id, exc)
                return
