"""What a worker claims: how many runs (engine/worker/claim_ahead.py), whether to claim again at once,
and the claim's parameters."""

import heapq

from ..jobs import registry
from .claim_ahead import ClaimAhead

# Due times kept at most (the soonest): past them, a run falls due unannounced and the poll
# finds it, as before this worker knew any.
DUE_TIMES_KEPT = 1000
# Seconds after a due time (the database's clock, read as a delay or an offset) that the loop
# claims: enough that run_at <= now() holds at the claim however the two clocks' reads interleave.
DUE_MARGIN = 0.01


class Claimer:
    """The claims of worker `worker`, with `concurrency` slots, for `queues` (None: every queue),
    each run leased for `lease` seconds."""

    def __init__(self, worker, *, concurrency, lease, queues):
        self.worker = worker
        self.concurrency = concurrency
        self.lease = lease
        self.queues = queues
        self.size = ClaimAhead()
        self.more_due = False  # the last claim took as many runs as it asked for: more may be waiting
        # A wake-up (a NOTIFY: a run was enqueued for now) came since the last claim was sent. The
        # claims under way then may have read job_runs before that run committed and come back
        # short; a short claim stops the next one, so the run waited for the poll interval (5 s).
        # Such claims count as full: the loop claims again at once.
        self.woken = False
        # time.monotonic() of the due times this worker knows, soonest first: the retries it wrote
        # (FINISH_RUNS returns their delays) and the runs it was told of (wakeup.py: a run enqueued
        # for later). The loop claims at each, not at its next poll (a run due in 0.6 s started
        # 5 s later); one passed counts as a wake-up.
        self.due = []

    def woke(self):
        self.woken = True

    def due_at(self, when):
        """A run falls due at time.monotonic() `when`: claim then."""
        if len(self.due) < DUE_TIMES_KEPT:
            heapq.heappush(self.due, when + DUE_MARGIN)

    def next_due(self, now):
        """The soonest due time still ahead, or None. Those passed by `now` count as a wake-up: a
        claim sent from now on finds their runs, and one under way, sent before, may not have."""
        while self.due and self.due[0] <= now:
            heapq.heappop(self.due)
            self.woken = True
        return self.due[0] if self.due else None

    def finished(self, count, now):
        """`count` runs ended (their outcomes are written or about to be)."""
        self.size.finished(count, now)

    def limit(self, busy, now, came_back=()):
        """How many runs to claim now with `busy` slots taken (0: none), given the trips that just
        `came_back`: a claim that came back short is sent again at the loop's next pass (a
        handler's return, a wake-up or the poll interval); after a full one, at once."""
        if not self.more_due and any(trip.limit for trip in came_back):
            return 0
        return self.size.limit(self.concurrency, busy, now)

    def at_once(self, busy, now):
        """Whether the loop should claim again without waiting: the last claim was full, or a run
        fell due since the last was sent, and a slot (or room ahead) is free."""
        return (self.more_due or self.woken) and self.size.limit(self.concurrency, busy, now) > 0

    def params(self, limit, busy):
        """CLAIM_RUNS's parameters for up to `limit` runs with `busy` slots taken. Sending them
        answers the wake-ups so far."""
        self.woken = False
        return {"worker": self.worker, "lease": self.lease, "limit": limit,
                "free": max(self.concurrency - busy, 0), "job_types": registry.names(), "queues": self.queues}

    def came_back(self, trips):
        """The claims among `trips` came back: full ones (or a wake-up meanwhile) mean more is due."""
        if claims := [trip for trip in trips if trip.limit]:
            self.more_due = self.woken or all(len(trip.claimed_rows()) == trip.limit for trip in claims)
