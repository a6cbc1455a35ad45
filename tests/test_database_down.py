"""Drill: the database stops under load for a while (DRILL_DOWN_SECONDS: 10 in `make drills`, 4
here), then starts again, on each server kind (a private one). Two `--forever` workers with 4
slots each and the web app under gunicorn (its alert thread) ride it out: every run succeeds,
none runs again after its success, and while the database is away each process writes at most
one line per backoff step and uses under 5% of a core, then one line saying it is back."""

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import psycopg
import pytest

from jobsweb.engine.worker.outages import RECONNECT_FIRST_DELAY, RECONNECT_MAX_DELAY
from tests import servers
from tests.conftest import SECRET_KEY, TEST_SETTINGS, wait_for
from tests.forkserver import python_m
from tests.private_databases import migrated_with_executions
from tests.reliability.conftest import size
from tests.test_deploy import free_port
from tests.test_server_limits import attempts_after_a_success

JOBS = size("DOWN_JOBS", 300)
DOWN = size("DOWN_SECONDS", 4.0)  # seconds the server stays stopped
CPU_BOUND = 0.05  # of one core, per process, while the database is away
TICK = os.sysconf("SC_CLK_TCK")


@pytest.fixture(params=servers.KINDS)
def own_server(request):
    with migrated_with_executions(request.param, "down") as (server, url):
        yield server, url


def backoff_steps(seconds):
    """How many of the worker's backoff steps begin within `seconds` of the first failure."""
    steps, waited, delay = 0, 0.0, RECONNECT_FIRST_DELAY
    while waited < seconds:
        steps, waited, delay = steps + 1, waited + delay, min(delay * 2, RECONNECT_MAX_DELAY)
    return steps


class Process:
    """A jobsweb process with its output in a file: lines written, CPU seconds used (with its
    children: gunicorn's worker)."""

    def __init__(self, args, url, log, **settings):
        env = {**os.environ, **TEST_SETTINGS, "DATABASE_URL": url, "SECRET_KEY": SECRET_KEY,
               **{k: str(v) for k, v in settings.items()}}
        self.log = log
        self.proc = python_m(args[0], args[1:], env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)

    def lines(self):
        return Path(self.log).read_text().splitlines()

    def cpu_seconds(self):
        pids = [self.proc.pid]
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        pids += [int(pid) for pid in children.read_text().split()]
        return sum(sum(int(n) for n in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11:13])
                   for pid in pids) / TICK

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=60) == 0
        assert not [line for line in self.lines() if "Traceback" in line or " ERROR " in line]


def healthy(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def quiet(lines):
    """A process's lines that are not about one run (those are its work, not its noise)."""
    return [line for line in lines if " run " not in line and "GET /" not in line]


def test_a_database_stopped_under_load_costs_each_process_a_line_per_backoff_step_no_cpu_and_no_run(
        own_server, tmp_path, figures):
    server, url = own_server
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO job_runs (job_type, payload, run_at, max_attempts) SELECT 'test.effect', "
                     "'{\"max_sleep\": 0.02}', now(), 100 FROM generate_series(1, %s)", [JOBS])
    workers = [Process(["flask", "--app", "wsgi", "run-jobs", "--forever", "--concurrency", "4",
                        "--poll-interval", "0.05"], url, tmp_path / f"worker-{n}.log") for n in (1, 2)]
    port = free_port()
    web = Process(["gunicorn", "wsgi:app"], url, tmp_path / "web.log", PORT=port, WEB_CONCURRENCY=1,
                  JOBSWEB_WEB_ALERTS="true", JOBSWEB_ALERT_INTERVAL=1)
    processes = [*workers, web]
    wait_for(lambda: healthy(port), message="the web process to answer")

    def succeeded():
        with psycopg.connect(url) as conn:
            return conn.execute("SELECT count(*) FROM job_runs WHERE status = 'succeeded'").fetchone()[0]

    wait_for(lambda: succeeded() >= JOBS // 10, timeout=60, message="a tenth of the runs to finish")
    server.stop("fast")
    stopped = time.monotonic()
    # The window measured: from when every process has had its first failure (the trips under
    # way when the server stopped end at once) until the server starts again.
    wait_for(lambda: all(any("database unavailable" in line for line in p.lines()) for p in processes),
             message="every process to notice")
    began = time.monotonic()
    before = [(len(p.lines()), p.cpu_seconds()) for p in processes]
    time.sleep(max(0.0, stopped + DOWN - time.monotonic()))  # the outage itself
    window = time.monotonic() - began
    during = [(quiet(p.lines()[count:]), p.cpu_seconds() - cpu) for p, (count, cpu) in zip(processes, before)]
    server.start()
    back = time.monotonic()

    wait_for(lambda: succeeded() == JOBS, timeout=max(60, JOBS / 20), message="every run to succeed")
    recovered = time.monotonic() - back
    # A worker still in a long backoff step when the other has finished everything has not yet
    # had a round trip answered: its line comes at its next try, not before (seen under load).
    # So with the web process's alert thread.
    wait_for(lambda: all(any("database available again" in line for line in p.lines()) for p in processes),
             message="every process to say the database is back")
    for p in processes:
        p.stop()

    allowed = backoff_steps(time.monotonic() - stopped)  # lines from first failure to the end
    for p, (lines, cpu) in zip(processes, during):
        name = Path(p.log).name
        assert len(lines) <= allowed, f"{name}: {lines}"
        assert cpu / window < CPU_BOUND, f"{name}: {cpu:.2f} s of CPU in {window:.1f} s"
    for p in workers:
        assert sum("database available again after" in line for line in p.lines()) == 1
    assert sum("alerts: database available again" in line for line in web.lines()) == 1
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT run_id) FROM test_executions").fetchone() == (JOBS, JOBS)
    assert attempts_after_a_success(url) == 0
    figures(server=server.kind, jobs=JOBS, down_seconds=round(DOWN, 1),
            lines_per_process_while_down=[len(lines) for lines, _ in during],
            cpu_percent_while_down=[round(100 * cpu / window, 2) for _, cpu in during],
            all_done_seconds_after_start=round(recovered, 1),
            failed_attempts=_count(url, "SELECT count(*) FROM job_attempts WHERE outcome <> 'succeeded'"))


def _count(url, statement):
    with psycopg.connect(url) as conn:
        return conn.execute(statement).fetchone()[0]
