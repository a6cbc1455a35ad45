"""Fixtures: a real PostgreSQL started by the suite, migrated once; each test on empty tables."""

import graphlib
import json
import logging
import os
from contextlib import contextmanager
import subprocess
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from jobsweb import create_app
from jobsweb.core.database import database_url, db, libpq_url
from tests.forkserver import python_m

ROOT = Path(__file__).resolve().parent.parent
# tests/test_oldest_pins.py runs a second pytest on this suite's server: it names its own.
TEST_DATABASE = os.environ.get("TEST_DATABASE_NAME", "jobsweb_test")
SECRET_KEY = "0123456789abcdef-test-secret-key-0123456789-test"  # the standalone app wants 32+ characters
TABLES = ("job_effects, job_attempts, job_runs, job_definitions, job_workers, test_executions, jobsweb_audit_log, "
          "jobsweb_users, job_duration_totals, job_metrics_state, job_type_metrics, job_type_metrics_state, "
          "jobsweb_alert_deliveries, jobsweb_alert_incident_runs, jobsweb_alert_incidents, job_queues, job_paused_types, "
          "jobsweb_sign_in_failures, job_batches, job_run_deps, jobsweb_deploy_marks")


def empty_tables(conn):
    """Empty TABLES as `TRUNCATE ... RESTART IDENTITY CASCADE` would. TRUNCATE makes each table's
    and index's files anew, about 55 ms a test, where the few rows most tests leave take a DELETE
    a millisecond: a DELETE for each table, a table before those it references, and their sequences
    back to 1. Once the tables have grown past 4 MB (a test that wrote many rows, or the dead rows
    of many DELETEs before autovacuum came), TRUNCATE, so that no test scans another's leftovers."""
    names = [name.strip() for name in TABLES.split(",")]
    [(size,)] = conn.execute("SELECT sum(pg_relation_size(name::regclass)) FROM unnest(%(names)s::text[]) name",
                             {"names": names}).fetchall()
    if size > 4 * 1024 * 1024:
        conn.execute(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")
        return
    database = conn.info.dbname
    if database not in _DELETES:
        references = conn.execute(
            "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint "
            "WHERE contype = 'f' AND conrelid::regclass::text = ANY(%(names)s) AND conrelid <> confrelid",
            {"names": names}).fetchall()
        after = {name: set() for name in names}  # table -> the tables to empty before it
        for referencing, referenced in references:
            after[referenced].add(referencing)
        sequences = conn.execute(
            "SELECT s.oid::regclass::text FROM pg_class s JOIN pg_depend d ON d.objid = s.oid "
            "AND d.classid = 'pg_class'::regclass AND d.deptype IN ('a', 'i') "
            "WHERE s.relkind = 'S' AND d.refobjid::regclass::text = ANY(%(names)s) ORDER BY 1",
            {"names": names}).fetchall()
        _DELETES[database] = "; ".join(
            [f"DELETE FROM {table}" for table in graphlib.TopologicalSorter(after).static_order()]
            + [f"SELECT setval('{sequence}', 1, false)" for (sequence,) in sequences])
    conn.execute(_DELETES[database])


_DELETES = {}  # database name -> its emptying statements, read once from its catalog

# Settings every test app and test worker process share: quick retries so that retry tests
# need not wait, and the job types in tests/job_types.py.
TEST_SETTINGS = {
    "JOBSWEB_HANDLERS": "tests.job_types",
    "JOBSWEB_BACKOFF_BASE": "0.01",
    "JOBSWEB_BACKOFF_CAP": "0.05",
    # The tests' webhook receivers listen on 127.0.0.1, which alerts refuse by default.
    "JOBSWEB_ALERT_ALLOW_PRIVATE_IPS": "true",
    # Tests leave runs due with no worker around all the time; a 'no_worker' incident opens
    # only in the tests about it, which set a window of seconds (the longest one allowed here).
    "JOBSWEB_NO_WORKER_MINUTES": "10080",
    # `flask jobs exec` against a database that is up: its start recorded (or refused) before the
    # command starts, however loaded the machine (half a second was not at a load of 20). The
    # tests of a silent or slow database set the default, 0.5 s, themselves.
    "JOBSWEB_EXEC_START_WAIT": "30",
}

# Apps the tests build without TESTING (host apps, bad-config apps, gunicorn children) would
# each evaluate alerts on a thread against the shared test database: only the tests of that
# thread ask for it (tests/test_web_alerts.py).
os.environ["JOBSWEB_WEB_ALERTS"] = "false"


# Which server the suite starts (tests/servers.py): "embedded" (the default) or "stock", Debian's
# PostgreSQL 15 with JIT on. TEST_DATABASE_URL instead names a server that is already running.
TEST_SERVER = os.environ.get("TEST_SERVER", "embedded")

# The tests that also run on the stock server (`make test` runs them there with -m both_servers;
# every test runs on the embedded one). Everything that claims, finishes, materialises or
# migrates, and the drills' short forms: where a planner with JIT on, another major version or
# TCP with a password could change what jobsweb does. Left out: the admin screen's pages and
# browsers, the configuration, CLI and packaging tests, whose SQL is the ORM's and not the queue's.
# Not listed because they start servers of their own (of each kind, or stock only) and so run
# in the embedded run: test_stop_during_outage.py, test_exec_outage.py, test_network_faults.py,
# test_web_outage.py, test_database_down.py, test_server_limits.py, test_hosted_settings.py,
# test_stop_deadline.py.
ON_BOTH_SERVERS = (
    # engine: enqueue, claim, finish, retry, flow control, the worker loop and its processes
    "test_enqueue.py", "test_claim_ahead.py", "test_round_trips.py", "test_worker.py",
    "test_worker_processes.py", "test_worker_cancel.py", "test_worker_wakeup.py", "test_async_handlers.py",
    "test_flow_control.py", "test_flow_processes.py", "test_effects.py", "test_exec.py", "test_output.py",
    "test_job_objects.py", "test_testing_helpers.py", "test_progress.py", "test_external.py", "test_bounds.py",
    "test_deadlines.py", "test_workflows.py", "test_workflow_seams.py", "test_claim_order_by_run_at.py",
    "test_after_separate_transactions.py", "test_lifecycle_model.py", "test_conflicts.py",
    "test_control.py", "test_runs_cli.py", "test_leases.py", "test_trips.py",
    "test_enqueue_delay.py", "test_handler_retry.py", "test_wait_inside_handler.py", "test_schema_repair.py",
    "test_unbegun_claims.py", "test_cancel_terminate.py", "test_finish_params.py",
    # scheduling: materialising slots, definitions (crontab mode, test_cron.py, is the same worker
    # and SQL launched by Debian's cron: four minutes of waiting for its minutes, on one server)
    "test_materialise.py", "test_definitions.py",
    # schema
    "test_migrations.py", "test_schema_names.py", "test_schema_file.py",
    # ops: pruning, alerts, stats, health, outages, a pooler, deploys
    "test_prune.py", "test_alerts.py", "test_stats.py", "test_queue_stats.py", "test_run_search.py", "test_metrics.py", "test_health.py",
    "test_web_why_waiting.py",  # why a run is not running: one statement for many runs, planned on both
    # the admin pages' reads: bounded on the server, planned alike whatever the statistics saw, and
    # searches whose cost says nothing of what they match
    "test_page_limits.py", "test_page_plans.py", "test_search_cost.py", "test_payload_search.py",
    "test_error_search_passes.py", "test_search_bulk_count.py", "test_count_budget.py",
    # one masking rule, read alike by Python and by each server's regular expressions
    "test_masking_rule.py", "test_masking_generated.py",
    "test_database_outage.py", "test_pooler.py", "test_deploy.py",
    # the reliability drills, short forms: every file in tests/reliability/
    "reliability/",
    # the installed wheel, deployed as a team deploys it (tests/deployment.py)
    "test_deployed.py",
)


# The tests that start servers of their own, of each kind, to stop them or break the path to them
# (tests/private_databases.py), or to give them a hosted plan's settings: mostly waiting out
# timeouts and backoff steps, so `make test` runs them in a process of their own (-m own_servers)
# beside the rest, which their waits held back.
OWN_SERVERS = ("test_stop_during_outage.py", "test_exec_outage.py", "test_network_faults.py", "test_web_outage.py",
               "test_database_down.py", "test_server_limits.py", "test_hosted_settings.py", "test_stop_deadline.py",
               "test_failover.py")


# What `make check`, a contributor's quick loop, leaves out besides the slow and own-server tests:
# the tests that start a browser, a worker or another process (a fixture of these, or a module
# that imports subprocess), and the lifecycle model at its 100 examples. They are most of the
# suite's time; make test runs everything.
STARTS_PROCESSES = {"browser", "spawn_worker", "installed_wheel", "scratch_database", "restart_postgres", "receiver",
                    "docs"}  # tests/docs/conftest.py: runs the blocks as a reader would, shells and pages
NOT_QUICK = ("test_lifecycle_model.py",)


def pytest_configure(config):
    config.addinivalue_line("markers", "own_servers: starts PostgreSQL servers of its own (OWN_SERVERS in tests/conftest.py)")
    config.addinivalue_line("markers", "quick: in the process alone, no browser or other process (make check)")


def pytest_collection_modifyitems(config, items):
    """Mark the tests of ON_BOTH_SERVERS both_servers, those of OWN_SERVERS own_servers and the
    rest of the slow ones' complement quick (select them with -m)."""
    tests = Path(__file__).parent
    for item in items:
        where = item.path.relative_to(tests).as_posix()
        if any(where == name or (name.endswith("/") and where.startswith(name)) for name in ON_BOTH_SERVERS):
            item.add_marker(pytest.mark.both_servers)
        if where in OWN_SERVERS:
            item.add_marker(pytest.mark.own_servers)
        elif (not item.get_closest_marker("slow") and where not in NOT_QUICK
              and STARTS_PROCESSES.isdisjoint(item.fixturenames) and "subprocess" not in vars(item.module)):
            item.add_marker(pytest.mark.quick)


def _admin_url():
    """TEST_DATABASE_URL names an existing server; otherwise start the one TEST_SERVER names."""
    from tests import servers

    if os.environ.get("TEST_DATABASE_URL"):
        return os.environ["TEST_DATABASE_URL"], None
    # 300 connections, not the default 100: in-process workers that tests build and never run
    # (test_worker.py's, about 20 a file) keep their lanes' threads, and with them their
    # connections, until the process ends; with this session's new tests those of one pytest
    # process reached 100 before test_worker_processes.py, whose workers then met "too many
    # clients" (a fresh-clone make test, both servers). Closing them is the lasting fix.
    server = servers.start(TEST_SERVER, {"max_connections": 300})
    return server.get_uri("postgres"), server


@pytest.fixture(autouse=True)
def jobswebs_loggers_left_enabled():
    """A host app's Alembic fileConfig (test_host_app's `flask db migrate`, in this process)
    disables every logger that exists when it runs: jobsweb's stayed disabled for the rest of the
    process, and a later test's caplog saw none of their lines (test_stop_and_outages, whole suite)."""
    yield
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if name.startswith("jobsweb") and isinstance(logger, logging.Logger):
            logger.disabled = False


@pytest.fixture(scope="session")
def postgres_server():
    """(admin URL, the server the suite started (tests/servers.py), or None when
    TEST_DATABASE_URL names an existing one)."""
    admin, server = _admin_url()
    yield admin, server
    if server is not None:
        # Stops the postmaster by its data directory, so also after restart_postgres.
        server.cleanup()


@pytest.fixture(scope="session")
def database_url_for_tests(postgres_server):
    """A migrated, empty test database on a real PostgreSQL server, for the whole session."""
    admin, server = postgres_server
    with psycopg.connect(admin, autocommit=True) as conn:
        if server is not None:
            # A throwaway server: durability only costs time here.
            conn.execute("ALTER SYSTEM SET fsync = off")
            conn.execute("ALTER SYSTEM SET synchronous_commit = off")
            conn.execute("SELECT pg_reload_conf()")
        conn.execute(f"DROP DATABASE IF EXISTS {TEST_DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {TEST_DATABASE}")
    url = database_url(make_url(admin).set(database=TEST_DATABASE).render_as_string(hide_password=False))
    app = create_app({"SQLALCHEMY_DATABASE_URI": url, "TESTING": True, "SECRET_KEY": SECRET_KEY})
    with app.app_context():
        from flask_migrate import upgrade

        upgrade()
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("CREATE TABLE test_executions (run_id bigint NOT NULL, pid integer NOT NULL, "
                     "at timestamptz NOT NULL DEFAULT clock_timestamp())")
    return url


@pytest.fixture
def app(database_url_for_tests, monkeypatch):
    for name, value in TEST_SETTINGS.items():
        monkeypatch.setenv(name, value)
    with psycopg.connect(libpq_url(database_url_for_tests), autocommit=True) as conn:
        empty_tables(conn)
    app = create_app({"SQLALCHEMY_DATABASE_URI": database_url_for_tests, "TESTING": True,
                      "SECRET_KEY": SECRET_KEY})
    yield app
    with app.app_context():
        # Its pooled connections: else each test's app kept one until the process ended, and one
        # pytest process reached the server's 100 connections.
        db.engine.dispose()


@pytest.fixture
def registry_snapshot():
    """The job-type registry is process-global: what a test registers is removed afterwards."""
    import importlib

    from jobsweb.engine.jobs import registry

    # Registered before the snapshot: first imported during a test, they would be removed with
    # its registrations, and a module is imported once (JOBSWEB_HANDLERS would not bring them back).
    importlib.import_module(TEST_SETTINGS["JOBSWEB_HANDLERS"])
    saved = dict(registry._registry)
    yield
    registry._registry.clear()
    registry._registry.update(saved)


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def runner(app):
    return app.test_cli_runner()


@pytest.fixture
def sql(database_url_for_tests):
    """Run SQL on the test database and get rows back: sql("SELECT ...", {...})."""
    conn = psycopg.connect(libpq_url(database_url_for_tests), autocommit=True)

    def run(statement, params=None):
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else None

    yield run
    conn.close()


@pytest.fixture
def spawn_worker(database_url_for_tests):
    """Start `flask run-jobs` as a real separate process; every one is killed at teardown.

    Each is a fork of a process that imported jobsweb once (tests/forkserver.py), instead of a new
    interpreter importing it for a second of CPU; TEST_FORK_SERVER=0 starts new interpreters."""
    processes = []

    def environment(**settings):
        """The environment of a jobsweb process on the test database (also for other scripts)."""
        return {**os.environ, "DATABASE_URL": libpq_url(database_url_for_tests),
                "SECRET_KEY": SECRET_KEY,
                **TEST_SETTINGS, **{k: str(v) for k, v in settings.items()}}

    def spawn(*args, output=None, **settings):
        """`output`: a file for the worker's log (long drills would fill a pipe nobody reads)."""
        env = environment(**settings)
        proc = python_m("flask", ["--app", "wsgi", "run-jobs", *args], env=env, stdout=output or subprocess.PIPE,
                        stderr=subprocess.STDOUT)
        proc.output = output
        processes.append(proc)
        return proc

    spawn.env = environment
    yield spawn
    for proc in processes:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout:
            proc.stdout.close()


@pytest.fixture
def figures(request):
    """record(**numbers): print a drill's figures and append them to $DRILL_FIGURES (JSON lines):
    the drills of tests/reliability and the outage tests, which drills/run.py runs at full size."""

    def record(**numbers):
        line = json.dumps({"drill": request.node.name, **numbers}, default=str)
        print(line)
        if os.environ.get("DRILL_FIGURES"):
            with open(os.environ["DRILL_FIGURES"], "a") as f:
                f.write(line + "\n")

    return record


@pytest.fixture
def restart_postgres(postgres_server):
    """restart(): restart the suite's PostgreSQL server (fast shutdown), as an outage would."""
    _, server = postgres_server
    if server is None:
        pytest.fail("this test restarts the server, so it needs one the suite starts: unset TEST_DATABASE_URL")
    return lambda: server.restart("fast")


def define(app, name, **kwargs):
    """A committed definition (a daily no-op unless kwargs say otherwise); its id."""
    from jobsweb import definitions

    kwargs.setdefault("job_type", "jobsweb.noop")
    kwargs.setdefault("schedule", "0 6 * * *")
    with committed(app):
        return definitions.define(name, **kwargs).id


@contextmanager
def committed(app):
    """An app context whose session is committed at the end, as a CLI command or a view does."""
    from jobsweb.core.database import db

    with app.app_context():
        yield
        db.session.commit()


@pytest.fixture
def materialise(app):
    """Run the materialising step of a tick, as a worker does, on its own connection."""
    from jobsweb.core.database import db
    from jobsweb.engine.link import Link
    from jobsweb.scheduling.materialise import materialise_due

    with committed(app):
        link = Link(libpq_url(db.engine))
    yield lambda: materialise_due(link)
    link.close()


@pytest.fixture
def receiver():
    """A webhook endpoint on loopback that records each POST (tests/alert_receivers.py)."""
    from tests.alert_receivers import Receiver

    r = Receiver()
    yield r
    r.close()


# Seconds a wait_for gives an event by default. A passing test waits only until the event; the
# bound is for a failing one, and must outlast a loaded machine: at load 13 four workers took more
# than 30 s to register (a second of CPU each at a seventh of a core, beside everything else).
EVENT_TIMEOUT = 120.0


def wait_for(check, timeout=EVENT_TIMEOUT, interval=0.05, message="condition"):
    """Poll `check` until it returns something truthy; fail the test after `timeout` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


# -- the admin screen ---------------------------------------------------------------------

PASSWORD = "correct horse battery"


# werkzeug's scrypt at its default cost (N=32768) takes 0.16 s of CPU to make a password hash and
# as long to check one, and the admin screen's tests make and sign in hundreds of users: the ones
# make_user makes get a scrypt hash of N=1024 (check_password_hash reads the cost from the hash).
# Users made any other way (the CLI, the users page, host apps, processes the tests start) and
# unknown emails' dummy hash keep the real cost.
TEST_PASSWORD_HASH = "scrypt:1024:8:1"


@pytest.fixture
def make_user(app):
    """Create a user with a role: make_user("viewer") -> email."""
    from unittest import mock

    from werkzeug.security import generate_password_hash

    from jobsweb.web import accounts

    def quick_hash(password):
        return generate_password_hash(password, method=TEST_PASSWORD_HASH)

    def make(role="operator", email=None):
        email = email or f"{role}@example.com"
        with committed(app), mock.patch.object(accounts, "generate_password_hash", quick_hash):
            accounts.create_user(email, PASSWORD, role)
        return email

    return make


def csrf_token(client, path="/sign-in"):
    """The CSRF token of the client's session, read from a page's meta tag."""
    import re

    html = client.get(path).get_data(as_text=True)
    return re.search(r'name="csrf-token" content="([^"]+)"', html).group(1)


@pytest.fixture
def sign_in(client, make_user):
    """Sign the test client in as a new user with `role`; returns the client."""

    def sign(role="operator"):
        email = make_user(role)
        response = client.post("/sign-in", data={"email": email, "password": PASSWORD,
                                                  "csrf_token": csrf_token(client)})
        assert response.status_code == 302, response.get_data(as_text=True)
        return client

    return sign


@pytest.fixture
def scratch_database(postgres_server):
    """make(name, revision="head"): a new database migrated to `revision` (None: not migrated),
    as a SQLAlchemy URL; dropped at teardown. For tests about the schema itself."""
    from flask_migrate import upgrade

    admin, _ = postgres_server
    made = []

    def make(name, revision="head"):
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
        made.append(name)
        url = database_url(make_url(admin).set(database=name).render_as_string(hide_password=False))
        if revision is not None:
            with create_app({"SQLALCHEMY_DATABASE_URI": url, "TESTING": True, "SECRET_KEY": "0123456789abcdef-test-secret-key-0123456789-x"}).app_context():
                upgrade(revision=revision)
        return url

    yield make
    with psycopg.connect(admin, autocommit=True) as conn:
        for name in made:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# -- jobsweb as a team installs it --------------------------------------------------------

@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory):
    """(the wheel of this checkout, the bin/ folder of a fresh virtualenv holding it with the
    server, sentry and otel extras): tests/deployment.py. Built once per pytest process."""
    from tests.deployment import built_wheel, install

    work = tmp_path_factory.mktemp("wheel")
    wheel = built_wheel(work)
    return wheel, install(wheel, work / "venv", ["server", "sentry", "otel"])


# -- real browsers and servers --------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="session")
def browser():
    """Debian's headless Chromium through Playwright (never a downloaded browser)."""
    from playwright import sync_api

    if not os.path.exists(CHROMIUM):
        raise RuntimeError(f"{CHROMIUM} is missing: `make test` installs Debian's chromium package")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        yield browser
        browser.close()


@pytest.fixture
def serve():
    """serve(app): the app on a real HTTP server on 127.0.0.1 until the test ends; its base URL."""
    import threading

    from werkzeug.serving import make_server

    running = []

    def start(app):
        httpd = make_server("127.0.0.1", 0, app, threaded=True)
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        running.append((httpd, thread))
        return f"http://127.0.0.1:{httpd.server_port}"

    yield start
    for httpd, thread in running:
        httpd.shutdown()
        thread.join()
