"""enqueue(..., delay=): a run due that long from the database's now(), never Python's clock."""

import math
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import text

import tests.control_jobs  # noqa: F401 - a job type the chain below names
from jobsweb import InvalidInput, batch, chain, enqueue, enqueue_many, job
from jobsweb.core.database import db
from jobsweb.engine.enqueue.enqueuing import DELAY_MAX
from tests.conftest import committed, wait_for

LATER = datetime(2099, 1, 1, tzinfo=timezone.utc)


def due_after_creation(sql, ids):
    """run_at - created_at of each run: both from its enqueue transaction's now() when the delay
    is read from the database's clock, so exactly the delay."""
    return [row[0] for row in sql("SELECT run_at - created_at FROM job_runs WHERE id = ANY(%s) ORDER BY id",
                                  [list(ids)])]


def test_a_delay_makes_the_run_due_that_long_after_the_databases_now(app, sql):
    with app.app_context():
        seconds = enqueue("jobsweb.noop", delay=30)
        fraction = enqueue("jobsweb.noop", delay=2.5)
        span = enqueue("jobsweb.noop", delay=timedelta(minutes=5, microseconds=250))
        now = enqueue("jobsweb.noop", delay=0)
    assert due_after_creation(sql, [seconds, fraction, span, now]) == [
        timedelta(seconds=30), timedelta(seconds=2.5), timedelta(minutes=5, microseconds=250), timedelta(0)]


def test_a_delay_in_the_callers_transaction_counts_from_that_transactions_now(app):
    with app.app_context():
        began = db.session.execute(text("SELECT now()")).scalar()
        run = enqueue("jobsweb.noop", delay=45, session=db.session)
        due = db.session.execute(text("SELECT run_at FROM job_runs WHERE id = :id"), {"id": run}).scalar()
        db.session.commit()
    assert due == began + timedelta(seconds=45)


def test_enqueue_many_job_objects_batches_and_chains_take_a_delay(app, sql):
    @job("test.delay.object")
    def delayed_object(ctx):
        return None

    with app.app_context():
        many = enqueue_many("jobsweb.noop", [{"n": 1}, {"n": 2}], delay=timedelta(hours=1))
        one = delayed_object.enqueue(delay=90)
        with batch() as members:
            member = members.enqueue("jobsweb.noop", delay=12)
            bulk = members.enqueue_many("jobsweb.noop", [{}], delay=13)
        steps = chain([("jobsweb.noop", {}, {"delay": 7}), ("jobsweb.noop", {})])
    assert due_after_creation(sql, [*many, one, member, *bulk, steps.ids[0]]) == [
        timedelta(hours=1), timedelta(hours=1), timedelta(seconds=90), timedelta(seconds=12),
        timedelta(seconds=13), timedelta(seconds=7)]


@pytest.mark.parametrize("delay, says", [
    (-1, "must be from 0 to"),
    (timedelta(seconds=-0.5), "must be from 0 to"),
    (math.nan, "must be from 0 to"),
    (math.inf, "must be from 0 to"),
    (10 ** 400, "must be from 0 to"),
    (DELAY_MAX + 1, "for a later time give run_at"),
    ("30", "must be a number of seconds or a timedelta, got str"),
    (True, "got bool"),
])
def test_a_delay_that_is_not_a_sensible_wait_is_refused_naming_delay(app, sql, delay, says):
    with app.app_context():
        for call in (lambda: enqueue("jobsweb.noop", delay=delay), lambda: enqueue_many("jobsweb.noop", [{}], delay=delay)):
            with pytest.raises(InvalidInput, match=says) as refused:
                call()
            assert refused.value.field == "delay"
    assert sql("SELECT count(*) FROM job_runs") == [(0,)]


def test_run_at_and_delay_together_are_refused_naming_delay(app, sql):
    with app.app_context():
        for call in (lambda: enqueue("jobsweb.noop", run_at=LATER, delay=5),
                     lambda: enqueue_many("jobsweb.noop", [{}], run_at=LATER, delay=5),
                     lambda: chain([("jobsweb.noop", {}, {"run_at": LATER, "delay": 5})])):
            with pytest.raises(InvalidInput, match="cannot be combined with run_at") as refused:
                call()
            assert refused.value.field == "delay"
    assert sql("SELECT count(*) FROM job_runs") == [(0,)]


def test_the_shell_takes_a_delay_in_seconds_or_with_a_unit(app, runner, sql):
    ids = []
    for given in ("90", "1.5m", "2h", "1d", "20s"):
        result = runner.invoke(args=["jobs", "enqueue", "jobsweb.noop", "--delay", given])
        assert result.exit_code == 0, result.output
        ids.append(int(result.output))
    assert due_after_creation(sql, ids) == [timedelta(seconds=90), timedelta(seconds=90), timedelta(hours=2),
                                            timedelta(days=1), timedelta(seconds=20)]
    for args, says in ((["--delay", "-3"], "delay: '-3' is not a delay such as 90"),
                       (["--delay", "soon"], "delay: 'soon' is not a delay"),
                       (["--delay", "4000d"], "delay: must be from 0 to"),
                       (["--delay", "5", "--run-at", "2099-01-01T00:00:00Z"], "delay: cannot be combined with run_at")):
        result = runner.invoke(args=["jobs", "enqueue", "jobsweb.noop", *args])
        assert result.exit_code == 2 and says in result.output, result.output
    assert sql("SELECT count(*) FROM job_runs") == [(5,)]


def test_a_worker_starts_a_delayed_run_once_it_is_due_by_the_databases_clock(app, sql, spawn_worker):
    with committed(app):
        soon = enqueue("jobsweb.noop", delay=1.5)
        later = enqueue("jobsweb.noop", delay=3600)
    worker = spawn_worker("--forever", "--poll-interval", "0.1")
    wait_for(lambda: sql("SELECT status FROM job_runs WHERE id = %s", [soon]) == [("succeeded",)], timeout=60,
             message="the delayed run to run")
    [(delay, started_when_due)] = sql("SELECT run_at - created_at, started_at >= run_at FROM job_runs "
                                      "WHERE id = %s", [soon])
    assert (delay, started_when_due) == (timedelta(seconds=1.5), True)
    worker.terminate()
    assert worker.wait(timeout=30) == 0
    assert sql("SELECT status, attempts, run_at - created_at FROM job_runs WHERE id = %s", [later]) == [
        ("queued", 0, timedelta(hours=1))]
