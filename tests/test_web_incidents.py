"""The admin screen's alerts: the incidents page, the test alert button, incident state on the
dashboard and a definition's page, and the alert fields of the definition form."""

from jobsweb import definitions
from jobsweb.ops import alerts
from tests.conftest import committed, csrf_token
from tests.test_web_definition_form import FORM

HOOK = "https://hooks.example.com/services/T000/B000/very-secret"


def overdue_incident(app, sql, name="nightly", due=None):
    """An open overdue incident for a new definition whose slot was due an hour ago (or at `due`)."""
    with committed(app):
        definitions.define(name, "jobsweb.noop", "0 6 * * *")
    sql("UPDATE job_definitions SET next_run_at = coalesce(%s::timestamptz, now() - interval '1 hour')", [due])
    with app.app_context():
        opened, _ = alerts.evaluate()
    # The definition's incident opens first; a slot due for days opens the no-worker one too.
    return opened[0]


def test_the_incidents_page_shows_open_incidents_and_notification_errors_escaped(app, sign_in, sql):
    app.config["JOBSWEB_ALERT_WEBHOOK_URL"] = HOOK
    overdue_incident(app, sql, name="<b>nightly</b>")
    sql("UPDATE jobsweb_alert_deliveries SET attempts = 1, last_error = 'HTTP 500: <script>x</script>'")
    html = sign_in("admin").get("/incidents").get_data(as_text=True)
    assert "&lt;b&gt;nightly&lt;/b&gt; is overdue" in html
    # Each notification row says what it was about, not only "incident #8, opened".
    [(subject,)] = sql("SELECT subject FROM jobsweb_alert_deliveries")
    row = html.split("<h2>Notifications</h2>")[1].split("</tr>")[1]
    assert "&lt;b&gt;nightly&lt;/b&gt;" in subject.replace("<", "&lt;").replace(">", "&gt;") and \
        subject.replace("<", "&lt;").replace(">", "&gt;") in row
    assert "HTTP 500: &lt;script&gt;x&lt;/script&gt;" in html and "<script>x" not in html
    assert 'hx-trigger="every 3s"' in html  # polls while a notification is pending
    # The webhook URL is the secret: only its host is shown.
    assert "https://hooks.example.com/…" in html and "very-secret" not in html


def test_a_receivers_reply_is_shown_to_admins_only(app, sign_in, sql):
    app.config["JOBSWEB_ALERT_WEBHOOK_URL"] = HOOK
    overdue_incident(app, sql)
    sql("UPDATE jobsweb_alert_deliveries SET attempts = 1, last_error = 'HTTP 500 Internal Server Error: internal "
        "host db-7.corp answered'")
    html = sign_in("viewer").get("/incidents").get_data(as_text=True)
    assert "HTTP 500 Internal Server Error" in html and "db-7.corp" not in html


def test_the_dashboard_and_the_definition_page_show_an_open_incident(app, sign_in, sql):
    incident_id = overdue_incident(app, sql)
    client = sign_in("viewer")
    dashboard = client.get("/").get_data(as_text=True)
    assert f'id="incident-{incident_id}"' in dashboard
    assert "should have run" not in dashboard  # said once, by the incident
    [(definition_id,)] = sql("SELECT id FROM job_definitions")
    html = client.get(f"/definitions/{definition_id}").get_data(as_text=True)
    assert "nightly is overdue" in html and "1 open incident" in html


def test_an_operator_sends_a_test_alert_and_it_is_audited(app, sign_in, sql):
    app.config["JOBSWEB_ALERT_WEBHOOK_URL"] = HOOK
    client = sign_in("operator")
    response = client.post("/incidents/test", data={"csrf_token": csrf_token(client, "/")})
    assert response.status_code == 302 and response.headers["Location"] == "/incidents"
    assert sql("SELECT event, channel, target, status FROM jobsweb_alert_deliveries") == [("test", "webhook", HOOK, "pending")]
    assert sql("SELECT action, target_type, detail FROM jobsweb_audit_log WHERE action <> 'sign_in'") == [
        ("send_test_alert", "alerts", {"channels": ["webhook"]})]
    assert "Test alert queued on 1 channel" in client.get("/incidents").get_data(as_text=True)


