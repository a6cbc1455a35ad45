"""The definition form and its schedule preview: they need the schedules work (issue 3)."""

import re

import pytest

from tests.conftest import csrf_token


FORM = {"name": "nightly invoices", "job_type": "jobsweb.noop", "schedule": "0 6 * * 1-5",
        "timezone": "Europe/Madrid", "payload": '{"batch": 5}', "overlap": "skip", "misfire": "latest",
        "grace_seconds": "300"}


def test_the_preview_shows_the_schedule_in_words_and_the_next_five_times(sign_in):
    client = sign_in("viewer")
    response = client.get("/definitions/preview", query_string={"schedule": "0 6 * * 1-5", "timezone": "Europe/Madrid"},
                          headers={"HX-Request": "true"})
    html = response.get_data(as_text=True)
    assert response.status_code == 200 and "HX-Request" in response.headers["Vary"]
    assert "06:00" in html and "Europe/Madrid" in html
    assert html.count("<li>") == 5 and ("CET" in html or "CEST" in html)


def test_the_preview_shows_the_error_escaped(sign_in):
    client = sign_in("viewer")
    html = client.get("/definitions/preview", query_string={"schedule": "<script>x</script> * * *"}).get_data(as_text=True)
    assert "field-error" in html and "<script>x" not in html
    html = client.get("/definitions/preview", query_string={"schedule": "@daily", "timezone": "Mars/Base"}).get_data(as_text=True)
    assert "not an IANA timezone" in html


@pytest.mark.parametrize("schedule, message", [
    ("0 0 30 2 *", "February never has a 30th"),
    ("0 0 31 2,4,6,9,11 *", "never have a 31st"),
    ("0 0 15 * MON#2", "`#` or `L` in day of week with a day of month is not supported"),
    ("@every 99999999999m", "at most 366d"),
])
def test_the_preview_of_a_schedule_that_can_never_fire_shows_why(sign_in, schedule, message):
    client = sign_in("viewer")
    response = client.get("/definitions/preview", query_string={"schedule": schedule, "timezone": "UTC"})
    html = response.get_data(as_text=True)
    assert response.status_code == 200 and "field-error" in html and message in html


def test_an_admin_creates_a_definition(sign_in, sql):
    client = sign_in("admin")
    assert "Europe/Madrid" in client.get("/definitions/new").get_data(as_text=True)
    response = client.post("/definitions/new", data={**FORM, "csrf_token": csrf_token(client, "/")})
    assert response.status_code == 302
    [(d, schedule, tz, payload, due)] = sql("SELECT id, schedule, timezone, payload, next_run_at > now() FROM job_definitions")
    assert (schedule, tz, payload, due) == ("0 6 * * 1-5", "Europe/Madrid", {"batch": 5}, True)
    assert response.headers["Location"] == f"/definitions/{d}"
    assert sql("SELECT action, target_id FROM jobsweb_audit_log WHERE action <> 'sign_in'") == [("create", d)]
    # Its next run as every time on the pages: UTC in a <time> the viewer's browser shows in its own
    # zone (it read "next run 2026-11-30 06:00 CET" while the page it led to showed local time).
    [(next_run,)] = sql("SELECT to_char(next_run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') FROM job_definitions")
    flash = client.get(f"/definitions/{d}").get_data(as_text=True).split('class="flash"')[1].split("</p>")[0]
    assert "nightly invoices is defined; next run <time" in flash
    assert f'datetime="{next_run}+00:00" data-local' in flash and "CET" not in flash


@pytest.mark.parametrize("fields, message", [
    ({"schedule": "61 * * * *"}, "the minute field (1st of 5), &#39;61&#39;, is not valid: it takes 0 to 59"),
    ({"schedule": "* *"}, "has 2 fields"),
    ({"schedule": "0 0 30 2 *"}, "February never has a 30th"),
    ({"schedule": "0 0 1 * MON#4"}, "with a day of month is not supported"),
    ({"payload": "[]"}, "must be a JSON object"),
    ({"backoff_base": "10", "backoff_cap": "5"}, "must be at least backoff_base"),
])
def test_the_form_shows_errors_in_place(sign_in, sql, fields, message):
    client = sign_in("admin")
    response = client.post("/definitions/new", headers={"HX-Request": "true"},
                           data={**FORM, **fields, "csrf_token": csrf_token(client, "/")})
    html = response.get_data(as_text=True)
    assert response.status_code == 422 and html.lstrip().startswith('<form id="definition-form"')
    assert message in html
    assert sql("SELECT count(*) FROM job_definitions") == [(0,)]


