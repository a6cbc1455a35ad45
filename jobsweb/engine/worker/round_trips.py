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

import itertools
import queue
import threading
import time
from dataclasses import dataclass, field

import psycopg

from .. import statements, upkeep
from ..link import DatabaseUnavailable
from .execution import Outcome
from .outcome_writes import finish_each, finish_params, log_finished

# Outcomes remembered after they were written: a failover to an asynchronous standby loses the
# commits of the last moments before it (milliseconds to seconds of finishes), and a run among
# these that LOST_CLAIMS finds running again is said to have lost its outcome, not its claim.
# 10,000: a second of a busy worker's finishes; a dict entry each, ~0.1 us a run.
LATELY_WRITTEN = 10_000


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
    def build(cls, worker, outcomes, claim=None, counted=0, began=None):
        """The statements for worker `worker`: write `outcomes`, say that the runs claimed ahead in
        `began` began (HeldRuns.began_ahead's (ids, attempts); None or no ids: nothing to say),
        claim with CLAIM_RUNS's `claim` parameters (Claimer.params; None: no claim), and add
        `counted` runs done to its job_workers row."""
        trip = cls(outcomes, claim["limit"] if claim else 0, counted)
        if outcomes:
            trip.batch.append((statements.FINISH_RUNS, finish_params(outcomes)))
        if began and began[0]:
            # After the finish (results[0]) and before the claim (results[-1]), in the same commit.
            trip.batch.append((upkeep.RUNS_BEGAN, {"worker": worker, "ids": began[0], "attempts": began[1]}))
        if counted:
            # The count of runs done is written with them (at heartbeats only, the Workers page said 0).
            trip.batch.append((upkeep.WORKER_SEEN, {"worker": worker, "done": counted}))
        if claim:
            trip.batch.append((statements.CLAIM_RUNS, claim))
        return trip

    @property
    def claim(self):
        """The CLAIM_RUNS (sql, params) of this trip, if it claims."""
        return self.batch[-1] if self.limit else None

    def free(self):
        """The free slots its claim was sent for (CLAIM_RUNS's `free`; None: no claim): the runs
        after that many were claimed ahead (HeldRuns.start)."""
        return self.batch[-1][1]["free"] if self.limit else None

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


