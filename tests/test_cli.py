import pytest

from jobsweb import create_app


def test_enqueue_prints_the_new_run_id(runner, sql):
    result = runner.invoke(args=["jobs", "enqueue", "jobsweb.sleep", "--payload", '{"seconds": 1}',
                                 "--run-at", "2030-01-01T06:00:00+01:00", "--idempotency-key", "k1",
                                 "--max-attempts", "3"])
    assert result.exit_code == 0, result.output
    run_id = int(result.output)
    [(payload, run_at, key, max_attempts)] = sql(
        "SELECT payload, to_char(run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI'), idempotency_key, "
        "max_attempts FROM job_runs WHERE id = %s", [run_id])
    assert (payload, run_at, key, max_attempts) == ({"seconds": 1}, "2030-01-01 05:00", "k1", 3)


@pytest.mark.parametrize("args, message", [
    (["no.such.type"], "job_type: 'no.such.type' is not a registered job type"),
    (["jobsweb.noop", "--payload", "{not json"], "payload: is not valid JSON"),
    (["jobsweb.noop", "--payload", "[1]"], "payload: must be a JSON object"),
    (["jobsweb.noop", "--payload", '{"x": "' + "y" * 70000 + '"}'], "over the limit of 65536 bytes"),
    (["jobsweb.noop", "--run-at", "tomorrow"], "run_at: 'tomorrow' is not an ISO 8601 timestamp"),
    (["jobsweb.noop", "--run-at", "2030-01-01T06:00:00"], "run_at: must say its timezone"),
    (["jobsweb.noop", "--max-attempts", "0"], "--max-attempts"),
])
def test_enqueue_refuses_bad_input_with_a_message_and_writes_nothing(runner, sql, args, message):
    result = runner.invoke(args=["jobs", "enqueue", *args])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
    assert sql("SELECT count(*) FROM job_runs") == [(0,)]


def test_demo_enqueues_the_built_in_job_types(runner, sql):
    assert runner.invoke(args=["jobs", "demo"]).exit_code == 0
    assert {t for (t,) in sql("SELECT job_type FROM job_runs")} == {"jobsweb.noop", "jobsweb.sleep", "jobsweb.fail"}


def test_run_jobs_says_when_the_database_cannot_be_reached():
    app = create_app({"SQLALCHEMY_DATABASE_URI": "postgresql+psycopg://nobody@127.0.0.1:1/none",
                      "SECRET_KEY": "0123456789abcdef-test-secret-key-0123456789-x"})
    result = app.test_cli_runner().invoke(args=["run-jobs"])
    assert result.exit_code == 1
    assert "cannot reach the database" in result.output
    assert "Check DATABASE_URL" in result.output
    assert "Traceback" not in result.output


def test_enqueue_says_when_the_database_cannot_be_reached():
    app = create_app({"SQLALCHEMY_DATABASE_URI": "postgresql+psycopg://nobody@127.0.0.1:1/none",
                      "SECRET_KEY": "0123456789abcdef-test-secret-key-0123456789-x"})
    result = app.test_cli_runner().invoke(args=["jobs", "enqueue", "jobsweb.noop"])
    assert result.exit_code == 1
    assert "cannot reach the database" in result.output


def test_run_jobs_says_when_the_schema_is_missing(database_url_for_tests):
    import psycopg
    from sqlalchemy.engine import make_url

    from jobsweb.core.database import libpq_url

    admin = libpq_url(make_url(database_url_for_tests).set(database="postgres").render_as_string(False))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS jobsweb_empty")
        conn.execute("CREATE DATABASE jobsweb_empty")
    url = make_url(database_url_for_tests).set(database="jobsweb_empty").render_as_string(False)
    app = create_app({"SQLALCHEMY_DATABASE_URI": url, "SECRET_KEY": "0123456789abcdef-test-secret-key-0123456789-x"})
    result = app.test_cli_runner().invoke(args=["run-jobs"])
    assert result.exit_code == 1
    assert "run `flask jobs migrate` first" in result.output


