"""The runs a worker holds: started on its pools as their claims land, timed out, stopped, and
turned into outcomes when their handlers return or the worker gives them up.

Runs claimed ahead of a free slot (engine/worker/claim_ahead.py) are held like running ones: they wait
for a thread (sync handlers) or for the event loop's semaphore (async ones). Only the loop thread
changes what is held; the stopper and handler threads read it (`snapshot`, `get`).
"""

import logging
import time

from ...core.logs import run_event
from ..jobs import registry, signals
from .async_execution import AsyncPool
from .child_process import Children, Terminated
from .execution import Deadlines, Held, Pool, released

log = logging.getLogger("jobsweb.worker")

# Seconds a handler of a run claimed ahead has run before the worker's round trip says it began
# (upkeep.RUNS_BEGAN), and at most between two looks of the loop while such runs are held (a slot
# freed by a handler's return wakes it, but the run it starts begins just after). A handler that
# returns sooner has its outcome written instead: in a drain of short runs, hundreds of runs that
# had begun and ended were said to have begun, one row version more each (the drain's PostgreSQL
# CPU per run rose by a third). Lease recovery gives a run back uncharged until it is said.
BEGAN_AFTER = 0.25


class HeldRuns:
    """The runs worker `worker` holds, run by up to `concurrency` handlers at once.

    `report` takes what a handler thread or the event loop reports back (from their threads);
    `context` makes a run's JobContext (the worker's, with its lease and progress hooks);
    `failures` (execution.Failures) says what a timed-out or given-up attempt comes to.
    """

    def __init__(self, app, worker, *, concurrency, lease, default_timeout, failures, report, context):
        self.worker = worker
        self.concurrency = concurrency
        self.lease = lease  # seconds: the worker's, the shortest a run may have
        self.default_timeout = default_timeout
        self.failures = failures
        self.context = context
        self.runs = {}  # run id -> Held
        self.deadlines = Deadlines()  # of the held runs that have a timeout
        self.busy = 0  # slots taken: runs held, including handlers this worker gave up on
        # Per claim, [its runs held ahead (CLAIM_RUNS marked them not begun), how many of them the
        # worker has said began or stopped holding]: began_ahead() reads them (0032_unbegun_claims).
        self.unmarked = []
        # Threads for sync handlers (a `cancel="terminate"` one's in a child process the thread watches)
        # and an event loop for async ones, each started when first needed.
        self.pool = Pool(app, concurrency, report, run=Children(app).run)
        self.async_pool = AsyncPool(app, concurrency, report)

    def __len__(self):
        return len(self.runs)

    def __contains__(self, run_id):
        return run_id in self.runs

    def taken(self):
        """Slots taken: runs held, and handlers given up on that have not returned yet."""
        return self.busy

    def ids(self):
        return list(self.runs)

    def get(self, run_id):
        return self.runs.get(run_id)

    def snapshot(self):
        """The held runs, from any thread: dict.copy() is one step under the GIL, while iterating
        the dict itself fails if the loop adds or removes a run meanwhile."""
        return list(self.runs.copy().values())

    def drop(self, held):
        """Stop holding `held` (its lease was lost); whether it was still held."""
        if self.runs.get(held.ctx.run_id) is not held:
            return False
        del self.runs[held.ctx.run_id]
        return True

    def next_deadline(self):
        """time.monotonic() when the first held run times out, or None."""
        return self.deadlines.next(self.runs)

    def start(self, rows, back_at, free=None):
        """Start the claimed `rows` (CLAIM_RUNS's), whose claim came back at `back_at`. `free`: the
        claim's free slots (its `free`; None: not a claim of this worker's loop); the rows after
        that many were claimed ahead and marked not begun until began_ahead() says they began."""
        threaded = []
        helds = []
        for (run_id, job_type_name, payload, attempt, max_attempts, definition_id, run_timeout, run_lease,
             backoff_base, backoff_cap, priority, run_at) in rows:
            job = registry.get(job_type_name)
            ctx = self.context(run_id, job_type_name, payload, attempt, max_attempts, definition_id)
            # A definition's own settings (copied onto its runs) come before the job type's.
            timeout = run_timeout or job.timeout or self.default_timeout
            deadline = time.monotonic() + timeout if timeout else None
            # Only a run claimed ahead (no slot free as it lands) counts the time it waits for
            # one: a run with a slot starts now, and its started_at stays the claim's, the time
            # a limited queue's rate window counts (such a queue gives no runs ahead).
            landed = back_at if self.busy >= self.concurrency else None
            # A definition may lengthen the lease, never shorten it: heartbeats come every third
            # of this worker's lease, and a shorter one would expire between two of them.
            held = Held(ctx, job, max(run_lease or 0, self.lease), deadline, timeout, (backoff_base, backoff_cap),
                        landed=landed, order=(priority, run_at, run_id))
            self.runs[run_id] = held
            helds.append(held)
            self.deadlines.add(run_id, held)
            self.busy += 1
            # DEBUG: one INFO line per run, when it ends (its duration says when it started).
            run_event(log, logging.DEBUG, "started", "run %d %s started (attempt %d of %d)", run_id,
                      job_type_name, attempt, max_attempts, run_id=run_id, job_type=job_type_name,
                      attempt=attempt, worker=self.worker)
            if job.is_async:
                self.async_pool.submit(held)
            else:
                threaded.append(held)
        if threaded:
            self.pool.submit(threaded)  # one lock and one wake-up for the batch
        # The database's "ahead" (beyond `free` when the claim was sent) and `landed` above (no slot
        # as it lands) may differ: slots free up meanwhile. The mark is the database's, so that is
        # what is tracked; a run ahead that starts at once is said to have begun like any other.
        if free is not None and len(helds) > free:
            self.unmarked.append([helds[free:], 0])

    def began_ahead(self, now):
        """(run ids, attempts) of the runs claimed ahead whose handlers began BEGAN_AFTER seconds or
        more before `now` (time.monotonic()) and are still held, not said before: the next round
        trip clears their claim's mark (upkeep.RUNS_BEGAN).

        Both pools start the runs waiting for a slot smallest (priority, run_at, id) first, and a
        claim's rows come in that order: the runs of a claim that began are the first ones, and
        the look stops at its first run not begun long enough, so it costs a run once, not a pass
        over every held run each trip. (Two threads taking two runs at once may set `began` out
        of order: the later one is said a trip later.) A run no longer held is passed over: its
        outcome is pending or written, and its finish sets 0 itself."""
        ids, attempts = [], []
        since = now - BEGAN_AFTER
        for claim in self.unmarked:
            runs, said = claim
            while said < len(runs):
                held = runs[said]
                is_held = self.runs.get(held.ctx.run_id) is held
                if is_held and (held.began is None or held.began > since):
                    break
                if is_held:
                    ids.append(held.ctx.run_id)
                    attempts.append(held.ctx.attempt)
                said += 1
            claim[1] = said
        self.unmarked = [claim for claim in self.unmarked if claim[1] < len(claim[0])]
        return ids, attempts

    def awaits_beginning(self):
        """Whether a run claimed ahead is held whose handler has not been said to begin: the loop then
        looks again within BEGAN_AFTER seconds, as its beginning wakes no one."""
        return bool(self.unmarked)

    def returned(self, finished, stopping):
        """The outcome of a handler's return (execution.Finished), or None when the worker had
        already given the run up."""
        self.busy -= 1
        held = finished.held
        ctx = held.ctx
        if self.runs.get(ctx.run_id) is not held:
            # Timed out or lease lost: the attempt was already finished without this result.
            if isinstance(finished.exc, Terminated):  # its child process, ended as it was given up
                log.info("run %d %s: attempt %d given up: %s", ctx.run_id, ctx.job_type, ctx.attempt, finished.exc)
                return None
            log.warning("run %d %s: attempt %d returned after this worker gave it up; result ignored",
                        ctx.run_id, ctx.job_type, ctx.attempt)
            return None
        if not finished.begun and stopping:
            return self._unstarted(held)  # it waited for a thread and saw the stop request first
        del self.runs[ctx.run_id]
        return self.failures.outcome_of(self.worker, finished, stopping=stopping)

    def timed_out(self, now):
        """The outcomes of the held runs whose timeout passed by `now`; their handlers are asked
        to stop and given up."""
        outcomes = []
        for run_id in self.deadlines.due(self.runs, now):
            held = self.runs.pop(run_id)
            signals.attempt_over(held, "timed_out")  # before the handler is told: its span ends now
            held.stop(force=True)
            log.warning("run %d %s: attempt %d timed out after %gs", run_id, held.ctx.job_type,
                        held.ctx.attempt, held.timeout)
            ended = ": its process is ended" if held.job.cancel == "terminate" else ""
            outcome = self.failures.failed(self.worker, held.job, held.ctx, "timeout",
                                           f"timed out after {held.timeout:g} seconds{ended}", backoff=held.backoff)
            outcome.waited = held.waited()
            outcomes.append(outcome)
        return outcomes

    def stop_all(self):
        """When the loop sees the stop request: the runs waiting for a thread, released; every
        other held run asked to stop. The stopper thread has usually asked the running ones
        already; under load the loop may come first, and then it is the one that says so."""
        outcomes = self.release_waiting()
        # Every held run is asked; those whose handler began, and that it asked first, are counted.
        asked = sum(held.stop() and held.began is not None for held in self.runs.values())
        if asked:
            log.info("worker is shutting down: asked %d running job(s) to stop", asked)
        return outcomes

    def release_waiting(self):
        """The outcomes that release the runs no thread has begun (taken back from the pool)."""
        withdrawn = self.pool.withdraw()
        for held in withdrawn:
            self.busy -= 1  # counted from its claim on, as if a thread ran it
        if withdrawn:
            log.info("released %d run(s) claimed ahead and not started", len(withdrawn))
        return [self._unstarted(held) for held in withdrawn]

    def give_up_all(self):
        """At the shutdown deadline: the outcomes of the runs still held, interrupted attempts."""
        leftover = list(self.runs.values())
        self.runs.clear()
        outcomes = []
        for held in leftover:
            signals.attempt_over(held, "interrupted")
            held.stop(force=True)  # an async one claimed ahead and not started must now never start
            # "released back to the queue" is said once FINISH_RUNS has written it (log_finished).
            log.warning("run %d %s: still running at the shutdown deadline; its attempt %d is interrupted",
                        held.ctx.run_id, held.ctx.job_type, held.ctx.attempt)
            outcome = self.failures.interrupted(self.worker, held.ctx, "shut down before the run finished")
            outcome.waited = held.waited()
            outcomes.append(outcome)
        return outcomes

    def close(self):
        self.async_pool.stop()

    def _unstarted(self, held):
        """`held` never began and never will here: it goes back to the queue with no attempt."""
        held.stop(force=True)
        del self.runs[held.ctx.run_id]
        return released(held.ctx.run_id, held.ctx.job_type, held.ctx.attempt, self.worker)
