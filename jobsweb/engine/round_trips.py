"""The worker's round trip, finish and claim in one transaction, sent on a thread of its own.

With short jobs a worker alternates two costs: PostgreSQL finishing and claiming a batch, and
Python starting that batch's runs, taking their outcomes and logging them. Done one after the
other, each side idles while the other works (in the bench, ~60 us of statement time and
~30 us of Python per no-op run). So the loop hands the transaction to a Lane thread and keeps
working: the runs of the trip that came back start, and the outcomes of the runs before them
are taken, while PostgreSQL writes and claims.

One connection is one PostgreSQL backend, which works on one statement at a time: with short
jobs a worker's backend was busy most of the time (~55 us a run) and capped one process at
~15,000 runs/s. So a worker has two lanes, each with its own connection: claims go on the first;
when many outcomes are pending they go out alone on the second while the first claims, and two
backends work at once. Fewer outcomes ride with the claim, in its one commit, so a quiet worker
never opens its second connection.

Trips on the two lanes are separate transactions, and what each guarantees does not hang on
their order: each claim takes its runs with SKIP LOCKED (no run twice), each outcome is in
exactly one trip, guarded by locked_by and attempts, and a claim that committed unseen (a
connection broke) is found by LOST_CLAIMS once every trip under way is back. A trip writes the
worker's job_workers row (WORKER_SEEN) only when the other trip under way does not: two
transactions updating one row would wait on each other's row lock. Only the loop thread sends
and takes trips back.
"""

import queue
import threading
import time
from dataclasses import dataclass, field

import psycopg

from . import registry, statements, upkeep
from .execution import Outcome, finish_each, finish_params
from .link import DatabaseUnavailable


@dataclass
class Trip:
    """One finish-and-claim transaction: what was sent and what came back."""

    outcomes: list[Outcome]  # written by its FINISH_RUNS (none: no FINISH_RUNS)
    limit: int  # runs claimed at most (0: no CLAIM_RUNS)
    counted: int = 0  # runs done its WORKER_SEEN adds to job_workers.runs_done
    batch: list = field(default_factory=list)  # (sql, params) in the order they run
    results: list | None = None  # rows of each statement, once back
    error: BaseException | None = None  # what Link.fetch_together raised instead
    lane: "Lane | None" = None  # where it was sent
    back_at: float | None = None  # time.monotonic() when it came back: its claimed runs are held from then

    @classmethod
    def build(cls, worker, outcomes, limit, busy, counted=0):
        """The statements for `worker` (a Worker): write `outcomes`, claim up to `limit` runs
        with `busy` of its slots taken, and add `counted` runs done to its job_workers row."""
        trip = cls(outcomes, limit, counted)
        if outcomes:
            trip.batch.append((statements.FINISH_RUNS, finish_params(outcomes)))
        if counted:
            # The count of runs done is written with them (at heartbeats only, the Workers page said 0).
            trip.batch.append((upkeep.WORKER_SEEN, {"worker": worker.id, "done": counted}))
        if limit:
            trip.batch.append((statements.CLAIM_RUNS, {
                "worker": worker.id, "lease": worker.lease, "limit": limit,
                "free": max(worker.concurrency - busy, 0), "job_types": registry.names(),
                "queues": worker.queues}))
        return trip

    @property
    def claim(self):
        """The CLAIM_RUNS (sql, params) of this trip, if it claims."""
        return self.batch[-1] if self.limit else None

    def finished_rows(self):
        return self.results[0] if self.outcomes else []

    def claimed_rows(self):
        return self.results[-1] if self.limit else []


class Lane:
    """A daemon thread that runs one trip at a time on `link` and hands each back to `report`
    (the worker's queue of things to take, from the lane's thread), results or error."""

    def __init__(self, link, report, name="jobsweb-lane"):
        self.link = link
        self.report = report
        self.name = name
        self.trips = queue.SimpleQueue()
        self.thread = None
        self.trip = None  # the trip sent and not yet taken back (by the loop thread)

    def send(self, trip):
        if self.thread is None:
            self.thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
            self.thread.start()
        self.trip = trip
        trip.lane = self
        self.trips.put(trip)

    def run(self, trip):
        """Run `trip` on this thread: its results, or the error it met, are kept on it."""
        try:
            trip.results = self.link.fetch_together(trip.batch)
        except Exception as exc:  # noqa: BLE001 - handed to the loop thread, which decides
            trip.error = exc
        trip.back_at = time.monotonic()

    def _serve(self):
        while (trip := self.trips.get()) is not None:
            self.run(trip)
            self.report(trip)

    def stop(self):
        """End the thread once the trip under way (if any) is done."""
        if self.thread is not None:
            self.trips.put(None)
            self.thread.join()
            self.thread = None


class TripKeeper:
    """Sending trips and taking them back, for Worker (engine/worker.py), whose state this is (a
    mixin): `lanes`, `returned`, `pending`, `done`, `more_due`, `link`; `_collect` and `_land`."""

    # A wake-up (a NOTIFY: a run was enqueued for now) came since the last claim was sent. The
    # claims under way then may have read job_runs before that run committed and come back
    # short; a short claim stops the next one, so the run waited for the poll interval (5 s).
    # Such claims count as full: the loop claims again at once.
    woken = False

    def _send(self, lane, limit, held):
        """Send the pending outcomes and a claim of up to `limit` runs on `lane`, with the runs
        done so far unless another trip under way writes them (this module's docstring)."""
        outcomes, self.pending = self.pending, []
        self.woken = self.woken and not limit
        counted = 0
        if not any(other.trip is not None and other.trip.counted for other in self.lanes):
            counted, self.done = self.done + len(outcomes), -len(outcomes)
        lane.send(Trip.build(self, outcomes, limit, held, counted))

    def _under_way(self):
        return sum(lane.trip is not None for lane in self.lanes)

    def _settle(self, start=True):
        """Wait for the trips under way, if any, and take them back (start: their runs start).
        A stopping worker's trips end by its cut (engine/link.py: its connects and answers are
        waited for no later than that, so no lane holds a link's lock past it)."""
        while len(self.returned) < self._under_way():
            self._collect(None)  # handlers' outcomes meanwhile wait in self.pending
        for trip in self._take_back(start):
            self._land(trip, start)

    def _take_back(self, start=True):
        """The trips the lanes handed back, checked, for the caller to land. If one failed for the
        database's sake, the others are landed (start: their runs start) before that is raised."""
        trips, self.returned = self.returned, []
        unavailable = None
        for trip in trips:
            trip.lane.trip = None
            try:
                self._check(trip)
            except DatabaseUnavailable as exc:
                unavailable = exc
        if unavailable is not None:
            for trip in trips:
                if trip.error is None:
                    self._land(trip, start)
            raise unavailable
        if claims := [trip for trip in trips if trip.limit]:
            self.more_due = self.woken or all(len(trip.claimed_rows()) == trip.limit for trip in claims)
        return trips

    def _check(self, trip):
        """Raise DatabaseUnavailable if the trip's transaction failed for the database's sake;
        if the database refused a value of one outcome, write them one by one instead."""
        if trip.error is None:
            return
        self.done += trip.counted  # its WORKER_SEEN was rolled back with it
        if isinstance(trip.error, DatabaseUnavailable):
            self.pending = trip.outcomes + self.pending  # written again once the database is back
        if not isinstance(trip.error, psycopg.Error):  # DatabaseUnavailable is not one
            raise trip.error
        self.done += finish_each(self.link.fetch, trip.outcomes)
        trip.outcomes, trip.error = [], None
        trip.results = [self.link.fetch(*trip.claim)] if trip.limit else []

