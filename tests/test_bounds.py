"""Issue 16, bounds: no number or time anyone can type or store stops the queue or breaks a page."""

import math
from datetime import datetime, timedelta, timezone

import pytest

from jobsweb.core.database import libpq_url
from jobsweb.core.errors import InvalidInput
from jobsweb.engine.jobs import retry
from jobsweb.engine.enqueue.enqueuing import enqueue, parse_payload, parse_run_at
from jobsweb.engine.worker.execution import Outcome
from jobsweb.engine.worker.outcome_writes import finish_each
from jobsweb.engine.worker.lease_recovery import recover_expired_leases
from jobsweb.engine.worker.execution import Failures
from jobsweb.engine.link import Link
from jobsweb.scheduling.definitions import define
from jobsweb.scheduling.schedule import next_fire_times
from tests.conftest import csrf_token

WEEK = 7 * 86400


@pytest.mark.parametrize("base, cap", [(1e300, 1e300), (math.inf, math.inf), (math.nan, math.nan), (-5, None),
                                       ("x", 10)])
def test_the_retry_delay_is_clamped_whatever_base_and_cap_are_stored(base, cap):
    for attempt in (1, 2, 50, 10_000):
        delay = retry.backoff_seconds(attempt, base, cap)
        assert math.isfinite(delay) and 0 <= delay <= WEEK


@pytest.mark.parametrize("field", ["backoff_base", "backoff_cap", "timeout", "lease"])
@pytest.mark.parametrize("value", [1e300, math.inf, math.nan, WEEK + 1])
def test_define_refuses_a_delay_that_is_not_finite_or_over_a_week(app, field, value):
    with app.app_context(), pytest.raises(InvalidInput) as refused:
        define("nightly", "jobsweb.noop", "@daily", **{field: value})
    assert refused.value.field == field


def test_define_refuses_a_grace_that_does_not_fit_and_a_name_with_a_line_break(app):
    with app.app_context():
        with pytest.raises(InvalidInput, match="grace_seconds"):
            define("nightly", "jobsweb.noop", "@daily", grace_seconds=2**31)
        with pytest.raises(InvalidInput, match="name"):
            define("nightly\r\nBcc: x@example.com", "jobsweb.noop", "@daily")


def test_the_definition_form_refuses_an_enormous_retry_delay_in_place(sign_in, sql):
    client = sign_in("admin")
    for value in ("1e300", "inf", "nan"):
        response = client.post("/definitions/new", data={
            "name": "nightly", "job_type": "jobsweb.noop", "schedule": "@daily", "timezone": "UTC",
            "payload": "{}", "backoff_base": value, "backoff_cap": value, "overlap": "skip", "misfire": "latest",
            "grace_seconds": "300", "csrf_token": csrf_token(client, "/")})
        assert response.status_code == 422, value
    assert sql("SELECT count(*) FROM job_definitions") == [(0,)]


def test_a_worker_survives_runs_stored_with_an_enormous_retry_delay(app, spawn_worker, sql):
    """The review's high finding: base and cap of 1e300 made every `flask run-jobs` exit 1."""
    sql("INSERT INTO job_runs (job_type, backoff_base, backoff_cap) VALUES ('jobsweb.fail', 1e300, 1e300), "
        "('jobsweb.fail', 'Infinity', 'Infinity'), ('jobsweb.noop', NULL, NULL)")
    worker = spawn_worker()
    output, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, output
    rows = sql("SELECT status, run_at <= now() + interval '7 days' FROM job_runs ORDER BY id")
    assert rows == [("failed", True), ("failed", True), ("succeeded", True)]


def test_lease_recovery_survives_a_stored_infinite_retry_delay(app, database_url_for_tests, sql):
    sql("INSERT INTO job_runs (job_type, status, attempts, locked_by, locked_until, backoff_base, backoff_cap) "
        "VALUES ('jobsweb.fail', 'running', 1, 'gone', now() - interval '1 minute', 'Infinity', 'Infinity')")
    link = Link(libpq_url(database_url_for_tests))
    try:
        assert recover_expired_leases(link, Failures.from_config(app.config)) == 1
    finally:
        link.close()
    assert sql("SELECT status, error_type FROM job_runs") == [("failed", "lease_expired")]


def test_an_outcome_the_database_refuses_does_not_lose_the_others(app, database_url_for_tests, sql, caplog):
    """Written one by one after the batch failed: the bad one is logged, the good one written."""
    sql("INSERT INTO job_runs (job_type, status, attempts, locked_by, locked_until) "
        "SELECT 'jobsweb.noop', 'running', 1, 'w1', now() + interval '1 minute' FROM generate_series(1, 2)")
    bad = Outcome(1, "jobsweb.noop", 1, "w1", "failed", error_type="E", error="e", delay=math.inf)
    good = Outcome(2, "jobsweb.noop", 1, "w1", "succeeded")
    link = Link(libpq_url(database_url_for_tests))
    try:
        assert finish_each(link.fetch, [bad, good]) == 1
    finally:
        link.close()
    assert sql("SELECT id, status FROM job_runs ORDER BY id") == [(1, "running"), (2, "succeeded")]
    assert "run 1 jobsweb.noop: the outcome of attempt 1 could not be written" in caplog.text


