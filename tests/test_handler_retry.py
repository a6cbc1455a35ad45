"""raise jobsweb.Retry(in_=...) in a handler: a failed attempt retried that long after it ended
(by the database's clock), instead of after the backoff; dead on the last attempt as usual."""

import math
from datetime import timedelta

import pytest

import tests.control_jobs  # noqa: F401 - the job types, in this process too
from jobsweb import Retry, enqueue, get_run
from jobsweb.engine.jobs import registry, retry
from jobsweb.engine.worker.execution import Failures, Finished, Held
from jobsweb.testing import drain
from tests.conftest import committed

WORKER = {"JOBSWEB_HANDLERS": "tests.job_types,tests.control_jobs"}


def retry_due_after_finish(sql, run):
    """The run's status and run_at - updated_at: FINISH_RUNS sets both from its now(), so a
    retry's delay exactly."""
    return sql("SELECT status, run_at - updated_at FROM job_runs WHERE id = %s", [run])


def attempts(sql, run):
    return sql("SELECT attempt, outcome, error_type, error FROM job_attempts WHERE run_id = %s ORDER BY attempt",
               [run])


def test_a_retry_asked_by_the_handler_fails_the_attempt_and_is_due_that_long_after_it(app, sql, spawn_worker):
    with committed(app):
        sync = enqueue("test.control.retry_later", {"in": 30, "reason": "rate limited: Retry-After 30"})
        minutes = enqueue("test.control.retry_later", {"in": {"minutes": 2}})
        awaited = enqueue("test.control.async_retry_later", {"in": 45})
    assert spawn_worker(**WORKER).wait(timeout=60) == 0
    assert retry_due_after_finish(sql, sync) == [("failed", timedelta(seconds=30))]
    assert retry_due_after_finish(sql, minutes) == [("failed", timedelta(minutes=2))]
    assert retry_due_after_finish(sql, awaited) == [("failed", timedelta(seconds=45))]
    assert attempts(sql, sync) == [(1, "failed", "Retry", "retry in 30 s: rate limited: Retry-After 30")]
    assert attempts(sql, minutes) == [(1, "failed", "Retry", "retry in 120 s (asked by the handler)")]
    assert attempts(sql, awaited) == [(1, "failed", "Retry", "retry in 45 s: async and rate limited")]

    # Due now: the second attempt is the last (max_attempts=2), so the run is dead.
    sql("UPDATE job_runs SET run_at = now()")
    assert spawn_worker(**WORKER).wait(timeout=60) == 0
    for run in (sync, minutes, awaited):
        assert sql("SELECT status, attempts FROM job_runs WHERE id = %s", [run]) == [("dead", 2)]
        assert [row[:3] for row in attempts(sql, run)] == [(1, "failed", "Retry"), (2, "failed", "Retry")]


def test_a_retry_is_retried_even_where_the_job_type_lists_every_exception_as_permanent(app, sql, spawn_worker):
    with committed(app):
        run = enqueue("test.control.retry_listed_permanent", {"in": 20})
    assert spawn_worker(**WORKER).wait(timeout=60) == 0
    assert retry_due_after_finish(sql, run) == [("failed", timedelta(seconds=20))]


def test_drain_runs_a_retry_due_within_its_wait_and_leaves_a_later_one(app, sql):
    with app.app_context():
        soon = enqueue("test.control.retry_once", {"in": 0.2})
        later = enqueue("test.control.retry_once", {"in": 60})
        ran = drain()
    assert [(r.run_id, r.attempt, r.status) for r in ran] == [(soon, 1, "failed"), (later, 1, "failed"),
                                                              (soon, 2, "succeeded")]
    assert retry_due_after_finish(sql, later) == [("failed", timedelta(seconds=60))]


def outcome_of(exc, job_type="test.control.retry_later"):
    job = registry.get(job_type)
    ctx = registry.JobContext(1, job.name, {}, 1, 3)
    return Failures((10.0, 3600.0), 2000, 8000).outcome_of("w", Finished(Held(ctx, job, 60, None), exc=exc),
                                                          stopping=False)


@pytest.mark.parametrize("asked, delay", [
    (30, 30.0), (timedelta(minutes=1, milliseconds=500), 60.5), (0, 0.0),
    (-5, 0.0),  # bounded as a backoff is: never before the attempt ended
    (1e12, retry.MAX_DELAY), (math.inf, retry.MAX_DELAY), (10 ** 400, retry.MAX_DELAY),  # nor past a timestamp
    (math.nan, retry.DEFAULT_DELAY),
])
def test_the_retry_delay_is_bounded_as_the_backoff_is(asked, delay):
    outcome = outcome_of(Retry(asked))
    assert (outcome.outcome, outcome.delay, outcome.give_up) == ("failed", delay, False)


def test_a_retry_without_a_delay_waits_the_backoff():
    outcome = outcome_of(Retry(reason="try later"))
    assert 8.0 <= outcome.delay <= 12.0  # the first attempt's 10 s, ±20%
    assert outcome.error == "retry after the backoff: try later"


def test_a_retry_given_text_or_a_bool_is_a_type_error_saying_what_it_takes():
    for wrong in ("30", True, [30]):
        with pytest.raises(TypeError, match=r"takes seconds \(a number\) or a timedelta"):
            Retry(wrong)


def test_inline_mode_ends_a_run_that_asks_for_a_retry_dead_as_any_failure(app):
    app.config["JOBSWEB_INLINE"] = True
    with app.app_context():
        run = get_run(enqueue("test.control.retry_later", {"in": 30, "reason": "busy"}))
    assert (run.status, run.attempts, run.error_type, run.last_error) == ("dead", 1, "Retry", "retry in 30 s: busy")
