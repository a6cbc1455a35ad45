"""A --forever worker LISTENs for new runs: it starts them at once, and still polls."""

from jobsweb import enqueue

from .conftest import wait_for


def listening(sql):
    return sql("SELECT 1 FROM pg_stat_activity WHERE query = 'LISTEN jobsweb_runs'")


def succeeded(sql, run_id):
    return sql("SELECT status FROM job_runs WHERE id = %s", [run_id]) == [("succeeded",)]


def insert_without_notify(sql):
    return sql("INSERT INTO job_runs (job_type, payload) VALUES ('jobsweb.noop', '{}') RETURNING id")[0][0]


def test_an_idle_worker_starts_an_enqueued_run_long_before_its_poll_interval(app, sql, spawn_worker):
    spawn_worker("--forever", "--poll-interval", "30")
    first = insert_without_notify(sql)  # found by the worker's first tick: it is idle after it
    wait_for(lambda: succeeded(sql, first) and listening(sql), timeout=20, message="an idle, listening worker")
    with app.app_context():
        run_id = enqueue("jobsweb.noop")
    wait_for(lambda: succeeded(sql, run_id), timeout=5, message="the enqueued run to be started by NOTIFY")


def test_a_listening_worker_still_polls_for_runs_written_without_notify(app, sql, spawn_worker):
    spawn_worker("--forever", "--poll-interval", "1")
    wait_for(lambda: listening(sql), timeout=20, message="a listening worker")
    run_id = insert_without_notify(sql)
    wait_for(lambda: succeeded(sql, run_id), timeout=10, message="the run to be found by polling")


def test_a_worker_with_listen_off_does_not_listen(app, sql, spawn_worker):
    spawn_worker("--forever", "--poll-interval", "0.05", JOBSWEB_LISTEN="off")
    run_id = insert_without_notify(sql)
    wait_for(lambda: succeeded(sql, run_id), timeout=20, message="the run to be found by polling")
    assert not listening(sql)
