"""The settings hosted PostgreSQL servers impose, each on a server of its own with jobsweb's real
processes (gunicorn with its alert thread, a --forever worker, the CLI) on the app's own role:
timeouts set on the role, SSL required, and a connection limit that leaves the app 20.

Each runs on a throwaway cluster of Debian's stock PostgreSQL 15 (tests/servers.py), the server
hosted plans resemble (JIT on: a claim JIT-compiled on every call took seconds here and was
cancelled by the 5 s statement_timeout, before migration 0017). The embedded server is left out:
the timeouts test alone takes 20 s on each server."""

import contextlib
import os
import pwd
import re
import subprocess
import sys
import time

import psycopg
import pytest

from tests import servers
from tests.conftest import ROOT, wait_for
from tests.hosted import (APP_DATABASE, APP_ROLE, ConnectionCensus, Processes, app_database, environment, flask, log_of,
                          prepare)

IDLE_IN_TRANSACTION = 10  # seconds
ROLE_TIMEOUTS = {"statement_timeout": "5s", "idle_in_transaction_session_timeout": f"{IDLE_IN_TRANSACTION}s"}
LONG_JOB = 12  # seconds: longer than both timeouts
# What the server logs when a timeout ends a statement or a session, and when it refuses a connection.
KILLED = re.compile(r"statement timeout|idle-in-transaction timeout|too many clients|connection slots are reserved")
# What jobsweb's processes log when something went wrong: a level as a word (not the logger
# name gunicorn.error, which gunicorn's every line carries), a traceback, a refusal, a timeout.
TROUBLE = re.compile(r"Traceback|\b(?:ERROR|WARNING|CRITICAL)\b|(?i:too many clients|timeout)")


def trouble(log):
    """The lines of a process's log that say something went wrong, but for the run of
    jobsweb.fail a test made to die."""
    return [line for line in log.splitlines() if TROUBLE.search(line) and "jobsweb.fail" not in line]


# A throwaway server: durability costs only time here, and is not what these tests are about.
FAST = {"fsync": "off", "synchronous_commit": "off"}


def server_log(server):
    return (server.root / "server.log").read_text()


def killed(log):
    """What the server's log says it ended or refused (KILLED), but for the counts jobsweb bounds
    itself: a status chip's or a bulk confirmation's count past its budget is ended by the
    statement_timeout it set for that statement alone (run_actions.within_budget), whose
    statement carries the set_config that gives the page's limit back. A loaded make test
    reached a chip's 10 ms so; the page said "≈" as it should."""
    entries = re.split(r"\n(?=\d{4}-\d\d-\d\d )", log)  # a line and its continuation lines
    return [entry for entry, following in zip(entries, entries[1:] + [""]) if KILLED.search(entry)
            and not ("canceling statement due to statement timeout" in entry
                     and "STATEMENT:" in following and "set_config(" in following)]


def sql(url, statement, params=None):
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else None


def runs_by_status(url):
    return dict(sql(url, "SELECT status, count(*) FROM job_runs GROUP BY status"))


def enqueue(url, job_type, payload, count):
    """`count` runs due now, inserted in one statement as another program would."""
    sql(url, "INSERT INTO job_runs (job_type, payload, run_at) "
             "SELECT %s, %s::jsonb, now() FROM generate_series(1, %s)", [job_type, payload, count])


@pytest.fixture
def slow_receiver(receiver):
    """The webhook receiver, not answering until the test sets `answering` (always set at the
    end: closing it waits for the requests it holds)."""
    receiver.answering.clear()
    yield receiver
    receiver.answering.set()


@pytest.fixture
def processes(tmp_path):
    running = Processes(tmp_path)
    yield running
    running.stop()


# -- timeouts on the role ------------------------------------------------------------------

@pytest.fixture(scope="module")
def role_timeouts():
    """(server, the app's URL): the app's role has a 5 s statement_timeout and a 10 s
    idle_in_transaction_session_timeout, as hosted plans and careful DBAs set them."""
    server = servers.start("stock", FAST)
    try:
        yield server, app_database(server, ROLE_TIMEOUTS)
    finally:
        server.cleanup()