@pytest.mark.parametrize("option", ["--max-runtime", "--poll-interval", "--shutdown-timeout"])
@pytest.mark.parametrize("value", ["nan", "-NaN", "inf", "infinity", "-inf", "1e400"])
def test_run_jobs_refuses_nan_and_infinity_in_its_seconds_options_naming_the_option(runner, sql, option, value):
    sql("INSERT INTO job_runs (job_type, payload, run_at) VALUES ('jobsweb.noop', '{}', now())")
    result = runner.invoke(args=["run-jobs", option, value])
    assert result.exit_code == 2, result.output
    assert option in result.output and "is not a finite number" in result.output
    assert sql("SELECT status FROM job_runs") == [("queued",)]  # refused before any work


@pytest.mark.parametrize("value", ["99999999999", "10001"])
def test_run_jobs_refuses_a_concurrency_past_its_bound_as_a_usage_error(runner, sql, value):
    sql("INSERT INTO job_runs (job_type, payload, run_at) VALUES ('jobsweb.noop', '{}', now())")
    result = runner.invoke(args=["run-jobs", "--concurrency", value])
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '--concurrency': {value} is not in the range 1<=x<=10000." in result.output
    assert "Traceback" not in result.output and sql("SELECT status FROM job_runs") == [("queued",)]


def test_jobsweb_concurrency_past_its_bound_stops_start_up_naming_it():
    from jobsweb.core.errors import ConfigError
    from jobsweb.core.settings import from_environment

    with pytest.raises(ConfigError, match="JOBSWEB_CONCURRENCY must be at most 10000, got '99999999999'"):
        from_environment({"JOBSWEB_CONCURRENCY": "99999999999"})


@pytest.mark.parametrize("args, message", [
    (["queue", "q", "--limit", "99999999999999999999"], "limit: must be a whole number from 1 to 2147483647"),
    (["queue", "q", "--limit", "2147483648"], "limit: must be a whole number from 1 to 2147483647"),
    (["pause-type", "t" * 8200], "job_type: must be at most"),
    (["resume-type", "t" * 8200], "job_type: must be at most"),
    (["define", "d", "--type", "jobsweb.noop", "--schedule", "@daily", "--max-attempts", "9" * 400], "max_attempts"),
    (["define", "d", "--type", "jobsweb.noop", "--schedule", "@daily", "--grace", "9" * 400], "grace"),
    (["define", "d", "--type", "jobsweb.noop", "--schedule", "@daily", "--alert-after", "9" * 400], "alert"),
    (["define", "d", "--type", "jobsweb.noop", "--schedule", "@daily", "--max-duration", "9" * 400], "max_duration"),
    (["define", "d", "--type", "jobsweb.noop", "--schedule", "@daily", "--alert-webhook", "http://[::1"],
     "alert_webhook_url: must be an http:// or https:// URL"),
    (["enqueue", "jobsweb.noop", "--max-attempts", "9" * 400], "max_attempts: must be a whole number"),
])
def test_numbers_too_big_for_their_column_and_bad_urls_are_cli_errors_naming_the_field(runner, sql, args, message):
    result = runner.invoke(args=["jobs", *args])
    assert result.exit_code in (1, 2), result.output
    assert message in result.output and "Traceback" not in result.output and result.exception.__class__ is SystemExit
    assert sql("SELECT (SELECT count(*) FROM job_queues WHERE name = 'q') + (SELECT count(*) FROM job_paused_types)"
               " + (SELECT count(*) FROM job_definitions) + (SELECT count(*) FROM job_runs)") == [(0,)]


def test_migrate_logs_each_migration_it_applies_on_one_line_naming_it_in_a_sentence(scratch_database):
    """Alembic logs a migration's first docstring paragraph: one wrapped over two lines came out
    with a literal \\n in it (the log formatter escapes line breaks)."""
    import os
    import re
    import subprocess
    import sys

    url = scratch_database("jobsweb_migrate_log", revision=None)
    result = subprocess.run([sys.executable, "-m", "flask", "--app", "wsgi", "jobs", "migrate"],
                            env={**os.environ, "DATABASE_URL": url, "JOBSWEB_HANDLERS": ""},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    applied = [line for line in result.stderr.splitlines() if "Running upgrade" in line]
    assert len(applied) >= 26, result.stderr  # 0001_foundation to 0026_retry_seams, and any later one
    assert [line for line in applied if "\\" in line] == []
    assert [line for line in applied if not re.search(r"Running upgrade \w* -> \w+, \S.*\.$", line)] == []
    assert "0026_retry_seams, Retry and the runs that wait: nothing waits for a run that ended dead or cancelled, and a run released by a failure that is retried waits for its new attempt." in result.stderr
