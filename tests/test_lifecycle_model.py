"""The model test of the run lifecycle (issue 35): every operation a user, an operator or a worker
can do to runs, through jobsweb's real code, against the session's PostgreSQL, with the plain
Python model of tests/lifecycle_model.py beside it. After every step the database must match the
model (check) and keep the invariants (invariants, check_claimable). The only writes behind the API's back stand for
time passing: a dead worker's locked_until, an old finished_at, a definition's next_run_at.

`make test` runs the same derandomized examples each time. A longer run: TEST_MODEL_EXAMPLES=5000,
and TEST_MODEL_RANDOM=1 for new examples at each run (make test-model); a failure prints the
steps and a @reproduce_failure blob that replays it.
"""

import os
import re
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from jobsweb import PermanentError, batch, chain, enqueue, enqueue_many, get_run
from jobsweb.core.database import db, libpq_url
from jobsweb.engine.runs import batch_status, run_actions
from jobsweb.engine.jobs import flow, registry
from jobsweb.engine import statements, upkeep
from jobsweb.engine.worker.execution import Failures, Finished, Held, interrupted, released
from jobsweb.engine.worker.outcome_writes import finish_params
from jobsweb.engine.worker.leases import lost_claims
from jobsweb.engine.worker.lease_recovery import UNBEGUN_CLAIMS, recover_expired_leases
from jobsweb.engine.link import Link
from jobsweb.engine.jobs.registry import JobContext
from jobsweb.ops import retention
from jobsweb.scheduling import definitions
from jobsweb.scheduling.materialise import materialise_due
from tests.conftest import empty_tables
from tests.lifecycle_model import ENDED, FINISHED, LATER, UNFINISHED, Batch, Model, Worker

EXAMPLES = int(os.environ.get("TEST_MODEL_EXAMPLES", "100"))
RANDOM = os.environ.get("TEST_MODEL_RANDOM") == "1"  # explore new examples (reproduce with the printed blob)
# TEST_MODEL_SHRINK=0: report the first failing sequence as found (quick mutation runs).
PHASES = [phase for phase in Phase if phase != Phase.shrink or os.environ.get("TEST_MODEL_SHRINK") != "0"]
STEPS = 30

JOB_TYPES = ("jobsweb.noop", "jobsweb.sleep")  # the second one is the one paused
QUEUES = ("default", "other")
PAST = datetime(2001, 1, 1, tzinfo=timezone.utc)
FUTURE = datetime(2200, 1, 1, tzinfo=timezone.utc)
LEASE = 60.0  # seconds
DUE_NOW = Failures((0, 0), 1000, 1000)  # a failed attempt's retry is due at once
DUE_LATER = Failures((3600, 3600), 1000, 1000)  # ... in about an hour
# (name, overlap policy, queue, priority): "@every 7d" from a next_run_at set to now() has one due
# slot, new at every materialisation.
DEFINITIONS = (("model-skip", "skip", "default", 0), ("model-queue", "queue", "other", 1))
# Bugs this model found that are not fixed yet: each switches its check off until the fix lands
# (then delete the entry). The report of issue 35 gives each one's reproduction.
OPEN = {}
# TEST_MODEL_FIXED=name,...: check those as fixed (to try a fix before its entry is deleted).
OPEN = {name: why for name, why in OPEN.items() if name not in os.environ.get("TEST_MODEL_FIXED", "").split(",")}
REASON = re.compile(r"run (\d+) (?:ended (\w+)|was (deleted))")

picks = st.lists(st.integers(0, 63), min_size=1, max_size=3)
whens = st.sampled_from([None, ("past", 0), ("past", 1), ("future", 0), ("future", 1)])
options = st.fixed_dictionaries({"job_type": st.sampled_from(JOB_TYPES), "queue": st.sampled_from(QUEUES),
                                 "priority": st.sampled_from([-1, 0, 1]), "when": whens,
                                 "max_attempts": st.sampled_from([1, 2, 3])})
dependencies = st.none() | st.tuples(picks, st.sampled_from(["cancel", "run"]))
pools = st.sampled_from(["any", "eligible", "awaited", "keyed"])  # which runs an operator's action picks from


def run_at_of(when):
    """(the run_at to pass, or None; its model key, None for now)."""
    if when is None:
        return None, None
    kind, n = when
    base, order = (PAST, 0) if kind == "past" else (FUTURE, 3)
    return base + timedelta(minutes=n), (order, n)