def test_with_statement_and_idle_in_transaction_timeouts_on_the_role_jobs_longer_than_both_succeed_and_nothing_is_killed(
        role_timeouts, processes, slow_receiver):
    server, url = role_timeouts
    assert sql(url, "SELECT current_setting('statement_timeout'), "
                    "current_setting('idle_in_transaction_session_timeout')") == [("5s", "10s")]
    prepare(url)  # the whole migration history, under both timeouts
    enqueue(url, "test.record", f'{{"seconds": {LONG_JOB}}}', 2)
    enqueue(url, "test.record", "{}", 50)
    enqueue(url, "jobsweb.fail", '{"permanent": true}', 1)  # dies: an incident, and a webhook to send
    receiver = slow_receiver  # its answer waits until the long runs are done
    alerts = {"JOBSWEB_ALERT_WEBHOOK_URL": receiver.url, "JOBSWEB_ALERT_TIMEOUT": 3 * LONG_JOB,
              "JOBSWEB_ALERT_INTERVAL": 1}
    # A 6 s lease: the long runs' leases are extended every 2 s while their handlers sleep.
    worker = processes.worker(url, "--forever", "--concurrency", "4", "--poll-interval", "0.5",
                              JOBSWEB_LEASE_SECONDS=6, **alerts)
    web, base = processes.gunicorn(url, **alerts)
    load = processes.load(base, clients=2)
    wait_for(lambda: sql(url, "SELECT count(*) FROM job_runs WHERE status = 'running' AND payload ? 'seconds'")
             == [(2,)], message="the two long runs to start")
    # While they run: more runs from the CLI, a release-phase migrate, the pages and a webhook
    # kept waiting, each well past the 10 s after which an open transaction would be ended.
    code, output = flask(url, "jobs", "enqueue", "test.record")
    assert code == 0, output
    code, output = flask(url, "jobs", "migrate")
    assert code == 0, output
    wait_for(lambda: receiver.posts, message="the webhook to be sent")
    sent_at = time.monotonic()
    wait_for(lambda: runs_by_status(url) == {"succeeded": 53, "dead": 1}, timeout=LONG_JOB + 30,
             message="every run to end")
    # The sender keeps waiting for the answer longer than a transaction may stay idle: one left
    # open across the send would be ended (the server would log it, and the delivery would not
    # be recorded as sent).
    wait_for(lambda: time.monotonic() - sent_at > IDLE_IN_TRANSACTION + 1, timeout=IDLE_IN_TRANSACTION + 2,
             message="the webhook's sender to have waited out the idle-in-transaction timeout")
    receiver.answering.set()
    wait_for(lambda: sql(url, "SELECT status FROM jobsweb_alert_deliveries") == [("sent",)],
             message="the webhook's delivery to be recorded")
    loaded = load.stop()

    assert load.failures == [] and loaded > 20
    # One attempt each: no heartbeat was cancelled, so no lease ran out and no run was retried.
    assert sql(url, "SELECT max(attempts), count(*) FROM job_runs") == [(1, 54)]
    assert sql(url, "SELECT count(*), count(DISTINCT run_id) FROM test_executions") == [(53, 53)]
    processes.stop()
    assert killed(server_log(server)) == [], server_log(server)
    for proc in (worker, web):
        assert trouble(log_of(proc)) == []


