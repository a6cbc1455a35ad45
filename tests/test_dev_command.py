"""`flask dev` (what `make run` runs), as a real process with its real gunicorn and worker: the
sign-in line comes after the start-up logs on every start, the demo admin's password is quoted,
the demo runs are made once, and htmx refreshes stay out of the access log."""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.request

import pytest

from tests.conftest import ROOT, wait_for

SIGN_IN = re.compile(r"Sign in as admin@example\.com with password '([^']+)' \(a demo admin")
PASSWORD_FILE = ROOT / "instance" / "demo_password"


@pytest.fixture
def dev(app, spawn_worker):
    """start() -> (process, lines): `flask dev` on a free port, its output collected line by line
    (on empty tables: `app` empties them)."""
    started = []
    kept = PASSWORD_FILE.read_bytes() if PASSWORD_FILE.exists() else None  # a developer's own

    def start():
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        proc = subprocess.Popen([sys.executable, "-m", "flask", "--app", "wsgi", "dev", "--port", str(port)],
                                cwd=ROOT, env=spawn_worker.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        lines = []
        threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True).start()
        proc.base = f"http://127.0.0.1:{port}"
        started.append(proc)
        return proc, lines

    yield start
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # dev, its gunicorn and its worker
        proc.wait()
    if kept is not None:
        PASSWORD_FILE.write_bytes(kept)
    else:
        PASSWORD_FILE.unlink(missing_ok=True)


def sign_in_line(lines):
    return next((i for i, line in enumerate(lines) if SIGN_IN.search(line)), None)


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0


def test_make_run_says_how_to_sign_in_after_the_start_up_logs_on_every_start(dev, sql):
    proc, lines = dev()
    at = wait_for(lambda: sign_in_line(lines), timeout=90, message="the sign-in line")
    before = "".join(lines[:at])
    assert "Listening at" in before and re.search(r"worker \S+ started", before)
    assert re.search(r"run \d+ jobsweb\.noop succeeded", before)  # the demo runs due now were taken
    [password] = SIGN_IN.findall(lines[at])
    assert sql("SELECT email, role FROM jobsweb_users") == [("admin@example.com", "admin")]

    # htmx refreshes and static files are left out of the access log; a page load is not.
    urllib.request.urlopen(urllib.request.Request(proc.base + "/sign-in?polled=1", headers={"HX-Request": "true"})).close()
    urllib.request.urlopen(proc.base + "/static/app.css?asset=1").close()
    urllib.request.urlopen(proc.base + "/sign-in?loaded=1").close()
    wait_for(lambda: any("/sign-in?loaded=1" in line for line in lines), message="the access log line")
    assert not any("polled=1" in line or "asset=1" in line for line in lines)
    stop(proc)

    proc, lines = dev()
    at = wait_for(lambda: sign_in_line(lines), timeout=90, message="the sign-in line, again")
    assert SIGN_IN.findall(lines[at]) == [password]
    # The demo runs of the first start only, and no copy of them without its key.
    assert sql("SELECT count(*) FROM job_runs WHERE idempotency_key LIKE 'jobsweb-demo:%'") == [(4,)]
    assert sql("SELECT count(DISTINCT job_type) FROM job_runs WHERE idempotency_key IS NULL AND job_type IN "
               "('jobsweb.noop', 'jobsweb.sleep', 'jobsweb.fail')") == [(0,)]
    stop(proc)


def test_make_run_takes_another_port_when_told():
    # What `make run PORT=5001` runs (make -n prints it without running it): port 5000 is
    # taken by AirPlay Receiver on macOS.
    told = subprocess.run(["make", "--no-print-directory", "-n", "run", "PORT=5001"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert told.stdout.splitlines()[-1].endswith("/flask --app wsgi dev --port 5001")
    plain = subprocess.run(["make", "--no-print-directory", "-n", "run"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert plain.stdout.splitlines()[-1].endswith("/flask --app wsgi dev")
