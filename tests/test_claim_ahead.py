"""Claiming ahead of the free slots (issue 18): runs waiting in a worker are held like running
ones, so that a kill or a SIGTERM neither loses them nor runs them twice."""

import os
import queue
import signal
import subprocess
import sys
import threading

import pytest

from jobsweb.engine import statements
from jobsweb.engine.worker.claim_ahead import RATE_WINDOW, ClaimAhead
from jobsweb.engine.worker.execution import Held, Pool
from jobsweb.engine.jobs.registry import JobContext, JobType
from tests.conftest import wait_for
from tests.processes import finish, insert_many

RUNS = 1500


def running(sql):
    return sql("SELECT count(*) FROM job_runs WHERE status = 'running'")[0][0]


def waiting(sql):
    """Runs held by a worker that have not run: beyond its 2 slots, some wait (claimed ahead)."""
    return sql("SELECT count(*) FROM job_runs r WHERE status = 'running' AND NOT EXISTS "
               "(SELECT 1 FROM test_executions e WHERE e.run_id = r.id)")[0][0]


def test_fast_runs_are_claimed_ahead_and_slow_ones_only_for_free_slots():
    fast = ClaimAhead()
    assert fast.limit(4, busy=0, now=0.0) == 4
    fast.finished(0, now=0.0)
    fast.finished(round(2000 * RATE_WINDOW), now=RATE_WINDOW)  # 2,000 runs/s
    assert fast.ahead == 200  # README: "about 0.1 s of work ahead of its free slots"
    assert fast.limit(4, busy=4, now=RATE_WINDOW) == fast.ahead
    # With every slot taken, it waits until half the runs ahead have started.
    assert fast.limit(4, busy=4 + fast.ahead // 2 + 1, now=RATE_WINDOW) == 0

    slow = ClaimAhead()  # one run a second
    slow.finished(1, now=0.0)
    slow.finished(1, now=1.0)
    assert slow.ahead == 0
    assert slow.limit(4, busy=3, now=1.0) == 1
    assert slow.limit(4, busy=4, now=1.0) == 0

    flood = ClaimAhead()
    flood.finished(10**7, now=0.0)
    flood.finished(0, now=RATE_WINDOW)
    assert flood.ahead == 2048  # README: "(up to 2,048 runs)"
    assert flood.limit(4, busy=0, now=RATE_WINDOW) == 4 + 2048


def test_runs_ahead_shrink_by_half_a_window_when_runs_stop_finishing():
    # Runs finish in bursts, a claim's worth at a time: a window that saw none between two
    # bursts must not drop the runs ahead to none (claims of --concurrency runs until the next).
    bursts = ClaimAhead()
    bursts.finished(0, now=0.0)
    bursts.finished(10**6, now=RATE_WINDOW)
    assert bursts.ahead == 2048
    bursts.finished(0, now=2 * RATE_WINDOW)
    assert bursts.ahead == 1024
    for window in range(3, 40):
        bursts.finished(0, now=window * RATE_WINDOW)
    assert bursts.ahead == 0


def test_runs_claimed_ahead_by_a_killed_worker_are_recovered_and_none_runs_twice(app, sql, spawn_worker, tmp_path):
    insert_many(sql, "test.record", RUNS, '{"seconds": 0.001}', max_attempts=3)
    [(before_victim,)] = sql("SELECT clock_timestamp()")
    victim = spawn_worker("--forever", "--poll-interval", "0.02", "--concurrency", "2",
                          output=open(tmp_path / "victim.log", "w+"), JOBSWEB_LEASE_SECONDS=2)
    # More runs held and not run than slots: some wait in the worker, claimed ahead.
    wait_for(lambda: waiting(sql) > 6, interval=0.005, message="runs claimed ahead of the two slots")
    # Frozen first, so that what it holds is what it held when killed: runs it had not run
    # beyond its two slots (a worker killed between two claims would hold none).
    os.kill(victim.pid, signal.SIGSTOP)
    assert waiting(sql) > 2
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    # A transaction it had sent whole before the SIGSTOP (a finish and its COMMIT) still runs on
    # the server and may end runs after its death: what it held is read once its backends are
    # gone (quiet run 10 of e08d38d read 9 running runs, and 8 came back from lease recovery).
    wait_for(lambda: sql("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                         "AND backend_type = 'client backend' AND backend_start >= %s AND pid <> pg_backend_pid()",
                         [before_victim]) == [(0,)], message="the killed worker's connections to close")
    held = [run_id for (run_id,) in sql("SELECT id FROM job_runs WHERE status = 'running'")]
    assert len(held) > 2
    # Its claims marked the runs they took ahead not begun, and its round trips cleared the marks of
    # those whose handlers began (0032_unbegun_claims): lease recovery charges only those.
    said_begun = sql("SELECT count(*) FROM job_runs WHERE status = 'running' AND unbegun_claims = 0")[0][0]
    assert said_begun < len(held)

    rescuer = spawn_worker("--forever", "--poll-interval", "0.02", "--concurrency", "2",
                           output=open(tmp_path / "rescuer.log", "w+"), JOBSWEB_LEASE_SECONDS=2)
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")[0][0] == RUNS,
             timeout=120, message="every run to succeed")
    rescuer.send_signal(signal.SIGTERM)
    assert finish(rescuer)[0] == 0

    assert sql("SELECT count(DISTINCT run_id) FROM test_executions") == [(RUNS,)], "no run was lost"
    assert sql("SELECT count(*) FROM job_attempts WHERE error_type = 'lease_expired'") == [(said_begun,)]
    # A run the victim had finished but not yet written runs again (at least once, as ever);
    # the runs it held that had not started (claimed ahead) ran once, on the rescuer.
    unstarted = sql("SELECT run_id, count(*) FROM test_executions WHERE run_id = ANY(%s) GROUP BY run_id "
                    "HAVING bool_and(pid <> %s)", [held, victim.pid])
    assert unstarted and all(count == 1 for _, count in unstarted)
    assert sql("SELECT count(*) FROM test_executions GROUP BY run_id, pid HAVING count(*) > 1") == []


