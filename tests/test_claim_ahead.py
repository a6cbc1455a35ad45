"""Claiming ahead of the free slots (issue 18): runs waiting in a worker are held like running
ones, so that a kill or a SIGTERM neither loses them nor runs them twice."""

import os
import signal

from jobsweb.engine.claim_ahead import RATE_WINDOW, ClaimAhead
from tests.conftest import wait_for
from tests.processes import finish, insert_many

RUNS = 3000


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
    victim = spawn_worker("--forever", "--poll-interval", "0.02", "--concurrency", "2",
                          output=open(tmp_path / "victim.log", "w+"), JOBSWEB_LEASE_SECONDS=2)
    # More runs held and not run than slots: some wait in the worker, claimed ahead.
    wait_for(lambda: waiting(sql) > 6, timeout=30, interval=0.005, message="runs claimed ahead of the two slots")
    # Frozen first, so that what it holds is what it held when killed: runs it had not run
    # beyond its two slots (a worker killed between two claims would hold none).
    os.kill(victim.pid, signal.SIGSTOP)
    assert waiting(sql) > 2
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    held = [run_id for (run_id,) in sql("SELECT id FROM job_runs WHERE status = 'running'")]
    assert len(held) > 2

    rescuer = spawn_worker("--forever", "--poll-interval", "0.02", "--concurrency", "2",
                           output=open(tmp_path / "rescuer.log", "w+"), JOBSWEB_LEASE_SECONDS=2)
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")[0][0] == RUNS,
             timeout=120, message="every run to succeed")
    rescuer.send_signal(signal.SIGTERM)
    assert finish(rescuer)[0] == 0

    assert sql("SELECT count(DISTINCT run_id) FROM test_executions") == [(RUNS,)], "no run was lost"
    assert sql("SELECT count(*) FROM job_attempts WHERE error_type = 'lease_expired'") == [(len(held),)]
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
    wait_for(lambda: waiting(sql) > 6, timeout=30, interval=0.005, message="runs claimed ahead of the two slots")
    # The signal lands while it is frozen holding runs it has not started, so that some are
    # still waiting when its loop sees the signal, however loaded the machine.
    os.kill(first.pid, signal.SIGSTOP)
    assert waiting(sql) > 2
    first.send_signal(signal.SIGTERM)
    os.kill(first.pid, signal.SIGCONT)
    code, output = finish(first)
    assert code == 0, output
    assert running(sql) == 0, "every run it held was finished or released"
    released = [run_id for (run_id,) in sql("SELECT run_id FROM job_attempts WHERE outcome = 'interrupted'")]
    assert released, "runs claimed ahead and not started were released"

    second = spawn_worker("--concurrency", "2", output=open(tmp_path / "second.log", "w+"))
    assert finish(second, timeout=120)[0] == 0
    assert sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'") == [(RUNS,)]
    # A released run never started: each run's effect happened exactly once.
    assert sql("SELECT count(*), count(DISTINCT run_id) FROM test_executions") == [(RUNS, RUNS)]
    assert sql("SELECT count(*) FROM test_executions WHERE run_id = ANY(%s) AND pid = %s",
               [released, first.pid]) == [(0,)]
