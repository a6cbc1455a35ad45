"""Workers on a network that fails: reset connections, a slow link, a blackhole (a path that
goes silent, as in a failover). Real `flask run-jobs` processes reach the database through
tests/fault_proxy.py; each server kind has one of its own (tests/servers.py)."""

import signal
import threading
import time

import psycopg
import pytest

from jobsweb.engine.link import DatabaseUnavailable, Link
from tests import servers
from tests.conftest import EVENT_TIMEOUT, wait_for
from tests.private_databases import migrated, proxy_to
from tests.processes import stop_cost

SHUTDOWN_TIMEOUT = 2  # seconds: --shutdown-timeout
# What docs/REFERENCE.md promises a stopping worker: seconds from SIGTERM to exit, beyond what an
# idle worker took to stop just before (the machine's own cost of a stop, at its present load).
STOP_BOUND = SHUTDOWN_TIMEOUT + 2


@pytest.fixture(scope="module", params=servers.KINDS)
def server_url(request):
    with migrated(request.param, "faults") as (_, url):
        yield url


@pytest.fixture
def db(server_url):
    """Run SQL on the test's server, directly (never through the proxy); tables emptied first."""
    conn = psycopg.connect(server_url, autocommit=True)
    conn.execute("TRUNCATE job_attempts, job_runs, job_workers RESTART IDENTITY CASCADE")

    def run(statement, params=None):
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else None

    yield run
    conn.close()


@pytest.fixture
def proxy(server_url):
    p = proxy_to(server_url)
    yield p
    p.close()


@pytest.fixture
def workers(server_url, proxy, spawn_worker):
    """start(*args, **settings): `flask run-jobs` through the proxy (conftest's spawn_worker)."""
    return lambda *args, **settings: spawn_worker(*args, DATABASE_URL=proxy.url(server_url), **settings)


def add(db, count, job_type="jobsweb.sleep", payload='{"seconds": 1}'):
    db("INSERT INTO job_runs (job_type, payload, run_at) SELECT %s, %s::jsonb, now() FROM generate_series(1, %s)",
       [job_type, payload, count])


def statuses(db):
    return dict(db("SELECT status, count(*) FROM job_runs GROUP BY status"))


def read_until(proc, text):
    """Read the worker's output up to the first line holding `text`."""
    line = proc.stdout.readline()
    while text not in line:
        assert line, f"the worker exited before logging {text!r}"
        line = proc.stdout.readline()


def idle_stop(db, workers):
    """Seconds an idle worker through the proxy, the path still sound, takes from SIGTERM to exit."""
    return stop_cost(db, workers("--forever", "--queues", "idle", "--shutdown-timeout", str(SHUTDOWN_TIMEOUT)))


def stop_in_time(proc, idle):
    """SIGTERM, then the exit within the promised bound beyond `idle` (an idle worker's stop);
    (seconds it took, its output)."""
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=EVENT_TIMEOUT)
    took = time.monotonic() - began
    assert proc.returncode == 0, output
    assert "Traceback" not in output, output
    assert took - idle <= STOP_BOUND, f"{took:.2f} s, an idle worker {idle:.2f} s\n{output}"
    return took, output


def four_running(db, workers, runs, concurrency):
    """A --forever worker stopped with --shutdown-timeout SHUTDOWN_TIMEOUT, once four of `runs`
    one-second runs are running; and an idle worker's stop, measured first."""
    idle = idle_stop(db, workers)
    add(db, runs)
    proc = workers("--forever", "--concurrency", str(concurrency), "--poll-interval", "0.05",
                   "--shutdown-timeout", str(SHUTDOWN_TIMEOUT))
    wait_for(lambda: statuses(db).get("running") == 4, message="four runs running")
    return proc, idle


def test_sigterm_during_a_blackhole_ends_the_worker_by_its_deadline(db, proxy, workers, figures):
    proc, idle = four_running(db, workers, runs=8, concurrency=4)

    proxy.blackhole = True
    took, output = stop_in_time(proc, idle)
    assert output.count("database unavailable") <= 3
    assert "could not record" in output  # its last outcomes, or (none left unwritten) its own stop
    figures(shutdown_timeout=SHUTDOWN_TIMEOUT, sigterm_to_exit_seconds=round(took, 2),
            lines_logged=len(output.splitlines()))


