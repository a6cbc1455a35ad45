"""ctx.once: an effect's business key recorded with the effect, so retries do not repeat it."""

import threading

import psycopg
import pytest
from sqlalchemy import text

from jobsweb import InvalidInput, JobContext, enqueue
from jobsweb.core.database import db
from jobsweb.core.database import libpq_url
from tests.conftest import wait_for
from tests.test_worker import make_due, make_worker


def ctx_for(run_id=1, attempt=1):
    return JobContext(run_id, "test.effect", {}, attempt, 5)


def charges(sql):
    return sql("SELECT run_id FROM test_executions ORDER BY run_id")


def charge(session_or_conn, run_id):
    statement = "INSERT INTO test_executions (run_id, pid) VALUES (%s, 0)"
    if isinstance(session_or_conn, psycopg.Connection):
        session_or_conn.execute(statement, [run_id])
    else:
        session_or_conn.execute(text(statement.replace("%s", ":r")), {"r": run_id})


def test_the_first_attempt_performs_the_effect_and_a_retry_skips_it(app, sql):
    with app.app_context():
        for attempt in (1, 2):
            with ctx_for(812, attempt).once("invoice_charge:812") as first:
                if first:
                    charge(db.session, 812)
            assert first is (attempt == 1)
    assert charges(sql) == [(812,)]
    assert sql("SELECT key, run_id, attempt FROM job_effects") == [("invoice_charge:812", 812, 1)]


def test_a_plain_psycopg_connection_records_the_key_in_its_own_transaction(app, database_url_for_tests, sql):
    with psycopg.connect(libpq_url(database_url_for_tests)) as conn:
        results = []
        for _ in range(2):
            with ctx_for().once("sales_report:2026-01-14", conn) as first:
                if first:
                    charge(conn, 1)
            results.append(first)
    assert results == [True, False]
    assert charges(sql) == [(1,)]


def test_an_effect_that_raises_leaves_no_key_so_the_retry_performs_it(app, sql):
    with app.app_context():
        with pytest.raises(ConnectionError):
            with ctx_for().once("invoice_charge:813") as first:
                charge(db.session, 813)
                raise ConnectionError("payment provider timed out")
        assert first
        assert sql("SELECT count(*) FROM job_effects") == [(0,)]
        with ctx_for(attempt=2).once("invoice_charge:813") as first:
            if first:
                charge(db.session, 813)
    assert first
    assert charges(sql) == [(813,)]


def test_a_tuple_key_is_stored_as_its_parts_joined_with_colons(app, sql):
    with app.app_context():
        with ctx_for().once(("weekly_digest", 42, "2026-01-12")) as first:
            pass
    assert first
    assert sql("SELECT key FROM job_effects") == [("weekly_digest:42:2026-01-12",)]


@pytest.mark.parametrize("key", ["", "   ", None, 812])
def test_a_missing_or_non_string_key_is_a_clear_error(app, key):
    with app.app_context(), pytest.raises(InvalidInput, match="effect key"):
        with ctx_for().once(key):
            pass


def test_a_concurrent_attempt_waits_for_the_first_and_then_skips(app, database_url_for_tests, sql):
    url = libpq_url(database_url_for_tests)
    second = {}

    def rival():
        with psycopg.connect(url) as conn, ctx_for(attempt=2).once("invoice_charge:812", conn) as first:
            second["first"] = first

    with psycopg.connect(url) as conn:
        with ctx_for().once("invoice_charge:812", conn) as first:
            charge(conn, 812)
            thread = threading.Thread(target=rival)
            thread.start()
            # The rival blocks on the primary key until this transaction ends.
            wait_for(lambda: sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                 "AND query LIKE '%INSERT INTO job_effects%'")[0][0] == 1,
                     message="the rival attempt to wait on the key")
        thread.join(timeout=10)
    assert first and second == {"first": False}
    assert charges(sql) == [(812,)]


def test_a_run_retried_after_its_effect_committed_does_not_repeat_the_effect(app, sql):
    with app.app_context():
        run_id = enqueue("test.effect_then_fail", max_attempts=3)
    make_worker(app).run()
    make_due(sql)
    make_worker(app).run()
    assert sql("SELECT attempts, result FROM job_runs") == [(2, {"first": False})]
    assert charges(sql) == [(run_id,)]
