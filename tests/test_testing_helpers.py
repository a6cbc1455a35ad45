"""jobsweb.testing: drain() runs what is due inline, enqueued() lists what is queued (issue 12,
part 9)."""

from datetime import datetime, timedelta, timezone

import pytest

from jobsweb import batch, cancel, chain, enqueue, enqueue_many, get_batch, get_run, job, retry
from jobsweb.core.database import db, libpq_url
from jobsweb.core.errors import ConfigError
from jobsweb.testing import create_schema, drain, empty_tables, enqueued
from tests.conftest import committed, define


def test_drain_runs_a_due_run_and_returns_it(app, sql):
    with app.app_context():
        run_id = enqueue("jobsweb.sleep", {"seconds": 0})
        ran = drain()
    assert [(r.run_id, r.job_type, r.attempt, r.status, r.result, r.error) for r in ran] == [
        (run_id, "jobsweb.sleep", 1, "succeeded", {"slept": 0}, None)]
    assert sql("SELECT status, attempts, locked_by FROM job_runs") == [("succeeded", 1, None)]
    assert sql("SELECT attempt, outcome FROM job_attempts") == [(1, "succeeded")]


def test_drain_retries_a_failing_run_until_it_is_dead(app, sql):
    with app.app_context():
        run_id = enqueue("jobsweb.fail", max_attempts=3)
        ran = drain()
    assert [(r.run_id, r.attempt, r.status) for r in ran] == [(run_id, 1, "failed"), (run_id, 2, "failed"),
                                                              (run_id, 3, "dead")]
    assert ran[-1].error == "RuntimeError: jobsweb.fail failing on purpose (attempt 3)"
    assert sql("SELECT status FROM job_runs") == [("dead",)]
    assert sql("SELECT attempt, outcome FROM job_attempts ORDER BY attempt") == [
        (1, "failed"), (2, "failed"), (3, "failed")]


def test_drain_runs_a_retry_until_it_succeeds_and_a_permanent_error_at_once(app):
    with app.app_context():
        flaky = enqueue("jobsweb.fail", {"times": 1})
        permanent = enqueue("jobsweb.fail", {"permanent": True})
        ran = drain()
    assert [(r.run_id, r.attempt, r.status) for r in ran] == [
        (flaky, 1, "failed"), (permanent, 1, "dead"), (flaky, 2, "succeeded")]


def test_drain_leaves_a_retry_that_is_due_later_than_it_waits(app, sql):
    with app.app_context():
        app.config["JOBSWEB_BACKOFF_BASE"] = app.config["JOBSWEB_BACKOFF_CAP"] = 60.0
        enqueue("jobsweb.fail", max_attempts=3)
        assert [r.status for r in drain()] == ["failed"]
    assert sql("SELECT status, attempts FROM job_runs") == [("failed", 1)]


def test_drain_materialises_a_due_schedule_slot_and_runs_it(app, sql):
    definition_id = define(app, "nightly", job_type="jobsweb.noop")
    sql("UPDATE job_definitions SET next_run_at = now() - interval '1 second'")
    with app.app_context():
        ran = drain()
    assert [(r.job_type, r.status) for r in ran] == [("jobsweb.noop", "succeeded")]
    assert sql("SELECT definition_id, status FROM job_runs") == [(definition_id, "succeeded")]
    assert sql("SELECT last_status, next_run_at > now() FROM job_definitions") == [("succeeded", True)]


def test_drain_leaves_runs_enqueued_for_later_and_says_nothing_ran(app, sql):
    with app.app_context():
        enqueue("jobsweb.noop", run_at=datetime.now(timezone.utc) + timedelta(hours=1))
        assert drain() == []
    assert sql("SELECT status FROM job_runs") == [("queued",)]


def test_drain_runs_what_a_handler_enqueues(app, registry_snapshot):
    @job("test.fan_out")
    def fan_out(ctx):
        for n in range(ctx.payload["n"]):
            enqueue("jobsweb.noop", {"n": n})

    with app.app_context():
        fan_out.enqueue({"n": 2})
        assert [r.job_type for r in drain()] == ["test.fan_out", "jobsweb.noop", "jobsweb.noop"]


def test_drain_stops_a_job_that_keeps_enqueuing_itself(app, sql, registry_snapshot):
    @job("test.forever")
    def forever(ctx):
        enqueue("test.forever")

    with app.app_context():
        forever.enqueue()
        with pytest.raises(RuntimeError, match="made 5 attempts and runs are still due"):
            drain(max_runs=5)
    assert sql("SELECT status, count(*) FROM job_runs GROUP BY status ORDER BY status") == [
        ("queued", 1), ("succeeded", 5)]


