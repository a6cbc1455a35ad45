"""Real `flask run-jobs` processes competing for one table, killed, paused and stopped."""

import os
import signal

import pytest

from tests.conftest import wait_for
from tests.processes import add_many, finish, status_of


def test_competing_worker_processes_execute_every_run_exactly_once(app, sql, spawn_worker, tmp_path):
    runs = 400
    # Not due yet: all four workers are up and polling before any run can be claimed.
    ids = add_many(app, "test.record", runs)
    sql("UPDATE job_runs SET run_at = now() + interval '1 hour'")
    # Logs to files: 400 runs log ~84 KB, and a worker that took most of them filled its
    # 64 KB pipe, which nobody reads until the end, and stopped mid-run.
    workers = [spawn_worker("--forever", "--poll-interval", "0.02", "--concurrency", "4",
                            output=open(tmp_path / f"worker-{n}.log", "w+")) for n in range(4)]
    wait_for(lambda: sql("SELECT count(*) FROM job_workers")[0][0] == 4, message="four workers registered")
    sql("UPDATE job_runs SET run_at = now()")
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")[0][0] == runs,
             timeout=60, message="every run succeeded")
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    assert [finish(proc)[0] for proc in workers] == [0, 0, 0, 0]

    assert sql("SELECT count(*), count(DISTINCT run_id) FROM test_executions") == [(runs, runs)]
    assert sql("SELECT count(*) FROM job_runs WHERE attempts = 1 AND status = 'succeeded'") == [(runs,)]
    assert sql("SELECT count(*) FROM job_attempts") == [(runs,)]
    [(workers_that_ran,)] = sql("SELECT count(DISTINCT worker) FROM job_attempts")
    assert workers_that_ran >= 2, "the runs were shared out between competing processes"
    assert sorted(r for (r,) in sql("SELECT run_id FROM test_executions")) == ids


def test_a_run_held_by_a_killed_worker_is_recovered_by_another(app, sql, spawn_worker):
    [run_id] = add_many(app, "test.slow_first", 1, {"seconds": 60})
    victim = spawn_worker("--forever", "--poll-interval", "0.05", JOBSWEB_LEASE_SECONDS=1)
    wait_for(lambda: status_of(sql, run_id) == "running", message="the run to start")
    [(victim_id,)] = sql("SELECT locked_by FROM job_runs WHERE id = %s", [run_id])
    victim.send_signal(signal.SIGKILL)
    victim.wait()

    rescuer = spawn_worker("--forever", "--poll-interval", "0.05", JOBSWEB_LEASE_SECONDS=1)
    wait_for(lambda: status_of(sql, run_id) == "succeeded", message="the rescuer to finish the run")
    rescuer.send_signal(signal.SIGTERM)
    assert finish(rescuer)[0] == 0

    [(rescuer_id,)] = sql("SELECT id FROM job_workers WHERE stopped_at IS NOT NULL")
    assert sql("SELECT attempt, worker, outcome, error_type FROM job_attempts WHERE run_id = %s "
               "ORDER BY attempt", [run_id]) == [
        (1, victim_id, "failed", "lease_expired"),
        (2, rescuer_id, "succeeded", None),
    ]


