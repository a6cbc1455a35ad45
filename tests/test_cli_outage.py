"""The CLI while the database is away: every command that touches it, through a proxy that refuses
connections or a blackhole (accepts, answers nothing), ends within its connect timeout with a
one-line message and exit code 1 (never a hang, never a traceback), and works again once the
path is back. `flask jobs exec` has its own tests (tests/test_exec_outage.py): it runs its command
whatever the database does."""

import os
import time

import pytest

from jobsweb.engine.link import CONNECT_TIMEOUT
from tests.conftest import EVENT_TIMEOUT, SECRET_KEY, TEST_SETTINGS
from tests.forkserver import run_python_m
from tests.private_databases import migrated, proxy_to

# Each command waits out a refused or silent path with its own interpreter: two to three minutes in
# all, run with make test's other slow tests (Makefile) so the rest of the suite is not held back.
pytestmark = pytest.mark.slow

# Seconds beyond the same command's run once the path is back (its interpreter's start and its
# work, on this machine at its present load): the longest connect timeout of a command (the
# worker's; the others' is 3 s), and as much again, as a loaded machine starts two interpreters
# unevenly. Without one a blackhole hangs forever.
BOUND = 2 * CONNECT_TIMEOUT
COMMANDS = {
    "enqueue": ["jobs", "enqueue", "jobsweb.noop"],
    "schedules": ["jobs", "schedules"],
    "migrate": ["jobs", "migrate"],
    "sync": ["jobs", "sync"],
    "queue": ["jobs", "queue", "default"],
    "prune": ["jobs", "prune"],
    "users": ["users", "create", "cli-outage@example.com", "--password", "a long passphrase for cli"],
    "one tick": ["run-jobs"],
}


@pytest.fixture(scope="module")
def server_url():
    with migrated("embedded", "cli_outage") as (_, url):
        yield url


@pytest.fixture
def proxy(server_url):
    p = proxy_to(server_url)
    yield p
    p.close()


def flask(url, args):
    env = {**os.environ, **TEST_SETTINGS, "DATABASE_URL": url, "SECRET_KEY": SECRET_KEY}
    began = time.monotonic()
    code, output = run_python_m("flask", ["--app", "wsgi", *args], env=env, timeout=EVENT_TIMEOUT)
    return code, output, time.monotonic() - began


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_with_the_database_away_ends_in_time_with_one_line_and_works_once_it_is_back(
        server_url, proxy, command):
    took = {}
    for fault in ("refuse", "blackhole"):
        setattr(proxy, fault, True)
        code, output, took[fault] = flask(proxy.url(server_url), COMMANDS[command])
        assert code == 1, f"{fault}: {output}"
        assert "cannot reach the database" in output and "Traceback" not in output, f"{fault}: {output}"
        setattr(proxy, fault, False)

    code, output, back = flask(proxy.url(server_url), COMMANDS[command])
    assert code == 0, output
    assert "Traceback" not in output
    for fault, seconds in took.items():
        assert seconds - back < BOUND, f"{fault}: {seconds:.2f} s, {back:.2f} s with the path back"
