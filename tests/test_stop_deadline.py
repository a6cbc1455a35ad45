"""SIGTERM in every fault: one shutdown deadline, whatever the path to the database does.

A worker told to stop exits within its shutdown timeout and 2 s more (docs/REFERENCE.md), with
the default timeout (10 s, so 12 s), when the database stopped fast or immediately, when the path
refuses, resets, goes silent (a blackhole) or is slow (500 ms each way per packet), and when a
handler ignores the stop. What it could not record is left to lease recovery: afterwards every
run completes, once. On both servers, each with one of its own (the test stops it).

The five path faults run side by side, one worker each, through a FaultProxy of its own and on a
queue of its own; then the two server stops, one after the other. As in the review that found
the overruns (issue 37), SIGTERM comes 2 s into the fault. Each stop has beside it a worker with
nothing to wait for, signalled at the same moment: the deadline is held beyond its time to exit,
which is the machine's (a loaded one slows every exit), not the fault's.
"""

import datetime
import os
import signal
import subprocess
import threading
import time

import psycopg
import pytest

from tests import servers
from tests.conftest import SECRET_KEY, TEST_SETTINGS, wait_for
from tests.forkserver import python_m
from tests.private_databases import migrated_with_executions, proxy_to
from tests.processes import registered

BOUND = 12.0  # seconds from SIGTERM to exit, beyond an idle worker's: the default --shutdown-timeout (10) and 2 for the last writes
INTO_THE_FAULT = 2.0  # seconds between the fault and SIGTERM
RUNS = 100  # per worker, 0.1 s each: some are under way when the fault comes
LEASE = 5  # seconds: what a stopping worker could not record comes back this soon
PATH_FAULTS = ("refused", "reset", "blackhole", "latency", "ignores the stop")
STUBBORN = ("refused", "blackhole", "ignores the stop")  # a handler ignores the stop in these too
SERVER_STOPS = ("fast", "immediate")
RESTART_AFTER = 3.0  # seconds after SIGTERM: the fast stop was a restart
ASKED_WITHIN = 2.0  # seconds from SIGTERM to the handlers asked to stop ("at once", on a loaded machine)
signalled = []  # when stop_all sent its SIGTERMs (the log's clock)


