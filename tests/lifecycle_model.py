"""The run lifecycle as plain Python: what every run's state must be after each operation.

tests/test_lifecycle_model.py drives jobsweb's real code and this model side by side and compares
them after every step. The model follows docs/ARCHITECTURE.md §2 and docs/WORKFLOWS.md, with
the delete rule decided in issue 35 (a run not yet ended is cancelled first, then deleted).

Times are symbolic: a run's run_at is a key that sorts as the database's timestamps do.
(0, n) is an explicit time in the past, (1, tick) the database's now() in the step `tick`
(every step is one transaction that may set run_at), (2, 0) a retry due an hour or so later
(jitter: such runs are not ordered among themselves, and nothing makes them due but a retry),
(3, n) an explicit time in the future.

Cancel and retry from code (jobsweb.cancel(), jobsweb.retry(): engine/runs/run_control.py) and from
the command line (`flask jobs runs cancel/retry`) are not operations of their own here: they call
the same run_actions.cancel and run_actions.retry as the operator's steps of the model test, and
add only an audit entry and their refusals (RunStateError) around them.
"""

from dataclasses import dataclass, field

ENDED = ("succeeded", "dead", "cancelled")  # what the workflow trigger counts as ended
FINISHED = ENDED + ("skipped", "missed")  # never executes again: get_run().done, retention
UNFINISHED = ("queued", "running", "failed")  # holds its unique key; active for overlap
FAILED_ENDS = ("dead", "cancelled", "skipped", "missed")  # ended without succeeding
LATER = (2, 0)


def due(key):
    return key[0] <= 1


@dataclass
class Run:
    id: int
    job_type: str
    queue: str
    priority: int
    run_at: tuple
    max_attempts: int
    status: str
    attempts: int = 0
    attempt_rows: int = 0
    unique_key: str | None = None
    after: list = field(default_factory=list)  # the runs it waits for that still exist
    waiting_for: int | None = None
    run_after_failure: bool = False
    batch_id: int | None = None
    callback: str | None = None  # on_finish | on_success: a batch's callback run
    definition_id: int | None = None
    after_run_id: int | None = None  # overlap 'queue': not claimed while that run is active
    holder: str | None = None
    # job_runs.unbegun_claims (0032_unbegun_claims): claims in a row that held it ahead of a free
    # slot with no handler said to have begun; lease recovery gives such a run back uncharged.
    unbegun: int = 0
    cancel_requested: bool = False
    cause: tuple | None = None  # (run id, status) of the reason 'run X ended S'
    aged: bool = False  # finished_at made older than every retention
    retried_by_operator: bool = False
    released_when_all_succeeded: bool | None = None  # a callback: its members, when its batch released it
    stuck: bool = False  # waits again (retried or revived) while a run it waits for is dead or cancelled
    deleting: bool = False  # cancelled by CANCEL_BEFORE_DELETE (reason 'deleted')
    deleted: bool = False

    @property
    def ended(self):
        return self.status in ENDED


@dataclass
class Batch:
    id: int
    members: list
    pending: int = 0
    failures: int = 0
    finishes: int = 0
    callbacks: list = field(default_factory=list)  # run ids, oldest first

    @property
    def finished(self):
        return self.pending == 0


@dataclass
class Worker:
    id: str
    concurrency: int
    queues: list | None
    held: list = field(default_factory=list)  # run ids claimed and not yet finished
    started: list = field(default_factory=list)  # those whose handler started


