"""A --forever worker LISTENs for new runs: it starts them at once, and still polls."""

import pytest

from jobsweb import definitions, enqueue, enqueue_many
from jobsweb.engine.runs import run_actions

from .conftest import committed, define, wait_for

# An idle worker that neither polls nor heartbeats (a heartbeat pass also claims) within the
# tests' deadlines: a run it starts within them was started by a NOTIFY.
QUIET = {"JOBSWEB_LEASE_SECONDS": 3600}
QUIET_POLL = ("--poll-interval", "600")


def listening(sql):
    return sql("SELECT 1 FROM pg_stat_activity WHERE query = 'LISTEN jobsweb_runs'")


def succeeded(sql, *run_ids):
    return sql("SELECT count(*) FROM job_runs WHERE id = ANY(%s) AND status = 'succeeded'",
               [list(run_ids)]) == [(len(run_ids),)]


def insert_without_notify(sql):
    return sql("INSERT INTO job_runs (job_type, payload) VALUES ('jobsweb.noop', '{}') RETURNING id")[0][0]


def wait_succeeded(sql, run_ids, log, message):
    """Wait for the runs to succeed; else fail with the worker's log."""
    try:
        wait_for(lambda: succeeded(sql, *run_ids), timeout=60, message=message)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the worker's log:\n{log.read_text()}") from None


def idle_listening_worker(sql, spawn_worker, log):
    spawn_worker("--forever", *QUIET_POLL, output=open(log, "w+"), **QUIET)
    first = insert_without_notify(sql)  # found by the worker's first tick: it is idle after it
    wait_for(lambda: succeeded(sql, first) and listening(sql), timeout=60, message="an idle, listening worker")


def by_enqueue(app, sql):
    with app.app_context():
        return [enqueue("jobsweb.noop")]


def by_enqueue_many(app, sql):
    with app.app_context():
        return enqueue_many("jobsweb.noop", [{}, {}, {}])


def by_retry(app, sql):
    [(dead,)] = sql("SELECT id FROM job_runs WHERE status = 'dead'")
    with committed(app):
        assert run_actions.retry([dead]) == [dead]
    return [dead]


def by_run_now(app, sql):
    with committed(app):
        return [definitions.run_now("nightly")]


def by_plain_sql_and_pg_notify(app, sql):
    run_id = insert_without_notify(sql)
    sql("SELECT pg_notify('jobsweb_runs', '')")  # README, "Enqueue and handle jobs"
    return [run_id]


# README, JOBSWEB_LISTEN: "enqueue, enqueue_many, retry and run-now NOTIFY", and plain SQL
# with pg_notify('jobsweb_runs', '').
@pytest.mark.parametrize("enqueue_now", [by_enqueue, by_enqueue_many, by_retry, by_run_now,
                                         by_plain_sql_and_pg_notify])
def test_an_idle_worker_starts_a_run_due_now_long_before_its_poll_interval(app, sql, spawn_worker, enqueue_now,
                                                                           tmp_path):
    define(app, "nightly")  # 06:00 daily: no slot of it falls due during the test
    sql("INSERT INTO job_runs (job_type, payload, status, attempts, max_attempts) "
        "VALUES ('jobsweb.noop', '{}', 'dead', 1, 1)")
    log = tmp_path / "worker.log"
    idle_listening_worker(sql, spawn_worker, log)
    run_ids = enqueue_now(app, sql)
    wait_succeeded(sql, run_ids, log, "the runs to be started by NOTIFY")


def test_a_listening_worker_still_polls_for_runs_written_without_notify(app, sql, spawn_worker):
    spawn_worker("--forever", "--poll-interval", "1", **QUIET)
    wait_for(lambda: listening(sql), timeout=20, message="a listening worker")
    run_id = insert_without_notify(sql)
    wait_for(lambda: succeeded(sql, run_id), timeout=10, message="the run to be found by polling")


def test_a_worker_with_listen_off_does_not_listen(app, sql, spawn_worker):
    spawn_worker("--forever", "--poll-interval", "0.05", JOBSWEB_LISTEN="off")
    run_id = insert_without_notify(sql)
    wait_for(lambda: succeeded(sql, run_id), timeout=20, message="the run to be found by polling")
    assert not listening(sql)


def test_a_retry_the_worker_wrote_starts_when_it_falls_due_not_at_its_next_poll(sql, spawn_worker, figures):
    # A retry due in 0.6-1.2 s ran about 5 s later, at the worker's next poll (issue 52): the
    # worker knows when the retries it wrote fall due (FINISH_RUNS returns each one's delay).
    [(run_id,)] = sql("INSERT INTO job_runs (job_type, max_attempts) VALUES ('test.fail_first', 2) RETURNING id")
    worker = spawn_worker("--forever", "--poll-interval", "5", JOBSWEB_BACKOFF_BASE="0.8", JOBSWEB_BACKOFF_CAP="0.8")
    wait_for(lambda: sql("SELECT status FROM job_runs WHERE id = %s", [run_id]) == [("succeeded",)], timeout=20,
             message="the retry to succeed")
    [(due_to_start,)] = sql("SELECT extract(epoch FROM a.started_at - f.finished_at)::float8 FROM job_attempts a "
                            "JOIN job_attempts f ON f.run_id = a.run_id AND f.attempt = 1 "
                            "WHERE a.run_id = %s AND a.attempt = 2", [run_id])
    figures(backoff_seconds=0.8, failure_to_retry_start_seconds=round(due_to_start, 3), poll_interval_seconds=5)
    assert due_to_start < 2.5, due_to_start  # 0.8 s of backoff (jitter ±20%), far from the 5 s poll
    worker.terminate()
    assert worker.wait(timeout=15) == 0


def by_enqueue_with_delay(app, sql):
    with app.app_context():
        return [enqueue("jobsweb.noop", delay=1.5)]


def by_enqueue_many_with_run_at(app, sql):
    [(run_at,)] = sql("SELECT now() + interval '1.5 seconds'")
    with app.app_context():
        return enqueue_many("jobsweb.noop", [{}, {}], run_at=run_at)


# Issue 52: a run enqueued for a few seconds ahead by another process started at the worker's
# next poll after its due time; the enqueue tells the listening workers when (NOTIFY_AT).
@pytest.mark.parametrize("enqueue_later", [by_enqueue_with_delay, by_enqueue_many_with_run_at])
def test_an_idle_worker_starts_a_run_enqueued_for_later_when_it_falls_due_not_at_its_poll(
        app, sql, spawn_worker, enqueue_later, tmp_path, figures):
    log = tmp_path / "worker.log"
    idle_listening_worker(sql, spawn_worker, log)
    run_ids = enqueue_later(app, sql)
    wait_succeeded(sql, run_ids, log, "the runs to start when due")
    rows = sql("SELECT extract(epoch FROM a.started_at - r.run_at)::float8 FROM job_runs r "
               "JOIN job_attempts a ON a.run_id = r.id WHERE r.id = ANY(%s)", [run_ids])
    late = [seconds for (seconds,) in rows]
    figures(due_to_start_seconds=[round(seconds, 3) for seconds in late], poll_interval_seconds=600)
    assert len(late) == len(run_ids) and all(seconds >= 0 for seconds in late), late  # never before it is due