# README, "The worker": "SIGTERM/SIGINT: stop claiming, ..., wait up to --shutdown-timeout".
@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_release_unfinished_runs_at_the_shutdown_deadline(app, sql, spawn_worker, tmp_path,
                                                                             stop_signal):
    # jobsweb.sleep's handler, and one that ignores the request; each records when it began.
    [polite] = add_many(app, "test.polite", 1, {"seconds": 60})
    [stubborn] = add_many(app, "test.started", 1, {"seconds": 60})
    log = tmp_path / "worker.log"
    proc = spawn_worker("--forever", "--concurrency", "2", "--shutdown-timeout", "1",
                        output=open(log, "w+"), JOBSWEB_LOG_LEVEL="debug")
    # Their handlers began, not only their claims: a run no thread has begun at the SIGTERM is
    # released unstarted, with no attempt (the log's "started" line comes at the claim).
    wait_for(lambda: sql("SELECT count(*) FROM test_executions")[0][0] == 2, message="both handlers to begin")
    proc.send_signal(stop_signal)
    code, output = finish(proc)

    assert code == 0, output
    assert "Traceback" not in output
    assert sql("SELECT id, status, locked_by, run_at <= now() FROM job_runs ORDER BY id") == [
        (polite, "queued", None, True), (stubborn, "queued", None, True)]
    attempts = sql("SELECT run_id, outcome, error FROM job_attempts ORDER BY run_id")
    assert [(r, o) for r, o, _ in attempts] == [(polite, "interrupted"), (stubborn, "interrupted")]
    assert "stopped by worker shutdown" in attempts[0][2]
    assert "shut down before the run finished" in attempts[1][2]
    assert sql("SELECT stopped_at IS NOT NULL FROM job_workers") == [(True,)]


@pytest.mark.parametrize("first, second", [(signal.SIGTERM, signal.SIGTERM), (signal.SIGINT, signal.SIGINT),
                                           (signal.SIGTERM, signal.SIGINT)])
def test_a_second_signal_stops_waiting_for_running_jobs(app, sql, spawn_worker, tmp_path, first, second):
    [run_id] = add_many(app, "test.started", 1, {"seconds": 600})  # ignores the stop request
    log = tmp_path / "worker.log"
    # A shutdown timeout far longer than the test may take: only the second signal ends the wait.
    proc = spawn_worker("--forever", "--shutdown-timeout", "600", output=open(log, "w+"), JOBSWEB_LOG_LEVEL="debug")
    wait_for(lambda: sql("SELECT count(*) FROM test_executions")[0][0] == 1, message="the run's handler to begin")
    proc.send_signal(first)
    wait_for(lambda: "worker is shutting down: asked 1 running job(s) to stop" in log.read_text(),
             message="the worker to start waiting for its handler")
    assert proc.poll() is None
    proc.send_signal(second)
    code, output = finish(proc, timeout=60)
    assert code == 0, output
    assert sql("SELECT status, locked_by FROM job_runs") == [("queued", None)], output
    assert sql("SELECT run_id, outcome FROM job_attempts") == [(run_id, "interrupted")], output


def test_released_runs_are_picked_up_again_after_a_restart(app, sql, spawn_worker):
    # Outlives the shutdown timeout on its first attempt (ignoring cancellation), succeeds on the
    # second; records each beginning.
    [run_id] = add_many(app, "test.slow_until", 1, {"seconds": 60, "attempt": 2})
    first = spawn_worker("--forever", "--shutdown-timeout", "0.2")
    # Its handler began, not only its claim (a run no thread began is released with no attempt).
    wait_for(lambda: sql("SELECT count(*) FROM test_executions") == [(1,)], message="the run's handler to begin")
    first.send_signal(signal.SIGTERM)
    assert finish(first)[0] == 0
    assert status_of(sql, run_id) == "queued"

    second = spawn_worker()
    assert finish(second)[0] == 0
    assert sql("SELECT status, attempts FROM job_runs") == [("succeeded", 2)]
    assert sql("SELECT outcome FROM job_attempts ORDER BY attempt") == [("interrupted",), ("succeeded",)]


def test_three_deploys_during_one_run_leave_it_every_attempt_it_had(app, sql, spawn_worker):
    [run_id] = add_many(app, "test.slow_until", 1, {"seconds": 60, "attempt": 4}, max_attempts=3)
    for deploy in range(1, 4):  # each deploy: SIGTERM, the run released at the shutdown deadline
        worker = spawn_worker("--forever", "--shutdown-timeout", "0.2")
        # Its handler began (not only claimed: a run whose handler has not begun is released
        # with its attempt given back, and this deploy would not count).
        wait_for(lambda: sql("SELECT count(*) FROM test_executions")[0][0] == deploy, message="the run to start")
        worker.send_signal(signal.SIGTERM)
        assert finish(worker)[0] == 0
    assert sql("SELECT status, attempts, max_attempts FROM job_runs") == [("queued", 3, 6)]

    assert finish(spawn_worker())[0] == 0
    assert sql("SELECT status, attempts FROM job_runs") == [("succeeded", 4)]
    assert sql("SELECT attempt, outcome FROM job_attempts ORDER BY attempt") == [
        (1, "interrupted"), (2, "interrupted"), (3, "interrupted"), (4, "succeeded")]