def test_sigterm_releases_runs_claimed_ahead_without_running_them(app, sql, spawn_worker, tmp_path):
    insert_many(sql, "test.record", RUNS, '{"seconds": 0.001}')
    first = spawn_worker("--forever", "--poll-interval", "0.02", "--concurrency", "2",
                         output=open(tmp_path / "first.log", "w+"))
    wait_for(lambda: waiting(sql) > 6, interval=0.005, message="runs claimed ahead of the two slots")
    # The signal lands while it is frozen holding runs it has not started, so that some are
    # still waiting when its loop sees the signal, however loaded the machine.
    os.kill(first.pid, signal.SIGSTOP)
    assert waiting(sql) > 2
    first.send_signal(signal.SIGTERM)
    os.kill(first.pid, signal.SIGCONT)
    code, output = finish(first)
    assert code == 0, output
    assert running(sql) == 0, "every run it held was finished or released"
    # Its two running handlers finished (1 ms each); the runs it held and had not begun went back
    # to the queue with no attempt recorded and none used up.
    assert sql("SELECT count(*) FROM job_attempts WHERE outcome <> 'succeeded'") == [(0,)]
    released = [run_id for (run_id,) in sql("SELECT id FROM job_runs WHERE status = 'queued' AND attempts = 0 "
                                            "AND updated_at > created_at")]  # claimed, then given back
    assert released, "runs claimed ahead and not started were released"

    second = spawn_worker("--concurrency", "2", output=open(tmp_path / "second.log", "w+"))
    assert finish(second, timeout=120)[0] == 0
    assert sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'") == [(RUNS,)]
    # A released run never started: each run's effect happened exactly once.
    assert sql("SELECT count(*), count(DISTINCT run_id) FROM test_executions") == [(RUNS, RUNS)]
    assert sql("SELECT count(*) FROM test_executions WHERE run_id = ANY(%s) AND pid = %s",
               [released, first.pid]) == [(0,)]


def enqueue_at(sql, job_type, count, priority, payload="{}", attempts=0):
    """`count` due runs of `job_type` at `priority`, having used `attempts` of 5 already."""
    sql("INSERT INTO job_runs (job_type, payload, run_at, priority, attempts, max_attempts) "
        "SELECT %s, %s::jsonb, now(), %s, %s, 5 FROM generate_series(1, %s)",
        [job_type, payload, priority, attempts, count])


def held_at_once(sql, priority):
    """Runs of `priority` a worker holds now (claimed: running, begun or not)."""
    return sql("SELECT count(*) FROM job_runs WHERE status = 'running' AND priority = %s", [priority])[0][0]


