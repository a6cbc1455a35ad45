"""The worker's round trip, finish and claim in one transaction, sent on a thread of its own.

With short jobs a worker alternates two costs: PostgreSQL finishing and claiming a batch, and
Python starting that batch's runs, taking their outcomes and logging them. Done one after the
other, each side idles while the other works (in the bench, ~60 us of statement time and
~30 us of Python per no-op run). So the loop hands the transaction to a Lane thread and keeps
working: the runs of the trip that came back start, and the outcomes of the runs before them
are taken, while PostgreSQL writes and claims.

Still one transaction at a time on the worker's one connection, in the order sent, so every
guarantee of the synchronous round trip holds: a run's outcome is written before the claim
that refills its slot, and a claim that committed unseen (the connection broke) is found by
LOST_CLAIMS. Only the loop thread sends and takes trips back.
"""

import queue
import threading
from dataclasses import dataclass, field

from . import registry, statements, upkeep
from .execution import Outcome, finish_params


@dataclass
class Trip:
    """One finish-and-claim transaction: what was sent and what came back."""

    outcomes: list[Outcome]  # written by its FINISH_RUNS (none: no FINISH_RUNS)
    limit: int  # runs claimed at most (0: no CLAIM_RUNS)
    batch: list = field(default_factory=list)  # (sql, params) in the order they run
    results: list | None = None  # rows of each statement, once back
    error: BaseException | None = None  # what Link.fetch_together raised instead

    @classmethod
    def build(cls, worker, outcomes, limit, busy):
        """The statements for `worker` (a Worker): write `outcomes`, claim up to `limit` runs
        with `busy` of its slots taken."""
        trip = cls(outcomes, limit)
        if outcomes:
            # The count of runs done is written with them (at heartbeats only, the Workers page said 0).
            trip.batch += [(statements.FINISH_RUNS, finish_params(outcomes)),
                           (upkeep.WORKER_SEEN, {"worker": worker.id, "done": len(outcomes)})]
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

    def __init__(self, link, report):
        self.link = link
        self.report = report
        self.trips = queue.SimpleQueue()
        self.thread = None

    def send(self, trip):
        if self.thread is None:
            self.thread = threading.Thread(target=self._serve, name="jobsweb-lane", daemon=True)
            self.thread.start()
        self.trips.put(trip)

    def run(self, trip):
        """Run `trip` on this thread: its results, or the error it met, are kept on it."""
        try:
            trip.results = self.link.fetch_together(trip.batch)
        except Exception as exc:  # noqa: BLE001 - handed to the loop thread, which decides
            trip.error = exc

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
