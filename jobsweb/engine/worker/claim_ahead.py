"""How many runs the worker claims at once: its free slots, plus a few runs of work ahead.

Claiming only for free slots makes short jobs wait on the loop's round trip: at
--concurrency 4, a claim takes at most 4 runs, the handlers finish them in microseconds and
then idle while the loop writes their outcomes and claims the next 4. So the claim also takes
about CLAIM_AHEAD_SECONDS of work at the rate this worker has been finishing runs lately: they
wait in the pool's queue (threads) or on its semaphore (async) and start the moment a slot
frees, while the loop's next round trip is under way.

Runs claimed ahead are held like running ones (Worker.held): heartbeats extend their leases,
a SIGTERM releases those not started (engine/stopping.py: no attempt recorded, the claim's
given back), their started_at counts from when their handler began (the time they waited is
added at FINISH_RUNS), they start in (priority, run_at, id) order whichever claim brought them,
and a worker killed outright leaves them to lease recovery like its running runs (which fails
the attempt the claim counted, so the claim never takes a run on its last attempt ahead of a
free slot: it would end dead without having run; nor the runs after it, which would start first).
Slow jobs finish few runs per second, so nothing is claimed ahead of them and no other worker
waits behind a run this one cannot start yet.
"""

CLAIM_AHEAD_SECONDS = 0.1  # of work, at the recent rate, claimed beyond the free slots
# Runs: the most claimed ahead whatever the rate. A claim under way must not run the buffer dry:
# a 1,000-run claim takes ~25 ms while a worker with two lanes runs ~20,000 no-op runs/s.
MAX_AHEAD = 2048
# Seconds over which the finishing rate is counted. Short, so that a worker that just found a
# backlog claims ahead after a few round trips (with 0.1 s, a fifth of a 20,000-run drain went by
# at --concurrency-sized claims); a window with fewer runs than the last halves the runs ahead
# instead of setting them from it alone, since runs finish in bursts of a claim at a time.
RATE_WINDOW = 0.02


class ClaimAhead:
    """The claim's size for a worker, from how fast its runs finish."""

    def __init__(self):
        self.ahead = 0  # runs to hold beyond the slots
        self.counted = 0  # runs finished since window_start
        self.window_start = None  # time.monotonic()

    def finished(self, count, now):
        """`count` runs ended (their outcomes are written or about to be)."""
        if self.window_start is None:
            self.window_start = now
        self.counted += count
        elapsed = now - self.window_start
        if elapsed >= RATE_WINDOW:
            self.ahead = max(min(MAX_AHEAD, int(self.counted / elapsed * CLAIM_AHEAD_SECONDS)), self.ahead // 2)
            self.counted, self.window_start = 0, now

    def limit(self, concurrency, busy, now):
        """How many runs to claim now for `concurrency` slots, with `busy` runs held (started or
        waiting to start); 0: none.

        With every slot taken, a claim waits until half the runs ahead have started: each
        claim costs a round trip, and a claim of one run per finished run would cost as many
        round trips as it saved.
        """
        if self.window_start is not None and now - self.window_start >= 2 * RATE_WINDOW:
            self.finished(0, now)  # nothing finished for a while: the rate fell
        # Fewer runs per CLAIM_AHEAD_SECONDS than slots: each takes longer than that, far longer
        # than a round trip, and a run claimed ahead would only wait.
        ahead = self.ahead if self.ahead >= concurrency else 0
        room = concurrency + ahead - busy
        if busy < concurrency or room >= max(1, ahead // 2):
            return max(room, 0)
        return 0
