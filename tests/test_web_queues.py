"""The Queues page: depths, limits and pauses; operators pause, admins set limits; audited."""

import re

import pytest

from tests.conftest import csrf_token


def test_the_queues_page_lists_each_queue_with_its_counts_limits_and_state(sign_in, sql):
    client = sign_in("viewer")
    sql("INSERT INTO job_queues (name, concurrency_limit, rate_limit, rate_seconds, paused) "
        "VALUES ('mail', 2, 5, 1, true)")
    sql("INSERT INTO job_runs (job_type, queue, run_at) VALUES ('t', 'mail', now() - interval '2 minutes'), "
        "('t', 'mail', now()), ('t', 'plain_sql', now())")
    sql("INSERT INTO job_runs (job_type, queue, status) VALUES ('t', 'mail', 'running')")
    sql("INSERT INTO job_attempts (run_id, attempt, outcome, started_at) VALUES (4, 1, 'succeeded', now())")
    html = client.get("/queues").get_data(as_text=True)
    rows = {line.split("<code>")[1].split("</code>")[0]: line for line in re.split(r"<tr[ >]", html) if "<code>" in line}
    cells = lambda row: [re.sub(r"<[^>]+>", "", c.split(">", 1)[1].split("</td>")[0]).strip()  # noqa: E731
                         for c in row.split("<td")[1:]]
    assert cells(rows["mail"])[1:7] == ["2", "1", "2 min", "2", "5 per 1 s", "1"]
    assert ">paused<" in rows["mail"]
    # On a phone the headings are gone: each number says what it is.
    assert '<td data-label="due"><a href="/runs?queue=mail&amp;status=queued&amp;status=failed"' in rows["mail"] and '<td data-label="limit">2</td>' in rows["mail"]
    assert ">running<" in rows["plain_sql"]  # only inserted by SQL: listed, unlimited
    assert 'href="/runs?queue=mail"' in rows["mail"]
    assert "<button>" not in html  # a viewer gets no buttons
    assert 'href="/queues"' in client.get("/").get_data(as_text=True)  # the dashboard links here


def test_an_operator_pauses_and_resumes_a_queue_and_a_job_type_and_each_is_audited(sign_in, sql):
    client = sign_in("operator")
    token = csrf_token(client, "/queues")
    assert client.post("/queues/pause", data={"csrf_token": token, "queue": "mail"}).status_code == 302
    assert sql("SELECT name, paused FROM job_queues") == [("mail", True)]
    assert client.post("/queues/resume", data={"csrf_token": token, "queue": "mail"}).status_code == 302
    assert client.post("/queues/job-types/pause", data={"csrf_token": token, "job_type": "jobsweb.noop"}).status_code == 302
    assert sql("SELECT job_type FROM job_paused_types") == [("jobsweb.noop",)]
    assert "Job type jobsweb.noop is paused" in client.get("/queues").get_data(as_text=True)
    assert client.post("/queues/job-types/resume", data={"csrf_token": token, "job_type": "jobsweb.noop"}).status_code == 302
    assert sql("SELECT name, paused FROM job_queues") == [("mail", False)]
    assert sql("SELECT count(*) FROM job_paused_types") == [(0,)]
    assert sql("SELECT user_email, action, target_type, detail FROM jobsweb_audit_log WHERE action <> 'sign_in' "
               "ORDER BY id") == [
        ("operator@example.com", "pause", "queue", {"queue": "mail"}),
        ("operator@example.com", "resume", "queue", {"queue": "mail"}),
        ("operator@example.com", "pause_type", "job_type", {"job_type": "jobsweb.noop"}),
        ("operator@example.com", "resume_type", "job_type", {"job_type": "jobsweb.noop"})]


