"""Crontab mode with Debian's real cron daemon: two "servers" with the same crontab line, both
firing `flask run-jobs --max-runtime 55` every minute against one database; and a crontab line
that jobsweb does not run but watches, wrapped in `flask jobs exec`.

Slow (one to three minutes: it waits for cron's minute boundaries) and run by `make test`,
which installs the `cron` package like chromium. Needs root, as cron itself does.
"""

import fcntl
import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from jobsweb import definitions, enqueue
from jobsweb.core.database import libpq_url
from tests.conftest import ROOT, TEST_SETTINGS, committed, wait_for
from tests.docs.snippets import Document

CRON = shutil.which("cron") or "/usr/sbin/cron"
# cron allows one daemon per machine (its pid file): a second test's `cron -f` exits at once and
# that test leans on the first one's daemon, which reads every file in /etc/cron.d, until the
# first test stops it a minute into the second's wait. Tests of every run on this machine (make
# test's parallel runs, other checkouts) take turns through this lock instead.
CRON_LOCK = "/run/lock/jobsweb-test-cron.lock"
RUNS = 40  # enqueued before the first firing; each works 0.2 s, so both servers get some


@pytest.fixture
def cron(database_url_for_tests, tmp_path):
    """start(lines): install /etc/cron.d/<name> with the test environment and `lines` (each may
    name {logs}, a folder for their output), start cron; (logs folder, the daemon)."""
    if os.geteuid() != 0 or not os.path.exists(CRON):
        pytest.fail("this test runs Debian's cron daemon as root: run it as root after "
                    "`apt-get install cron` (make test does)")
    lock = open(CRON_LOCK, "a")

    def take():
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    # Another run's cron test lasts three minutes at most.
    wait_for(take, timeout=300, interval=0.5, message="another test run's cron daemon to stop")
    logs = tmp_path / "logs"
    logs.mkdir()
    # cron.d names may hold only letters, digits, - and _ (run-parts rules), or cron ignores them.
    path = Path("/etc/cron.d") / f"jobsweb_test_{secrets.token_hex(4)}"
    started = []

    def start(lines, environment=True):
        """environment=False: `lines` alone, their own variables among them (DEPLOY's crontab)."""
        env = {"PATH": f"{ROOT}/.venv/bin:/usr/bin:/bin", "DATABASE_URL": libpq_url(database_url_for_tests),
               "SECRET_KEY": "0123456789abcdef-test-secret-key-0123456789-test", **TEST_SETTINGS}
        text = [f"{name}={value}" for name, value in env.items() if environment] + [
            line.format(logs=logs) for line in lines]
        path.write_text("\n".join(text) + "\n")
        path.chmod(0o644)
        started.append(subprocess.Popen([CRON, "-f"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        return logs, started[0]

    try:
        yield start
    finally:
        path.unlink(missing_ok=True)
        for daemon in started:
            if daemon.poll() is None:
                daemon.terminate()
            daemon.wait(timeout=10)
        lock.close()  # releases the lock


@pytest.fixture
def crontab(cron):
    """Two identical lines (server a, server b) running the documented worker line."""
    # The documented line, as each server's crontab has it; only the log file differs.
    # "fired" is written the moment cron starts the line, before Python has even started.
    return cron([f"* * * * * root cd {ROOT} && echo fired >> {{logs}}/{server}.log && "
                 f"flask run-jobs --max-runtime 55 >> {{logs}}/{server}.log 2>&1" for server in ("a", "b")])


def log_lines(logs, server, words):
    path = logs / f"{server}.log"
    return [line for line in path.read_text().splitlines() if words in line] if path.exists() else []


@pytest.mark.slow
def test_two_servers_with_the_same_crontab_run_each_run_and_each_slot_once(app, sql, crontab):
    logs, daemon = crontab
    with committed(app):
        runs = [enqueue("test.record", {"seconds": 0.2}) for _ in range(RUNS)]
        definitions.define("every-minute", "test.record", "* * * * *")
    started = time.monotonic()

    # Two firings of both lines: the enqueued runs in the first, a new slot in each.
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE definition_id IS NOT NULL "
                         "AND status = 'succeeded'")[0][0] >= 2
             and sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded' AND id = ANY(%s)",
                     [runs])[0][0] == RUNS,
             timeout=200, interval=1, message="two cron firings to finish their work")
    daemon.terminate()  # no more firings; the processes already started finish on their own
    daemon.wait(timeout=10)
    # Cron starts lines at the minute boundary and this point comes seconds after one, so every
    # line cron started has written "fired" by now; wait until each such process has stopped.
    wait_for(lambda: all(len(log_lines(logs, s, "fired")) == len(log_lines(logs, s, " stopped"))
                         for s in ("a", "b")),
             timeout=70, interval=0.5, message="the cron-started workers to exit")

    # Both servers fired every minute, and every process exited cleanly.
    for server in ("a", "b"):
        assert len(log_lines(logs, server, " started: ")) == len(log_lines(logs, server, "fired")) >= 2
        assert log_lines(logs, server, "Traceback") == []
    # Each enqueued run executed exactly once, whichever server claimed it.
    executions = dict(sql("SELECT run_id, count(*) FROM test_executions GROUP BY run_id"))
    assert all(executions.get(run_id) == 1 for run_id in runs), executions
    # Each slot has one run; each slot run that ran executed once; slots are whole minutes in a row.
    slots = sql("SELECT scheduled_for, status, count(*) OVER (PARTITION BY scheduled_for), id "
                "FROM job_runs WHERE definition_id IS NOT NULL ORDER BY scheduled_for")
    assert all(count == 1 for _, _, count, _ in slots)
    # (A slot that fell due before cron's first firing is 'missed': misfire policy 'latest'.)
    assert all(status in ("succeeded", "missed") for _, status, _, _ in slots), slots
    assert all((b[0] - a[0]).total_seconds() == 60 for a, b in zip(slots, slots[1:])), slots
    assert all(executions.get(run_id) == 1 for _, status, _, run_id in slots if status == "succeeded")
    assert time.monotonic() - started < 200