def test_enqueued_lists_the_payloads_of_queued_runs_including_the_sessions_own(app, registry_snapshot):
    @job("test.send_invoice")
    def send_invoice(ctx):
        pass

    with app.app_context():
        send_invoice.enqueue({"invoice": 1})
        enqueue("jobsweb.noop", {"other": True})
        send_invoice.enqueue({"invoice": 2}, session=db.session)  # not committed yet
        assert enqueued(send_invoice) == [{"invoice": 1}, {"invoice": 2}]
        assert enqueued("jobsweb.noop") == [{"other": True}]
        assert enqueued() == [{"invoice": 1}, {"other": True}, {"invoice": 2}]
        db.session.commit()
        drain()
        assert enqueued() == []


def test_a_handler_run_by_drain_writes_through_the_apps_session(app, sql):
    with committed(app):
        enqueue("test.record")
    with app.app_context():
        [ran] = drain()
    assert sql("SELECT run_id FROM test_executions") == [(ran.run_id,)]


@pytest.fixture
def sqlite_host(app, database_url_for_tests, monkeypatch):
    """A host app on an in-memory SQLite (not in inline mode), as many Flask test suites are,
    while libpq's PG* variables name the real test database: what jobsweb was not given, it must
    never find on its own."""
    from flask import Flask
    from psycopg.conninfo import conninfo_to_dict

    from jobsweb import JobsWeb

    real = conninfo_to_dict(libpq_url(database_url_for_tests))
    for name, key in (("PGHOST", "host"), ("PGPORT", "port"), ("PGUSER", "user"), ("PGPASSWORD", "password"),
                      ("PGDATABASE", "dbname")):
        if key in real:
            monkeypatch.setenv(name, str(real[key]))
    host = Flask("sqlite_host")  # not "host": a logger made early can be turned off by a later logging config
    host.config.update(SQLALCHEMY_DATABASE_URI="sqlite://", SECRET_KEY="host-secret", TESTING=True)
    JobsWeb(host, url_prefix="/admin/jobs")
    with host.app_context():
        yield host


def open_a_batch():
    with batch(on_finish="jobsweb.noop"):
        pass


@pytest.mark.parametrize("call", [
    lambda: drain(), lambda: enqueued(), lambda: enqueue("jobsweb.noop"), lambda: enqueue_many("jobsweb.noop", [{}]),
    lambda: get_run(1), lambda: create_schema(), lambda: empty_tables(), lambda: get_batch(1), open_a_batch,
    lambda: chain([("jobsweb.noop", {})]), lambda: cancel(1), lambda: retry(1)],
    ids=["drain", "enqueued", "enqueue", "enqueue_many", "get_run", "create_schema", "empty_tables", "get_batch",
         "batch", "chain", "cancel", "retry"])
def test_on_sqlite_the_helpers_name_the_url_and_inline_mode_and_leave_the_pg_variables_database_alone(
        app, sqlite_host, sql, call):
    with app.app_context():
        queued = enqueue("jobsweb.sleep", {"seconds": 0})
    with pytest.raises(ConfigError) as refused:
        call()
    assert str(refused.value.message) == (
        "jobsweb needs PostgreSQL, but SQLALCHEMY_DATABASE_URI (or DATABASE_URL) is "
        "'sqlite://': set it to postgresql://user:password@host:5432/dbname, or, for "
        "tests on SQLite, set JOBSWEB_INLINE=True (enqueue() runs each handler at once and get_run() reads it; "
        "drain() and enqueued() need PostgreSQL)")
    # The real database's run was neither run nor joined by another.
    assert sql("SELECT id, status, attempts FROM job_runs") == [(queued, "queued", 0)]
    assert sql("SELECT count(*) FROM job_attempts") == [(0,)]


def test_the_refusal_masks_the_password_of_the_configured_url(app):
    from jobsweb.core.database import require_postgresql

    with pytest.raises(ConfigError) as refused:
        require_postgresql("mysql+pymysql://ann:Zq9xK7wP@db/shop", from_code=True)
    assert "Zq9xK7wP" not in str(refused.value) and "'mysql+pymysql://ann:***@db/shop'" in str(refused.value)


def test_a_host_on_sqlite_reaches_sqlite_through_jobswebs_own_engine_and_leaves_later_apps_alone(sqlite_host, app):
    import sqlalchemy as sa

    # jobsweb's own engine opens psycopg connections only on PostgreSQL: with the PG* variables
    # set, one opened here went to the real database.
    assert db.session.execute(sa.text("SELECT sqlite_version()")).scalar().startswith("3.")
    with app.app_context():  # made before, connected after: no option of SQLite's reached it
        assert db.session.execute(sa.text("SELECT 1")).scalar() == 1
    from jobsweb.core.database import ENGINE_OPTIONS

    assert ENGINE_OPTIONS == {"pool_pre_ping": True, "connect_args": {"prepare_threshold": None}}