def test_a_migrate_waiting_for_another_upgraders_lock_past_the_roles_statement_timeout_still_succeeds(role_timeouts):
    _, url = role_timeouts
    prepare(url)
    # Another upgrader holds the migration lock (migrations/env.py MIGRATION_LOCK) for longer than
    # the role's 5 s statement_timeout; before migrate set its own, it was cancelled after 5 s.
    with psycopg.connect(url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(7146010)")
        migrate = subprocess.Popen([sys.executable, "-m", "flask", "--app", "wsgi", "jobs", "migrate"], cwd=ROOT,
                                   env=environment(url), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        waiting = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 7146010 AND NOT granted")
        wait_for(lambda: sql(url, waiting) == [(1,)], message="migrate to wait for the lock")
        began = time.monotonic()
        wait_for(lambda: time.monotonic() - began > 6 or migrate.poll() is not None, timeout=10,
                 message="the role's statement_timeout to have passed")
        assert migrate.poll() is None, migrate.communicate()[0]
        holder.execute("SELECT pg_advisory_unlock(7146010)")
        output, _ = migrate.communicate(timeout=60)
    assert migrate.returncode == 0, output


# -- SSL required ----------------------------------------------------------------------------

SSL_MARK = "jobsweb-over-ssl"  # the application_name in DATABASE_URL: seen on a connection, the URL's parameters reached it


LISTENING = ("SELECT s.ssl, a.application_name FROM pg_stat_activity a JOIN pg_stat_ssl s ON s.pid = a.pid "
             "WHERE a.usename = %s AND a.query LIKE 'LISTEN %%'")


@pytest.fixture(scope="module")
def ssl_only():
    """(server, the app's URL with sslmode=require): a stock server with a self-signed
    certificate whose pg_hba.conf has hostssl lines only, so a connection without SSL is refused."""
    server = servers.start("stock", FAST)
    try:
        owner = pwd.getpwnam(servers.STOCK_USER)
        key, certificate = server.root / "server.key", server.root / "server.crt"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", key, "-out", certificate, "-days", "1", "-subj", "/CN=127.0.0.1"],
                       check=True, capture_output=True)
        for path in (key, certificate):
            os.chown(path, owner.pw_uid, owner.pw_gid)
        key.chmod(0o600)  # the server refuses a key others may read
        (server.pgdata / "pg_hba.conf").write_text("local all all scram-sha-256\n"
                                                    "hostssl all all 127.0.0.1/32 scram-sha-256\n")
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            for name, value in {"ssl": "on", "ssl_cert_file": certificate, "ssl_key_file": key}.items():
                conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            conn.execute("SELECT pg_reload_conf()")  # ssl and pg_hba.conf both take effect on reload
        yield server, app_database(server, query={"sslmode": "require", "application_name": SSL_MARK})
    finally:
        server.cleanup()


def test_with_ssl_required_the_worker_pages_migrate_and_enqueue_connect_over_ssl_with_the_urls_parameters(
        ssl_only, processes):
    server, url = ssl_only
    with pytest.raises(psycopg.OperationalError, match="no encryption"):
        psycopg.connect(url.replace("sslmode=require", "sslmode=disable"))
    prepare(url)
    census = ConnectionCensus(server.get_uri(APP_DATABASE))
    try:
        code, output = flask(url, "jobs", "enqueue", "test.record")
        assert code == 0, output
        enqueue(url, "test.record", "{}", 20)
        worker = processes.worker(url, "--forever", "--concurrency", "4", "--poll-interval", "0.5")
        census.watch("worker", worker.pid)
        web, base = processes.gunicorn(url, JOBSWEB_ALERT_INTERVAL=1)
        census.watch("gunicorn", web.pid)
        load = processes.load(base, clients=2)
        wait_for(lambda: runs_by_status(url) == {"succeeded": 21}, message="every run to succeed")
        # The worker's own connection and its LISTEN; each gunicorn process's pool.
        wait_for(lambda: len(census.seen.get("worker", ())) >= 2 and len(census.seen.get("gunicorn child 1", ())) >= 1
                 and len(census.seen.get("gunicorn child 2", ())) >= 1,
                 message="the worker's and both gunicorn processes' connections")
        # LISTEN, on a connection of its own: it too got the URL's parameters.
        listen = wait_for(lambda: sql(server.get_uri(APP_DATABASE), LISTENING, [APP_ROLE]),
                          message="the worker's LISTEN")
        code, output = flask(url, "jobs", "migrate")
        assert code == 0, output
        load.stop()
    finally:
        census.stop()

    assert listen == [(True, SSL_MARK)]
    assert load.failures == []
    held = {label: set(connections.values()) for label, connections in census.seen.items()}
    assert held == {label: {(True, SSL_MARK)} for label in held}, held
    assert trouble(log_of(worker)) == []


# -- 20 connections for the app ------------------------------------------------------------

APP_CONNECTIONS = 20  # what the plan leaves the app
RESERVED = 3  # superuser_reserved_connections, PostgreSQL's default
OBSERVERS = 2  # the test's own superuser connections: the census, and the one that waits for the runs
RUNS = 300
CONCURRENCY = 8
# What each process may hold (docs/DEPLOY.md, "Database connections"): a gunicorn process one
# per thread and one for its alert thread; a worker its claims, its finishes, its LISTEN and
# LISTEN's probe (at start), one per handler thread and one for its alert evaluation; migrate one.
# At the default 4 threads that is 2 x 5 + 13 + 1 = 24: two threads each fit in 20.
WEB_THREADS = 2
MOST = {"gunicorn child": WEB_THREADS + 1, "worker": 4 + CONCURRENCY + 1, "migrate": 1}


@pytest.fixture(scope="module")
def twenty_connections():
    """(server, the app's URL): a stock server whose max_connections leaves the app's role
    exactly APP_CONNECTIONS (the rest are for superusers: the reserved ones and the test's)."""
    server = servers.start("stock", {**FAST, "max_connections": APP_CONNECTIONS + RESERVED + OBSERVERS})
    try:
        yield server, app_database(server)
    finally:
        server.cleanup()


def test_two_gunicorn_processes_a_worker_at_concurrency_8_and_a_release_migrate_fit_in_20_connections(
        twenty_connections, processes):
    server, url = twenty_connections
    prepare(url)
    admin = server.get_uri(APP_DATABASE)
    census = ConnectionCensus(admin)
    try:
        enqueue(admin, "test.record", "{}", RUNS)  # its handler writes through the app's own session
        web, base = processes.gunicorn(url, WEB_THREADS=WEB_THREADS, JOBSWEB_ALERT_INTERVAL=1)  # 2 processes
        census.watch("gunicorn", web.pid)
        load = processes.load(base, clients=8)  # more than both processes' threads: all kept busy
        worker = processes.worker(url, "--forever", "--concurrency", str(CONCURRENCY), "--poll-interval", "0.5")
        census.watch("worker", worker.pid)
        migrate = subprocess.Popen([sys.executable, "-m", "flask", "--app", "wsgi", "jobs", "migrate"], cwd=ROOT,
                                   env=environment(url), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        census.watch("migrate", migrate.pid)
        output, _ = migrate.communicate(timeout=60)
        assert migrate.returncode == 0, output
        with psycopg.connect(admin, autocommit=True) as watching:
            wait_for(lambda: watching.execute("SELECT count(*) FILTER (WHERE status = 'succeeded') = %s "
                                              "FROM job_runs", [RUNS]).fetchone()[0],
                     timeout=90, message="every run to succeed")
        loaded = load.stop()
    finally:
        census.stop()

    print(f"\npeak connections per process: {census.peaks}; all together {census.peak_total}; {loaded} pages")
    assert load.failures == [] and loaded > 50
    for label, most in MOST.items():
        assert all(peak <= most for name, peak in census.peaks.items() if name.startswith(label)), census.peaks
    assert census.peak_total <= APP_CONNECTIONS
    assert sql(admin, "SELECT max(attempts) FROM job_runs") == [(1,)]
    processes.stop()
    assert killed(server_log(server)) == [], server_log(server)
    for proc in (worker, web):
        assert trouble(log_of(proc)) == []


def test_that_server_leaves_the_app_exactly_20_connections_beside_the_tests_own(twenty_connections):
    server, url = twenty_connections
    with contextlib.ExitStack() as held:
        for _ in range(OBSERVERS):
            held.enter_context(psycopg.connect(server.get_uri()))
        for _ in range(APP_CONNECTIONS):
            held.enter_context(psycopg.connect(url))
        with pytest.raises(psycopg.OperationalError, match="reserved"):
            psycopg.connect(url)