def test_a_taken_name_is_refused(sign_in, sql):
    client = sign_in("admin")
    token = csrf_token(client, "/")
    client.post("/definitions/new", data={**FORM, "csrf_token": token})
    response = client.post("/definitions/new", data={**FORM, "schedule": "@hourly", "csrf_token": token})
    assert response.status_code == 422 and "is taken" in response.get_data(as_text=True)
    assert sql("SELECT schedule FROM job_definitions") == [("0 6 * * 1-5",)]


def test_an_admin_edits_a_definition_and_operators_cannot(sign_in, sql, client):
    admin = sign_in("admin")
    admin.post("/definitions/new", data={**FORM, "csrf_token": csrf_token(admin, "/")})
    [(d,)] = sql("SELECT id FROM job_definitions")
    assert "0 6 * * 1-5" in admin.get(f"/definitions/{d}/edit").get_data(as_text=True)
    response = admin.post(f"/definitions/{d}/edit", data={**FORM, "schedule": "@every 10m", "name": "renamed",
                                                           "csrf_token": csrf_token(admin, "/")})
    assert response.status_code == 302
    assert sql("SELECT name, schedule FROM job_definitions") == [("nightly invoices", "@every 10m")]
    assert sql("SELECT action FROM jobsweb_audit_log WHERE action <> 'sign_in' ORDER BY id") == [("create",), ("edit",)]
    admin.post("/sign-out", data={"csrf_token": csrf_token(admin, "/")})
    operator = sign_in("operator")
    assert operator.get(f"/definitions/{d}/edit").status_code == 403
    assert operator.get("/definitions/new").status_code == 403


def test_the_dashboard_names_failing_and_overdue_definitions(sign_in, sql):
    client = sign_in("viewer")
    sql("""INSERT INTO job_definitions (name, job_type, schedule, failure_count, next_run_at)
           VALUES ('flaky export', 'jobsweb.noop', '@hourly', 3, now() + interval '1 hour'),
                  ('stuck backup', 'jobsweb.noop', '@hourly', 0, now() - interval '2 hours')""")
    html = client.get("/").get_data(as_text=True)
    assert "flaky export" in html and "has failed its last 3 runs" in html
    assert "stuck backup" in html and "should have run 2 h ago" in html


def test_resume_from_the_screen_does_not_owe_the_slots_missed_while_paused(sign_in, sql):
    client = sign_in("admin")
    token = csrf_token(client, "/")
    client.post("/definitions/new", data={**FORM, "schedule": "@every 1m", "csrf_token": token})
    [(d,)] = sql("SELECT id FROM job_definitions")
    client.post(f"/definitions/{d}/pause", data={"csrf_token": token})
    sql("UPDATE job_definitions SET next_run_at = now() - interval '1 day'")
    client.post(f"/definitions/{d}/resume", data={"csrf_token": token})
    assert sql("SELECT enabled, next_run_at > now() FROM job_definitions") == [(True, True)]


def test_run_now_from_the_screen_copies_the_definitions_timeout(sign_in, sql):
    client = sign_in("admin")
    token = csrf_token(client, "/")
    client.post("/definitions/new", data={**FORM, "timeout": "42", "csrf_token": token})
    [(d,)] = sql("SELECT id FROM job_definitions")
    client.post(f"/definitions/{d}/run-now", data={"csrf_token": token})
    assert sql("SELECT definition_id, timeout_seconds FROM job_runs") == [(d, 42.0)]


def test_the_form_sets_a_definitions_queue_and_priority_and_refuses_a_bad_priority_in_place(sign_in, sql):
    client = sign_in("admin")
    token = csrf_token(client, "/")
    bad = client.post("/definitions/new", data={**FORM, "priority": "1001", "csrf_token": token})
    assert bad.status_code == 422
    assert "must be a whole number from -1000 to 1000" in bad.get_data(as_text=True)
    assert sql("SELECT count(*) FROM job_definitions") == [(0,)]
    ok = client.post("/definitions/new", data={**FORM, "queue": "reports", "priority": "-3", "csrf_token": token})
    assert ok.status_code == 302
    assert sql("SELECT queue, priority FROM job_definitions") == [("reports", -3)]
    assert sql("SELECT name FROM job_queues") == [("reports",)]


