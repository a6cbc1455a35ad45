"""SIGTERM while the database is gone: a worker waits out its backoff quietly, stops by its
shutdown deadline, and leaves what it could not record to lease recovery. On both servers.

Each deadline is held beyond what an idle worker took to stop just before, on the same path:
a loaded machine slows every worker's exit, and the stop test measures that on the same run.

A test that stops a server has one of its own (tests/servers.py): it stops it outright, as a
crash or a failover would, which the suite's shared server must never be. A test that only needs
the database unreachable reaches the suite's server through a FaultProxy that refuses.
"""

import os
import signal
import subprocess
import time

import psycopg
import pytest
from psycopg.types.json import Jsonb

from jobsweb.core.database import libpq_url
from tests import servers
from tests.conftest import SECRET_KEY, TEST_SETTINGS, wait_for
from tests.forkserver import python_m
from tests.private_databases import migrated, proxy_to
from tests.processes import stop_cost

SHUTDOWN_TIMEOUT = 3  # seconds: --shutdown-timeout
RUNS = 8


@pytest.fixture(params=servers.KINDS)
def own_server(request):
    with migrated(request.param, "outage") as (server, url):
        yield server, url


def worker(url, *args, **settings):
    env = {**os.environ, **TEST_SETTINGS, "DATABASE_URL": url, "SECRET_KEY": SECRET_KEY,
           **{k: str(v) for k, v in settings.items()}}
    return python_m("flask", ["--app", "wsgi", "run-jobs", *args], env=env, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT)


def on(url):
    """sql(statement, params) on `url`: what processes.stop_cost reads the worker's row with."""
    def sql(statement, params=None):
        with psycopg.connect(url) as conn:
            return conn.execute(statement, params).fetchall()
    return sql


def statuses(url):
    with psycopg.connect(url) as conn:
        return dict(conn.execute("SELECT status, count(*) FROM job_runs GROUP BY status").fetchall())


def test_a_worker_told_to_stop_while_the_database_is_down_exits_by_its_deadline_and_quietly(own_server, figures):
    server, url = own_server
    idle = stop_cost(on(url), worker(url, "--forever", "--queues", "idle", "--shutdown-timeout", str(SHUTDOWN_TIMEOUT)))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO job_runs (job_type, payload, run_at) "
                     "SELECT 'jobsweb.sleep', '{\"seconds\": 1}', now() FROM generate_series(1, %s)", [RUNS])
    proc = worker(url, "--forever", "--concurrency", "4", "--poll-interval", "0.05",
                  "--shutdown-timeout", str(SHUTDOWN_TIMEOUT), JOBSWEB_LEASE_SECONDS=3)
    wait_for(lambda: statuses(url).get("running") == 4, message="four runs running")

    server.stop("immediate")
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=30)
    took = time.monotonic() - began

    assert proc.returncode == 0
    # The bound docs/REFERENCE.md promises: the shutdown timeout, and 2 s to write what it can.
    assert took - idle <= SHUTDOWN_TIMEOUT + 2, f"{took:.2f} s, an idle worker {idle:.2f} s\n{output}"
    unavailable = output.count("database unavailable")
    assert 1 <= unavailable <= 5, output
    assert "could not record the last" in output and "Traceback" not in output

    # Back up: the runs it could not record come back through lease recovery, none lost.
    server.start()
    restarted = time.monotonic()
    again = worker(url, "--forever", "--concurrency", "4", "--poll-interval", "0.05", JOBSWEB_LEASE_SECONDS=3)
    wait_for(lambda: statuses(url) == {"succeeded": RUNS}, timeout=60, message="every run succeeded")
    recovered = time.monotonic() - restarted
    again.send_signal(signal.SIGTERM)
    assert again.communicate(timeout=30)[0] and again.returncode == 0
    figures(shutdown_timeout=SHUTDOWN_TIMEOUT, sigterm_to_exit_seconds=round(took, 2), idle_worker_seconds=round(idle, 2),
            unavailable_lines=unavailable, lease_seconds=3,
            seconds_from_restart_to_all_done_by_the_next_worker=round(recovered, 1))


