"""Drill 2, database restart: PostgreSQL restarts mid-run; workers reconnect, nothing is lost or doubled."""

import signal
import time

import psycopg

from jobsweb.core.database import libpq_url
from tests.conftest import wait_for
from tests.processes import finish, insert_many
from tests.reliability.conftest import size


def fresh(app):
    """Like the sql fixture, but each statement on a new connection."""

    def run(statement, params=None):
        with psycopg.connect(libpq_url(app.config["SQLALCHEMY_DATABASE_URI"]), autocommit=True) as conn:
            return conn.execute(statement, params).fetchall()

    return run


def test_workers_ride_out_a_database_restart_in_the_middle_of_a_run(app, sql, spawn_worker, worker_log,
                                                                   restart_postgres, figures):
    jobs = size("RESTART_JOBS", 400)
    insert_many(sql, "test.effect", jobs, payload='{"max_sleep": 0.02}', max_attempts=100)
    workers = [spawn_worker("--forever", "--poll-interval", "0.05", "--concurrency", "4", output=worker_log())
               for _ in range(2)]
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")[0][0] >= jobs // 10,
             message="a tenth of the runs to finish")
    started = time.monotonic()
    restart_postgres()
    restarted = time.monotonic() - started

    sql = fresh(app)  # the fixture's connection died with the server
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")[0][0] == jobs, timeout=max(60, jobs / 20), message="every run to succeed after the restart")
    recovered = time.monotonic() - started
    exited = [finish(proc) for proc in workers if proc.poll() is not None]
    assert not exited, f"a worker exited during the outage: {exited}"
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    outputs = [finish(proc, timeout=60) for proc in workers]

    assert [code for code, _ in outputs] == [0, 0]
    assert all("Traceback" not in output for _, output in outputs), outputs
    assert any("database unavailable" in output for _, output in outputs)
    assert sql("SELECT count(*), count(DISTINCT run_id) FROM test_executions") == [(jobs, jobs)]
    assert sql("SELECT count(*) FROM job_effects") == [(jobs,)]
    figures(jobs=jobs, lost=jobs - sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")[0][0],
            duplicated_effects=sql("SELECT count(*) - count(DISTINCT run_id) FROM test_executions")[0][0],
            restart_seconds=round(restarted, 1),
            all_done_seconds_after_restart=round(recovered, 1),
            failed_attempts=sql("SELECT count(*) FROM job_attempts WHERE outcome = 'failed'")[0][0],
            reconnect_warnings=sum(o.count("database unavailable") for _, o in outputs))