def test_sigterm_on_a_slow_link_ends_the_worker_by_its_deadline_and_loses_no_run(db, proxy, workers, figures):
    idle = idle_stop(db, workers)
    add(db, 8, payload='{"seconds": 0.5}')
    proc = workers("--forever", "--concurrency", "4", "--poll-interval", "0.05",
                   "--shutdown-timeout", str(SHUTDOWN_TIMEOUT), JOBSWEB_LEASE_SECONDS=3)
    wait_for(lambda: statuses(db).get("running") == 4, message="four runs running")

    proxy.latency = 0.2  # each chunk, either way: every statement is under way for 0.4 s or more
    took, output = stop_in_time(proc, idle)
    # What it wrote in time was written; what it could not (a loaded machine leaves less of the
    # last writes' 2 s to round trips) says so, and lease recovery gives those runs to the next.
    unrecorded = db("SELECT count(*) FROM job_runs WHERE status = 'running'")[0][0]
    assert unrecorded == 0 or "could not record the last" in output, output
    proxy.latency = 0  # the link is fast again for the next worker
    again = workers("--forever", "--concurrency", "4", "--poll-interval", "0.05", JOBSWEB_LEASE_SECONDS=3)
    wait_for(lambda: statuses(db) == {"succeeded": 8}, timeout=60, message="every run succeeded")
    stop_in_time(again, idle)
    assert db("SELECT count(*) FROM job_attempts WHERE outcome = 'succeeded'") == [(8,)]
    figures(shutdown_timeout=SHUTDOWN_TIMEOUT, latency_each_way_seconds=0.2, sigterm_to_exit_seconds=round(took, 2),
            runs_left_to_lease_recovery=unrecorded)


def test_a_forever_worker_notices_a_blackhole_comes_back_and_keeps_its_leases(db, proxy, workers, figures):
    # One long run that must outlive the blackhole without being taken over (heartbeats resume
    # before its lease ends), and short ones that complete once the path is back.
    db("INSERT INTO job_runs (job_type, payload, run_at) VALUES ('jobsweb.sleep', '{\"seconds\": 30}', now())")
    proc = workers("--forever", "--concurrency", "4", "--poll-interval", "0.2", JOBSWEB_LEASE_SECONDS=45,
                   JOBSWEB_LOG_LEVEL="debug")
    # Started by the worker, not only claimed: this is the run whose lease must outlive the
    # blackhole. A claim whose answer the blackhole swallows is released once the worker is back
    # (LOST_CLAIMS), unstarted and with no attempt recorded, and its runs run only then.
    read_until(proc, " started (attempt 1")

    proxy.blackhole = True
    add(db, 5, payload='{"seconds": 0}')  # written directly: the worker would claim them now
    began = time.monotonic()
    read_until(proc, "database unavailable")
    noticed = time.monotonic() - began
    assert noticed <= 30, "noticed within 30 s"
    proxy.blackhole = False
    healed = time.monotonic()

    wait_for(lambda: statuses(db) == {"succeeded": 6}, timeout=90, message="every run succeeded")
    assert db("SELECT max(attempt), count(*) FROM job_attempts") == [(1, 6)]
    stop_in_time(proc, idle_stop(db, workers))
    figures(lease_seconds=45, blackhole_noticed_after_seconds=round(noticed, 1),
            seconds_from_path_back_to_all_done=round(time.monotonic() - healed, 1), takeovers=0)


def test_connections_reset_under_load_lose_nothing_and_run_nothing_twice(db, proxy, workers, figures):
    add(db, 300, "jobsweb.noop", "{}")
    procs = [workers("--forever", "--concurrency", "4", "--poll-interval", "0.05") for _ in range(2)]
    for _ in range(3):  # resets while claims and finishes are under way
        wait_for(lambda: db("SELECT count(*) FROM job_attempts")[0][0] > 0, message="work under way")
        proxy.reset()
        time.sleep(0.3)  # spacing between resets, not a wait for an outcome
    wait_for(lambda: statuses(db) == {"succeeded": 300}, timeout=90, message="every run succeeded")
    assert db("SELECT count(*) FROM job_attempts WHERE outcome = 'succeeded'") == [(300,)]
    idle = idle_stop(db, workers)
    for proc in procs:
        stop_in_time(proc, idle)
    figures(runs=300, resets=3, attempts=db("SELECT count(*) FROM job_attempts")[0][0], succeeded_twice=0)