def test_runs_held_behind_a_busy_slot_start_their_clock_when_their_handler_begins(app, sql, spawn_worker,
                                                                                  tmp_path):
    # 400 no-ops first: the worker finishes runs fast, so the claim that reaches the five
    # 0.5 s runs takes them all at once, ahead of its one slot (claim_ahead.py).
    enqueue_at(sql, "jobsweb.noop", 400, priority=0)
    enqueue_at(sql, "test.started", 5, priority=1, payload='{"seconds": 0.5}')
    worker = spawn_worker("--concurrency", "1", output=open(tmp_path / "worker.log", "w+"))
    wait_for(lambda: held_at_once(sql, 1) >= 3, timeout=60, interval=0.005,
             message="three or more of the 0.5 s runs held at once by a worker with one slot")
    code, output = finish(worker, timeout=60)
    assert code == 0, output

    runs = sql("SELECT extract(epoch FROM r.finished_at - r.started_at)::float8, e.at, r.started_at, a.started_at "
               "FROM job_runs r JOIN test_executions e ON e.run_id = r.id JOIN job_attempts a ON a.run_id = r.id "
               "WHERE r.priority = 1 ORDER BY e.at")
    assert len(runs) == 5
    previous_began = None
    for duration, began, run_started, attempt_started in runs:
        # Each ran 0.5 s (its handler sleeps that long). No upper bound: finished_at is when the
        # outcome was written, which a loaded machine delays (0.70 s seen under make test).
        assert duration >= 0.5, runs
        # Its start is when its handler began (`began`, recorded by the handler itself), not its
        # claim's time. The handlers ran one after another in the one slot, so each began after
        # the one before it had slept its 0.5 s: a start counted from the claim (taken before the
        # first of them began) would come before the previous handler began. The start is read
        # from the database's clock at the claim plus the seconds the run waited in the worker,
        # so it may come before `began` by the claim's round trip, never after it.
        assert previous_began is None or previous_began < run_started, runs
        assert run_started <= began, runs
        assert attempt_started == run_started
        previous_began = began


def test_sigterm_gives_back_the_runs_held_behind_a_busy_slot_with_no_attempt_recorded(app, sql, spawn_worker,
                                                                                     tmp_path):
    gate = tmp_path / "gate"
    enqueue_at(sql, "jobsweb.noop", 400, priority=0)  # fast runs first: the worker then claims ahead
    enqueue_at(sql, "test.started", 1, priority=1, payload=f'{{"until": "{gate}"}}')  # holds the slot
    # Runs that failed twice already: a release must leave them at 2 of 5 attempts.
    enqueue_at(sql, "test.started", 20, priority=2, attempts=2)
    worker = spawn_worker("--forever", "--concurrency", "1", "--poll-interval", "0.05", "--shutdown-timeout", "1",
                          output=open(tmp_path / "worker.log", "w+"))
    # Once its one slot is taken by the run that waits for the gate (its handler has begun), no run
    # of priority 2 can begin: those it holds were claimed ahead, and stay unstarted until the signal.
    wait_for(lambda: sql("SELECT count(*) FROM test_executions")[0][0] == 1 and held_at_once(sql, 2) >= 2,
             timeout=60, interval=0.005, message="the gate's run begun, two or more runs held behind it")
    worker.send_signal(signal.SIGTERM)
    code, output = finish(worker)
    assert code == 0, output

    assert sql("SELECT r.priority FROM test_executions e JOIN job_runs r ON r.id = e.run_id") == [(1,)]
    # Held and never begun: back in the queue at the attempts they had, and no attempt recorded.
    assert sql("SELECT status, attempts, max_attempts, locked_by, count(*) FROM job_runs WHERE priority = 2 "
               "GROUP BY 1, 2, 3, 4") == [("queued", 2, 5, None, 20)]
    assert sql("SELECT count(*) FROM job_attempts a JOIN job_runs r ON r.id = a.run_id WHERE r.priority = 2") == [(0,)]
    # The run whose handler had begun is an interrupted attempt, given back as ever.
    assert sql("SELECT r.status, r.attempts, r.max_attempts, a.outcome FROM job_runs r "
               "JOIN job_attempts a ON a.run_id = r.id WHERE r.priority = 1") == [("queued", 1, 6, "interrupted")]

    gate.touch()
    assert finish(spawn_worker("--concurrency", "1", output=open(tmp_path / "next.log", "w+")), timeout=60)[0] == 0
    assert sql("SELECT a.attempt, a.outcome, count(*) FROM job_attempts a JOIN job_runs r ON r.id = a.run_id "
               "WHERE r.priority = 2 GROUP BY 1, 2") == [(3, "succeeded", 20)]


