"""@job(cancel="terminate") (issue 52, item 3): the handler runs in a child process that the worker
ends, as Celery's revoke(terminate=True) and RQ's send_stop_job_command do, when the run is
cancelled, times out or is given up; its return, its exception and its crash are recorded.

Real worker processes; the child's pid is what its handler recorded (tests/terminate_jobs.py)."""

import json
import os
import signal
import time
from pathlib import Path

import pytest

import jobsweb
from jobsweb.core.errors import InvalidInput
from jobsweb.engine.jobs import registry
from tests import terminate_jobs  # noqa: F401 - registers the job types insert() reads
from tests.conftest import wait_for

HANDLERS = "tests.job_types,tests.terminate_jobs"


def insert(sql, job_type, payload=None):
    """A run due now, with its job type's max_attempts (as enqueue() gives it)."""
    [(run,)] = sql("INSERT INTO job_runs (job_type, payload, max_attempts) VALUES (%s, %s, %s) RETURNING id",
                   [job_type, json.dumps(payload or {}), registry.get(job_type).max_attempts])
    return run


def worker(spawn_worker, *args, **settings):
    return spawn_worker("--poll-interval", "0.1", *args, **{"JOBSWEB_HANDLERS": HANDLERS, **settings})


def pids(sql, run, count=1):
    """The pids the run's handler recorded, once it has recorded `count` (one an attempt)."""
    def recorded():
        found = [pid for pid, in sql("SELECT pid FROM test_executions WHERE run_id = %s ORDER BY at", [run])]
        return found if len(found) >= count else None

    return wait_for(recorded, timeout=30, message=f"{count} attempt(s) of run {run} to begin in their child processes")