def test_a_worker_transaction_is_one_round_trip_whatever_its_statements(db, proxy, server_url):
    # Counted by the proxy as the times the client sent after an answer, on a link slow enough
    # (0.1 s each way) that nothing is answered while it is still sending. psycopg's own
    # transaction block in a pipeline took four for one statement: 4 s on a link with 500 ms
    # each way, where a stopping worker has under a second to write.
    link = Link(proxy.url(server_url))
    try:
        link.fetch("SELECT 1")  # connected
        proxy.latency = 0.1
        trips = proxy.round_trips
        assert link.fetch_together([("SELECT 1", None), ("SELECT %(n)s::int", {"n": 2}), ("SELECT 3", None)]) == \
            [[(1,)], [(2,)], [(3,)]]
        assert proxy.round_trips - trips == 1
        trips = proxy.round_trips
        assert link.fetch("SELECT 4") == [(4,)]
        assert proxy.round_trips - trips == 1
        # A statement that fails leaves no aborted transaction behind: the next one runs.
        with pytest.raises(psycopg.errors.DivisionByZero):
            link.fetch("SELECT 1 / 0")
        assert link.fetch("SELECT 5") == [(5,)]
    finally:
        link.close()


def in_a_thread(call):
    """Start call() in a thread; a function that joins it and gives (what it returned or raised,
    seconds from the start to its end)."""
    began, ended = time.monotonic(), {}

    def serve():
        try:
            ended["result"] = call()
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            ended["result"] = exc
        ended["took"] = time.monotonic() - began

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def join():
        thread.join(timeout=30)
        return ended.get("result"), ended.get("took")
    return join


def connect_held(proxy, link, sql):
    """link.fetch(sql) begun in a thread, inside a connect the proxy holds; in_a_thread's join."""
    proxy.hold_new = True
    join = in_a_thread(lambda: link.fetch(sql))
    wait_for(lambda: proxy.held == 1, message="the connect under way")
    return join


def test_a_round_trip_whose_connect_was_under_way_at_the_cut_still_ends_by_it(proxy, server_url):
    # A stopping worker cuts its links' round trips at its deadline; a connect under way then had
    # no connection to cut, and the statement after it had the whole ROUND_TRIP_TIMEOUT (15 s):
    # a worker exited 18.7 s after SIGTERM on a 500 ms link (issue 37).
    link = Link(proxy.url(server_url))
    try:
        join = connect_held(proxy, link, "SELECT pg_sleep(20)")
        link.cut_by(time.monotonic() + 2)
        proxy.hold_new = False  # connected now, after the cut
        result, took = join()
        assert isinstance(result, DatabaseUnavailable), result
        assert took <= 5, f"ended {took:.1f} s after it began, its cut was 2 s after"
    finally:
        link.close()


def test_a_round_trip_waiting_for_a_link_held_by_a_connect_gives_up_at_the_cut(proxy, server_url):
    # The link's lock is held by the thread inside the connect (up to CONNECT_TIMEOUT, 10 s): a
    # stopping worker's own last writes on that link waited for it.
    link = Link(proxy.url(server_url))
    try:
        connecting = connect_held(proxy, link, "SELECT 1")
        link.cut_by(time.monotonic() + 1)
        result, took = in_a_thread(lambda: link.fetch("SELECT 2"))()
        assert isinstance(result, DatabaseUnavailable), result
        assert took <= 3, f"gave up after {took:.1f} s, its cut was 1 s after"
        proxy.hold_new = False
        connecting()
    finally:
        link.close()


def test_sigterm_while_a_worker_is_connecting_ends_it_by_its_deadline(db, proxy, workers, figures):
    # Free slots, so it claims every poll: after the reset, its claims lane connects (and its
    # listener: two connects held).
    proc, idle = four_running(db, workers, runs=4, concurrency=8)

    proxy.hold_new = True
    proxy.reset()  # every connection lost: the worker's next round trips connect, and wait
    wait_for(lambda: proxy.held >= 2, message="the claims lane's and the listener's connects under way")
    took, output = stop_in_time(proc, idle)
    figures(shutdown_timeout=SHUTDOWN_TIMEOUT, connects_held=proxy.held, sigterm_to_exit_seconds=round(took, 2))
