"""Bad input found by the round-five review (issue 53, item 4), each a one-line refusal naming the
field where it was a 500, an OSError or a RecursionError; nothing written."""

import pytest

from jobsweb.core.errors import InvalidInput
from jobsweb.engine.jobs.registry import JobContext
from tests.conftest import committed, csrf_token

LONG_TIMEZONE = "Europe/" + "M" * 250  # 257 characters: ZoneInfo's file name was too long (OSError)


@pytest.mark.parametrize("action", ["quiet", "resume"])
@pytest.mark.parametrize("worker, message", [
    ("h:1:a\x00b", "worker: must not contain the control character &#39;\\x00&#39;"),
    ("h" * 10_000, "worker: must be at most 300 characters, got 10000"),
])
def test_a_worker_name_with_a_nul_or_of_ten_thousand_characters_is_a_400_naming_the_field(
        sign_in, sql, action, worker, message):
    client = sign_in("operator")
    sql("INSERT INTO job_workers (id, host, pid) VALUES ('h:1:a', 'h', 1)")
    answer = client.post(f"/workers/{action}", data={"worker": worker, "csrf_token": csrf_token(client, "/workers")})
    assert answer.status_code == 400 and message in answer.get_data(as_text=True)
    assert sql("SELECT quiet_at FROM job_workers") == [(None,)]
    assert sql("SELECT count(*) FROM jobsweb_audit_log WHERE action IN ('quiet', 'resume')") == [(0,)]


def test_a_long_timezone_on_the_definition_form_is_a_422_naming_the_field(sign_in, sql):
    client = sign_in("admin")
    form = {"name": "nightly", "job_type": "jobsweb.noop", "schedule": "0 6 * * *", "timezone": LONG_TIMEZONE,
            "payload": "{}", "overlap": "skip", "misfire": "latest", "grace_seconds": "300",
            "csrf_token": csrf_token(client, "/")}
    answer = client.post("/definitions/new", data=form)
    assert answer.status_code == 422 and "Not a valid choice" in answer.get_data(as_text=True)
    assert sql("SELECT count(*) FROM job_definitions") == [(0,)]


def test_a_long_timezone_in_the_schedule_preview_is_said_under_it(sign_in):
    client = sign_in("viewer")
    answer = client.get("/definitions/preview", query_string={"schedule": "@daily", "timezone": "M" * 100})
    assert answer.status_code == 200
    assert "must be at most 64 characters (an IANA name such as Europe/Madrid), got 100" in answer.get_data(as_text=True)


@pytest.mark.parametrize("timezone, message", [
    (LONG_TIMEZONE, "timezone: must be at most 64 characters (an IANA name such as Europe/Madrid), got 257"),
    # A folder of the zone database: IsADirectoryError, another OSError.
    ("America", "timezone: 'America' is not an IANA timezone name (for example UTC, Europe/Madrid, America/New_York)"),
])
def test_define_refuses_a_timezone_that_is_no_zone_file_naming_the_field(app, sql, timezone, message):
    from jobsweb import definitions

    with pytest.raises(InvalidInput) as refused, committed(app):
        definitions.define("nightly", job_type="jobsweb.noop", schedule="@daily", timezone=timezone)
    assert str(refused.value) == message
    assert sql("SELECT count(*) FROM job_definitions") == [(0,)]


def test_flask_jobs_define_refuses_a_long_timezone_in_one_line(runner, sql):
    result = runner.invoke(args=["jobs", "define", "nightly", "--type", "jobsweb.noop", "--schedule", "@daily",
                                 "--timezone", LONG_TIMEZONE])
    assert result.exit_code == 2 and result.exception.__class__ is SystemExit
    assert ("Error: timezone: must be at most 64 characters (an IANA name such as Europe/Madrid), got 257"
            in result.output)
    assert "Traceback" not in result.output and sql("SELECT count(*) FROM job_definitions") == [(0,)]


def nested(levels):
    data = {}
    for _ in range(levels - 1):
        data = {"in": data}
    return data


def said(data):
    written = []
    ctx = JobContext(1, "t", {}, 1, 1, _report_progress=lambda ctx, *progress: written.append(progress))
    ctx.progress(0.5, None, data)
    return written


@pytest.mark.parametrize("levels", [65, 3_000, 100_000])
def test_progress_data_nested_deeper_than_64_levels_is_the_input_error_not_a_recursion_error(levels):
    with pytest.raises(InvalidInput) as refused:
        said(nested(levels))
    assert str(refused.value) == "data: must be nested at most 64 levels deep"


def test_progress_data_nested_64_levels_is_said():
    assert said(nested(64)) == [(0.5, None, nested(64))]


def test_progress_data_holding_a_lone_surrogate_is_the_input_error():
    with pytest.raises(InvalidInput) as refused:
        said({"file": "report-\udcff.csv"})  # what a file name of invalid UTF-8 reads as in Python
    assert str(refused.value) == "data: must hold text only: a lone surrogate (\\ud800-\\udfff) is not text"


def test_a_progress_note_holding_bytes_that_are_not_utf8_is_the_input_error():
    written = []
    ctx = JobContext(1, "t", {}, 1, 1, _report_progress=lambda ctx, *progress: written.append(progress))
    with pytest.raises(InvalidInput) as refused:
        ctx.progress(0.5, b"caf\xe9".decode("utf-8", "surrogateescape"))
    assert str(refused.value) == "note: must be UTF-8 text: it holds bytes that are not (read as lone surrogates)"
    assert written == []


def test_flask_jobs_enqueue_with_an_idempotency_key_that_is_not_utf8_is_one_line_naming_it(runner, sql):
    key = b"caf\xe9".decode("utf-8", "surrogateescape")  # what Python makes of such bytes in argv
    result = runner.invoke(args=["jobs", "enqueue", "jobsweb.noop", "--idempotency-key", key])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1] == (
        "Error: idempotency_key: must be UTF-8 text: it holds bytes that are not (read as lone surrogates)")
    assert sql("SELECT count(*) FROM job_runs") == [(0,)]