@pytest.mark.parametrize("max_attempts", [5, 1])
def test_runs_of_the_smaller_priority_start_first_whatever_a_claim_takes_ahead(app, sql, spawn_worker, tmp_path,
                                                                               max_attempts):
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # under load
    try:
        worker = spawn_worker("--forever", "--concurrency", "1", "--poll-interval", "0.02",
                              output=open(tmp_path / "worker.log", "w+"))
        wait_for(lambda: sql("SELECT count(*) FROM job_workers")[0][0] == 1, message="the worker to register")
        for round_ in range(8):  # 20 before; without 0025's stop of the claim ahead it fails in round 0
            # 40 + 40 due at once (one statement): whatever it claims ahead, the 40 of priority 0 start first.
            sql("INSERT INTO job_runs (job_type, priority, max_attempts) SELECT 'test.started', p, "
                "CASE p WHEN 0 THEN %s ELSE 5 END FROM generate_series(1, 40), unnest(ARRAY[5, 0]) p",
                [max_attempts])
            wait_for(lambda: sql("SELECT count(*) FROM test_executions")[0][0] == 80 * (round_ + 1), timeout=60,
                     interval=0.01, message=f"round {round_}'s 80 runs to start")
            order = [p for (p,) in sql("SELECT r.priority FROM test_executions e JOIN job_runs r ON r.id = e.run_id "
                                       "ORDER BY e.at OFFSET %s", [80 * round_])]
            assert order == [0] * 40 + [5] * 40, f"round {round_}"
        worker.send_signal(signal.SIGTERM)
        assert finish(worker)[0] == 0
    finally:
        burner.kill()
        burner.wait()


def claim(sql, job_type, free):
    """(id, priority, run_at) of the runs a claim of up to 10 runs of `job_type` takes, `free` slots free."""
    return [(row[0], row[10], row[11]) for row in sql(statements.CLAIM_RUNS, {
        "worker": "test", "lease": 60, "job_types": [job_type], "limit": 10, "free": free, "queues": None})]


def four_runs(sql, job_type):
    """Due runs, in claim order: at priority 0 one with attempts to spare, one on its last attempt
    and one with attempts to spare; then one at priority 1, due before all three."""
    return sql("INSERT INTO job_runs (job_type, priority, run_at, max_attempts) VALUES "
               "(%(t)s, 0, now() - interval '3 s', 5), (%(t)s, 0, now() - interval '2 s', 1), "
               "(%(t)s, 0, now() - interval '1 s', 5), (%(t)s, 1, now() - interval '4 s', 5) "
               "RETURNING id, priority, run_at", {"t": job_type})


def test_a_claim_takes_no_run_ahead_past_one_on_its_last_attempt_at_any_priority(app, sql):
    first, last_attempt, after, next_priority = four_runs(sql, "test.record")
    # One free slot: the run on its last attempt is not claimed ahead, and the runs after it, of
    # its priority or the next, are not either: they would start before it.
    assert claim(sql, "test.record", free=1) == [first]
    assert claim(sql, "test.record", free=0) == []
    # Once it can take a free slot, the runs after it are claimed ahead of it again.
    assert claim(sql, "test.record", free=1) == [last_attempt, after, next_priority]


def test_a_run_on_its_last_attempt_in_a_free_slot_does_not_stop_the_claim_ahead(app, sql):
    runs = four_runs(sql, "test.record")
    # Each row carries its priority and run_at, by which the worker orders the runs it holds.
    assert claim(sql, "test.record", free=2) == runs


def held_run(run_id, priority, func):
    return Held(JobContext(run_id, "test.order", {}, 1, 5), JobType("test.order", func), 30, None,
                order=(priority, 0, run_id))


def test_held_runs_wait_for_the_slot_in_priority_order_whichever_claim_brought_them(app):
    gate, began, finished = threading.Event(), [], queue.SimpleQueue()

    def handler(ctx):
        began.append(ctx.run_id)
        gate.wait(30)  # the first run holds the one slot until the later claims are queued

    pool = Pool(app, 1, finished.put)
    pool.submit([held_run(1, 0, handler)])
    wait_for(lambda: began == [1], message="the first run to hold the slot")
    pool.submit([held_run(2, 5, handler), held_run(3, 5, handler)])  # a claim's runs of priority 5
    pool.submit([held_run(4, 0, handler), held_run(5, 0, handler)])  # then a claim of priority 0
    gate.set()
    assert sorted(finished.get(timeout=10).held.ctx.run_id for _ in range(5)) == [1, 2, 3, 4, 5]
    assert began == [1, 4, 5, 2, 3]
    assert pool.withdraw() == []