@pytest.mark.slow
def test_a_crontab_line_wrapped_in_flask_jobs_exec_reports_each_slot_of_its_external_definition(app, sql, cron):
    with committed(app):
        definitions.define("cleanup", None, "* * * * *", external=True, grace_seconds=50)
    # A command that is not Python and not jobsweb's, with output on both streams and a failure.
    logs, daemon = cron([f"* * * * * root cd {ROOT} && flask jobs exec cleanup --timeout 30 -- "
                         "sh -c 'echo removed 12 files; echo 1 was busy >&2; exit 3' >> {logs}/cleanup.log 2>&1"])

    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'dead'")[0][0] >= 2,
             timeout=200, interval=1, message="two cron firings to be reported")
    daemon.terminate()
    daemon.wait(timeout=10)
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'running'") == [(0,)], timeout=60,
             message="the last exec to finish")

    reported = sql("SELECT r.scheduled_for, r.last_error, a.output FROM job_runs r "
                   "JOIN job_attempts a ON a.run_id = r.id ORDER BY r.scheduled_for")
    assert len(reported) >= 2
    for slot, error, output in reported:
        # Each firing counted for its own minute's slot: that slot is reported, never missed.
        assert slot is not None and slot.second == 0 and error == "exit code 3"
        assert "removed 12 files\n" in output and "1 was busy\n" in output
    assert all((b[0] - a[0]).total_seconds() == 60 for a, b in zip(reported, reported[1:])), reported
    missed = [slot for (slot,) in sql("SELECT scheduled_for FROM job_runs WHERE status = 'missed'")]
    assert not set(missed) & {slot for slot, _, _ in reported}
    # Passed through to cron's redirect as it ran; and cron ran nothing jobsweb refused.
    text = (logs / "cleanup.log").read_text()
    assert text.count("removed 12 files") == len(reported) and "Traceback" not in text
    assert sql("SELECT last_status, failure_count >= 2 FROM job_definitions") == [("dead", True)]


@pytest.mark.slow
def test_deploys_crontab_block_installed_as_written_runs_what_is_due(app, sql, cron, database_url_for_tests):
    """DEPLOY.md's block, every line of it and nothing more: only its placeholders filled in (the
    app's directory, the database, the log file), and cron.d's user field after the schedule."""
    [block] = [block for block in Document("docs/DEPLOY.md").blocks if block.id == "crontab"]
    text = block.text.replace("postgresql://user:password@db.example.com:5432/app", libpq_url(database_url_for_tests))
    text = text.replace("/var/log/jobsweb.log", "{logs}/jobsweb.log").replace("/app", str(ROOT))
    with committed(app):
        run_id = enqueue("jobsweb.noop")
    logs, daemon = cron([line.replace("* * * * * ", "* * * * * root ") for line in text.splitlines()],
                        environment=False)
    wait_for(lambda: sql("SELECT status FROM job_runs WHERE id = %s", [run_id]) == [("succeeded",)], timeout=130,
             interval=1, message="the crontab's first tick to run the enqueued run")
    daemon.terminate()
    daemon.wait(timeout=10)
    assert "Traceback" not in (logs / "jobsweb.log").read_text()