class Trips:
    """Worker `worker`'s round trips: the outcomes not yet written, the two lanes (claims on
    `link`, many outcomes at once on `finish_link`, opened when first used), and the runs done
    since job_workers.runs_done was last counted. Lanes hand trips back to `report` (the loop's
    queue of things to take); the loop gives them back here with `came_back`."""

    def __init__(self, worker, link, finish_link, report):
        self.worker = worker
        self.link = link
        self.lanes = (Lane(link, report, "jobsweb-claims"), Lane(finish_link, report, "jobsweb-finishes"))
        self.pending: list[Outcome] = []  # attempts that ended and are not yet written
        self.returned = []  # trips the lanes handed back, not yet taken
        self.done = 0  # runs written since job_workers.runs_done was last updated
        self.lately = {}  # run id -> attempt of the outcomes written lately (lately_written)

    def add(self, outcomes):
        self.pending += outcomes

    def pending_count(self):
        return len(self.pending)

    def pending_ids(self):
        return [o.run_id for o in self.pending]

    def came_back(self, trip):
        self.returned.append(trip)

    def under_way(self):
        return sum(lane.trip is not None for lane in self.lanes)

    def awaited(self):
        """Whether a trip under way has not come back yet."""
        return len(self.returned) < self.under_way()

    def claim_lane_free(self):
        return self.lanes[0].trip is None

    def finish_lane_free(self):
        return self.lanes[1].trip is None

    def send_claim(self, claim, began=None):
        """Send the pending outcomes, the runs claimed ahead that `began` (Trip.build) and a claim
        (CLAIM_RUNS's parameters; None: none) on the claims' lane, in one commit."""
        self._send(self.lanes[0], claim, began)

    def send_finishes(self):
        """Send the pending outcomes alone, on the finishes' lane."""
        self._send(self.lanes[1], None)

    def _send(self, lane, claim, began=None):
        """With the runs done so far, unless another trip under way writes them (this module's
        docstring)."""
        outcomes, self.pending = self.pending, []
        counted = 0
        if not any(other.trip is not None and other.trip.counted for other in self.lanes):
            counted, self.done = self.done + len(outcomes), -len(outcomes)
        lane.send(Trip.build(self.worker, outcomes, claim, counted, began))

    def take_back(self):
        """The trips the lanes handed back, checked, and the DatabaseUnavailable one of them met
        (None: none did): the caller lands the others before raising it."""
        trips, self.returned = self.returned, []
        unavailable = None
        for trip in trips:
            trip.lane.trip = None
            try:
                self.check(trip)
            except DatabaseUnavailable as exc:
                unavailable = exc
        return trips, unavailable

    def write_now(self):
        """A trip that writes every pending outcome, run on this thread on the claims' lane (None:
        nothing pending). Raises DatabaseUnavailable (the outcomes pending again) if it failed."""
        if not self.pending:
            return None
        outcomes, self.pending = self.pending, []
        trip = Trip.build(self.worker, outcomes)
        self.lanes[0].run(trip)
        self.check(trip)
        return trip

    def written(self, trip):
        """Log the outcomes `trip` wrote and count them as runs done; the time.monotonic() when
        each retry it wrote falls due."""
        if not trip.outcomes:
            return []
        self.done += log_finished(trip.outcomes, trip.finished_rows(), self._written_before)
        attempts = {o.run_id: o.attempt for o in trip.outcomes}
        retries = []
        for run_id, status, retry_in, _ in trip.finished_rows():
            self.lately[run_id] = attempts[run_id]
            if status == "failed":
                retries.append(trip.back_at + float(retry_in))
        # The oldest go, a dict keeping insertion order. Taken in one pass a trip: next(iter()) a
        # run walked the slots its deletions had emptied at the front each time (until the dict
        # was resized), a few hundred a run, 5% of a busy worker's Python (issue 55).
        if (excess := len(self.lately) - LATELY_WRITTEN) > 0:
            for run_id in list(itertools.islice(self.lately, excess)):
                del self.lately[run_id]
        return retries

    def lately_written(self):
        """Run id -> attempt of the outcomes written lately (the last LATELY_WRITTEN): a run among
        them that LOST_CLAIMS finds running again lost its outcome with a failover."""
        return self.lately

    def _written_before(self, outcomes):
        """The ids of `outcomes`, refused by FINISH_RUNS's guard, that an earlier send of theirs
        wrote (upkeep.WRITTEN_BEFORE); none when the database cannot say."""
        try:
            rows = self.link.fetch(upkeep.WRITTEN_BEFORE, {
                "worker": self.worker, "ids": [o.run_id for o in outcomes], "attempts": [o.attempt for o in outcomes],
                "outcomes": [o.outcome for o in outcomes], "error_types": [o.error_type for o in outcomes]})
        except DatabaseUnavailable:
            return set()
        return {run_id for (run_id,) in rows}

    def check(self, trip):
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

    def seen(self):
        """Count the runs done on this worker's job_workers row and mark it seen: (whether an
        operator quieted it, who asked it to stop or None)."""
        rows = self.link.fetch(upkeep.WORKER_SEEN, {"worker": self.worker, "done": self.done})
        self.done = 0
        if not rows:
            return False, None
        quiet, stop, by = rows[0]
        return bool(quiet), (by or "someone") if stop else None

    def stopped(self):
        """Mark this worker's row stopped, with the runs done since last counted."""
        self.link.fetch(upkeep.WORKER_STOPPED, {"worker": self.worker, "done": self.done})

    def stop(self):
        """End the lanes' threads once their trips under way (if any) are done."""
        for lane in self.lanes:
            lane.stop()