def test_only_an_admin_sets_limits_and_bad_ones_are_refused_naming_the_field(sign_in, sql, client):
    operator = sign_in("operator")
    token = csrf_token(operator, "/queues")
    assert operator.post("/queues/limits", data={"csrf_token": token, "queue": "mail", "limit": "2"}).status_code == 403
    client.post("/sign-out", data={"csrf_token": token})
    admin = sign_in("admin")
    token = csrf_token(admin, "/queues")
    bad = admin.post("/queues/limits", data={"csrf_token": token, "queue": "mail", "limit": "0", "rate": ""})
    assert bad.status_code == 422
    assert "limit: must be a whole number of at least 1" in bad.get_data(as_text=True)
    bad = admin.post("/queues/limits", data={"csrf_token": token, "queue": "mail", "limit": "", "rate": "fast"})
    assert bad.status_code == 422 and "rate: must be N/SECONDS" in bad.get_data(as_text=True)
    bad = admin.post("/queues/limits", data={"csrf_token": token, "queue": "mail", "limit": "", "rate": "1000000/1"})
    assert bad.status_code == 422 and "rate: may allow at most 10000 starts per window" in bad.get_data(as_text=True)
    assert admin.post("/queues/pause", data={"csrf_token": token, "queue": "bad name"}).status_code == 400
    assert sql("SELECT count(*) FROM job_queues") == [(0,)]

    ok = admin.post("/queues/limits", data={"csrf_token": token, "queue": "mail", "limit": "2", "rate": "5/1"})
    assert ok.status_code == 302
    assert sql("SELECT concurrency_limit, rate_limit, rate_seconds FROM job_queues") == [(2, 5, 1)]
    assert admin.post("/queues/limits", data={"csrf_token": token, "queue": "mail"}).status_code == 302
    assert sql("SELECT concurrency_limit, rate_limit FROM job_queues") == [(None, None)]
    assert sql("SELECT action, detail FROM jobsweb_audit_log WHERE action <> 'sign_in' ORDER BY id") == [
        ("set_limits", {"queue": "mail", "limit": "2", "rate": "5/1"}),
        ("set_limits", {"queue": "mail", "limit": None, "rate": None})]


def test_the_runs_list_shows_and_filters_queue_and_priority(sign_in, sql):
    client = sign_in("viewer")
    sql("INSERT INTO job_runs (job_type, queue, priority) VALUES ('t.mail', 'mail', -5), ('t.other', 'default', 0), "
        "('t.mail_low', 'mail', 5)")
    html = client.get("/runs", query_string={"queue": "mail"}).get_data(as_text=True).split('id="runs-table"')[1]
    assert "t.mail" in html and "t.mail_low" in html and "t.other" not in html
    html = client.get("/runs", query_string={"queue": "mail", "priority": "-5"}).get_data(as_text=True).split('id="runs-table"')[1]
    assert "t.mail" in html and "t.mail_low" not in html
    assert 'name="queue" value="mail"' in html and 'value="-5"' in html
    bad = client.get("/runs", query_string={"priority": "5000"})
    assert bad.status_code == 400 and "priority: must be a whole number from -1000 to 1000" in bad.get_data(as_text=True)



@pytest.mark.parametrize("limit", ["2147483648", "9" * 400])
def test_a_limit_past_what_the_column_holds_is_a_422_naming_the_field(sign_in, sql, limit):
    admin = sign_in("admin")
    response = admin.post("/queues/limits", data={"csrf_token": csrf_token(admin, "/queues"), "queue": "mail",
                                                  "limit": limit, "rate": ""})
    assert response.status_code == 422
    assert "limit: must be a whole number from 1 to 2147483647" in response.get_data(as_text=True)
    assert sql("SELECT count(*) FROM job_queues") == [(0,)]


@pytest.mark.parametrize("path", ["/queues/job-types/pause", "/queues/job-types/resume"])
def test_a_job_type_name_of_8_kb_is_a_400_naming_the_field(sign_in, sql, path):
    client = sign_in("operator")
    response = client.post(path, data={"csrf_token": csrf_token(client, "/queues"), "job_type": "t" * 8200})
    assert response.status_code == 400 and "job_type:" in response.get_data(as_text=True)
    assert sql("SELECT count(*) FROM job_paused_types") == [(0,)]