def gone(pid):
    """No process `pid` runs: none, or a zombie its parent has not reaped yet."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def status(sql, run):
    return sql("SELECT status FROM job_runs WHERE id = %s", [run])[0][0]


def attempts(sql, run):
    return sql("SELECT attempt, outcome, error_type, error FROM job_attempts WHERE run_id = %s ORDER BY attempt",
               [run])


# -- decoration ---------------------------------------------------------------------------

def test_a_bad_cancel_value_is_refused_when_the_handler_is_declared():
    with pytest.raises(InvalidInput) as refused:
        jobsweb.job("test.terminate.bad", cancel="kill")
    assert refused.value.field == "cancel"
    assert "must be 'cooperative' (ctx.cancelled turns true) or 'terminate'" in str(refused.value)
    assert "got 'kill'" in str(refused.value)
    with pytest.raises(InvalidInput, match="got True"):
        jobsweb.job("test.terminate.bad", cancel=True)
    assert registry.get("test.terminate.bad") is None


def test_an_async_handler_cannot_ask_to_be_terminated():
    async def handler(ctx):
        return None

    with pytest.raises(InvalidInput) as refused:
        jobsweb.job("test.terminate.async", cancel="terminate")(handler)
    assert refused.value.field == "cancel"
    assert "async def handler is cancelled at its next await" in str(refused.value)
    assert registry.get("test.terminate.async") is None


# -- a handler's ends, through its child ------------------------------------------------------

def test_a_child_handler_returns_its_result_with_the_app_context_payload_progress_and_lease(
        sql, spawn_worker, figures):
    run = insert(sql, "test.terminate.works", {"n": 7})
    again = insert(sql, "test.terminate.works", {"n": 8})
    proc = worker(spawn_worker, "--concurrency", "1")
    assert proc.wait(timeout=60) == 0
    # A child's start (the forkserver's at the first, then a fork, the app built, the handlers
    # imported) is in its attempt's time: the first run's, then the second's.
    figures(child_attempt_seconds=[float(seconds) for seconds, in sql(
        "SELECT extract(epoch FROM finished_at - started_at) FROM job_attempts ORDER BY run_id")])
    assert status(sql, again) == "succeeded"
    [(state, result, progress, note, data)] = sql(
        "SELECT status, result, progress, progress_note, progress_data FROM job_runs WHERE id = %s", [run])
    assert state == "succeeded"
    assert result["pid"] != proc.pid and result["pid"] == pids(sql, run)[0]
    assert {k: result[k] for k in ("attempt", "payload", "app", "lease_extended", "cancelled", "batch")} == {
        "attempt": 1, "payload": {"n": 7}, "app": "jobsweb", "lease_extended": True, "cancelled": False,
        "batch": None}
    assert (progress, note, data) == (1.0, "half way", {"done": 1})  # the note and data its child said; 1.0 as it succeeded
    assert attempts(sql, run) == [(1, "succeeded", None, None)]
    [(output,)] = sql("SELECT output FROM job_attempts WHERE run_id = %s", [run])  # captured in the child
    assert f"INFO tests.terminate: working on run {run} in pid {result['pid']}" in output


def test_a_child_handlers_exceptions_are_retried_or_dead_as_in_a_thread(sql, spawn_worker):
    retried = insert(sql, "test.terminate.works", {"fail": "value"})
    permanent = insert(sql, "test.terminate.works", {"fail": "permanent"})
    listed = insert(sql, "test.terminate.works", {"fail": "listed"})
    later = insert(sql, "test.terminate.works", {"fail": "retry"})
    unstorable = insert(sql, "test.terminate.works", {"fail": "result"})
    sql("UPDATE job_runs SET max_attempts = 1 WHERE id = %s", [unstorable])
    proc = worker(spawn_worker, "--concurrency", "2")
    assert proc.wait(timeout=90) == 0
    assert [status(sql, run) for run in (retried, permanent, listed, later, unstorable)] == [
        "succeeded", "dead", "dead", "failed", "dead"]
    assert attempts(sql, retried) == [(1, "failed", "ValueError", "no good on attempt 1"), (2, "succeeded", None, None)]
    assert attempts(sql, permanent) == [(1, "failed", "PermanentError", "retrying cannot help")]
    assert attempts(sql, listed) == [(1, "failed", "KeyError", "'listed in permanent='")]
    assert attempts(sql, later) == [(1, "failed", "Retry", "retry in 3600 s: rate limited")]
    [(retry_in,)] = sql("SELECT extract(epoch FROM r.run_at - a.finished_at) FROM job_runs r JOIN job_attempts a "
                        "ON a.run_id = r.id WHERE r.id = %s", [later])
    assert 3590 < retry_in <= 3600
    [(stack,)] = sql("SELECT stack FROM job_attempts WHERE run_id = %s AND attempt = 1", [retried])
    # The child's own traceback: the handler's file and line, not the worker's stand-in.
    assert 'terminate_jobs.py", line' in stack and "in works" in stack
    assert "TypeError" in attempts(sql, unstorable)[0][2]


@pytest.mark.parametrize("how, error", [
    ("segfault", "ended without an answer: killed by signal 11 (SIGSEGV)"),
    ("exit", "ended without an answer: it exited with code 3")])
def test_a_child_that_crashes_fails_its_attempt_and_is_retried(sql, spawn_worker, how, error):
    run = insert(sql, "test.terminate.crash", {"how": how})
    proc = worker(spawn_worker, "--forever")  # a tick may end before the retry is due
    first, second = pids(sql, run, 2)
    wait_for(lambda: status(sql, run) == "dead", timeout=30, message="the second attempt to end")
    proc.terminate()
    assert proc.wait(timeout=15) == 0
    assert [(attempt, outcome, error_type) for attempt, outcome, error_type, _ in attempts(sql, run)] == [
        (1, "failed", "ChildProcessDied"), (2, "failed", "ChildProcessDied")]
    assert attempts(sql, run)[1][3] == f"its process (pid {second}) {error}"
    assert first != second and proc.pid not in (first, second)


# -- ending the child ---------------------------------------------------------------------------

def test_a_cancel_ends_a_child_that_never_looks_within_a_second_or_two(app, sql, spawn_worker, figures):
    run = insert(sql, "test.terminate.spin")
    proc = worker(spawn_worker, "--forever", JOBSWEB_LISTEN="true")  # the default 60 s lease: a heartbeat each 20 s
    [pid] = pids(sql, run)
    wait_for(lambda: sql("SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN jobsweb_runs'") == [(1,)],
             message="the worker to listen")
    with app.app_context():
        began = time.monotonic()
        assert jobsweb.cancel(run) == "stop_requested"
    wait_for(lambda: gone(pid), timeout=10, message=f"the child {pid} to be gone")
    ended = time.monotonic() - began
    wait_for(lambda: status(sql, run) == "cancelled", timeout=10, message="the run to end cancelled")
    figures(cancel_to_child_gone_seconds=round(ended, 3))
    assert ended < 5
    assert attempts(sql, run) == [(1, "cancelled", "cancelled",
                                   f"cancelled by an operator: its process (pid {pid}) was ended with SIGTERM")]
    proc.terminate()
    assert proc.wait(timeout=15) == 0


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(app, sql, spawn_worker):
    run = insert(sql, "test.terminate.deaf")
    proc = worker(spawn_worker, "--forever", JOBSWEB_LISTEN="true")
    [pid] = pids(sql, run)
    with app.app_context():
        began = time.monotonic()
        jobsweb.cancel(run)
    wait_for(lambda: gone(pid), timeout=20, message=f"the child {pid} to be killed")
    assert 4.5 < time.monotonic() - began < 15  # SIGTERM, 5 s of grace, SIGKILL
    wait_for(lambda: status(sql, run) == "cancelled", timeout=10, message="the run to end cancelled")
    assert attempts(sql, run)[0][3] == (f"cancelled by an operator: its process (pid {pid}) was ended with "
                                        "SIGKILL, 5 s after a SIGTERM it outlived")
    proc.terminate()
    assert proc.wait(timeout=15) == 0


def test_a_child_past_its_timeout_is_ended_and_its_attempt_timed_out(sql, spawn_worker):
    # A first run starts the forkserver (a second or more of imports, in its attempt's time): the
    # children of the 3 s timeout's attempts are then forks that begin within a fraction of it.
    warm = insert(sql, "test.terminate.works")
    run = insert(sql, "test.terminate.overrun")
    proc = worker(spawn_worker, "--concurrency", "1", "--forever")
    first, second = pids(sql, run, 2)
    wait_for(lambda: status(sql, run) == "dead", timeout=30, message="the second attempt to time out")
    wait_for(lambda: gone(first) and gone(second), timeout=10, message="both children to be gone")
    assert status(sql, warm) == "succeeded"
    assert attempts(sql, run) == [
        (attempt, "failed", "timeout", "timed out after 3 seconds: its process is ended") for attempt in (1, 2)]
    proc.terminate()
    assert proc.wait(timeout=15) == 0


def test_a_stopping_worker_asks_its_child_which_stops_and_the_run_is_queued_again(sql, spawn_worker):
    run = insert(sql, "test.terminate.polite")
    proc = worker(spawn_worker, "--forever", "--shutdown-timeout", "30")
    [pid] = pids(sql, run)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0  # well before the 30 s deadline: the child heard ctx.cancelled
    assert gone(pid)
    assert status(sql, run) == "queued"
    assert [(attempt, outcome) for attempt, outcome, *_ in attempts(sql, run)] == [(1, "interrupted")]


def test_a_child_exits_when_its_worker_is_killed(sql, spawn_worker):
    # No one is left to record its attempt: the child hears its pipe to the worker close and
    # exits, and lease recovery takes the run, as for any handler of a killed worker.
    run = insert(sql, "test.terminate.spin")
    proc = worker(spawn_worker, "--forever")
    [pid] = pids(sql, run)
    proc.kill()
    proc.wait(timeout=15)
    wait_for(lambda: gone(pid), timeout=10, message=f"the child {pid} to exit")
    assert status(sql, run) == "running"  # until its lease expires


def test_a_child_that_ignores_sigterm_does_not_hold_the_workers_exit_past_its_deadline(sql, spawn_worker):
    # At the 1 s shutdown deadline the child is sent SIGTERM, which it ignores; its 5 s of grace
    # would hold the exit (multiprocessing joins its children at exit): it is killed at the exit.
    run = insert(sql, "test.terminate.deaf")
    proc = worker(spawn_worker, "--forever", "--shutdown-timeout", "1")
    [pid] = pids(sql, run)
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    assert time.monotonic() - began < 4  # the promise: the shutdown timeout and 2 s more
    wait_for(lambda: gone(pid), timeout=5, message=f"the child {pid} to be gone")
    assert status(sql, run) == "queued"
    assert [(attempt, outcome) for attempt, outcome, *_ in attempts(sql, run)] == [(1, "interrupted")]


def test_lifecycle_signals_are_sent_by_the_worker_around_a_childs_attempt(app, sql, spawn_worker):
    # tests/signal_jobs.py's receivers, connected in the worker (and in each child, where no
    # signal is sent), record what they hear; the exception is the stand-in named after the child's.
    sql("CREATE TABLE IF NOT EXISTS test_signals (id bigserial PRIMARY KEY, signal text NOT NULL, run_id bigint,"
        " attempt int, detail text, app text)")
    sql("TRUNCATE test_signals")
    permanent = insert(sql, "test.terminate.works", {"fail": "permanent"})
    spin = insert(sql, "test.terminate.spin")
    proc = worker(spawn_worker, "--forever", "--concurrency", "2", JOBSWEB_HANDLERS=HANDLERS + ",tests.signal_jobs",
                  TEST_RECORD_SIGNALS="1")
    pids(sql, spin)
    with app.app_context():
        jobsweb.cancel(spin)
    wait_for(lambda: sql("SELECT count(*) FROM test_signals WHERE signal LIKE 'run_%'") == [(2,)], timeout=30,
             message="run_dead and run_cancelled")
    proc.terminate()
    assert proc.wait(timeout=15) == 0

    def heard(run):
        return sql("SELECT signal, attempt, detail FROM test_signals WHERE run_id = %s ORDER BY id", [run])

    assert heard(permanent) == [
        ("attempt_started", 1, "test.terminate.works"),
        ("attempt_failed", 1, "PermanentError: retrying cannot help; permanent=True last_attempt=False"),
        ("run_dead", 1, "PermanentError: retrying cannot help")]
    assert heard(spin) == [("attempt_started", 1, "test.terminate.spin"), ("run_cancelled", 1, "test.terminate.spin")]


def test_a_child_is_ended_when_its_worker_loses_the_runs_lease(sql, spawn_worker):
    # Another worker took the run over (its lease had expired): this one's handler must not go on.
    run = insert(sql, "test.terminate.spin")
    proc = worker(spawn_worker, "--forever", JOBSWEB_LEASE_SECONDS="3")  # a heartbeat each second
    [pid] = pids(sql, run)
    sql("UPDATE job_runs SET locked_by = 'another-worker' WHERE id = %s", [run])
    wait_for(lambda: gone(pid), timeout=10, message=f"the child {pid} to be ended at the next heartbeat")
    proc.terminate()
    assert proc.wait(timeout=15) == 0
    assert sql("SELECT status, locked_by FROM job_runs WHERE id = %s", [run]) == [("running", "another-worker")]


def test_a_child_that_cannot_find_its_handler_says_where_to_name_it():
    from jobsweb.engine.worker.child_main import find_job

    with pytest.raises(LookupError) as missing:
        find_job("test.terminate.nowhere", "__main__")
    assert str(missing.value) == ("job type 'test.terminate.nowhere' is not registered in the child process: the app "
                                  "it built did not import its module (__main__); name it in JOBSWEB_HANDLERS")
    assert find_job("test.terminate.spin", "tests.terminate_jobs").cancel == "terminate"


def test_drain_calls_a_terminate_handler_in_its_own_process(app):
    from jobsweb.testing import drain

    with app.app_context():
        run = jobsweb.enqueue("test.terminate.works", {"n": 1})
        [ran] = drain()
    assert (ran.run_id, ran.status) == (run, "succeeded")
    assert ran.result["pid"] == os.getpid()