@pytest.mark.parametrize("text", ["0001-01-01T00:00+14:00", "9999-12-31T23:59:59-14:00", "1969-12-31T23:59:59Z"])
def test_run_at_outside_1970_to_9998_is_refused(text):
    with pytest.raises(InvalidInput, match="run_at: must be between"):
        parse_run_at(text)


def test_enqueue_refuses_a_run_at_psycopg_could_not_read_back_and_the_runs_list_keeps_working(app, sign_in):
    far = datetime(9999, 12, 31, 23, 59, tzinfo=timezone(timedelta(hours=-14)))
    with app.app_context(), pytest.raises(InvalidInput, match="run_at"):
        enqueue("jobsweb.noop", run_at=far)
    assert sign_in("viewer").get("/runs?since=0001-01-01T00:00%2B14:00").status_code == 400


@pytest.mark.parametrize("text, why", [
    ('{"a": NaN}', "NaN"), ('{"a": Infinity}', "Infinity"), ('{"a": -Infinity}', "Infinity"),
    ('{"a": 1e400}', "inf"), ('{"a": "\\ud800"}', "surrogate"), ('{"a":' * 325 + "1" + "}" * 325, "nested"),
    ('[' * 5000 + ']' * 5000, "nested"),
])
def test_payloads_that_jsonb_cannot_hold_are_refused(text, why):
    with pytest.raises(InvalidInput, match=why) as refused:
        parse_payload(text, 10**7)
    assert refused.value.field == "payload"


def test_a_python_payload_with_nan_or_deep_nesting_is_refused(app):
    deep = {}
    for _ in range(100):
        deep = {"a": deep}
    with app.app_context():
        for payload in ({"a": math.nan}, {"a": [math.inf]}, deep):
            with pytest.raises(InvalidInput, match="payload"):
                enqueue("jobsweb.noop", payload)
        with pytest.raises(InvalidInput, match="max_attempts"):
            enqueue("jobsweb.noop", max_attempts=2**40)


def test_a_cron_expression_that_never_fires_is_refused(app, sign_in):
    with pytest.raises(InvalidInput, match="never fires"):
        next_fire_times("0 0 31 2 *")
    with app.app_context(), pytest.raises(InvalidInput, match="never fires"):
        define("never", "jobsweb.noop", "0 0 30 2 *")
    response = sign_in("viewer").get("/definitions/preview", query_string={"schedule": "0 0 31 2 *"})
    assert response.status_code == 200 and "never fires" in response.get_data(as_text=True)


def test_the_enqueue_form_refuses_hostile_payloads_in_place(sign_in, sql):
    client = sign_in("operator")
    for payload in ('{"a": NaN}', '{"a":' * 400 + "1" + "}" * 400, '{"a": "\\u0000"}'):
        response = client.post("/enqueue", data={"job_type": "jobsweb.noop", "payload": payload,
                                                 "csrf_token": csrf_token(client, "/")})
        assert response.status_code == 422
    assert sql("SELECT count(*) FROM job_runs") == [(0,)]


def test_grace_seconds_past_an_integer_column_is_refused_on_the_form(sign_in, sql):
    client = sign_in("admin")
    response = client.post("/definitions/new", data={
        "name": "nightly", "job_type": "jobsweb.noop", "schedule": "@daily", "timezone": "UTC", "payload": "{}",
        "overlap": "skip", "misfire": "latest", "grace_seconds": str(2**31), "csrf_token": csrf_token(client, "/")})
    assert response.status_code == 422
    assert sql("SELECT count(*) FROM job_definitions") == [(0,)]


def test_settings_refuse_delays_that_are_not_finite(monkeypatch, database_url_for_tests):
    from jobsweb.app import create_app
    from jobsweb.core.errors import ConfigError

    for value in ("inf", "1e300", "nan"):
        monkeypatch.setenv("JOBSWEB_BACKOFF_CAP", value)
        with pytest.raises(ConfigError, match="JOBSWEB_BACKOFF_CAP"):
            create_app({"SQLALCHEMY_DATABASE_URI": database_url_for_tests})


@pytest.mark.parametrize("option", ["timeout", "backoff_base", "backoff_cap"])
def test_a_job_type_with_a_delay_that_is_not_finite_or_over_a_week_is_refused(option):
    from jobsweb.engine.jobs.registry import get, job

    with pytest.raises(InvalidInput) as refused:
        job("tests.never_registered", **{option: math.inf})(lambda ctx: None)
    assert refused.value.field == option and get("tests.never_registered") is None
