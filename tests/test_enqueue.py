import threading
from datetime import datetime, timedelta, timezone

import pytest

from jobsweb import InvalidInput, enqueue, enqueue_many
from jobsweb.core.database import db


def count_runs(sql):
    return sql("SELECT count(*) FROM job_runs")[0][0]


def test_it_enqueues_a_queued_run_due_now(app, sql):
    with app.app_context():
        run_id = enqueue("jobsweb.noop", {"a": 1})
    [(job_type, payload, status, attempts, max_attempts, due)] = sql(
        "SELECT job_type, payload, status, attempts, max_attempts, run_at <= now() FROM job_runs WHERE id = %s",
        [run_id])
    assert (job_type, payload, status, attempts, max_attempts, due) == ("jobsweb.noop", {"a": 1}, "queued", 0, 5, True)


def test_it_keeps_run_at_and_max_attempts(app, sql):
    later = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    with app.app_context():
        run_id = enqueue("jobsweb.noop", run_at=later, max_attempts=9)
    assert sql("SELECT run_at, max_attempts FROM job_runs WHERE id = %s", [run_id]) == [(later, 9)]


def test_it_returns_the_existing_run_for_a_repeated_idempotency_key(app, sql):
    with app.app_context():
        first = enqueue("jobsweb.noop", {"n": 1}, idempotency_key="invoice:812")
        second = enqueue("jobsweb.noop", {"n": 2}, idempotency_key="invoice:812")
    assert first == second
    assert sql("SELECT payload FROM job_runs") == [({"n": 1},)]


def test_concurrent_enqueues_with_one_key_create_one_run(app, sql):
    callers = 16
    barrier = threading.Barrier(callers)
    ids, errors = [], []

    def call():
        with app.app_context():
            barrier.wait()
            try:
                ids.append(enqueue("jobsweb.noop", idempotency_key="report:2026-01-14"))
            except Exception as exc:  # recorded so the assertion shows it
                errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(set(ids)) == 1 and len(ids) == callers
    assert count_runs(sql) == 1


def test_a_run_enqueued_in_a_session_exists_only_if_the_session_commits(app, sql):
    with app.app_context():
        enqueue("jobsweb.noop", session=db.session)
        db.session.rollback()
        assert count_runs(sql) == 0
        kept = enqueue("jobsweb.noop", session=db.session)
        db.session.commit()
    assert sql("SELECT id FROM job_runs") == [(kept,)]


@pytest.mark.parametrize("kwargs, field", [
    ({"job_type": "no.such.type"}, "job_type"),
    ({"payload": [1, 2]}, "payload"),
    ({"payload": "text"}, "payload"),
    ({"payload": {"when": datetime.now()}}, "payload"),
    ({"payload": {"blob": "x" * (64 * 1024)}}, "payload"),
    ({"run_at": datetime(2030, 1, 1)}, "run_at"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"idempotency_key": ""}, "idempotency_key"),
])
def test_bad_input_is_refused_naming_the_field_and_writes_nothing(app, sql, kwargs, field):
    args = {"job_type": "jobsweb.noop", **kwargs}
    with app.app_context(), pytest.raises(InvalidInput) as raised:
        enqueue(args.pop("job_type"), **args)
    assert raised.value.field == field
    assert count_runs(sql) == 0


def test_the_payload_limit_is_configurable(app, sql):
    app.config["JOBSWEB_MAX_PAYLOAD_BYTES"] = 10
    with app.app_context(), pytest.raises(InvalidInput, match="over the limit of 10 bytes"):
        enqueue("jobsweb.noop", {"text": "more than ten bytes"})


@pytest.mark.parametrize("payload", [{"\x00": None}, {"note": "a\x00b"}, {"list": [{"deep": "\x00"}]}])
def test_a_payload_with_a_nul_character_is_refused_before_anything_is_written(app, sql, payload):
    # PostgreSQL's jsonb cannot store U+0000; this was a DataError and a 500 (the bad-input drill).
    with app.app_context(), pytest.raises(InvalidInput, match="NUL character"):
        enqueue("jobsweb.noop", payload)
    assert count_runs(sql) == 0


def test_a_plain_sql_insert_with_the_articles_columns_is_a_valid_run(app, sql, runner):
    sql("INSERT INTO job_runs (job_type, payload, run_at, status, attempts, max_attempts) "
        "VALUES ('jobsweb.noop', '{}', now() - interval '1 minute', 'queued', 0, 3)")
    result = runner.invoke(args=["run-jobs"])
    assert result.exit_code == 0, result.output
    assert sql("SELECT status, attempts FROM job_runs") == [("succeeded", 1)]


def test_runs_due_later_wait(app, sql, runner):
    with app.app_context():
        enqueue("jobsweb.noop", run_at=datetime.now(timezone.utc) + timedelta(hours=1))
    assert runner.invoke(args=["run-jobs"]).exit_code == 0
    assert sql("SELECT status, attempts FROM job_runs") == [("queued", 0)]


def test_enqueue_many_creates_one_queued_run_per_payload_in_order(app, sql):
    with app.app_context():
        ids = enqueue_many("jobsweb.noop", [{"n": n} for n in range(25_000)], max_attempts=3)
    assert len(ids) == 25_000
    rows = sql("SELECT id, payload, status, max_attempts, run_at <= now() FROM job_runs ORDER BY id")
    assert [r[0] for r in rows] == ids
    assert [r[1]["n"] for r in rows] == list(range(25_000))
    assert {r[2:] for r in rows} == {("queued", 3, True)}


def test_enqueue_many_writes_nothing_when_one_payload_is_bad(app, sql):
    with app.app_context(), pytest.raises(InvalidInput, match="item 1: must be a JSON object"):
        enqueue_many("jobsweb.noop", [{"ok": 1}, ["not", "an", "object"]])
    assert count_runs(sql) == 0


def test_enqueue_many_refuses_a_payload_postgresql_cannot_store_and_writes_nothing(app, sql):
    # It had its own copy of the payload checks, without enqueue()'s NUL check: a DataError.
    with app.app_context(), pytest.raises(InvalidInput, match="item 1: contains the NUL character"):
        enqueue_many("jobsweb.noop", [{"ok": 1}, {"name": "a\x00b"}])
    assert count_runs(sql) == 0


def test_enqueue_many_joins_the_callers_transaction(app, sql):
    with app.app_context():
        enqueue_many("jobsweb.noop", [{}, {}], session=db.session)
        db.session.rollback()
    assert count_runs(sql) == 0


def test_enqueue_many_of_nothing_returns_no_ids(app, sql):
    with app.app_context():
        assert enqueue_many("jobsweb.noop", []) == []