# A thread's heartbeat and an awaited handler's (engine/worker/async_execution.py) alike.
@pytest.mark.parametrize("job_type", ["test.until_file", "test.async_until_file"])
def test_heartbeats_keep_a_long_run_from_being_taken_over(app, sql, spawn_worker, job_type, tmp_path):
    done = tmp_path / "done"
    [run_id] = add_many(app, job_type, 1, {"file": str(done)})
    owner = spawn_worker("--forever", "--poll-interval", "0.05", JOBSWEB_LEASE_SECONDS=3)
    wait_for(lambda: status_of(sql, run_id) == "running", message="the run to start")
    # A second worker looks for expired leases every second (a third of its lease, as often as
    # it heartbeats). The run goes on until the rival has been seen well past the first lease
    # plus a recovery pass: by then, without the owner's heartbeats, it would have taken it over.
    rival = spawn_worker("--forever", "--poll-interval", "0.05", JOBSWEB_LEASE_SECONDS=3)
    wait_for(lambda: sql("SELECT count(*) FROM job_workers w, job_runs r WHERE w.id LIKE %s "
                         "AND w.last_seen_at > r.started_at + interval '5 seconds'", [f"%:{rival.pid}:%"])[0][0],
             timeout=60, message="the rival to look past the run's first lease")
    assert status_of(sql, run_id) == "running"
    done.touch()
    wait_for(lambda: status_of(sql, run_id) == "succeeded", message="the run to finish")
    for proc in (owner, rival):
        proc.send_signal(signal.SIGTERM)
        assert finish(proc)[0] == 0
    assert sql("SELECT attempts FROM job_runs") == [(1,)]
    assert sql("SELECT outcome FROM job_attempts") == [("succeeded",)]


def test_a_frozen_worker_that_lost_its_lease_cannot_overwrite_the_newer_attempt(app, sql, spawn_worker):
    [run_id] = add_many(app, "test.slow_first", 1, {"seconds": 2})
    frozen = spawn_worker("--forever", "--shutdown-timeout", "10", JOBSWEB_LEASE_SECONDS=1)
    wait_for(lambda: status_of(sql, run_id) == "running", message="the run to start")
    os.kill(frozen.pid, signal.SIGSTOP)  # no heartbeats from here on
    wait_for(lambda: sql("SELECT locked_until < now() FROM job_runs")[0][0], message="the lease to expire")

    rescuer = spawn_worker("--forever", "--poll-interval", "0.05", JOBSWEB_LEASE_SECONDS=1)
    wait_for(lambda: status_of(sql, run_id) == "succeeded", message="the rescuer to finish the run")
    rescuer.send_signal(signal.SIGTERM)
    assert finish(rescuer)[0] == 0

    # Thawed and told to stop, the frozen worker still believes it holds attempt 1. Either its
    # next heartbeat learns the lease is gone, or its late result reaches FINISH_RUNS and the
    # guard refuses it: which comes first depends on the signal's timing, and both must leave
    # the newer attempt alone.
    os.kill(frozen.pid, signal.SIGCONT)
    frozen.send_signal(signal.SIGTERM)
    code, output = finish(frozen)
    assert code == 0, output
    assert (f"run {run_id} test.slow_first: lease lost" in output
            or f"run {run_id} test.slow_first: outcome of attempt 1 rejected" in output), output
    assert sql("SELECT status, attempts, result FROM job_runs") == [("succeeded", 2, {"attempt": 2})]
    assert sql("SELECT attempt, outcome, error_type FROM job_attempts ORDER BY attempt") == [
        (1, "failed", "lease_expired"), (2, "succeeded", None)]
