"""Every page of the admin screen, as a viewer and as an admin, whole and as htmx fragments, with
a secret behind a mask word in every field that holds what jobs and people wrote: a run's
payload, result, error, stack and progress note, an attempt's error, stack and output, a batch's
payload, a definition's payload, an audit entry's detail, an alert delivery's error. The secret
is on none of them (issue 38: the batch page showed a viewer its payload's token)."""

import json

import pytest

from jobsweb import batch
from jobsweb.web.shown_text import MASK
from tests.conftest import committed, define

SECRET = "S3CR3T"
# Endpoints that are no page of the admin screen: files, probes, pings (whose token is no
# record of ours), and the sign-in form.
NOT_PAGES = {"jobsweb.static", "jobsweb.favicon", "jobsweb.htmx.static", "jobsweb.probes.healthz",
             "jobsweb.probes.metrics", "jobsweb.auth.sign_in"}


def a_secret_in_every_field(app, sql):
    """Runs, an attempt, a batch, a definition, audit entries and an alert delivery, each field
    holding SECRET behind a mask word; the ids the pages' URLs need."""
    definition_id = define(app, "nightly export", payload={"secret": f"{SECRET}-definition", "day": 1})
    with committed(app), batch(on_finish="test.batch_callback", payload={"token": f"{SECRET}-batch"}) as export:
        export.enqueue("test.record", {"password": f"{SECRET}-member"})
    dead = sql("""INSERT INTO job_runs (job_type, status, attempts, payload, result, last_error, error_type,
                                        last_stack, progress, progress_note, progress_at, definition_id, finished_at)
                  VALUES ('jobsweb.noop', 'dead', 1, %s, %s, %s, 'ConnectionError', %s, 0.5, %s, now(), %s, now())
                  RETURNING id""",
               [json.dumps({"password": f"{SECRET}-payload", "invoice": 812}),
                json.dumps({"api_key": f"{SECRET}-result"}),
                f"could not connect: password={SECRET}-error host=db",
                f'Traceback (most recent call last):\n  connect("postgres://app:{SECRET}-stack@db/prod")',
                f"uploading with token={SECRET}-note", definition_id])[0][0]
    running = sql("""INSERT INTO job_runs (job_type, status, attempts, locked_by, locked_until, progress, progress_note,
                                           progress_at, payload)
                     VALUES ('jobsweb.noop', 'running', 1, 'w1', now() + interval '1 hour', 0.25, %s, now(), %s) RETURNING id""",
                  [f"step 2, secret={SECRET}-running-note", json.dumps({"session": f"{SECRET}-running"})])[0][0]
    for attempt in (1, 2):  # the newest attempt's stack is the run's; the page shows the others'
        sql("""INSERT INTO job_attempts (run_id, attempt, worker, started_at, outcome, error_type, error, stack, output)
               VALUES (%s, %s, 'w1', now(), 'failed', 'ConnectionError', %s, %s, %s)""",
            [dead, attempt, f"password={SECRET}-attempt-error", f"auth_token={SECRET}-attempt-stack",
             f"Authorization: Bearer {SECRET}-output\nconnecting to db"])
    for target_type, target_id in (("run", dead), ("definition", definition_id), ("batch", export.id)):
        sql("""INSERT INTO jobsweb_audit_log (user_email, action, target_type, target_id, detail)
               VALUES ('ann@example.com', 'edit', %s, %s, %s)""",
            [target_type, target_id, json.dumps({
                "name": "nightly export", "note": f"rotated password={SECRET}-audit-note",
                "changes": {"payload": [{"token": f"{SECRET}-audit-old"}, {"token": f"{SECRET}-audit-new"}]},
                "credentials": {"user": "ann", "secret": f"{SECRET}-audit-nested"}})])
    sql("""INSERT INTO jobsweb_alert_deliveries (event, channel, target, subject, body, status, attempts, last_error)
           VALUES ('opened', 'webhook', 'https://hooks.example.com/x', 's', 'b', 'failed', 3, %s)""",
        [f"https://hooks:{SECRET}-alert@hooks.example.com/x: connection refused"])
    return {"run_id": dead, "definition_id": definition_id, "batch_id": export.id, "running": running}


def every_page(app, ids):
    """The URL of every GET page of the admin screen (each record's page for the records made),
    and a few lists filtered to them."""
    urls = []
    with app.test_request_context():
        from flask import url_for

        for rule in app.url_map.iter_rules():
            if (not rule.endpoint.startswith("jobsweb.") or rule.endpoint in NOT_PAGES
                    or rule.endpoint.startswith("jobsweb.pings.") or "GET" not in rule.methods):
                continue
            urls.append(url_for(rule.endpoint, **{name: ids[name] for name in rule.arguments}))
        urls += [url_for("jobsweb.runs.detail", run_id=ids["running"]),
                 url_for("jobsweb.runs.index", status="running"), url_for("jobsweb.runs.index", q="could not"),
                 url_for("jobsweb.runs.index", batch=ids["batch_id"]),
                 url_for("jobsweb.audit.index", target_type="run")]
    return urls


@pytest.mark.parametrize("role", ["viewer", "admin"])
def test_no_page_shows_a_secret_from_any_field_to_a_viewer_or_an_admin(app, sql, sign_in, role):
    ids = a_secret_in_every_field(app, sql)
    client = sign_in(role)
    urls = every_page(app, ids)
    assert len(urls) >= 20
    shown = {}
    for url in urls:
        for headers in ({"HX-Request": "true"}, {}):
            response = client.get(url, headers=headers)
            assert response.status_code < 500, url
            html = response.get_data(as_text=True)
            assert SECRET not in html, (url, headers, html[max(0, html.find(SECRET) - 200):html.find(SECRET) + 50])
            shown[url] = html
    # The fields were on the pages, masked: a page that left them out would prove nothing.
    run_page = shown[f"/runs/{ids['run_id']}"]
    for masked_text in ("password=" + MASK, "auth_token=" + MASK, "Authorization: " + MASK,
                        "token=" + MASK, "postgres://app:" + MASK + "@db/prod", '"password": "' + MASK):
        assert masked_text in run_page.replace("&#34;", '"'), masked_text
    assert '"token": "' + MASK in shown[f"/batches/{ids['batch_id']}"].replace("&#34;", '"')
    assert '"secret": "' + MASK in shown[f"/definitions/{ids['definition_id']}"].replace("&#34;", '"')
    assert "secret=" + MASK in shown["/runs?status=running"]
    assert "rotated password=" + MASK in run_page and "rotated password=" + MASK in shown[f"/batches/{ids['batch_id']}"]
    if role == "admin":
        assert "rotated password=" + MASK in shown["/audit"]