class RunLifecycle(RuleBasedStateMachine):
    def __init__(self, app, sql):
        super().__init__()
        self.app, self.sql = app, sql
        self.context = app.app_context()
        self.context.push()
        with psycopg.connect(libpq_url(db.engine), autocommit=True) as conn:
            empty_tables(conn)
        self.link = Link(libpq_url(db.engine))
        self.model = Model(OPEN)
        self.workers = [Worker("model-w1", 1, None), Worker("model-w2", 2, ["other"]), Worker("model-w3", 2, None)]
        self.generation = 0
        self.stale = []  # (worker id, run id, attempt, job type): outcomes of workers that died
        self.definitions = {}  # name -> id, defined at their first materialisation
        self.seen = {}  # run id -> status at the last check: get_run() is read for the runs that changed

    def teardown(self):
        self.link.close()
        db.session.remove()
        self.context.pop()

    # -- helpers ---------------------------------------------------------------------------

    def step(self):
        self.model.tick += 1
        self.model.reopened = []
        self.model.ended_in_step = set()

    def pick(self, candidates, n):
        candidates = sorted(candidates)
        return candidates[n % len(candidates)] if candidates else None

    def picked(self, candidates, ns):
        candidates = sorted(candidates)
        return sorted({candidates[n % len(candidates)] for n in ns}) if candidates else []

    def live_ids(self, statuses=None):
        return [run.id for run in self.model.live() if statuses is None or run.status in statuses]

    def targets(self, among, statuses):
        """Runs an operator's action may pick: any, those in `statuses`, those others wait for, or
        those with a unique key."""
        if among == "awaited":
            return sorted({a for run in self.model.live() for a in run.after})
        if among == "keyed":
            return [run.id for run in self.model.live() if run.unique_key is not None]
        return self.live_ids(statuses if among == "eligible" else None)

    def run_key(self, key):
        return self.model.now() if key is None else key

    def learn_reopened(self):
        """The callback runs the trigger created for reopened batches: the newest of each role, copied."""
        for batch_id in self.model.reopened:
            model_batch = self.model.batches[batch_id]
            newest = {}
            for run_id in model_batch.callbacks:
                if not self.model.runs[run_id].deleted:
                    newest[self.model.runs[run_id].callback] = self.model.runs[run_id]
            rows = self.sql("SELECT id, batch_callback FROM job_runs WHERE batch_id = %s AND batch_callback IS NOT NULL "
                            "AND id <> ALL(%s) ORDER BY id", [batch_id, list(self.model.runs)])
            assert sorted(role for _, role in rows) == sorted(newest), \
                f"batch {batch_id} reopened: new callbacks {rows}, expected one per role of {sorted(newest)}"
            for run_id, role in rows:
                old = newest[role]
                self.model.add(run_id, old.job_type, old.queue, old.priority, self.model.now(), old.max_attempts,
                               batch_id=batch_id, callback=role, status="waiting")
                model_batch.callbacks.append(run_id)
        self.model.reopened = []

    def commit(self):
        db.session.commit()

    # -- enqueue ---------------------------------------------------------------------------

    @rule(o=options, unique_key=st.sampled_from([None, "k1", "k1", "k2"]), dependency=dependencies)
    def enqueue_a_run(self, o, unique_key, dependency):
        self.step()
        run_at, key = run_at_of(o["when"])
        after, after_failure = ([], "cancel") if dependency is None else (
            self.picked(self.live_ids(), dependency[0]), dependency[1])
        if after:
            unique_key = None  # refused with after= (InvalidInput)
        holders = self.model.holding_key(unique_key) if unique_key else []
        run_id = enqueue(o["job_type"], {}, run_at=run_at, max_attempts=o["max_attempts"], queue=o["queue"],
                         priority=o["priority"], unique_key=unique_key, after=after or None, after_failure=after_failure)
        if holders:
            assert run_id == holders[0].id, f"unique key {unique_key}: enqueue returned {run_id}, not its holder"
            return
        self.model.add(run_id, o["job_type"], o["queue"], o["priority"], self.run_key(key), o["max_attempts"],
                       after=after, after_failure=after_failure, unique_key=unique_key)

    @rule(o=options, n=st.integers(1, 3), dependency=dependencies)
    def enqueue_many_runs(self, o, n, dependency):
        self.step()
        run_at, key = run_at_of(o["when"])
        after, after_failure = ([], "cancel") if dependency is None else (
            self.picked(self.live_ids(), dependency[0]), dependency[1])
        ids = enqueue_many(o["job_type"], [{}] * n, run_at=run_at, max_attempts=o["max_attempts"], queue=o["queue"],
                           priority=o["priority"], after=after or None, after_failure=after_failure)
        for run_id in ids:
            self.model.add(run_id, o["job_type"], o["queue"], o["priority"], self.run_key(key), o["max_attempts"],
                           after=after, after_failure=after_failure)

    @rule(members=st.lists(st.tuples(options, st.integers(1, 3), st.booleans()), max_size=3), dependency=dependencies,
          on_finish=st.sampled_from([None, "jobsweb.noop"]), on_success=st.sampled_from([None, "jobsweb.noop"]))
    def enqueue_a_batch(self, members, dependency, on_finish, on_success):
        """Members through b.enqueue (n = 1) and b.enqueue_many; those that wait share one after=."""
        self.step()
        after, after_failure = ([], "cancel") if dependency is None else (
            self.picked(self.live_ids(), dependency[0]), dependency[1])
        with batch(on_finish=on_finish, on_success=on_success) as b:
            self.model.batches[b.id] = model_batch = Batch(b.id, [])
            for o, n, waits in members:
                run_at, key = run_at_of(o["when"])
                waits_for = after if waits else []
                common = dict(run_at=run_at, max_attempts=o["max_attempts"], queue=o["queue"], priority=o["priority"],
                              after=waits_for or None, after_failure=after_failure)
                ids = [b.enqueue(o["job_type"], {}, **common)] if n == 1 else b.enqueue_many(o["job_type"], [{}] * n,
                                                                                              **common)
                for run_id in ids:
                    self.model.add(run_id, o["job_type"], o["queue"], o["priority"], self.run_key(key),
                                   o["max_attempts"], after=waits_for, after_failure=after_failure, batch_id=b.id)
        self.model.close_batch(model_batch)
        registered = registry.get("jobsweb.noop")
        for role in ("on_finish", "on_success"):
            if role in b.callbacks:
                self.model.add(b.callbacks[role], "jobsweb.noop", registered.queue or "default",
                               registered.priority or 0, self.model.now(),
                               registered.max_attempts or self.app.config["JOBSWEB_MAX_ATTEMPTS"], batch_id=b.id,
                               callback=role, status=self.model.callback_status(model_batch, role))
                model_batch.callbacks.append(b.callbacks[role])
                if not model_batch.pending:
                    self.model.runs[b.callbacks[role]].released_when_all_succeeded = all(
                        self.model.runs[m].status == "succeeded" for m in model_batch.members)

    @rule(steps=st.lists(options, min_size=1, max_size=3), dependency=dependencies)
    def enqueue_a_chain(self, steps, dependency):
        self.step()
        after, after_failure = ([], "cancel") if dependency is None else (
            self.picked(self.live_ids(), dependency[0]), dependency[1])
        made = chain([(o["job_type"], {}, {"run_at": run_at_of(o["when"])[0], "max_attempts": o["max_attempts"],
                                          "queue": o["queue"], "priority": o["priority"]}) for o in steps],
                     after=after or None, after_failure=after_failure)
        for index, (o, run_id) in enumerate(zip(steps, made.ids)):
            self.model.add(run_id, o["job_type"], o["queue"], o["priority"], self.run_key(run_at_of(o["when"])[1]),
                           o["max_attempts"], after=after if index == 0 else [made.ids[index - 1]],
                           after_failure=after_failure if index == 0 else "cancel")

    @rule(which=st.sampled_from(DEFINITIONS))
    def materialise_a_due_definition(self, which):
        self.step()
        name, overlap, queue, priority = which
        if name not in self.definitions:
            self.definitions[name] = definitions.define(name, "jobsweb.noop", "@every 7d", overlap=overlap,
                                                        max_attempts=2, queue=queue, priority=priority).id
            self.commit()
        definition_id = self.definitions[name]
        # Time passing: the definition's slot is due now.
        self.sql("UPDATE job_definitions SET next_run_at = now() WHERE id = %s", [definition_id])
        assert materialise_due(self.link) == 1
        [(run_id, status, after_run_id)] = self.sql(
            "SELECT id, status, after_run_id FROM job_runs WHERE definition_id = %s ORDER BY id DESC LIMIT 1",
            [definition_id])
        active = [run for run in self.model.live() if run.definition_id == definition_id and run.status in UNFINISHED]
        active = max(active, key=lambda r: r.id) if active else None
        expected = "skipped" if overlap == "skip" and active else "queued"
        run = self.model.add(run_id, "jobsweb.noop", queue, priority, self.model.now(), 2, status=expected,
                             definition_id=definition_id,
                             after_run_id=active.id if overlap == "queue" and active else None)
        assert (status, after_run_id) == (run.status, run.after_run_id), \
            f"materialised run {run_id}: {status} after {after_run_id}, expected {run.status} after {run.after_run_id}"

    # -- the worker's statements ------------------------------------------------------------

    @rule(w=st.integers(0, 2), ahead=st.integers(0, 2))
    def a_worker_claims(self, w, ahead):
        self.step()
        worker = self.workers[w]
        if (claimed := self.claim(worker, ahead)) is not None:
            self.model.claimed(worker, *claimed)

    @rule(w=st.integers(0, 2), ahead=st.integers(0, 2))
    def a_claim_is_lost_with_the_connection_and_its_runs_released(self, w, ahead):
        """The claim commits, its rows never reach the worker (the connection broke): once back,
        the worker finds them with LOST_CLAIMS and gives them back unstarted (engine/worker/leases.py)."""
        self.step()
        worker = self.workers[w]
        if (claimed := self.claim(worker, ahead)) is None:
            return
        claimed, free = claimed
        self.model.claimed(Worker(worker.id, worker.concurrency, worker.queues), claimed, free)  # held unknowingly
        outcomes = lost_claims(self.link.fetch, worker.id, worker.held)
        assert sorted(o.run_id for o in outcomes) == sorted(claimed)
        self.link.fetch(statements.FINISH_RUNS, finish_params(outcomes))
        # Never begun: released (no attempt recorded, the claim's given back), not interrupted.
        self.model.finished([(self.model.runs[run_id], "released", False, None) for run_id in claimed])

    def claim(self, worker, ahead):
        """CLAIM_RUNS for the worker's free slots and `ahead` more: (the ids it took, the free slots),
        checked against the model's order and what a claimed run must satisfy (None: it claims none)."""
        free = max(worker.concurrency - len(worker.held), 0)
        if free + ahead == 0:
            return None
        expected = self.model.claim_order(worker, free + ahead, free)
        rows = self.link.fetch(statements.CLAIM_RUNS, {
            "worker": worker.id, "lease": LEASE, "job_types": registry.names(), "limit": free + ahead, "free": free,
            "queues": worker.queues})
        claimed = [row[0] for row in rows]
        for run_id in claimed:
            self.check_claimable(worker, self.model.runs[run_id])
        assert claimed == expected, (
            f"{worker.id} claimed {claimed} (limit {free + ahead}, free {free}); the model takes {expected} of "
            + str([(r.id, r.priority, r.run_at, r.attempts, r.max_attempts) for r in sorted(
                (r for r in self.model.live() if self.model.claimable(r, worker)),
                key=lambda r: (r.priority, r.run_at, r.id))]))
        return claimed, free

    def check_claimable(self, worker, run):
        """What a claimed run must satisfy, whatever the model predicted."""
        model = self.model
        assert run.status in ("queued", "failed"), f"run {run.id} claimed while {run.status}"
        assert run.queue not in model.paused_queues, f"run {run.id} claimed from paused queue {run.queue}"
        assert run.job_type not in model.paused_types, f"run {run.id} claimed with its job type paused"
        for after_id in run.after:
            before = model.runs[after_id]
            ok = before.status == "succeeded" or (run.run_after_failure and before.status in FINISHED)
            if not ok and run.run_after_failure and before.retried_by_operator \
                    and "retry_leaves_released_dependents" in OPEN:
                continue
            assert ok, f"run {run.id} claimed while run {after_id}, which it waits for, is {before.status}"
        if run.callback is not None and not run.retried_by_operator:
            # Released by a finish of its batch (a later retry of a member may have reopened it since).
            assert run.released_when_all_succeeded is not None, f"callback {run.id} claimed before its batch finished"
            if run.callback == "on_success":
                assert run.released_when_all_succeeded, \
                    f"on_success {run.id} claimed although a member of batch {run.batch_id} did not succeed"
        if run.after_run_id is not None:
            before = model.runs[run.after_run_id]
            assert before.deleted or before.status not in UNFINISHED, \
                f"run {run.id} claimed while run {before.id} before it is {before.status}"

    def held_ctx(self, run_id):
        run = self.model.runs[run_id]
        return JobContext(run_id, run.job_type, {}, run.attempts, run.max_attempts, run.definition_id)

    @precondition(lambda self: any(worker.started for worker in self.workers))
    @rule(w=st.integers(0, 2), n=st.integers(0, 7),
          outcome=st.sampled_from(["succeeded", "failed now", "failed later", "permanent"]))
    def a_handler_returns(self, w, n, outcome):
        self.step()
        worker = [worker for worker in self.workers if worker.started][w % sum(1 for x in self.workers if x.started)]
        run_id = worker.started[n % len(worker.started)]
        run = self.model.runs[run_id]
        held = Held(self.held_ctx(run_id), registry.get(run.job_type), LEASE, None)
        failures = DUE_LATER if outcome == "failed later" else DUE_NOW
        exc = {"succeeded": None, "permanent": PermanentError("given up")}.get(outcome, RuntimeError("boom"))
        finished = failures.outcome_of(worker.id, Finished(held, exc=exc), stopping=False)
        rows = self.link.fetch(statements.FINISH_RUNS, finish_params([finished]))
        assert [row[0] for row in rows] == [run_id], f"finishing run {run_id} attempt {run.attempts}: {rows}"
        self.model.finished([(run, finished.outcome, finished.give_up, LATER if outcome == "failed later"
                              else self.model.now())])
        self.model.drop_held(worker, [run_id])
        self.model.start_handlers(worker)

    @precondition(lambda self: any(worker.started for worker in self.workers))
    @rule(w=st.integers(0, 2), ns=picks)
    def a_worker_says_which_handlers_began(self, w, ns):
        """A round trip of its own (nothing to claim or write) after handlers of runs it claimed ahead
        began: from then on lease recovery charges them. Some of those that began: two threads may
        set them out of order, and one is said a trip later."""
        self.step()
        worker = [worker for worker in self.workers if worker.started][w % sum(1 for x in self.workers if x.started)]
        self.say_began(worker, self.picked(worker.started, ns))

    def say_began(self, worker, ids):
        """RUNS_BEGAN for these runs the worker holds, whose handlers began."""
        self.link.fetch(upkeep.RUNS_BEGAN, {"worker": worker.id, "ids": ids,
                                            "attempts": [self.model.runs[run_id].attempts for run_id in ids]})
        self.model.began(worker, ids)

    @precondition(lambda self: any(worker.held for worker in self.workers))
    @rule(w=st.integers(0, 2), later=st.booleans())
    def a_worker_dies_and_its_leases_are_recovered(self, w, later):
        """A run its claim held ahead and whose handler it never said began is released (no attempt
        row, the claim's attempt given back, run_at kept), up to UNBEGUN_CLAIMS claims in a row;
        every other run it held is a failed attempt (0032_unbegun_claims)."""
        self.step()
        worker = [worker for worker in self.workers if worker.held][w % sum(1 for x in self.workers if x.held)]
        self.recover(worker, later)

    @rule(w=st.integers(0, 2), ahead=st.integers(1, 2), said=st.booleans(), later=st.booleans())
    def a_worker_is_killed_just_after_a_claim_ahead(self, w, ahead, said, later):
        """Killed as a claim lands: its runs ahead never began, and only what it held before can
        have (a drill's SIGKILL finds most workers so, busy ones holding up to 2,048 runs ahead).
        said: that claim's round trip also said which of its handlers began (RUNS_BEGAN rides on it)."""
        self.step()
        worker = self.workers[w]
        if said and worker.started:
            self.say_began(worker, worker.started)
        if (claimed := self.claim(worker, ahead)) is None:
            return
        self.model.claimed(worker, *claimed)
        self.step()
        self.recover(worker, later)

    def recover(self, worker, later):
        """`worker` is gone: its leases run out and lease recovery finds them."""
        # Time passing: the dead worker's leases run out.
        self.sql("UPDATE job_runs SET locked_until = now() - interval '1 second' "
                 "WHERE locked_by = %s AND status = 'running'", [worker.id])
        failures = DUE_LATER if later else DUE_NOW
        assert recover_expired_leases(self.link, failures) == len(worker.held)
        runs = [self.model.runs[run_id] for run_id in worker.held]
        self.stale += [(worker.id, run.id, run.attempts, run.job_type) for run in runs]
        self.model.finished([(run, self.model.recovered_as(run, UNBEGUN_CLAIMS), False,
                              LATER if later else self.model.now()) for run in runs])
        self.replace(worker)

    @precondition(lambda self: any(worker.held for worker in self.workers))
    @rule(w=st.integers(0, 2))
    def a_worker_is_stopped_and_releases_its_runs(self, w):
        """SIGTERM: what Worker._shut_down (engine/worker/loop.py) writes for the runs it holds: a run
        whose handler began is an interrupted attempt; one claimed ahead and never begun is released."""
        self.step()
        worker = [worker for worker in self.workers if worker.held][w % sum(1 for x in self.workers if x.held)]
        runs = [self.model.runs[run_id] for run_id in worker.held]
        outcomes = [interrupted(run.id, run.job_type, run.attempts, worker.id, "shut down before the run finished")
                    if run.id in worker.started else released(run.id, run.job_type, run.attempts, worker.id)
                    for run in runs]
        rows = self.link.fetch(statements.FINISH_RUNS, finish_params(outcomes))
        assert sorted(row[0] for row in rows) == sorted(run.id for run in runs)
        self.model.finished([(run, outcome.outcome, False, None) for run, outcome in zip(runs, outcomes)])
        self.replace(worker)

    def replace(self, worker):
        """The worker's process is gone; a new one (a new id) takes its place."""
        self.generation += 1
        index = self.workers.index(worker)
        self.workers[index] = Worker(f"model-w{index + 1}.{self.generation}", worker.concurrency, worker.queues)

    @precondition(lambda self: self.stale)
    @rule(n=st.integers(0, 63))
    def a_dead_workers_late_outcome_is_rejected(self, n):
        self.step()
        worker_id, run_id, attempt, job_type = self.stale[n % len(self.stale)]
        held = Held(JobContext(run_id, job_type, {}, attempt, 1), registry.get(job_type), LEASE, None)
        late = DUE_NOW.outcome_of(worker_id, Finished(held), stopping=False)
        assert self.link.fetch(statements.FINISH_RUNS, finish_params([late])) == []

    # -- operators ---------------------------------------------------------------------------

    @rule(ns=picks, among=pools)
    def an_operator_retries(self, ns, among):
        self.step()
        ids = self.picked(self.targets(among, statements.RETRYABLE), ns)
        expected = self.model.retry(ids)
        retried = run_actions.retry(ids)
        self.commit()
        assert sorted(retried) == sorted(expected), f"retry {ids}: retried {retried}, expected {expected}"
        self.learn_reopened()

    @rule(ns=picks, among=pools)
    def an_operator_cancels(self, ns, among):
        self.step()
        ids = self.picked(self.targets(among, statements.CANCELLABLE), ns)
        run_actions.cancel(ids)
        self.commit()
        self.model.cancel(ids)

    @precondition(lambda self: self.model.batches)
    @rule(n=st.integers(0, 63))
    def an_operator_cancels_the_rest_of_a_batch(self, n):
        """The batch page's "Cancel the rest" (web/batch_pages.py)."""
        self.step()
        batch_id = self.pick(self.model.batches, n)
        members = batch_status.batch_members(batch_id, statements.CANCELLABLE)
        run_actions.cancel(members)
        self.commit()
        self.model.cancel(members)

    @rule(ns=picks, among=pools)
    def an_operator_deletes(self, ns, among):
        self.step()
        ids = self.picked(self.targets(among, ("waiting", "queued", "failed")), ns)
        run_actions.delete(ids)
        self.commit()
        self.model.delete(ids)

    @rule(n=st.integers(0, 63))
    def an_operator_runs_a_queued_run_now(self, n):
        self.step()
        run_id = self.pick(self.live_ids(), n) if n % 2 else self.pick(self.live_ids(["queued"]), n // 2)
        if run_id is None:
            return
        run = self.model.runs[run_id]
        expected = run.status == "queued" and run.run_at[0] >= 2
        assert run_actions.run_now(run_id) == expected
        self.commit()
        if expected:
            run.run_at = self.model.now()

    @rule(n=st.integers(0, 63), slot=st.integers(0, 2))
    def an_operator_reschedules_a_queued_run(self, n, slot):
        self.step()
        run_id = self.pick(self.live_ids(), n) if n % 2 else self.pick(self.live_ids(["queued"]), n // 2)
        if run_id is None:
            return
        run = self.model.runs[run_id]
        expected = run.status == "queued"
        assert run_actions.reschedule(run_id, FUTURE + timedelta(minutes=slot)) == expected
        self.commit()
        if expected:
            run.run_at = (3, slot)

    @rule(queue=st.sampled_from(QUEUES), paused=st.booleans())
    def an_operator_pauses_or_resumes_a_queue(self, queue, paused):
        self.step()
        flow.configure_queue(queue, paused=paused)
        self.commit()
        (self.model.paused_queues.add if paused else self.model.paused_queues.discard)(queue)

    @rule(paused=st.booleans())
    def an_operator_pauses_or_resumes_a_job_type(self, paused):
        self.step()
        flow.pause_type(JOB_TYPES[1], paused)
        self.commit()
        (self.model.paused_types.add if paused else self.model.paused_types.discard)(JOB_TYPES[1])

    # -- retention ---------------------------------------------------------------------------

    @rule(ns=picks)
    def time_passes_for_finished_runs(self, ns):
        self.step()
        ids = self.picked(self.live_ids(FINISHED), ns)
        self.sql("UPDATE job_runs SET finished_at = finished_at - interval '400 days' WHERE id = ANY(%s)", [ids])
        for run_id in ids:
            self.model.runs[run_id].aged = True

    @rule()
    def retention_prunes(self):
        self.step()
        retention.prune()
        self.model.prune()

    # -- after every step ----------------------------------------------------------------------

    @invariant()
    def the_database_matches_the_model_and_keeps_the_invariants(self):
        check(self)


def check(machine):
    """Compare every run, attempt, dependency and batch with the model; then the invariants."""
    machine.learn_reopened()
    model, sql = machine.model, machine.sql
    rows = {row[0]: row for row in sql(
        "SELECT id, status, attempts, max_attempts, run_at, unique_key, batch_id, batch_callback, waiting_for, "
        "locked_by, started_at, finished_at, cancel_requested_at IS NOT NULL, reason, after_run_id, unbegun_claims "
        "FROM job_runs")}
    attempts = dict(sql("SELECT run_id, array_agg(attempt ORDER BY attempt) FROM job_attempts GROUP BY run_id"))
    deps = {}
    for run_id, after_id in sql("SELECT run_id, after_id FROM job_run_deps"):
        deps.setdefault(run_id, []).append(after_id)
    batches = {row[0]: row for row in sql("SELECT id, pending, failures, finishes, finished_at FROM job_batches")}
    live = {run.id: run for run in model.live()}
    assert sorted(rows) == sorted(live), f"runs in the database {sorted(rows)}, in the model {sorted(live)}"

    for run_id, run in live.items():
        (_, status, tries, max_attempts, _, _, _, _, waiting_for, locked_by, started_at, finished_at,
         cancel_requested, reason, after_run_id, unbegun_claims) = rows[run_id]
        assert status == run.status, f"run {run_id} is {status}, the model says {run.status}"
        assert (tries, max_attempts) == (run.attempts, run.max_attempts), \
            f"run {run_id}: attempts {tries}/{max_attempts}, the model says {run.attempts}/{run.max_attempts}"
        numbers = attempts.get(run_id, [])
        assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) == run.attempt_rows, \
            f"run {run_id}: job_attempts numbered {numbers}, the model recorded {run.attempt_rows}"
        assert len(numbers) == tries - (status == "running"), f"run {run_id}: {tries} attempts, rows {numbers}"
        assert sorted(deps.get(run_id, [])) == sorted(run.after), \
            f"run {run_id} waits for {sorted(deps.get(run_id, []))}, the model says {run.after}"
        assert after_run_id == run.after_run_id, f"run {run_id}: after_run_id {after_run_id}, not {run.after_run_id}"
        assert unbegun_claims == run.unbegun, f"run {run_id}: unbegun_claims {unbegun_claims}, the model says {run.unbegun}"
        if status == "waiting" and run.callback is None:
            assert waiting_for == run.waiting_for, f"run {run_id} waits for {waiting_for} runs, not {run.waiting_for}"
        if status == "running":
            assert locked_by == run.holder and started_at is not None, f"run {run_id} held by {locked_by}, {started_at}"
            assert cancel_requested == run.cancel_requested, f"run {run_id}: cancel requested {cancel_requested}"
        assert (finished_at is not None) == (status in FINISHED), f"run {run_id} {status} finished at {finished_at}"
        cause = REASON.fullmatch(reason or "")
        cause = (int(cause[1]), cause[2] or cause[3]) if cause else None
        if cause != run.cause and cause and run.cause and {cause[0], run.cause[0]} <= model.ended_in_step \
                and cause[0] in run.after:
            run.cause = cause  # two runs it waits for ended in one statement: whose trigger ran first is row order
            # (on stock, a cancel of runs 1 and 2 fired 2's first: run 5, waiting for 1 and for 3 below 2, named 3)
        assert cause == run.cause, f"run {run_id}: reason {reason!r}, the model's cause {run.cause}"

    # run_at: the database's order is the model's (runs due later after a failure are not ordered among themselves)
    timed = sorted((run.run_at, run_id) for run_id, run in live.items() if run.status in ("queued", "failed"))
    for (key_a, a), (key_b, b) in zip(timed, timed[1:]):
        if key_a == LATER and key_b == LATER:
            continue
        assert rows[a][4] < rows[b][4] if key_a != key_b else rows[a][4] == rows[b][4], \
            f"run_at of run {a} ({rows[a][4]}, {key_a}) and run {b} ({rows[b][4]}, {key_b})"

    for batch_id, model_batch in model.batches.items():
        _, pending, failures, finishes, finished_at = batches[batch_id]
        assert (pending, failures, finishes) == (model_batch.pending, model_batch.failures, model_batch.finishes), \
            f"batch {batch_id}: pending, failures, finishes {(pending, failures, finishes)}, the model says " \
            f"{(model_batch.pending, model_batch.failures, model_batch.finishes)}"
        for role in ("on_finish", "on_success"):
            made = [c for c in model_batch.callbacks if model.runs[c].callback == role]
            if not made or any(model.runs[c].deleted for c in made):
                continue  # an operator deleted one: a reopened batch copies only the callbacks it still has
            assert len(made) == finishes + (pending > 0), \
                f"batch {batch_id}: {len(made)} {role} runs after {finishes} finishes (open: {pending > 0})"

    invariants(rows, deps, batches, {run.id for run in live.values() if run.stuck and "retry_waits_for_failed" in OPEN})
    for run_id in rows:
        if machine.seen.get(run_id) != rows[run_id][1]:
            read_through_get_run(run_id, rows[run_id])
    machine.seen = {run_id: row[1] for run_id, row in rows.items()}


def invariants(rows, deps, batches, stuck):
    """What holds of the database whatever happened: nothing waits for ever, batches count right,
    unique keys are unique."""
    members_pending = {}
    for run_id, row in rows.items():
        if row[6] is not None and row[7] is None and row[1] not in ENDED:
            members_pending[row[6]] = members_pending.get(row[6], 0) + 1
    for run_id, row in rows.items():
        if row[1] != "waiting":
            continue
        if row[7] is not None:
            assert members_pending.get(row[6], 0) > 0, f"callback {run_id} waits for batch {row[6]}, which is finished"
        else:
            waited = [(after_id, rows[after_id][1]) for after_id in deps.get(run_id, [])]
            if run_id in stuck:
                continue
            assert any(status not in FINISHED for _, status in waited), \
                f"run {run_id} waits for ever: what it waits for is {waited}"
    for batch_id, (_, pending, _, _, finished_at) in batches.items():
        assert pending == members_pending.get(batch_id, 0), \
            f"batch {batch_id}: pending {pending}, but {members_pending.get(batch_id, 0)} members have not ended"
        assert (finished_at is None) == (pending > 0), f"batch {batch_id}: pending {pending}, finished at {finished_at}"
    keys = [row[5] for row in rows.values() if row[5] is not None and row[1] in UNFINISHED]
    assert len(keys) == len(set(keys)), f"a unique key held by two unfinished runs: {sorted(keys)}"


def read_through_get_run(run_id, row):
    db.session.rollback()  # a fresh snapshot
    run = get_run(run_id)
    assert (run.status, run.attempts) == (row[1], row[2]), f"get_run({run_id}): {run.status}, {run.attempts}"
    assert run.done == (row[1] in FINISHED), f"get_run({run_id}).done is {run.done} for a {row[1]} run"


def test_the_run_lifecycle_matches_its_model(app, sql):
    run_state_machine_as_test(lambda: RunLifecycle(app, sql), settings=settings(
        max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, database=None, print_blob=True,
        derandomize=not RANDOM, phases=PHASES, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))


# Issue 52: one meaning for cancelled. A cancel of a running run asks its handler to stop; what
# the run ends as is decided by what the handler does then (REFERENCE, jobsweb.cancel): returning
# successfully, the work was done; raising, the run ends cancelled, with no retry left or not.
@pytest.mark.parametrize("outcome, ends", [("succeeded", "succeeded"), ("failed now", "cancelled"),
                                           ("failed later", "cancelled"), ("permanent", "cancelled")])
def test_a_cancel_of_a_running_run_ends_as_its_handler_decides_in_the_database_and_the_model(
        app, sql, outcome, ends):
    machine = RunLifecycle(app, sql)
    try:
        machine.enqueue_a_run({"job_type": "jobsweb.noop", "queue": "default", "priority": 0, "when": None,
                               "max_attempts": 3}, unique_key=None, dependency=None)
        machine.a_worker_claims(w=0, ahead=0)
        machine.an_operator_cancels(ns=[0], among="any")
        machine.the_database_matches_the_model_and_keeps_the_invariants()
        assert sql("SELECT status, cancel_requested_at IS NOT NULL FROM job_runs") == [("running", True)]
        machine.a_handler_returns(w=0, n=0, outcome=outcome)
        machine.the_database_matches_the_model_and_keeps_the_invariants()
        assert sql("SELECT status, attempts FROM job_runs") == [(ends, 1)]
    finally:
        machine.teardown()
