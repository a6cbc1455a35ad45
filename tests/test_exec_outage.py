"""`flask jobs exec` is never delayed nor prevented by the database: down, silent (a blackholed
path) or slow, the command runs at once, its output passes through and exec exits with its code,
within a bound, saying on stderr when the run could not be recorded. Real exec processes, each
server kind a private one (tests/private_databases.py)."""

import os
import subprocess
import time

import psycopg
import pytest

from jobsweb import create_app, definitions
from jobsweb.core.database import database_url
from jobsweb.ops.command_runs import REPORT_WAIT
from tests import servers
from tests.conftest import EVENT_TIMEOUT, SECRET_KEY, TEST_SETTINGS, committed
from tests.forkserver import python_m
from tests.private_databases import migrated, proxy_to


@pytest.fixture(scope="module", params=servers.KINDS)
def server_url(request):
    with migrated(request.param, "exec_outage") as (server, url):
        app = create_app({"SQLALCHEMY_DATABASE_URI": database_url(url), "TESTING": True, "SECRET_KEY": SECRET_KEY})
        with committed(app):
            definitions.define("backup", None, "0 3 * * *", external=True)
        yield server, url


@pytest.fixture
def runs(server_url):
    """The runs of `backup` as (status, output), read directly; none at the start of a test."""
    _, url = server_url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE job_attempts, job_runs RESTART IDENTITY CASCADE")

    def read():
        with psycopg.connect(url) as conn:
            return conn.execute("SELECT r.status, a.output FROM job_runs r LEFT JOIN job_attempts a "
                                "ON a.run_id = r.id ORDER BY r.id").fetchall()

    return read


@pytest.fixture
def proxy(server_url):
    p = proxy_to(server_url[1])
    yield p
    p.close()


def start_exec(url, marker, script="echo hi; exit 3"):
    """`flask jobs exec backup -- sh -c ...`: the command first creates `marker`."""
    env = {**os.environ, **TEST_SETTINGS, "DATABASE_URL": url, "SECRET_KEY": SECRET_KEY,
           "JOBSWEB_EXEC_START_WAIT": "0.5"}  # the default: these tests' database is away, silent or slow
    return python_m("flask", ["--app", "wsgi", "jobs", "exec", "backup", "--", "sh", "-c", f"touch {marker}; {script}"],
                    env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def follow(proc):
    """(seconds to the command's first line on exec's stdout, whether exec was still running
    then, seconds to exec's exit, stdout, stderr)."""
    began = time.monotonic()
    first = proc.stdout.readline()
    first_at, running = time.monotonic() - began, proc.poll() is None
    out, err = proc.communicate(timeout=EVENT_TIMEOUT)
    return first_at, running, time.monotonic() - began, first + out, err


def exits_in_time(first_at, took, err):
    """exec exits within REPORT_WAIT of its command's end (its output), whatever the database
    does, and as long again as it took to start the command: its exit, like its start, is the
    interpreter's work, which a loaded machine slows alike (its start is measured on the same run)."""
    assert took - first_at <= REPORT_WAIT + first_at, f"exit {took:.2f} s, the command's output {first_at:.2f} s\n{err}"


def test_with_the_path_blackholed_the_command_runs_at_once_and_exec_exits_with_its_code_saying_it_was_not_recorded(
        server_url, proxy, runs, tmp_path, figures):
    proxy.blackhole = True
    marker = tmp_path / "started"
    proc = start_exec(proxy.url(server_url[1]), marker)
    first_at, running, took, out, err = follow(proc)
    figures(command_output_after_seconds=round(first_at, 2), exec_exit_after_seconds=round(took, 2))

    # The command's output came while exec was still waiting on the database.
    assert marker.exists() and running
    assert out == "hi\n"
    assert proc.returncode == 3
    assert REPORT_WAIT / 2 < took
    exits_in_time(first_at, took, err)
    assert "its start is not recorded (database did not answer within 0.5 s)" in err
    assert "the run was NOT recorded (exit code 3)" in err and "its slot shows as missed" in err
    assert "Traceback" not in err
    proxy.blackhole = False
    assert runs() == []


def test_with_the_server_stopped_the_command_runs_and_exec_exits_with_its_code_at_once(server_url, runs, tmp_path,
                                                                                        figures):
    server, url = server_url
    server.stop("immediate")
    try:
        proc = start_exec(url, tmp_path / "started")
        first_at, _, took, out, err = follow(proc)
    finally:
        server.start()
    figures(command_output_after_seconds=round(first_at, 2), exec_exit_after_seconds=round(took, 2))

    assert (tmp_path / "started").exists() and out == "hi\n"
    assert proc.returncode == 3
    # No wait on a database that refuses at once: exec ends soon after its command did (measured
    # from the command's output, as the interpreter's own start-up is no part of it).
    assert took - first_at < REPORT_WAIT / 2
    assert "its start is not recorded (database unreachable)" in err
    assert "the run was NOT recorded (exit code 3): database unreachable" in err
    assert "Traceback" not in err
    assert runs() == []


def test_on_a_slow_link_the_command_starts_before_its_run_is_recorded_and_the_run_is_recorded_by_the_end(
        server_url, proxy, runs, tmp_path, figures):
    proxy.latency = 0.1  # seconds each way, per chunk: 200 ms a round trip, and a start takes seconds
    proc = start_exec(proxy.url(server_url[1]), tmp_path / "started", "echo hi; exit 0")
    first_at, running, took, out, err = follow(proc)
    figures(latency_each_way_seconds=0.1, command_output_after_seconds=round(first_at, 2),
            exec_exit_after_seconds=round(took, 2))

    assert out == "hi\n" and proc.returncode == 0 and running
    assert "its start is not recorded (database did not answer within 0.5 s)" in err
    assert "NOT recorded" not in err and "Traceback" not in err, err
    exits_in_time(first_at, took, err)
    assert runs() == [("succeeded", "hi\n")]


def test_with_the_database_up_an_unknown_definition_still_stops_exec_before_the_command(server_url, tmp_path):
    env = {**os.environ, **TEST_SETTINGS, "DATABASE_URL": server_url[1], "SECRET_KEY": SECRET_KEY}
    proc = python_m("flask", ["--app", "wsgi", "jobs", "exec", "nope", "--", "touch", str(tmp_path / "ran")], env=env,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=EVENT_TIMEOUT)
    assert proc.returncode == 2 and "no job definition is called 'nope'" in err
    assert not (tmp_path / "ran").exists()