class Model:
    def __init__(self, open_bugs=()):
        self.open = set(open_bugs)  # the test's OPEN: bugs found and not yet fixed, modelled as they behave
        self.runs = {}
        self.batches = {}
        self.tick = 0
        self.paused_queues = set()
        self.paused_types = set()
        self.reopened = []  # (batch id, role): callback runs the trigger created in this step
        self.ended_in_step = set()  # runs one statement of this step ended: their triggers' order is the table's

    # -- reading --------------------------------------------------------------------------

    def live(self):
        return [run for run in self.runs.values() if not run.deleted]

    def dependents(self, run_id):
        return [run for run in self.live() if run_id in run.after]

    def now(self):
        return (1, self.tick)

    def holding_key(self, key):
        return [run for run in self.live() if run.unique_key == key and run.status in UNFINISHED]

    # -- enqueue ----------------------------------------------------------------------------

    def wait_state(self, after, after_failure):
        """(status, waiting_for, run_after_failure, cause) of a new run of after= (dependencies.wait_state)."""
        if not after:
            return "queued", None, False, None
        anyway = after_failure == "run"
        statuses = {run_id: self.runs[run_id].status for run_id in sorted(set(after))}
        failed = [(run_id, status) for run_id, status in statuses.items() if status in FAILED_ENDS]
        pending = sum(1 for status in statuses.values() if status != "succeeded" and not (anyway and status in FAILED_ENDS))
        if failed and not anyway:
            return "cancelled", pending, False, failed[0]
        return ("waiting" if pending else "queued"), pending, anyway, None

    def add(self, run_id, job_type, queue, priority, run_at, max_attempts, *, after=(), after_failure="cancel",
            unique_key=None, batch_id=None, callback=None, status=None, definition_id=None, after_run_id=None):
        after = sorted(set(after))
        state, waiting_for, anyway, cause = self.wait_state(after, after_failure)
        run = Run(run_id, job_type, queue, priority, run_at, max_attempts, status or state, unique_key=unique_key,
                  after=after, waiting_for=waiting_for, run_after_failure=anyway, batch_id=batch_id,
                  callback=callback, definition_id=definition_id, after_run_id=after_run_id, cause=cause)
        self.runs[run_id] = run
        if batch_id is not None and callback is None:
            self.batches[batch_id].members.append(run_id)
        return run

    def close_batch(self, batch):
        """CLOSE_BATCH: counts from the members; the callbacks' status (before they exist)."""
        members = [self.runs[run_id] for run_id in batch.members]
        batch.pending = sum(1 for run in members if not run.ended)
        batch.failures = sum(1 for run in members if run.status in ("dead", "cancelled"))
        batch.finishes = int(batch.pending == 0)

    def callback_status(self, batch, role):
        if batch.pending:
            return "waiting"
        return "cancelled" if role == "on_success" and batch.failures else "queued"

    # -- status changes and the workflow trigger ----------------------------------------------

    def change(self, changes):
        """Statuses set by one statement ([(run, new status)]), then the trigger's effects row by row,
        as PostgreSQL fires AFTER ROW triggers once the statement has changed every row."""
        # With several rows, what their triggers end (the rows, and the runs below them cancelled
        # by one row's trigger before another's fired) is ended in row order, the table's.
        before = {run.id: run.status for run in self.live()} if len(changes) > 1 else {}
        olds = []
        for run, new in changes:
            olds.append((run, run.status))
            run.status = new
            run.aged = False
            run.stuck = False
        for run, old in olds:
            if old != run.status:
                self.trigger(run, old)
        self.ended_in_step |= {run_id for run_id, old in before.items()
                               if self.runs[run_id].status in ENDED and old not in ENDED}

    def trigger(self, run, old):
        """jobsweb_workflow_step (migration 0024_seams) for `run`, which just left `old`: its WHEN
        lets through only a change into or out of an end."""
        ended_now, ended_before = run.status in ENDED, old in ENDED
        if ended_now == ended_before:
            return
        if ended_now:
            if run.status == "succeeded":
                self.count_down([run.id], after_failure_only=False)
            else:
                self.cancel_below(run, "deleted" if run.deleting else run.status)
        else:
            if old != "succeeded":
                for dependent in self.dependents(run.id):
                    if not dependent.run_after_failure:
                        continue
                    if dependent.status == "waiting":
                        dependent.waiting_for += 1
                    elif (dependent.status == "queued" and dependent.attempts == 0
                          and "retry_leaves_released_dependents" not in self.open):
                        dependent.waiting_for += 1  # released by this run's end and not started: waits again
                        dependent.status = "waiting"
                self.revive_below(run, old)
            if run.waiting_for is not None and run.status == "queued":
                pending = sum(1 for a in run.after if not (
                    self.runs[a].status == "succeeded" or (run.run_after_failure and self.runs[a].status in FAILED_ENDS)))
                run.waiting_for = pending
                if pending:
                    run.status = "waiting"
                    run.stuck = not run.run_after_failure and any(self.runs[a].status in FAILED_ENDS for a in run.after)
        if run.batch_id is not None and run.callback is None:
            if ended_now:
                self.batch_ended(self.batches[run.batch_id], 1, int(run.status != "succeeded"))
            else:
                batch = self.batches[run.batch_id]
                batch.pending += 1
                batch.failures -= old != "succeeded"
                if batch.pending == 1 and batch.finishes > 0:
                    self.reopened.append(batch.id)  # new callback runs: the caller learns their ids

    def count_down(self, ended, after_failure_only):
        """jobsweb_count_down: runs waiting for the `ended` runs count each of them as ended."""
        for run_id in ended:
            for dependent in self.dependents(run_id):
                if dependent.status == "waiting" and (dependent.run_after_failure or not after_failure_only):
                    dependent.waiting_for -= 1
                    if dependent.waiting_for == 0:
                        dependent.status = "queued"  # waiting -> queued fires nothing
                        dependent.run_at = max(dependent.run_at, self.now())

    def batch_ended(self, batch, ended, failed):
        """jobsweb_batch_ended: at zero pending the callbacks are released, on_success cancelled
        if any member failed (and what waits for it with it: its trigger fires)."""
        batch.pending -= ended
        batch.failures += failed
        if batch.pending:
            return
        batch.finishes += 1
        succeeded = all(self.runs[m].status == "succeeded" for m in batch.members)
        released = []
        for callback in (self.runs[c] for c in batch.callbacks):
            if not callback.deleted and callback.status == "waiting":
                callback.run_at = self.now()
                callback.cause = None
                callback.released_when_all_succeeded = succeeded
                released.append((callback, "cancelled" if callback.callback == "on_success" and batch.failures
                                 else "queued"))
        self.change(released)

    def cancel_below(self, root, words):
        """jobsweb_cancel_below: every run waiting below `root` (not after_failure="run") is
        cancelled, a level of the graph at a time, its reason naming the smallest id it waits for
        in the level above; these do not fire the trigger: their batches and the after_failure="run"
        runs waiting for them are counted here."""
        frontier, ended, members = [root.id], [root.id], []
        while frontier:
            causes = {}
            for cause_id in frontier:
                for dependent in self.dependents(cause_id):
                    causes[dependent.id] = min(causes.get(dependent.id, cause_id), cause_id)
            frontier = []
            for run_id, cause_id in sorted(causes.items()):
                run = self.runs[run_id]
                if run.status == "waiting" and not run.run_after_failure:
                    run.status, run.aged = "cancelled", False
                    run.cause = (cause_id, words if cause_id == root.id else "cancelled")
                    run.stuck = False
                    frontier.append(run_id)
                    if run.batch_id is not None:
                        members.append(run.batch_id)
            ended += frontier
        self.count_down(ended, after_failure_only=True)
        for batch_id in sorted(set(members)):
            self.batch_ended(self.batches[batch_id], members.count(batch_id), members.count(batch_id))

    def revive_below(self, root, old):
        """jobsweb_revive_below: a retried run's end is undone a level at a time: the runs it
        cancelled, and those cancelled below them, wait again. Since 0026_retry_seams one that also
        waits for another run ended dead or cancelled stays cancelled, its reason naming that run."""
        frontier, reasons = [root.id], {(root.id, old)}
        while frontier:
            ids = sorted({d.id for f in frontier for d in self.dependents(f)})
            locked = [self.runs[i] for i in ids if self.runs[i].status == "cancelled" and self.runs[i].cause in reasons]
            if not locked:
                return
            blocked = {}
            if "retry_waits_for_failed" not in self.open:
                for run in locked:
                    failed = sorted(a for a in run.after if self.runs[a].status in FAILED_ENDS)
                    if failed:
                        blocked[run.id] = (failed[0], self.runs[failed[0]].status)
            for run in locked:
                if run.id in blocked:
                    run.cause = blocked[run.id]
            revived = [run for run in locked if run.id not in blocked]
            for run in revived:
                run.cause = None
                run.status, run.aged = "waiting", False
            for run in revived:  # counted once every revived row has its new status, as the UPDATE does
                run.waiting_for = sum(1 for a in run.after if self.runs[a].status != "succeeded")
                run.stuck = any(self.runs[a].status in FAILED_ENDS for a in run.after)
            for run in revived:  # their triggers fire at the end of the statement
                self.trigger(run, "cancelled")
            frontier = [run.id for run in revived]
            reasons = {(run.id, "cancelled") for run in revived}

    # -- the worker's statements ----------------------------------------------------------------

    def claimable(self, run, worker):
        if run.deleted or run.status not in ("queued", "failed") or not due(run.run_at):
            return False
        if run.queue in self.paused_queues or run.job_type in self.paused_types:
            return False
        if worker.queues is not None and run.queue not in worker.queues:
            return False
        if run.after_run_id is not None:
            before = self.runs[run.after_run_id]
            if not before.deleted and before.status in UNFINISHED:
                return False
        return True

    def claim_order(self, worker, limit, free):
        """The runs CLAIM_RUNS takes: claimable ones in (priority, run_at, id) order; past the
        first `free` (claimed ahead), up to the first one on its last attempt, which is never
        claimed ahead: a worker killed before it began would have spent it."""
        candidates = sorted((run for run in self.live() if self.claimable(run, worker)),
                            key=lambda r: (r.priority, r.run_at, r.id))
        taken = []
        for place, run in enumerate(candidates, start=1):
            if len(taken) == limit:
                break
            if place > free and run.attempts + 1 >= run.max_attempts:
                break  # 0025_claim_order: claiming ahead stops at the first run on its last attempt
            taken.append(run.id)
        return taken

    def claimed(self, worker, ids, free):
        """CLAIM_RUNS took `ids` (in claim order) for `free` free slots: the runs beyond those were
        claimed ahead, one more claim that holds them unbegun (0032_unbegun_claims)."""
        for place, run_id in enumerate(ids):
            run = self.runs[run_id]
            run.attempts += 1
            run.holder = worker.id
            run.unbegun = 0 if place < free else min(run.unbegun + 1, 32767)
        self.change([(self.runs[run_id], "running") for run_id in ids])
        worker.held += ids
        self.start_handlers(worker)

    def start_handlers(self, worker):
        """A worker's free slots take the held runs not yet started, in (priority, run_at, id) order."""
        waiting = sorted((self.runs[run_id] for run_id in worker.held if run_id not in worker.started),
                         key=lambda r: (r.priority, r.run_at, r.id))
        for run in waiting[:max(worker.concurrency - len(worker.started), 0)]:
            worker.started.append(run.id)

    def began(self, worker, ids):
        """RUNS_BEGAN: the worker says the handlers of these runs it holds began (its next round trip)."""
        for run_id in ids:
            run = self.runs[run_id]
            if run.status == "running" and run.holder == worker.id:
                run.unbegun = 0

    def recovered_as(self, run, bound):
        """What lease recovery makes of a lost worker's run: released if its claim held it ahead and
        no handler was said to begin, at most `bound` claims in a row; else a failed attempt."""
        return "released" if 0 < run.unbegun <= bound else "failed"

    def finish_status(self, run, outcome, give_up=False):
        """FINISH_RUNS' `decided`."""
        if outcome == "succeeded":
            return "succeeded"
        if outcome == "cancelled" or run.cancel_requested:
            return "cancelled"
        if outcome in ("interrupted", "released"):
            return "queued"
        if give_up or run.attempts >= run.max_attempts:
            return "dead"
        return "failed"

    def finished(self, finishes):
        """FINISH_RUNS for [(run, outcome, give_up, retry key)]: one statement."""
        changes = []
        for run, outcome, give_up, retry_at in finishes:
            new = self.finish_status(run, outcome, give_up)
            run.holder = None
            if outcome == "released":
                run.attempts -= 1  # never began: nothing recorded, the claim's attempt taken back
            else:
                run.attempt_rows += 1
                run.unbegun = 0  # a release keeps its count: the next claim ahead counts on
            if new == "failed":
                run.run_at = retry_at
            elif new == "queued" and outcome == "interrupted":
                run.run_at = self.now()
                run.max_attempts += 1  # an interrupted attempt is given back
            changes.append((run, new))
        self.change(changes)

    def drop_held(self, worker, run_ids):
        worker.held = [r for r in worker.held if r not in run_ids]
        worker.started = [r for r in worker.started if r not in run_ids]

    # -- operators and retention --------------------------------------------------------------

    def retry(self, ids):
        """RETRY_RUNS: failed, dead and cancelled runs queued again; a dead or cancelled run whose
        unique key another unfinished run holds is left alone (in id order: the first one wins).
        Since 0026_retry_seams so is a run that waits for one ended dead or cancelled, unless it
        runs after failure or that run is retried with it (and what waits for it among these)."""
        ids = sorted(set(ids))
        holders = {run.unique_key for run in self.live() if run.unique_key and run.status in UNFINISHED}
        retryable = []
        for run_id in ids:
            run = self.runs[run_id]
            if run.deleted or run.status not in ("failed", "dead", "cancelled"):
                continue
            if run.unique_key is not None and run.status != "failed":
                if run.unique_key in holders:
                    continue
                holders.add(run.unique_key)
            retryable.append(run)
        if "retry_waits_for_failed" not in self.open:
            chosen = {run.id for run in retryable}
            failed_ends = {run.id for run in self.live() if run.status in FAILED_ENDS and run.id not in chosen}
            blocked, grew = set(), True
            while grew:
                grew = False
                for run in retryable:
                    if run.id not in blocked and not run.run_after_failure and \
                            any(a in failed_ends or a in blocked for a in run.after):
                        blocked.add(run.id)
                        grew = True
            retryable = [run for run in retryable if run.id not in blocked]
        changes = []
        for run in retryable:
            run.run_at = self.now()
            run.cancel_requested = False
            run.retried_by_operator = True
            changes.append((run, "queued"))
        self.change(changes)
        return [run.id for run, _ in changes]

    def cancel(self, ids):
        """CANCEL_WAITING, then REQUEST_CANCEL for the running ones."""
        runs = [self.runs[run_id] for run_id in sorted(set(ids)) if not self.runs[run_id].deleted]
        self.change([(run, "cancelled") for run in runs if run.status in ("waiting", "queued", "failed")])
        for run in runs:
            if run.status == "running" and not run.cancel_requested:
                run.cancel_requested = True

    def delete(self, ids):
        """Issue 35's rule: a run not yet ended is cancelled first (in the same transaction), then
        deleted with the rest; a running run is kept."""
        runs = [self.runs[run_id] for run_id in sorted(set(ids)) if not self.runs[run_id].deleted]
        doomed = [run for run in runs if run.status in ("waiting", "queued", "failed")]
        for run in doomed:
            run.deleting = True
        self.change([(run, "cancelled") for run in doomed])
        self.remove([run for run in runs if run.status != "running"])

    def prune(self):
        """Retention: ended runs whose finished_at was made old."""
        self.remove([run for run in self.live() if run.aged and run.status in FINISHED])

    def remove(self, runs):
        gone = {run.id for run in runs}
        for run in runs:
            run.deleted = True
        for run in self.live():
            run.after = [a for a in run.after if a not in gone]  # job_run_deps: ON DELETE CASCADE
            if run.after_run_id in gone:
                run.after_run_id = None  # ON DELETE SET NULL