def test_a_worker_whose_handler_ignores_the_stop_exits_by_its_deadline_although_its_backoff_step_is_longer(
        app, sql, database_url_for_tests, spawn_worker, tmp_path, figures):
    # The backoff step under way when the stop comes is cut at the shutdown deadline: a handler
    # that never stops keeps the worker draining until then, and a step waited out whole (4 s
    # here, up to 30 s in a long outage) would hold the exit past the promised bound.
    url = libpq_url(database_url_for_tests)
    proxy = proxy_to(url)
    try:
        # Records that its handler began, then waits for a file that never comes, ignoring its
        # cancellation flag.
        idle = stop_cost(sql, spawn_worker("--forever", "--queues", "idle", "--shutdown-timeout", "1",
                                           DATABASE_URL=proxy.url(url)))
        [(run_id,)] = sql("INSERT INTO job_runs (job_type, payload) VALUES ('test.started', %s) RETURNING id",
                          [Jsonb({"until": str(tmp_path / "never")})])
        log = tmp_path / "worker.log"
        with open(log, "w") as output:
            proc = spawn_worker("--forever", "--poll-interval", "0.05", "--shutdown-timeout", "1", output=output,
                                DATABASE_URL=proxy.url(url), JOBSWEB_LEASE_SECONDS=3)
        # Its handler began, not only its claim: a run no thread has begun at SIGTERM is released
        # unstarted and the worker exits at once (0.45 s at load 20, waiting for 'running' only).
        wait_for(lambda: sql("SELECT count(*) FROM test_executions") == [(1,)], message="the run's handler to begin")
        proxy.refuse = True
        proxy.reset()
        # The third backoff step (0.5 s, 1 s, then 2 s) is under way: the next one is 4 s.
        wait_for(lambda: "trying again in 2.0s" in log.read_text(), message="the third backoff step")
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        took = time.monotonic() - began
    finally:
        proxy.close()
    figures(shutdown_timeout=1, sigterm_to_exit_seconds=round(took, 2), idle_worker_seconds=round(idle, 2))
    output = log.read_text()
    # 1 s of --shutdown-timeout, and at most 2 s past it for the last writes (docs/REFERENCE.md).
    assert took - idle <= 3.0, f"{took:.2f} s, an idle worker {idle:.2f} s\n{output}"
    assert proc.returncode == 0, output
    assert "Traceback" not in output, output
    # Said as it is: the attempt interrupted, not written, and the run left to lease recovery.
    assert f"run {run_id} test.started: still running at the shutdown deadline; its attempt 1 is interrupted" \
        in output, output
    assert "could not record the last 1 outcome(s) (" in output and f"): run(s) {run_id} stay running until " \
        "their leases expire (lease 3s), then lease recovery takes them" in output, output
    assert "released back to the queue" not in output, output
    assert took >= 1.0  # it did wait for the handler until the shutdown deadline


@pytest.mark.parametrize("back_after", [0, 6, 8.8])
def test_a_server_back_inside_the_stop_window_gets_the_stopping_workers_outcomes(own_server, tmp_path, figures,
                                                                                 back_after):
    # Issue 51's drill: the outage's backoff had doubled to 4 s, then 8 s, before the SIGTERM,
    # and stopping kept it: the next try was due after the last writes' bound, so a server back
    # inside the window never got the outcomes, and each run was charged a lease_expired attempt
    # a minute later. Stopping, the worker tries every half second until its deadline, the cut
    # at 10.75 s: started 8.8 s after the SIGTERM, past the 8.75 s after which a worker that
    # wanted 2 s for a connect no longer tried (the drill's T+11 with SIGTERM at T+2).
    server, url = own_server
    idle = stop_cost(on(url), worker(url, "--forever", "--queues", "idle", "--shutdown-timeout", "10"))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO job_runs (job_type, payload, run_at) "
                     "SELECT 'jobsweb.sleep', '{\"seconds\": 1}', now() FROM generate_series(1, 4)")
    log = tmp_path / "worker.log"
    env = {**os.environ, **TEST_SETTINGS, "DATABASE_URL": url, "SECRET_KEY": SECRET_KEY, "JOBSWEB_LEASE_SECONDS": "60"}
    with open(log, "w") as output:
        proc = python_m("flask", ["--app", "wsgi", "run-jobs", "--forever", "--concurrency", "4", "--poll-interval",
                                  "0.05", "--shutdown-timeout", "10"], env=env, stdout=output, stderr=subprocess.STDOUT)
    wait_for(lambda: statuses(url).get("running") == 4, message="four runs running")
    server.stop("fast")
    # Its handlers ended meanwhile: their outcomes wait. The next step, unless it stops, is 16 s.
    wait_for(lambda: "trying again in 8.0s" in log.read_text(), timeout=30, message="the fifth backoff step")
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    time.sleep(back_after)  # the scenario: the server stays down this long after the signal
    server.start()
    back = time.monotonic() - began
    proc.wait(timeout=30)
    took = time.monotonic() - began
    output = log.read_text()
    figures(server_back_after_sigterm_seconds=round(back, 2), sigterm_to_exit_seconds=round(took, 2),
            idle_worker_seconds=round(idle, 2))
    assert proc.returncode == 0 and "Traceback" not in output, output
    assert took - idle <= 12, f"{took:.2f} s, an idle worker {idle:.2f} s\n{output}"
    assert "could not record" not in output, output
    assert statuses(url) == {"succeeded": 4}, output
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT outcome, count(*) FROM job_attempts GROUP BY outcome").fetchall() == [
            ("succeeded", 4)]
        assert conn.execute("SELECT count(*), bool_and(stopped_at IS NOT NULL) FROM job_workers").fetchall() == [
            (2, True)]  # the idle worker and this one, each with its stop written
