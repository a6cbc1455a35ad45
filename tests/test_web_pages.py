import json
import re

import pytest

from tests.conftest import csrf_token


def test_the_dashboard_shows_counts_the_queue_problems_and_the_chart(sign_in, sql):
    client = sign_in("viewer")
    sql("INSERT INTO job_runs (job_type, status, run_at) SELECT 'jobsweb.noop', 'queued', now() - interval '90 seconds' FROM generate_series(1, 3)")
    sql("INSERT INTO job_runs (job_type, status, last_error, error_type, finished_at) VALUES ('billing.charge', 'dead', 'card <b>declined</b>', 'CardError', now())")
    sql("INSERT INTO job_runs (job_type, status, locked_by, locked_until) VALUES ('jobsweb.sleep', 'running', 'host:1:abc', now() - interval '1 minute')")
    sql("INSERT INTO job_workers (id, host, pid) VALUES ('host:2:def', 'host', 2)")
    sql("INSERT INTO job_attempts (run_id, attempt, outcome) SELECT id, 1, 'succeeded' FROM job_runs WHERE status = 'queued'")
    response = client.get("/")
    html = response.get_data(as_text=True)
    assert response.status_code == 200
    assert "3 runs due now" in html and "waited 1 min" in html
    assert "billing.charge" in html and "card &lt;b&gt;declined&lt;/b&gt;" in html
    assert "lost its worker" in html and "host:1:abc" in html
    assert "host:2:def" in html
    assert "<svg" in html and "3 succeeded" in html
    fragment = client.get("/", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert fragment.lstrip().startswith('<div id="dashboard"')


def test_the_hourly_chart_has_24_buckets_ending_in_the_database_clocks_current_hour(app, sql):
    from jobsweb.ops import stats

    sql("INSERT INTO job_runs (job_type) VALUES ('jobsweb.noop'), ('jobsweb.noop'), ('jobsweb.noop')")
    sql("INSERT INTO job_attempts (run_id, attempt, outcome, finished_at) VALUES "
        "(1, 1, 'succeeded', now()), (2, 1, 'failed', now() - interval '3 hours'), "
        "(3, 1, 'succeeded', now() - interval '2 days')")
    with app.app_context():
        chart = stats.hourly_chart()
    [(current_hour,)] = sql("SELECT date_trunc('hour', now())")
    assert len(chart) == 24 and chart[-1][0] == current_hour
    assert [tuple(bucket[1:]) for bucket in chart] == [(0, 0)] * 20 + [(0, 1), (0, 0), (0, 0), (1, 0)]


def test_the_hourly_chart_counts_a_finished_hour_once_and_the_current_hour_on_every_refresh(app, sql):
    from jobsweb.ops import stats

    sql("INSERT INTO job_runs (job_type) SELECT 'jobsweb.noop' FROM generate_series(1, 4)")
    sql("INSERT INTO job_attempts (run_id, attempt, outcome, finished_at) VALUES "
        "(1, 1, 'failed', now() - interval '3 hours'), (2, 1, 'succeeded', now())")
    with app.app_context():
        first = stats.hourly_chart()
        # Cannot happen (attempts carry the database's now()); shows the ended hour is not re-read.
        sql("INSERT INTO job_attempts (run_id, attempt, outcome, finished_at) VALUES "
            "(3, 1, 'failed', now() - interval '3 hours'), (4, 1, 'succeeded', now())")
        second = stats.hourly_chart()
    assert [tuple(b[1:]) for b in first[-4:]] == [(0, 1), (0, 0), (0, 0), (1, 0)]
    assert [tuple(b[1:]) for b in second[-4:]] == [(0, 1), (0, 0), (0, 0), (2, 0)]


def test_status_counts_are_estimated_on_a_big_table(app, sql, monkeypatch):
    from jobsweb.ops import stats

    sql("INSERT INTO job_runs (job_type, status) SELECT 'jobsweb.noop', CASE WHEN g % 4 = 0 THEN 'dead' ELSE 'succeeded' END FROM generate_series(1, 2000) g")
    sql("INSERT INTO job_runs (job_type, status) VALUES ('jobsweb.noop', 'queued')")
    sql("ANALYZE job_runs")
    monkeypatch.setattr(stats, "EXACT_COUNT_LIMIT", 1000)
    with app.app_context():
        counts = stats.status_counts()
    assert counts["queued"] == (1, True)
    assert counts["succeeded"][1] is False and 1300 < counts["succeeded"][0] < 1700


def test_the_workers_page_lists_processes(sign_in, sql):
    client = sign_in("viewer")
    sql("INSERT INTO job_workers (id, host, pid, runs_done) VALUES ('web-1:7:aa', 'web-1', 7, 1234)")
    sql("INSERT INTO job_workers (id, host, pid, stopped_at) VALUES ('web-2:8:bb', 'web-2', 8, now())")
    html = client.get("/workers").get_data(as_text=True)
    assert "web-1:7:aa" in html and "1,234" in html and "alive" in html and "stopped" in html


def test_enqueue_creates_a_run_and_opens_it(sign_in, sql):
    client = sign_in("operator")
    assert "jobsweb.sleep" in client.get("/enqueue").get_data(as_text=True)
    response = client.post("/enqueue", data={"csrf_token": csrf_token(client, "/"), "job_type": "jobsweb.sleep",
                                             "payload": '{"seconds": 0.1}', "idempotency_key": "k1",
                                             "max_attempts": "3"})
    [(run, payload, attempts, key)] = sql("SELECT id, payload, max_attempts, idempotency_key FROM job_runs")
    assert response.status_code == 302 and response.headers["Location"] == f"/runs/{run}"
    assert (payload, attempts, key) == ({"seconds": 0.1}, 3, "k1")
    assert sql("SELECT action, target_id FROM jobsweb_audit_log WHERE action <> 'sign_in'") == [("enqueue", run)]


@pytest.mark.parametrize("fields, message", [
    ({"payload": "{nope"}, "is not valid JSON"),
    ({"payload": "[1, 2]"}, "must be a JSON object"),
    ({"run_at": "tomorrow"}, "must be a date and time such as 2026-11-21T06:00"),
    ({"run_at": "2030-01-01T00:00", "tz": "Mars/Olympus_Mons"}, "tz: &#39;Mars/Olympus_Mons&#39; is not a known time zone"),
    ({"job_type": "nope"}, "Not a valid choice"),
    ({"max_attempts": "0"}, "Number must be between 1 and 1000"),
])
def test_enqueue_shows_errors_in_place(sign_in, sql, fields, message):
    client = sign_in("operator")
    data = {"csrf_token": csrf_token(client, "/"), "job_type": "jobsweb.noop", "payload": "{}", **fields}
    response = client.post("/enqueue", data=data, headers={"HX-Request": "true"})
    html = response.get_data(as_text=True)
    assert response.status_code == 422
    assert html.lstrip().startswith('<form id="enqueue-form"') and message in html
    assert sql("SELECT count(*) FROM job_runs") == [(0,)]


def test_enqueue_by_htmx_redirects_the_whole_page(sign_in, sql):
    client = sign_in("operator")
    response = client.post("/enqueue", headers={"HX-Request": "true"}, data={
        "csrf_token": csrf_token(client, "/"), "job_type": "jobsweb.noop", "payload": "{}"})
    [(run,)] = sql("SELECT id FROM job_runs")
    assert response.headers["HX-Redirect"] == f"/runs/{run}"


def test_the_enqueue_error_for_a_hostile_payload_is_escaped(sign_in):
    client = sign_in("operator")
    html = client.post("/enqueue", data={"csrf_token": csrf_token(client, "/"), "job_type": "jobsweb.noop",
                                         "payload": "<script>alert(1)</script>"}).get_data(as_text=True)
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html


@pytest.fixture
def definition(sql):
    def make(name="nightly invoices", job_type="jobsweb.noop", enabled=True):
        return sql("INSERT INTO job_definitions (name, job_type, payload, schedule, enabled) "
                   "VALUES (%s, %s, %s, '0 3 * * *', %s) RETURNING id",
                   [name, job_type, json.dumps({"db_password": "pw-123", "batch": 5}), enabled])[0][0]
    return make


def test_definitions_list_filters_and_searches(sign_in, definition):
    client = sign_in("viewer")
    definition("nightly invoices")
    definition("hourly sync", job_type="jobsweb.sleep", enabled=False)
    html = client.get("/definitions").get_data(as_text=True)
    assert "nightly invoices" in html and "hourly sync" in html
    assert "hourly" not in client.get("/definitions?state=enabled").get_data(as_text=True)
    assert "nightly" not in client.get("/definitions?job_type=jobsweb.sleep").get_data(as_text=True)
    assert "nightly" not in client.get("/definitions?q=SYNC").get_data(as_text=True)
    assert client.get("/definitions?state=<script>").status_code == 400


def test_a_definition_page_shows_its_runs_and_masks_its_payload(sign_in, definition, sql):
    client = sign_in("viewer")
    d = definition()
    sql("INSERT INTO job_runs (job_type, definition_id) VALUES ('jobsweb.noop', %s)", [d])
    html = client.get(f"/definitions/{d}").get_data(as_text=True)
    assert 'href="/runs/1"' in html and "pw-123" not in html and "&#34;batch&#34;: 5" in html
    assert client.get("/definitions/999").status_code == 404


def test_operators_pause_resume_and_run_now_with_audit(sign_in, definition, sql):
    client = sign_in("operator")
    d = definition()
    token = csrf_token(client, "/")
    client.post(f"/definitions/{d}/pause", data={"csrf_token": token})
    assert sql("SELECT enabled FROM job_definitions") == [(False,)]
    client.post(f"/definitions/{d}/resume", data={"csrf_token": token})
    assert sql("SELECT enabled FROM job_definitions") == [(True,)]
    response = client.post(f"/definitions/{d}/run-now", data={"csrf_token": token})
    [(run, definition_id, payload)] = sql("SELECT id, definition_id, payload FROM job_runs")
    assert response.headers["Location"] == f"/runs/{run}" and definition_id == d and payload["batch"] == 5
    assert sql("SELECT user_email, action, target_type, target_id, detail->>'run_id' FROM jobsweb_audit_log "
               "WHERE action <> 'sign_in' ORDER BY id") == [
        ("operator@example.com", "pause", "definition", d, None),
        ("operator@example.com", "resume", "definition", d, None),
        ("operator@example.com", "run_now", "definition", d, str(run))]
    # The page's audit section lists the three, newest first, each with who did it.
    html = client.get(f"/definitions/{d}").get_data(as_text=True)
    audit = html[html.index("<h2>Audit log</h2>"):]
    entries = re.findall(r"<strong>operator@example.com</strong> (run now|resume|pause)", audit)
    assert entries == ["run now", "resume", "pause"]


def test_only_admins_delete_definitions_and_runs_stay(sign_in, definition, sql, client):
    d = definition()
    sql("INSERT INTO job_runs (job_type, definition_id) VALUES ('jobsweb.noop', %s)", [d])
    operator = sign_in("operator")
    assert operator.get(f"/definitions/{d}/delete").status_code == 403
    operator.post("/sign-out", data={"csrf_token": csrf_token(operator, "/")})
    admin = sign_in("admin")
    assert "Keep it" in admin.get(f"/definitions/{d}/delete").get_data(as_text=True)
    admin.post(f"/definitions/{d}/delete", data={"csrf_token": csrf_token(admin, "/")})
    assert sql("SELECT count(*) FROM job_definitions") == [(0,)]
    assert sql("SELECT definition_id FROM job_runs") == [(None,)]
    assert sql("SELECT action, detail->>'name' FROM jobsweb_audit_log WHERE action <> 'sign_in'") == [("delete", "nightly invoices")]


def test_viewers_cannot_pause_or_run_definitions(sign_in, definition, sql):
    client = sign_in("viewer")
    d = definition()
    token = csrf_token(client, "/")
    assert client.post(f"/definitions/{d}/pause", data={"csrf_token": token}).status_code == 403
    assert client.post(f"/definitions/{d}/run-now", data={"csrf_token": token}).status_code == 403
    assert sql("SELECT count(*) FROM job_runs") == [(0,)]


def test_times_read_as_words_before_and_after_now():
    from datetime import datetime, timedelta, timezone

    from jobsweb.web.rendering import time_ago

    now = datetime(2026, 11, 21, 12, tzinfo=timezone.utc)
    assert time_ago(now - timedelta(seconds=45), now) == "45 s ago"
    assert time_ago(now - timedelta(minutes=3, seconds=10), now) == "3 min ago"
    assert time_ago(now + timedelta(hours=2, minutes=5), now) == "in 2 h"
    assert time_ago(now - timedelta(days=3), now) == "3 d ago"
    assert time_ago(None, now) == "—"


def test_the_dashboard_tells_runs_scheduled_for_later_from_runs_waiting_now(sign_in, sql):
    client = sign_in("viewer")
    sql("INSERT INTO job_runs (job_type, run_at) VALUES ('jobsweb.noop', now() + interval '15 hours')")
    html = client.get("/").get_data(as_text=True)
    assert "Nothing is waiting" not in html
    text = re.sub(r"<[^>]+>", "", html)  # the time is a <time> element
    # 15 h less a moment: hours are rounded, not floored (tests/test_time_words.py)
    assert "Nothing is due now." in text and "1 run is scheduled for later; the next is due in 15 h" in text
    sql("DELETE FROM job_runs")
    assert "Nothing is waiting." in client.get("/").get_data(as_text=True)


def test_the_dashboard_says_a_definition_failed_its_last_run_not_its_last_1_runs(sign_in, sql):
    client = sign_in("viewer")
    sql("INSERT INTO job_definitions (name, job_type, failure_count, alert_after_failures) "
        "VALUES ('nightly', 'jobsweb.noop', 1, 1), ('hourly', 'jobsweb.noop', 3, 2)")
    html = client.get("/").get_data(as_text=True)
    assert "has failed its last run: open it to see why" in html
    assert "has failed its last 3 runs: open them to see why" in html and "last 1 runs" not in html


@pytest.mark.parametrize("path", ["/enqueue", "/definitions/new"])
def test_the_job_type_select_starts_blank_instead_of_on_the_first_type(sign_in, path):
    client = sign_in("admin")
    html = client.get(path).get_data(as_text=True)
    select = html.split('name="job_type"')[1].split("</select>")[0]
    first = select.split("<option")[1]
    assert 'value=""' in first and "choose a job type" in first and "selected" not in select


def test_the_favicon_is_served_and_linked_from_every_page(sign_in, client):
    icon = client.get("/favicon.ico")  # before signing in too: browsers ask on their own
    assert icon.status_code == 200 and icon.mimetype == "image/vnd.microsoft.icon" and icon.data[:4] == b"\0\0\1\0"
    html = sign_in("viewer").get("/").get_data(as_text=True)
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in html
    assert client.get("/static/favicon.svg").status_code == 200


def test_a_400_digit_max_attempts_on_enqueue_is_a_422_naming_the_field(sign_in, sql):
    client = sign_in("operator")
    response = client.post("/enqueue", headers={"HX-Request": "true"}, data={
        "csrf_token": csrf_token(client, "/"), "job_type": "jobsweb.noop", "payload": "{}", "max_attempts": "9" * 400})
    html = response.get_data(as_text=True)
    assert response.status_code == 422
    assert re.search(r'<label class="field has-error">(?:(?!</label>).)*name="max_attempts"(?:(?!</label>).)*'
                     r'Number must be between 1 and 1000', html, re.S)
    assert sql("SELECT count(*) FROM job_runs") == [(0,)]
