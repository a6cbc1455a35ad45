"""No attempt charged for a handler that never began (issue 51, item 7): a claim marks the runs it
takes ahead of a free slot not begun (job_runs.unbegun_claims, 0032_unbegun_claims), the worker's
next round trip clears the mark of those whose handler began, and lease recovery gives a run still
marked back as released: no attempt row, the attempt not counted, run_at kept. Bounded: a run
lost so more than UNBEGUN_CLAIMS claims in a row is charged as before."""

import os
import queue
import signal
import threading
import time

import pytest

import jobsweb
from jobsweb.core.database import libpq_url
from jobsweb.engine import statements, upkeep
from jobsweb.engine.jobs.registry import JobContext
from jobsweb.engine.link import Link
from jobsweb.engine.worker.execution import Failures, interrupted, released
from jobsweb.engine.worker.outcome_writes import finish_params
from jobsweb.engine.worker.held_runs import BEGAN_AFTER, HeldRuns
from jobsweb.engine.worker.lease_recovery import UNBEGUN_CLAIMS, recover_expired_leases
from tests.conftest import wait_for
from tests.test_held_runs import sleeping
from tests.test_worker import add, make_worker

FAILURES = Failures((3600, 3600), 1000, 1000)  # a failed attempt's retry is due in about an hour


@pytest.fixture
def link(app, database_url_for_tests):
    """The worker's kind of connection to the test database (emptied by `app`)."""
    link = Link(libpq_url(database_url_for_tests))
    yield link
    link.close()


def runs(sql, count, attempts=0, max_attempts=5):
    """`count` due no-op runs that used `attempts` of `max_attempts`; their ids, in claim order."""
    return [run_id for (run_id,) in sql(
        "INSERT INTO job_runs (job_type, run_at, attempts, max_attempts) SELECT 'jobsweb.noop', "
        "now() - interval '1 minute' + n * interval '1 second', %s, %s FROM generate_series(1, %s) n RETURNING id",
        [attempts, max_attempts, count])]


def claim(link, worker, limit, free):
    rows = link.fetch(statements.CLAIM_RUNS, {"worker": worker, "lease": 60, "job_types": ["jobsweb.noop"],
                                              "limit": limit, "free": free, "queues": None})
    return [row[0] for row in rows], [row[3] for row in rows]


def unbegun(sql, ids):
    return [count for (count,) in sql("SELECT unbegun_claims FROM job_runs WHERE id = ANY(%s) ORDER BY id", [ids])]


def worker_lost(sql, link, worker):
    """Time passing: `worker` is gone and its leases ran out; lease recovery runs."""
    sql("UPDATE job_runs SET locked_until = now() - interval '1 second' WHERE locked_by = %s", [worker])
    while recover_expired_leases(link, FAILURES):
        pass


def test_a_claim_marks_the_runs_it_takes_ahead_and_the_round_trip_after_a_handler_began_clears_its_mark(sql, link):
    ids = runs(sql, 5)
    claimed, attempts = claim(link, "w1", limit=5, free=2)
    assert claimed == ids
    # The first `free` start at once, as if begun at the claim; the other three wait in the worker.
    assert unbegun(sql, ids) == [0, 0, 1, 1, 1]

    # A guarded write: another worker's word, or an earlier attempt's, clears nothing.
    link.fetch(upkeep.RUNS_BEGAN, {"worker": "w2", "ids": [ids[2]], "attempts": [attempts[2]]})
    link.fetch(upkeep.RUNS_BEGAN, {"worker": "w1", "ids": [ids[3]], "attempts": [attempts[3] - 1]})
    assert unbegun(sql, ids) == [0, 0, 1, 1, 1]
    link.fetch(upkeep.RUNS_BEGAN, {"worker": "w1", "ids": [ids[2], ids[3]], "attempts": attempts[2:4]})
    assert unbegun(sql, ids) == [0, 0, 0, 0, 1]


def test_lease_recovery_releases_a_run_whose_handler_never_began_and_charges_those_that_began(sql, link):
    ids = runs(sql, 4, attempts=2)
    run_at = dict(sql("SELECT id, run_at FROM job_runs"))
    claimed, attempts = claim(link, "w1", limit=4, free=1)
    assert claimed == ids and attempts == [3, 3, 3, 3]
    link.fetch(upkeep.RUNS_BEGAN, {"worker": "w1", "ids": [ids[1]], "attempts": [3]})  # began; 2 and 3 wait
    worker_lost(sql, link, "w1")

    rows = sql("SELECT id, status, attempts, max_attempts, run_at, locked_by, unbegun_claims FROM job_runs ORDER BY id")
    charged = [(run_id, "failed", 3, 5) for run_id in ids[:2]]
    never_begun = [(run_id, "queued", 2, 5) for run_id in ids[2:]]
    assert [row[:4] for row in rows] == charged + never_begun
    # Released as a stopping worker releases: back at its own run_at (not moved to now()), the
    # mark kept, so that the next claim ahead counts on from it.
    assert [(row[4], row[5], row[6]) for row in rows[2:]] == [(run_at[run_id], None, 1) for run_id in ids[2:]]
    assert sql("SELECT run_id, attempt, outcome, error_type FROM job_attempts ORDER BY run_id") == [
        (run_id, 3, "failed", "lease_expired") for run_id in ids[:2]]


