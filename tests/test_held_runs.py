"""A worker's HeldRuns on its own: the runs it starts as claims land, the slots they take, and
what each comes to when its handler returns, its timeout passes or the worker gives it up.

No database: the rows are made here as CLAIM_RUNS returns them, and the handlers touch nothing.
What the pools report goes to a queue the test waits on, as the worker's loop does."""

import logging
import queue
import threading
from datetime import datetime, timezone

import pytest

from jobsweb.engine.jobs import registry
from jobsweb.engine.jobs.registry import JobContext, JobType
from jobsweb.engine.worker.execution import Failures
from jobsweb.engine.worker.held_runs import HeldRuns
from tests.conftest import EVENT_TIMEOUT

RUN_AT = datetime(2025, 1, 1, tzinfo=timezone.utc)


def row(run_id, job_type="test.parts.gate", payload=None, timeout=None, lease=None):
    """A row as CLAIM_RUNS returns it: (run_id, job_type, payload, attempt, max_attempts,
    definition_id, run_timeout, run_lease, backoff_base, backoff_cap, priority, run_at)."""
    return (run_id, job_type, payload or {}, 1, 3, None, timeout, lease, None, None, 0, RUN_AT)


def sleeping(run_id, timeout=None):
    """A run of jobsweb.sleep for 30 s, which ends early (Cancelled) once asked to stop."""
    return row(run_id, "jobsweb.sleep", {"seconds": 30}, timeout=timeout)


class Gate:
    """The handler of test.parts.gate: says it began, then waits until the test opens the gate."""

    def __init__(self):
        self.began = queue.SimpleQueue()
        self.open = threading.Event()

    def __call__(self, ctx):
        self.began.put(ctx.run_id)
        if not self.open.wait(EVENT_TIMEOUT):
            raise TimeoutError("the test never opened the gate")
        return {"run": ctx.run_id}


@pytest.fixture
def gate(registry_snapshot):
    gate = Gate()
    registry.add(JobType("test.parts.gate", gate))
    registry.add(JobType("test.parts.timed", gate, timeout=5))
    yield gate
    gate.open.set()


@pytest.fixture
def reports():
    """What the pools report back (execution.Finished), from their threads."""
    return queue.SimpleQueue()


@pytest.fixture
def make_held(app, gate, reports):
    """make_held(concurrency, lease, default_timeout): a HeldRuns of worker-1; whatever it still
    holds at the end is given up, so that its handlers return."""
    made = []

    def make(concurrency=2, lease=30, default_timeout=None):
        held = HeldRuns(app, "worker-1", concurrency=concurrency, lease=lease, default_timeout=default_timeout,
                        failures=Failures.from_config(app.config), report=reports.put, context=JobContext)
        made.append(held)
        return held

    yield make
    gate.open.set()
    for held in made:
        held.give_up_all()
        held.close()


def report(reports):
    return reports.get(timeout=EVENT_TIMEOUT)


def test_each_run_takes_a_slot_and_one_that_lands_with_no_slot_free_records_when_it_landed(make_held, gate, reports):
    held = make_held(concurrency=1)
    held.start([row(1)], back_at=100.0)
    assert (held.taken(), held.get(1).landed) == (1, None)
    assert gate.began.get(timeout=EVENT_TIMEOUT) == 1
    held.start([row(2), row(3)], back_at=200.0)  # claimed ahead: they wait for the one slot
    assert (held.taken(), held.ids()) == (3, [1, 2, 3])
    assert (held.get(2).landed, held.get(3).landed) == (200.0, 200.0)
    gate.open.set()
    outcomes = [held.returned(report(reports), stopping=False) for _ in range(3)]
    assert [(o.run_id, o.outcome, o.result) for o in outcomes] == [
        (1, "succeeded", {"run": 1}), (2, "succeeded", {"run": 2}), (3, "succeeded", {"run": 3})]
    assert (held.taken(), len(held), 1 in held) == (0, 0, False)


