"""Behind a real PgBouncer in transaction mode (Debian's package), as a PaaS "pooled" URL is:
workers, schedules, alerts, enqueue and the admin screen work with that URL alone."""

import os
import re
import signal
import socket
import subprocess

import pytest
from sqlalchemy.engine import make_url

from jobsweb import create_app, definitions, enqueue
from jobsweb.core.database import database_url, libpq_url
from jobsweb.engine.worker.wakeup import Listener
from tests.conftest import PASSWORD, SECRET_KEY, TEST_DATABASE, committed, csrf_token, wait_for

PGBOUNCER = "/usr/sbin/pgbouncer"
RUNS = 150
WORKERS = 3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pooled_url(postgres_server, database_url_for_tests, tmp_path_factory):
    """A libpq URL to the test database through PgBouncer, transaction pooling, few server
    connections (so clients share them, as on a PaaS), no prepared statements of its own."""
    if not os.path.exists(PGBOUNCER):
        raise RuntimeError(f"{PGBOUNCER} is missing: `make test` installs Debian's pgbouncer package")
    server = make_url(postgres_server[0])
    host, port = server.host, server.port
    if host is None:  # the embedded server listens on a Unix socket: ?host=<folder>, .s.PGSQL.<port>
        host = server.query["host"]
        [socket_file] = [name for name in os.listdir(host) if re.fullmatch(r"\.s\.PGSQL\.\d+", name)]
        port = int(socket_file.rsplit(".", 1)[1])
    # The stock server wants a password over TCP: PgBouncer logs in with the server URL's own (its
    # clients connect with auth_type = any, so they need none). A throwaway cluster's password, so
    # the file may stay readable: PgBouncer reads it as the user it drops to.
    password = f" password={server.password}" if server.password else ""
    folder = tmp_path_factory.mktemp("pgbouncer")
    folder.chmod(0o755)
    listen = free_port()
    config = folder / "pgbouncer.ini"
    config.write_text(f"""
[databases]
{TEST_DATABASE} = host={host} port={port} dbname={TEST_DATABASE} user={server.username}{password}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = 4
max_client_conn = 200
ignore_startup_parameters = extra_float_digits,options
""")
    config.chmod(0o644)
    # PgBouncer refuses to run as root: -u drops to the test server's own system user, who may
    # open the embedded server's socket folder (Debian's postgres user for a server named by
    # TEST_DATABASE_URL).
    started = postgres_server[1]
    user = started.system_user if started is not None else "postgres"
    args = [PGBOUNCER, "-u", user, str(config)] if os.geteuid() == 0 else [PGBOUNCER, str(config)]
    log = open(folder / "pgbouncer.log", "w")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    url = f"postgresql://{server.username}@127.0.0.1:{listen}/{TEST_DATABASE}"

    def accepting():
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", listen)) == 0

    wait_for(accepting, timeout=20, message="PgBouncer to listen")
    yield url
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=20)
    log.close()


def test_listen_through_the_pooler_is_found_not_to_work_and_a_direct_url_is(pooled_url, database_url_for_tests):
    pooled = Listener(pooled_url, report=lambda item: None).start()
    direct = Listener(libpq_url(database_url_for_tests), report=lambda item: None).start()
    try:
        wait_for(pooled.unusable.is_set, timeout=20, message="the pooled LISTEN to be found unusable")
        wait_for(direct.listening.is_set, timeout=20, message="the direct LISTEN")
        assert not pooled.listening.is_set() and not direct.unusable.is_set()
    finally:
        pooled.stop()
        direct.stop()


def test_workers_schedules_alerts_enqueue_and_pages_work_through_the_pooler_alone(
        app, sql, spawn_worker, pooled_url, make_user, tmp_path):
    pooled_app = create_app({"SQLALCHEMY_DATABASE_URI": database_url(pooled_url), "TESTING": True,
                             "SECRET_KEY": SECRET_KEY})
    with committed(pooled_app):
        runs = [enqueue("test.record") for _ in range(RUNS)]
        enqueue("jobsweb.fail", {"permanent": True})  # dies: an alert incident opens
        definitions.define("every-second", "jobsweb.noop", "@every 1s")

    logs = [open(tmp_path / f"worker-{n}.log", "w") for n in range(WORKERS)]
    workers = [spawn_worker("--forever", "--poll-interval", "0.2", "--concurrency", "4", output=log,
                            DATABASE_URL=pooled_url) for log in logs]
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded' AND id = ANY(%s)",
                         [runs])[0][0] == RUNS, timeout=120, message="every run through the pooler")
    wait_for(lambda: sql("SELECT count(*) FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id "
                         "WHERE d.name = 'every-second' AND r.status = 'succeeded'")[0][0] >= 2,
             timeout=60, message="schedule slots materialised and run")
    wait_for(lambda: sql("SELECT count(*) FROM jobsweb_alert_incidents WHERE kind = 'dead'")[0][0] == 1,
             timeout=60, message="the dead run's incident")

    # Every run exactly once, across the three workers sharing four server connections.
    assert sql("SELECT count(*), count(DISTINCT run_id) FROM test_executions") == [(RUNS, RUNS)]
    assert sql("SELECT count(*) FROM (SELECT definition_id, scheduled_for FROM job_runs "
               "WHERE definition_id IS NOT NULL GROUP BY 1, 2 HAVING count(*) > 1) twice") == [(0,)]

    client = pooled_app.test_client()
    email = make_user("operator")
    client.post("/sign-in", data={"email": email, "password": PASSWORD, "csrf_token": csrf_token(client)})
    for path in ("/", "/runs", "/definitions", "/incidents", "/workers", f"/runs/{runs[0]}"):
        assert client.get(path).status_code == 200, path

    def output():
        return "".join((tmp_path / f"worker-{n}.log").read_text() for n in range(WORKERS))

    # LISTEN found not to work through the pooler (the runs may all be done before the probe ends).
    wait_for(lambda: output().count("polling only") == WORKERS, message="every worker to poll")
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker, log in zip(workers, logs):
        assert worker.wait(timeout=30) == 0
        log.close()
    output = output()
    problems = [line for line in output.splitlines()
                if re.search(r"\bERROR\b|Traceback|prepared statement", line) and "is dead after" not in line]
    assert problems == [], problems
