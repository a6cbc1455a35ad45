"""Workers on a server that refuses or ends connections by its own rules: every connection slot
taken (`too many clients`) when a worker starts and in the middle of its work, and sessions ended
after a second idle (idle_session_timeout, as some hosted plans set). The first backs off like an
outage and finishes every run once a slot is free; the second costs nothing at all. Real
`flask run-jobs` processes, each server kind a private one (tests/private_databases.py)."""

import signal
import time

import psycopg
import pytest

from jobsweb.engine.statements import NOTIFY_CHANNEL
from tests import servers
from tests.conftest import wait_for
from tests.private_databases import migrated
from tests.test_stop_during_outage import statuses, worker

SLOTS = {"max_connections": "8", "superuser_reserved_connections": "0"}


@pytest.fixture(scope="module", params=servers.KINDS)
def crowded(request):
    with migrated(request.param, "crowded", SLOTS) as (_, url):
        yield url


@pytest.fixture
def slots(crowded):
    """take(): hold every free connection slot of the server; the connections, closed afterwards."""
    held = []

    def take():
        while True:
            try:
                held.append(psycopg.connect(crowded, autocommit=True))
            except psycopg.OperationalError as exc:
                assert "too many clients" in str(exc) or "connection slots are reserved" in str(exc)
                return held

    with psycopg.connect(crowded, autocommit=True) as conn:
        conn.execute("TRUNCATE job_attempts, job_runs, job_workers RESTART IDENTITY CASCADE")
    yield take
    for conn in held:
        conn.close()


def release_all_but_one(held):
    """Free every slot held but the first, which the test keeps to look (a slot freed is taken
    back by the server a moment after the close: a new connection could still be refused).
    Returns when it freed them (time.monotonic())."""
    for conn in held[1:]:
        conn.close()
    del held[1:]
    return time.monotonic()


def by_status(conn):
    return dict(conn.execute("SELECT status, count(*) FROM job_runs GROUP BY status").fetchall())


def read_until(proc, text):
    """The worker's output up to the first line holding `text`."""
    lines = [proc.stdout.readline()]
    while text not in lines[-1]:
        assert lines[-1], f"the worker exited before logging {text!r}: {''.join(lines)}"
        lines.append(proc.stdout.readline())
    return "".join(lines)


def add(conn, count, seconds):
    conn.execute("INSERT INTO job_runs (job_type, payload, run_at) SELECT 'jobsweb.sleep', %s::jsonb, now() "
                 "FROM generate_series(1, %s)", [f'{{"seconds": {seconds}}}', count])


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in output, output
    return output


def attempts_after_a_success(url):
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM job_attempts a JOIN job_attempts s ON s.run_id = a.run_id "
                            "AND s.outcome = 'succeeded' AND a.started_at > s.started_at").fetchone()[0]


def _attempts(url):
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM job_attempts").fetchone()[0]


def test_a_worker_started_with_every_slot_taken_waits_with_backoff_and_runs_everything_once_one_is_free(
        crowded, slots, figures):
    held = slots()
    add(held[0], 6, 0)
    proc = worker(crowded, "--forever", "--concurrency", "2", "--poll-interval", "0.1")
    began = time.monotonic()
    read_until(proc, "database unavailable (")
    # Still there after several backoff steps (0.5, 1, 2 s), not exited as at a wrong URL.
    time.sleep(4)
    assert proc.poll() is None
    waited = time.monotonic() - began
    freed = release_all_but_one(held)

    wait_for(lambda: by_status(held[0]) == {"succeeded": 6}, timeout=60, message="every run succeeded")
    done = time.monotonic() - freed
    output = stop(proc)
    refused = output.count("database unavailable")
    assert 1 <= refused <= 4, output  # one line per backoff step of ~4 s: 0.5 + 1 + 2 (+ 4)
    assert "too many clients" in output or "connection slots are reserved" in output
    assert output.count("database available again after") == 1
    assert waited < 30
    assert attempts_after_a_success(crowded) == 0
    figures(refused_for_seconds=round(waited, 1), unavailable_lines=refused,
            seconds_from_slots_free_to_all_done=round(done, 1))


def test_a_worker_whose_connections_end_while_every_slot_is_taken_backs_off_and_finishes_every_run_once(
        crowded, slots, figures):
    with psycopg.connect(crowded, autocommit=True) as conn:
        add(conn, 12, 0.3)
    proc = worker(crowded, "--forever", "--concurrency", "2", "--poll-interval", "0.1", JOBSWEB_LEASE_SECONDS=3)
    wait_for(lambda: statuses(crowded).get("running") == 2, message="two runs running")

    # Take every free slot, then end the worker's sessions: reconnecting, it finds none. Again
    # while it slipped into a slot a terminated session freed before this test took it.
    deadline = time.monotonic() + 30
    while True:
        held = slots()
        ours = [conn.info.backend_pid for conn in held]
        theirs = held[0].execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                                 "datname = current_database() AND pid <> ALL(%s)", [ours]).fetchall()
        if not theirs:
            break
        assert time.monotonic() < deadline, "the worker's sessions kept coming back"
    read_until(proc, "database unavailable (")
    assert proc.poll() is None
    freed = release_all_but_one(held)

    wait_for(lambda: by_status(held[0]) == {"succeeded": 12}, timeout=60, message="every run succeeded")
    done = time.monotonic() - freed
    output = stop(proc)
    assert attempts_after_a_success(crowded) == 0
    figures(unavailable_lines=output.count("database unavailable"), seconds_from_slots_free_to_all_done=round(done, 1),
            attempts=_attempts(crowded))


@pytest.fixture(params=servers.KINDS)
def idle_limited(request):
    # 2 s: the listener's keepalive (at 0.4 of it) then has 1.2 s to spare; with 1 s, a loaded
    # machine (load 20) delayed its thread past the timeout once.
    with migrated(request.param, "idle", {"idle_session_timeout": "2s"}) as (_, url):
        yield url


def test_sessions_ended_as_idle_cost_a_polling_and_listening_worker_no_outage_and_no_lost_listen(idle_limited):
    # Polls further apart than the idle timeout: each finds its claim connection ended by the
    # server, and must reopen it quietly; the LISTEN connection must never be ended at all.
    proc = worker(idle_limited, "--forever", "--poll-interval", "3", JOBSWEB_LOG_LEVEL="debug")
    read_until(proc, "started: concurrency")
    time.sleep(8)  # four idle timeouts: every idle session of the worker would have been ended
    with psycopg.connect(idle_limited, autocommit=True) as conn:
        add(conn, 1, 0)
        conn.execute("SELECT pg_notify(%s, '')", [NOTIFY_CHANNEL])
    wait_for(lambda: statuses(idle_limited) == {"succeeded": 1}, message="the run succeeded")
    time.sleep(4)  # more polls on connections the server ended meanwhile
    output = stop(proc)
    assert "database unavailable" not in output, output
    assert "LISTEN connection lost" not in output and "cannot LISTEN" not in output, output