def test_a_run_lost_unbegun_more_than_unbegun_claims_times_in_a_row_is_charged_as_ever(sql, link):
    """A handler that kills its worker before the worker's next round trip says it began looks
    like one that never began: without a bound it would run again uncharged for ever."""
    [run_id] = runs(sql, 1)
    for loss in range(1, UNBEGUN_CLAIMS + 1):
        assert claim(link, f"w{loss}", limit=1, free=0)[0] == [run_id]  # ahead of a free slot
        worker_lost(sql, link, f"w{loss}")
        assert sql("SELECT status, attempts, unbegun_claims FROM job_runs") == [("queued", 0, loss)]
    assert sql("SELECT count(*) FROM job_attempts") == [(0,)]

    assert claim(link, "w-last", limit=1, free=0)[0] == [run_id]
    worker_lost(sql, link, "w-last")
    assert sql("SELECT status, attempts, unbegun_claims FROM job_runs") == [("failed", 1, 0)]
    assert sql("SELECT attempt, error_type FROM job_attempts") == [(1, "lease_expired")]


def test_a_stopping_workers_release_counts_on_and_a_finish_or_a_free_slot_starts_the_count_again(sql, link):
    [run_id] = runs(sql, 1)
    claim(link, "w1", limit=1, free=0)
    link.fetch(statements.FINISH_RUNS, finish_params([released(run_id, "jobsweb.noop", 1, "w1")]))
    claim(link, "w2", limit=1, free=0)
    assert unbegun(sql, [run_id]) == [2]  # two claims in a row held it without its handler beginning
    # Its handler began and was interrupted by a stop: every outcome but a release starts again.
    link.fetch(statements.FINISH_RUNS, finish_params([interrupted(run_id, "jobsweb.noop", 1, "w2", "stopped")]))
    assert unbegun(sql, [run_id]) == [0]
    claim(link, "w3", limit=1, free=0)
    link.fetch(statements.FINISH_RUNS, finish_params([released(run_id, "jobsweb.noop", 2, "w3")]))
    claim(link, "w4", limit=1, free=1)  # a free slot: begun at the claim
    assert unbegun(sql, [run_id]) == [0]


def enqueue_at(sql, job_type, count, priority, payload="{}", attempts=0):
    """`count` due runs of `job_type` at `priority`, having used `attempts` of 5 already."""
    return [run_id for (run_id,) in sql(
        "INSERT INTO job_runs (job_type, payload, run_at, priority, attempts, max_attempts) "
        "SELECT %s, %s::jsonb, now(), %s, %s, 5 FROM generate_series(1, %s) RETURNING id",
        [job_type, payload, priority, attempts, count])]


def test_a_killed_worker_is_charged_for_its_running_run_and_not_for_the_runs_it_held_ahead(
        app, sql, link, spawn_worker, tmp_path):
    gate = tmp_path / "gate"
    enqueue_at(sql, "jobsweb.noop", 400, priority=0)  # fast runs first: the worker then claims ahead
    [running] = enqueue_at(sql, "test.started", 1, priority=1, payload=f'{{"until": "{gate}"}}')  # holds the slot
    behind = enqueue_at(sql, "test.started", 20, priority=2, attempts=2)  # 2 of 5 attempts used
    run_at = dict(sql("SELECT id, run_at FROM job_runs WHERE priority = 2"))
    [(before_worker,)] = sql("SELECT clock_timestamp()")
    worker = spawn_worker("--forever", "--concurrency", "1", "--poll-interval", "0.05",
                          output=open(tmp_path / "worker.log", "w+"))
    # Once the gate's run holds the one slot (its handler began), no run of priority 2 can begin:
    # those it holds were claimed ahead and wait, marked not begun.
    wait_for(lambda: sql("SELECT count(*) FROM test_executions")[0][0] == 1
             and sql("SELECT count(*) FROM job_runs WHERE priority = 2 AND status = 'running' AND unbegun_claims > 0")
             [0][0] >= 2, timeout=60, interval=0.005, message="the gate's run begun, two or more runs held behind it")
    # The worker says it began once it has run BEGAN_AFTER (a quarter of a second), though nothing
    # else wakes its loop then: not at its next heartbeat, a third of the 60 s lease later.
    wait_for(lambda: sql("SELECT unbegun_claims FROM job_runs WHERE id = %s", [running]) == [(0,)], timeout=10,
             interval=0.005, message="the worker's round trip to say that the gate's run began")
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait()
    # What it held is read once its backends are gone (a transaction it sent whole may still end).
    wait_for(lambda: sql("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                         "AND backend_type = 'client backend' AND backend_start >= %s AND pid <> pg_backend_pid()",
                         [before_worker]) == [(0,)], message="the killed worker's connections to close")
    held_behind = [run_id for (run_id,) in sql("SELECT id FROM job_runs WHERE priority = 2 AND status = 'running'")]
    assert len(held_behind) >= 2
    worker_lost(sql, link, sql("SELECT locked_by FROM job_runs WHERE id = %s", [running])[0][0])

    # The run whose handler began is charged its attempt, as ever.
    assert sql("SELECT status, attempts FROM job_runs WHERE id = %s", [running]) == [("failed", 1)]
    assert sql("SELECT attempt, outcome, error_type FROM job_attempts WHERE run_id = %s", [running]) == [
        (1, "failed", "lease_expired")]
    # The runs it held ahead never began: back in the queue at the attempt they had and their own
    # run_at, with no attempt recorded, as if the claim had never been.
    assert sql("SELECT id, status, attempts, run_at, locked_by FROM job_runs WHERE priority = 2 ORDER BY id") == [
        (run_id, "queued", 2, run_at[run_id], None) for run_id in behind]
    assert sql("SELECT count(*) FROM job_attempts WHERE run_id = ANY(%s)", [behind]) == [(0,)]
    assert sql("SELECT count(*) FROM test_executions WHERE run_id = ANY(%s)", [behind]) == [(0,)]