def asked_after(log, since):
    """Seconds from `since` to the worker's line saying it asked its running handlers to stop."""
    for line in log.read_text().splitlines():
        if "asked" in line and "running job(s) to stop" in line:
            return (datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f") - since).total_seconds()
    return None


@pytest.fixture(params=servers.KINDS)
def own_server(request):
    with migrated_with_executions(request.param, "deadline") as (server, url):
        yield server, url


class Resets:
    """Resets every connection through `proxy` every 0.2 s until stopped: a link that keeps
    dropping (each reconnect is reset again before it gets far)."""

    def __init__(self, proxy):
        self.proxy = proxy
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stopping.wait(0.2):
            self.proxy.reset()

    def stop(self):
        self.stopping.set()
        self.thread.join()


def worker(url, log, *args):
    """`flask run-jobs --forever` on `url`, output to `log`: no --shutdown-timeout (the default)."""
    env = {**os.environ, **TEST_SETTINGS, "DATABASE_URL": url, "SECRET_KEY": SECRET_KEY,
           "JOBSWEB_LEASE_SECONDS": str(LEASE)}
    env.pop("JOBSWEB_SHUTDOWN_TIMEOUT", None)
    return python_m("flask", ["--app", "wsgi", "run-jobs", "--forever", "--concurrency", "4",
                              "--poll-interval", "0.05", *args],
                    env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)


def fetch(url, statement, params=None):
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(statement, params).fetchall()


def add_runs(url, queue):
    """RUNS short runs, and one whose first attempt lasts until the worker asks it to stop."""
    fetch(url, "INSERT INTO job_runs (job_type, payload, queue) VALUES ('test.polite_once', '{}', %s) RETURNING id",
          [queue])
    fetch(url, "INSERT INTO job_runs (job_type, payload, queue) SELECT 'jobsweb.sleep', '{\"seconds\": 0.1}', %s "
               "FROM generate_series(1, %s) RETURNING id", [queue, RUNS])


def begun(url):
    """How many long handlers began (test.polite_once's first attempts and test.slow_until's), once
    the database knows of every run that began: a run claimed ahead is marked not begun until the
    worker's next round trip after 0.25 s says it began (0032_unbegun_claims), and a fault that
    came first would leave it to lease recovery as never begun, released uncharged, so that its
    stubborn handler ran again on attempt 1 (test_unbegun_claims covers that rule)."""
    [(count, unsaid)] = fetch(url, "SELECT (SELECT count(*) FROM test_executions), "
                                   "(SELECT count(*) FROM job_runs WHERE status = 'running' AND unbegun_claims > 0 "
                                   " AND id IN (SELECT run_id FROM test_executions))")
    return count if unsaid == 0 else -1


def stop_all(procs):
    """SIGTERM to each of `procs` at once; the seconds each took to exit (None: not within 30)."""
    began = time.monotonic()
    signalled.append(datetime.datetime.now())
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    took = [None] * len(procs)
    while time.monotonic() - began < 30 and None in took:
        for n, proc in enumerate(procs):
            if took[n] is None and proc.poll() is not None:
                took[n] = round(time.monotonic() - began, 2)
        time.sleep(0.01)  # the resolution of the figure, not a wait for an outcome
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return took


def idle_worker(url, log):
    """A worker on a queue nobody uses, registered: stopped beside the others, the time it takes
    is what the machine adds to any worker's stop."""
    proc = worker(url, log, "--queues", "idle")
    registered(lambda statement, params: fetch(url, statement, params), proc)
    return proc


def test_a_worker_told_to_stop_in_any_fault_exits_within_twelve_seconds_and_every_run_completes_once(
        own_server, tmp_path, figures):
    server, url = own_server
    took, idle, logs = {}, {}, {}

    # The path faults, side by side.
    proxies = {fault: proxy_to(url) for fault in PATH_FAULTS}
    procs = {}
    try:
        for fault, proxy in proxies.items():
            queue = fault.replace(" ", "-")
            add_runs(url, queue)
            if fault in STUBBORN:
                # Sleeps 30 s without looking at its cancellation flag on its first attempt.
                fetch(url, "INSERT INTO job_runs (job_type, payload, queue) VALUES ('test.slow_until', "
                           "'{\"attempt\": 2, \"seconds\": 30}', %s) RETURNING id", [queue])
            logs[fault] = tmp_path / f"{queue}.log"
            procs[fault] = worker(proxy.url(url), logs[fault], "--queues", queue)
        wait_for(lambda: begun(url) == len(PATH_FAULTS) + len(STUBBORN), message="every worker's long handlers to begin")
        proxies["refused"].refuse = True
        proxies["refused"].reset()
        resets = Resets(proxies["reset"])
        proxies["blackhole"].blackhole = True
        proxies["latency"].latency = 0.5
        beside = idle_worker(url, tmp_path / "idle-path.log")
        time.sleep(INTO_THE_FAULT)  # the spacing the review used, not a wait for an outcome
        *seconds, idle_seconds = stop_all([procs[fault] for fault in PATH_FAULTS] + [beside])
        took.update(zip(PATH_FAULTS, seconds))
        idle.update(dict.fromkeys(PATH_FAULTS, idle_seconds))
        asked = {fault: asked_after(logs[fault], signalled[-1]) for fault in PATH_FAULTS}
        resets.stop()
    finally:
        for proxy in proxies.values():
            proxy.close()

    # The server stopped: a fast stop that is a restart (back RESTART_AFTER s after SIGTERM, within
    # the budget: the worker writes its outcomes then), and an immediate stop that outlasts it.
    for mode in SERVER_STOPS:
        fault = f"{mode} stop"
        add_runs(url, mode)
        logs[fault] = tmp_path / f"{mode}.log"
        procs[fault] = worker(url, logs[fault], "--queues", mode)
        before = begun(url)
        wait_for(lambda: begun(url) == before + 1, message=f"the long handler to begin before the {fault}")
        beside = idle_worker(url, tmp_path / f"idle-{mode}.log")
        server.stop(mode)
        time.sleep(INTO_THE_FAULT)  # as above
        restart = threading.Timer(RESTART_AFTER, server.start) if mode == "fast" else None
        if restart:
            restart.start()
        took[fault], idle[fault] = stop_all([procs[fault], beside])
        asked[fault] = asked_after(logs[fault], signalled[-1])
        if restart:
            restart.join()
        else:
            server.start()

    # Afterwards, one worker on every queue: the runs left running come back after their lease.
    again = worker(url, tmp_path / "after.log", "--concurrency", "16")
    try:
        wait_for(lambda: fetch(url, "SELECT count(*) FILTER (WHERE status <> 'succeeded') FROM job_runs") == [(0,)],
                 timeout=120, message="every run to succeed")
    except AssertionError:
        left = fetch(url, "SELECT queue, job_type, status, attempts, count(*) FROM job_runs WHERE status <> 'succeeded' "
                          "GROUP BY 1, 2, 3, 4")
        raise AssertionError(f"not done: {left}\n{(tmp_path / 'after.log').read_text()[-3000:]}") from None
    finally:
        stop_all([again])
    left = fetch(url, "SELECT count(*) FROM job_attempts WHERE outcome <> 'succeeded'")[0][0]
    figures(server=server.kind, shutdown_timeout=10, sigterm_to_exit_seconds=took, idle_worker_beside_seconds=idle,
            sigterm_to_handlers_asked_seconds=asked, attempts_not_succeeded=left)

    for fault, seconds in took.items():
        # The log's end: what the worker did after SIGTERM (a CI report keeps a message's start only).
        output = logs[fault].read_text()[-6000:]
        assert seconds is not None and idle[fault] is not None and seconds - idle[fault] <= BOUND, \
            f"{fault}: {seconds} s, an idle worker beside it {idle[fault]} s\n{output}"
        assert procs[fault].returncode == 0, f"{fault}\n{output}"
        assert "Traceback" not in output, f"{fault}\n{output}"
        # A lost connection is the worker's one line, not psycopg's two more about its pipeline.
        assert "error ignored terminating" not in output, f"{fault}\n{output}"
        assert asked[fault] is not None and asked[fault] <= ASKED_WITHIN, f"{fault}: asked after {asked[fault]} s"
    # Every run once: one succeeded attempt each; the long ones on their second attempt.
    assert fetch(url, "SELECT count(*) FROM job_runs") == [(RUNS * 7 + 7 + 3,)]
    assert fetch(url, "SELECT count(*), count(DISTINCT run_id) FROM job_attempts WHERE outcome = 'succeeded'") == \
        [(RUNS * 7 + 7 + 3, RUNS * 7 + 7 + 3)]
    # The restart came within the budget: the stopping worker wrote its own outcomes (its
    # interrupted run and those it released), and lease recovery had nothing of it to take back.
    assert "could not record" not in logs["fast stop"].read_text()
    assert fetch(url, "SELECT count(*) FROM job_attempts a JOIN job_runs r ON r.id = a.run_id "
                      "WHERE r.queue = 'fast' AND a.error_type = 'lease_expired'") == [(0,)]
    # Each long run's attempts, by fault, for a failure's message (a quiet run of 5646f9a once
    # found one polite run ending on another attempt than its second, with nothing else to go on).
    attempts = fetch(url, "SELECT r.queue, r.job_type, a.attempt, a.outcome, a.error_type FROM job_attempts a "
                          "JOIN job_runs r ON r.id = a.run_id WHERE r.job_type <> 'jobsweb.sleep' ORDER BY 1, 2, 3")
    assert fetch(url, "SELECT job_type, attempt, count(*) FROM job_attempts a JOIN job_runs r ON r.id = a.run_id "
                      "WHERE job_type <> 'jobsweb.sleep' AND outcome = 'succeeded' GROUP BY 1, 2 ORDER BY 1, 2") == \
        [("test.polite_once", 2, 7), ("test.slow_until", 2, 3)], attempts