def test_a_return_after_the_worker_gave_the_run_up_frees_its_slot_and_is_ignored(make_held, reports, caplog):
    caplog.set_level(logging.WARNING, logger="jobsweb.worker")
    held = make_held(concurrency=2)
    held.start([sleeping(1, timeout=60)], back_at=0.0)
    given_up = held.get(1)
    [outcome] = held.give_up_all()
    assert outcome.outcome == "interrupted" and held.taken() == 1  # its handler has not returned yet
    finished = report(reports)  # asked to stop, its ctx.sleep ended early
    assert finished.held is given_up
    assert held.returned(finished, stopping=False) is None
    assert held.taken() == 0
    assert [r.getMessage() for r in caplog.records if "returned after" in r.getMessage()] == [
        "run 1 jobsweb.sleep: attempt 1 returned after this worker gave it up; result ignored"]


def test_only_runs_whose_deadline_has_come_time_out(make_held, reports):
    held = make_held(concurrency=2)
    held.start([sleeping(1, timeout=0.5), sleeping(2, timeout=60), sleeping(3)], back_at=0.0)
    first, second, third = held.get(1), held.get(2), held.get(3)
    assert (first.timeout, second.timeout, third.timeout, third.deadline) == (0.5, 60, None, None)
    assert held.next_deadline() == first.deadline
    assert held.timed_out(first.deadline - 0.001) == []
    [outcome] = held.timed_out(first.deadline)  # its deadline is now: it is up
    assert (outcome.run_id, outcome.outcome, outcome.error_type, outcome.error) == (
        1, "failed", "timeout", "timed out after 0.5 seconds")
    assert held.ids() == [2, 3] and held.next_deadline() == second.deadline
    assert (first.ctx.cancelled, second.ctx.cancelled, third.ctx.cancelled) == (True, False, False)
    finished = report(reports)  # the timed-out handler, asked to stop, returns
    assert finished.held is first and held.returned(finished, stopping=False) is None
    assert held.taken() == 2


def test_a_runs_own_timeout_comes_before_its_job_types_and_the_job_types_before_the_workers(make_held):
    held = make_held(default_timeout=7)
    held.start([row(1, "test.parts.timed", timeout=2), row(2, "test.parts.timed"), row(3)], back_at=0.0)
    assert [held.get(run_id).timeout for run_id in (1, 2, 3)] == [2, 5, 7]


def test_runs_no_thread_began_are_released_and_their_slots_freed(make_held, gate, reports):
    held = make_held(concurrency=1)
    held.start([row(1), row(2), row(3)], back_at=0.0)
    assert gate.began.get(timeout=EVENT_TIMEOUT) == 1  # run 1 has the one thread; 2 and 3 wait for it
    waiting = [held.get(2), held.get(3)]
    outcomes = sorted(held.release_waiting(), key=lambda o: o.run_id)
    assert [(o.run_id, o.job_type, o.attempt, o.worker, o.outcome) for o in outcomes] == [
        (2, "test.parts.gate", 1, "worker-1", "released"), (3, "test.parts.gate", 1, "worker-1", "released")]
    assert all(h.ctx.cancelled for h in waiting)  # never to start here
    assert (held.ids(), held.taken()) == ([1], 1)
    gate.open.set()
    assert held.returned(report(reports), stopping=True).outcome == "succeeded"
    assert (held.taken(), len(held)) == (0, 0)


def test_at_the_deadline_every_run_still_held_is_given_up_as_an_interrupted_attempt(make_held, reports):
    held = make_held(concurrency=2)
    held.start([sleeping(1), sleeping(2)], back_at=0.0)
    running = [held.get(1), held.get(2)]
    outcomes = held.give_up_all()
    assert [(o.run_id, o.outcome, o.error_type, o.error) for o in outcomes] == [
        (1, "interrupted", "interrupted", "worker worker-1: shut down before the run finished"),
        (2, "interrupted", "interrupted", "worker worker-1: shut down before the run finished")]
    assert len(held) == 0 and all(h.ctx.cancelled for h in running)
    assert [held.returned(report(reports), stopping=True) for _ in range(2)] == [None, None]
    assert held.taken() == 0


def test_a_run_may_lengthen_the_workers_lease_never_shorten_it(make_held):
    held = make_held(lease=30)
    held.start([row(1, lease=5), row(2), row(3, lease=120)], back_at=0.0)
    assert [held.get(run_id).lease for run_id in (1, 2, 3)] == [30, 30, 120]