def test_the_loop_says_a_run_claimed_ahead_began_on_a_round_trip_of_its_own_when_none_is_due(
        app, sql, registry_snapshot):
    """The run behind a slot begins as the handler before it returns: the round trip that writes
    that outcome may leave before it begins, and no other is due (nothing to claim or write)."""
    gates = {"first": threading.Event(), "behind": threading.Event()}
    jobsweb.job("test.gated")(lambda ctx: gates[ctx.payload["gate"]].wait(30))
    first = add(app, "test.gated", {"gate": "first"})
    behind = [add(app, "test.gated", {"gate": "behind"}) for _ in range(2)]
    worker = make_worker(app, concurrency=1)
    worker.claimer.size.ahead = 2  # as after fast runs: two runs are claimed ahead of its one slot
    # The pool's thread takes the next run only once the test has seen the first one's outcome sent.
    first_written, report = threading.Event(), worker.held.pool.report

    def report_then_hold(finished):
        report(finished)
        if finished.held.ctx.run_id == first:
            first_written.wait(30)

    worker.held.pool.report = report_then_hold
    worker.tick()  # the claim: one free slot, two runs ahead
    worker._collect(None)
    worker.tick()  # its runs land: the first begins, the other two wait
    assert unbegun(sql, [first, *behind]) == [0, 1, 1]

    gates["first"].set()
    worker._collect(None)  # the first run's outcome
    worker.tick()  # written, with a claim that finds nothing; the next run has not begun
    worker._collect(None)
    first_written.set()
    wait_for(lambda: any(held.ctx.run_id == behind[0] and held.began for held in worker.held.snapshot()),
             message="the run behind the slot to begin")
    # Once it has run BEGAN_AFTER, a pass of the loop with nothing to claim or write sends the mark alone.
    wait_for(lambda: (worker._collect(0), worker.tick(), unbegun(sql, behind) == [0, 1])[-1], timeout=10,
             interval=0.02, message="the round trip that says it began")
    # The other one still waits: the loop looks again within BEGAN_AFTER, not at its next heartbeat.
    now = time.monotonic()
    assert worker._wait_seconds(now, now + 60, None, claiming=True) <= BEGAN_AFTER

    gates["behind"].set()
    assert worker.run() == 0
    assert sql("SELECT status, attempts, unbegun_claims FROM job_runs ORDER BY id") == [("succeeded", 1, 0)] * 3


@pytest.fixture
def one_slot(app):
    """worker-1's HeldRuns with one slot, no database; what it holds at the end is given up."""
    held = HeldRuns(app, "worker-1", concurrency=1, lease=30, default_timeout=None,
                    failures=Failures.from_config(app.config), report=queue.SimpleQueue().put, context=JobContext)
    yield held
    held.give_up_all()
    held.close()


def test_a_run_claimed_ahead_is_said_to_have_begun_once_its_handler_has_run_began_after_seconds(one_slot):
    """Said sooner, each of a drain's short runs that began and ended between two round trips was one
    row version more (9,282 of 40,000): their finish says as much."""
    held = one_slot
    held.start([sleeping(1), sleeping(2), sleeping(3)], back_at=0.0, free=1)  # 2 and 3 claimed ahead
    assert held.awaits_beginning()
    held.get(1).stop()  # its ctx.sleep ends: the slot goes to 2
    wait_for(lambda: held.get(2).began is not None, message="run 2 to begin")
    began = held.get(2).began
    assert held.began_ahead(began + BEGAN_AFTER - 0.01) == ([], [])
    assert held.began_ahead(began + BEGAN_AFTER) == ([2], [1])
    assert held.began_ahead(began + 60) == ([], [])  # said once; 3 has not begun
    assert held.awaits_beginning()