def test_the_form_shows_every_server_side_error_at_once(sign_in, sql):
    client = sign_in("admin")
    response = client.post("/definitions/new", data={
        **FORM, "csrf_token": csrf_token(client, "/"), "schedule": "61 * * * *", "payload": "[]",
        "backoff_base": "10", "backoff_cap": "5", "queue": "bad queue!", "priority": "5000"})
    html = response.get_data(as_text=True)
    assert response.status_code == 422
    for words in ("the minute field (1st of 5), &#39;61&#39;, is not valid", "must be a JSON object",
                  "must be at least backoff_base", "priority", "queue"):
        assert words in html, words
    errors = re.findall(r'<small class="field-error">([^<]+)</small>', html)
    assert len(errors) == 5, errors
    assert sql("SELECT count(*) FROM job_definitions") == [(0,)]


def test_a_cron_error_names_the_field_in_our_words_not_croniters(sign_in):
    client = sign_in("admin")
    for schedule, words in (("* 25 * * *", "the hour field (2nd of 5), &#39;25&#39;, is not valid: it takes 0 to 23"),
                            ("0 0 * 13 *", "the month field (4th of 5)"), ("0 0 * * 9", "the day of week field"),
                            ("*/0 * * * *", "the minute field")):
        html = client.post("/definitions/new", data={**FORM, "schedule": schedule,
                                                      "csrf_token": csrf_token(client, "/")}).get_data(as_text=True)
        error = html.split('name="schedule"')[1].split("</label>")[0]
        assert words in error and "not acceptable" not in error and "out of range" not in error, error


def test_the_form_sets_a_max_duration_shows_it_when_editing_and_refuses_a_bad_one(sign_in, sql):
    client = sign_in("admin")
    token = csrf_token(client, "/")
    assert client.post("/definitions/new", data={**FORM, "max_duration": "900", "csrf_token": token}).status_code == 302
    [(definition_id, max_duration)] = sql("SELECT id, max_duration_seconds FROM job_definitions")
    assert max_duration == 900
    assert 'name="max_duration" type="number" value="900"' in client.get(
        f"/definitions/{definition_id}/edit").get_data(as_text=True)
    response = client.post(f"/definitions/{definition_id}/edit", data={**FORM, "max_duration": "0", "csrf_token": token})
    assert response.status_code == 422 and "Number must be between 1 and 604800" in response.get_data(as_text=True)
    assert sql("SELECT max_duration_seconds FROM job_definitions") == [(900,)]


@pytest.mark.parametrize("field", ["grace_seconds", "alert_after_failures", "max_duration", "max_attempts"])
def test_a_400_digit_number_is_refused_in_place_naming_its_field(sign_in, sql, field):
    client = sign_in("admin")
    response = client.post("/definitions/new", headers={"HX-Request": "true"},
                           data={**FORM, field: "9" * 400, "csrf_token": csrf_token(client, "/")})
    html = response.get_data(as_text=True)
    assert response.status_code == 422
    # The error is on the field itself: its label holds the input and the message.
    assert re.search(rf'<label class="field has-error">(?:(?!</label>).)*name="{field}"(?:(?!</label>).)*'
                     r'Number must be between', html, re.S)
    assert sql("SELECT count(*) FROM job_definitions") == [(0,)]


@pytest.mark.parametrize("url", ["http://[::1", "http://[::1]:99999999/x", "https://[nope]/"])
def test_a_malformed_webhook_url_is_refused_in_place_naming_the_field(sign_in, sql, url):
    client = sign_in("admin")
    response = client.post("/definitions/new", headers={"HX-Request": "true"},
                           data={**FORM, "alert_webhook_url": url, "csrf_token": csrf_token(client, "/")})
    html = response.get_data(as_text=True)
    assert response.status_code == 422 and "must be an http:// or https:// URL" in html
    assert sql("SELECT count(*) FROM job_definitions") == [(0,)]
