"""Run.wait() inside a handler is refused (RuntimeError) instead of deadlocking the worker slot it
holds, as Celery refuses result.get() inside a task; allow_inside_job=True waits anyway."""

import time

import pytest

import tests.control_jobs  # noqa: F401 - the job types, in this process too
from jobsweb import enqueue, get_run
from jobsweb.testing import drain
from tests.conftest import committed

WORKER = {"JOBSWEB_HANDLERS": "tests.job_types,tests.control_jobs"}
REFUSED = "Run.wait() inside a handler"


def ended(sql, run):
    return sql("SELECT status, error_type, last_error, finished_at - started_at FROM job_runs WHERE id = %s", [run])[0]


@pytest.mark.parametrize("job_type", ["test.control.waits_for_a_run", "test.control.async_waits_for_a_run"])
def test_a_handler_waiting_at_concurrency_one_gets_the_clear_error_instead_of_hanging(app, sql, spawn_worker,
                                                                                     job_type):
    with committed(app):
        # The wait would give up after 30 s: the refusal comes at once.
        waiter = enqueue(job_type, {"timeout": 30})
    started = time.monotonic()
    assert spawn_worker("--concurrency", "1", **WORKER).wait(timeout=120) == 0
    status, error_type, error, took = ended(sql, waiter)
    assert (status, error_type) == ("dead", "RuntimeError"), error
    assert error.startswith(f"{REFUSED} (run {waiter} {job_type}) is refused: it could deadlock")
    assert "after=[run_id]" in error and "allow_inside_job=True" in error
    assert took.total_seconds() < 5 and time.monotonic() - started < 30
    # The run it enqueued before waiting ran on the freed slot.
    assert sql("SELECT status FROM job_runs WHERE id <> %s", [waiter]) == [("succeeded",)]


def test_allow_inside_job_waits_for_a_run_another_slot_runs(app, sql, spawn_worker):
    with committed(app):
        waiter = enqueue("test.control.waits_for_a_run", {"allow": True, "timeout": 60})
    assert spawn_worker("--concurrency", "2", **WORKER).wait(timeout=120) == 0
    [(status, result)] = sql("SELECT status, result FROM job_runs WHERE id = %s", [waiter])
    assert (status, result["status"]) == ("succeeded", "succeeded")


def test_drain_refuses_a_wait_inside_a_handler_too(app):
    with app.app_context():
        waiter = enqueue("test.control.waits_for_a_run", {"timeout": 30})
        ran = drain()
    assert ran[0].run_id == waiter and ran[0].status == "dead"
    assert ran[0].error.startswith(f"RuntimeError: {REFUSED}")


def test_inline_mode_refuses_it_as_a_worker_would_though_the_run_has_ended(app):
    app.config["JOBSWEB_INLINE"] = True
    with app.app_context():
        run = get_run(enqueue("test.control.waits_for_a_run"))
        assert (run.status, run.error_type) == ("dead", "RuntimeError")
        assert run.last_error.startswith(REFUSED)
        # Outside a handler the same wait returns.
        assert get_run(enqueue("jobsweb.noop")).wait(timeout=1).status == "succeeded"


def test_a_wait_outside_any_handler_is_not_refused(app, sql):
    with app.app_context():
        run = enqueue("jobsweb.noop")
        sql("UPDATE job_runs SET status = 'succeeded', finished_at = now() WHERE id = %s", [run])
        assert get_run(run).wait(timeout=0).status == "succeeded"