def test_a_test_alert_without_any_channel_says_what_to_set_and_queues_nothing(sign_in, sql):
    client = sign_in("operator")
    client.post("/incidents/test", data={"csrf_token": csrf_token(client, "/")})
    assert "set JOBSWEB_ALERT_WEBHOOK_URL" in client.get("/incidents").get_data(as_text=True)
    assert sql("SELECT count(*) FROM jobsweb_alert_deliveries") == [(0,)]
    assert sql("SELECT count(*) FROM jobsweb_audit_log WHERE action <> 'sign_in'") == [(0,)]


def test_a_test_alert_needs_the_csrf_token_and_the_operator_role(app, sign_in, sql):
    app.config["JOBSWEB_ALERT_WEBHOOK_URL"] = HOOK
    client = sign_in("viewer")
    assert client.post("/incidents/test").status_code == 400
    assert client.post("/incidents/test", data={"csrf_token": csrf_token(client, "/")}).status_code == 403
    assert "Send test alert" not in client.get("/incidents").get_data(as_text=True)
    assert sql("SELECT count(*) FROM jobsweb_alert_deliveries") == [(0,)]


def test_an_admin_sets_a_definitions_threshold_and_own_webhook(sign_in, sql):
    client = sign_in("admin")
    response = client.post("/definitions/new", data={
        **FORM, "alert_after_failures": "1", "alert_webhook_url": HOOK, "csrf_token": csrf_token(client, "/")})
    assert response.status_code == 302
    assert sql("SELECT alert_after_failures, alert_webhook_url, alert_email_to FROM job_definitions") == [(1, HOOK, None)]
    [(definition_id,)] = sql("SELECT id FROM job_definitions")
    html = client.get(f"/definitions/{definition_id}/edit").get_data(as_text=True)
    assert f'value="{HOOK}"' in html  # admins see the whole URL to edit it
    assert "after 1 dead run in a row" in client.get(f"/definitions/{definition_id}").get_data(as_text=True)


def test_bad_alert_routing_is_shown_on_its_field(app, sign_in, sql):
    client = sign_in("admin")
    token = csrf_token(client, "/")
    response = client.post("/definitions/new", data={**FORM, "alert_webhook_url": "ftp://x", "csrf_token": token})
    assert response.status_code == 422 and "must be an http:// or https:// URL" in response.get_data(as_text=True)
    response = client.post("/definitions/new", data={**FORM, "alert_email_to": "ops@example.com", "csrf_token": token})
    assert response.status_code == 422 and "needs JOBSWEB_SMTP_HOST" in response.get_data(as_text=True)
    app.config["JOBSWEB_SMTP_HOST"] = "localhost"
    response = client.post("/definitions/new", data={**FORM, "alert_email_to": "ops, x@y", "csrf_token": token})
    assert response.status_code == 422 and "must be comma-separated email addresses" in response.get_data(as_text=True)
    assert sql("SELECT count(*) FROM job_definitions") == [(0,)]


def test_the_dashboard_says_when_a_definitions_run_waits_for_a_worker_that_never_comes(app, sign_in, sql):
    with committed(app):
        definitions.define("nightly", "jobsweb.noop", "0 6 * * *", grace_seconds=60)
    sql("INSERT INTO job_runs (definition_id, job_type, run_at) SELECT id, job_type, now() - interval '5 minutes' "
        "FROM job_definitions")
    html = sign_in("viewer").get("/").get_data(as_text=True)
    assert "has a run due 5 min ago that no worker has taken" in html and "handles jobsweb.noop" in html
