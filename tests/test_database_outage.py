"""A worker outlives a PostgreSQL restart: it waits, reconnects and loses nothing."""

import signal

import psycopg

from jobsweb import enqueue
from jobsweb.core.database import libpq_url
from tests.conftest import wait_for


def count(url, status):
    with psycopg.connect(libpq_url(url)) as conn:
        return conn.execute("SELECT count(*) FROM job_runs WHERE status = %s", [status]).fetchone()[0]


def test_a_forever_worker_reconnects_after_the_database_restarts(app, database_url_for_tests,
                                                                 spawn_worker, restart_postgres):
    with app.app_context():
        for _ in range(20):
            enqueue("test.record")
    worker = spawn_worker("--forever", "--poll-interval", "0.05")
    wait_for(lambda: count(database_url_for_tests, "succeeded") == 20, message="the first runs")

    restart_postgres()
    with app.app_context():
        for _ in range(20):
            enqueue("test.record")
    wait_for(lambda: count(database_url_for_tests, "succeeded") == 40, timeout=60,
             message="the runs enqueued after the restart")
    assert worker.poll() is None, "the worker kept running through the restart"
    worker.send_signal(signal.SIGTERM)
    output, _ = worker.communicate(timeout=30)

    assert worker.returncode == 0
    assert "database unavailable" in output
    assert "Traceback" not in output
    with psycopg.connect(libpq_url(database_url_for_tests)) as conn:
        assert conn.execute("SELECT count(*), count(DISTINCT run_id) FROM test_executions").fetchone() == (40, 40)
