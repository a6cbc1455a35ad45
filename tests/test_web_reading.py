"""What an operator reads on the admin screen, round three: incidents that lead to their runs,
paused queues named as the reason runs wait, external runs by their definition's name, exact
times in text, forms that fit what they define, and phones that show results first."""

import re
from datetime import datetime, timezone

from playwright import sync_api

from tests import test_web_look
from tests.conftest import csrf_token, define
from tests.test_web_incidents import overdue_incident
from tests.test_web_look import AXE, SIZES
from tests.test_web_look import sign_in as sign_in_page

expect = sync_api.expect
server, open_context = test_web_look.server, test_web_look.open_context  # its fixtures


def test_a_dead_runs_incident_links_its_run_its_runs_and_its_job_type(sign_in, sql):
    [(run,)] = sql("INSERT INTO job_runs (job_type, status) VALUES ('billing.charge_invoice', 'dead') RETURNING id")
    sql("INSERT INTO jobsweb_alert_incidents (kind, job_type, subject, summary, since, run_id, run_count) "
        "VALUES ('dead', 'billing.charge_invoice', 'billing.charge_invoice', 'run ' || %s || ' died', now(), %s, 30)",
        [run, run])
    client = sign_in("viewer")
    for path in ("/incidents", "/"):
        html = client.get(path).get_data(as_text=True)
        assert f'<a href="/runs/{run}">Run {run}</a>' in html
        assert '<a href="/runs?status=dead&amp;job_type=billing.charge_invoice">30 runs</a>' in html
        assert 'href="/runs?job_type=billing.charge_invoice" title="Runs of this job type"' in html


def test_the_dashboard_says_due_runs_of_a_paused_queue_wait_for_it_not_for_a_worker(sign_in, sql):
    sql("INSERT INTO job_queues (name, paused) VALUES ('exports', true)")
    sql("INSERT INTO job_runs (job_type, queue, run_at) SELECT 'exports.csv', 'exports', now() - interval '1 minute' "
        "FROM generate_series(1, 6)")
    sql("INSERT INTO job_workers (id, host, pid) VALUES ('web-1:1:a', 'web-1', 1)")  # one that handles anything
    client = sign_in("viewer")
    html = client.get("/").get_data(as_text=True)
    assert "due now" not in html and "waited" not in html
    assert "Nothing is due that a worker may take." in html
    assert re.search(r"6 due runs wait\s+for a pause to be lifted .*?:\s+<a href=\"/runs\?queue=exports&amp;status=queued"
                     r"&amp;status=failed\">6 in paused queue <code>exports</code></a>\.", html, re.S)
    table = client.get("/runs").get_data(as_text=True).split('id="runs-table"')[1]
    assert table.count('title="Its queue or job type is paused: no worker takes it until resumed">paused</span>') == 6


def test_an_external_dead_run_is_named_by_its_definition_on_the_dashboard(sign_in, sql):
    [(external,)] = sql("INSERT INTO job_definitions (name, job_type, schedule, external, next_run_at) VALUES "
                        "('nightly backup', 'jobsweb.external', '0 3 * * *', true, now()) RETURNING id")
    sql("INSERT INTO job_runs (definition_id, job_type, status, finished_at) "
        "VALUES (%s, 'jobsweb.external', 'dead', now())", [external])
    html = sign_in("viewer").get("/").get_data(as_text=True).split("Recent dead runs")[1]
    assert "nightly backup <span class=\"muted small\">(external)</span>" in html
    assert "jobsweb.external" not in html


def test_a_dead_run_says_why_it_has_no_result(sign_in, sql):
    [(run,)] = sql("INSERT INTO job_runs (job_type, status) VALUES ('x', 'dead') RETURNING id")
    html = sign_in("viewer").get(f"/runs/{run}").get_data(as_text=True)
    assert "No result: the run died without one." in html and "No result yet" not in html


def test_audit_details_read_as_words_and_name_the_definition(app, sign_in, sql):
    definition = define(app, "nightly report")
    sql("""INSERT INTO jobsweb_audit_log (user_email, action, target_type, target_id, detail) VALUES
           ('ada@example.com', 'bulk_retry', 'runs', NULL,
            '{"filter": {"tz": "Europe/Berlin", "status": ["dead", "failed"]}, "changed": 3}'),
           ('ada@example.com', 'pause', 'definition', %s, '{}')""", [definition])
    html = sign_in("admin").get("/audit").get_data(as_text=True)
    assert "filter: tz Europe/Berlin, status dead or failed, changed: 3" in html
    assert "{&#39;" not in html and "[&#39;" not in html  # no Python repr
    assert f'<a href="/definitions/{definition}">definition nightly report</a>' in html


def test_a_refused_cron_is_said_once_beside_its_field(sign_in):
    client = sign_in("admin")
    response = client.post("/definitions/new", data={
        "csrf_token": csrf_token(client, "/definitions/new"), "name": "x", "job_type": "jobsweb.noop",
        "schedule": "61 * * * *", "timezone": "UTC", "payload": "{}", "overlap": "skip", "misfire": "latest"})
    html = response.get_data(as_text=True)
    assert response.status_code == 422
    errors = re.findall(r'class="field-error">([^<]+)<', html)
    assert len([e for e in errors if "61" in e or "minute" in e]) == 1, errors


def test_refusing_to_demote_yourself_is_said_on_the_users_page_beside_the_role(sign_in, sql):
    client = sign_in("admin")
    [(me,)] = sql("SELECT id FROM jobsweb_users WHERE email = 'admin@example.com'")
    response = client.post(f"/users/{me}/role", data={"csrf_token": csrf_token(client, "/users"), "role": "viewer"})
    html = response.get_data(as_text=True)
    assert response.status_code == 400
    assert "<h1>Users</h1>" in html
    assert re.search(r'<p class="field-error" role="alert">role: you cannot take the admin role from yourself', html)
    assert sql("SELECT role FROM jobsweb_users WHERE id = %s", [me]) == [("admin",)]


def test_the_users_page_fits_its_password_inputs_and_asks_before_a_role_change(make_user, open_context, sql):
    make_user("viewer", "vic@example.com")
    page = open_context(viewport={"width": 1366, "height": 900})
    sign_in_page(page, make_user("admin"))
    page.goto("/users")
    card = page.locator("section.table-card").bounding_box()
    for box in page.locator("input[type=password]").all():
        b = box.bounding_box()
        assert b["x"] >= card["x"] and b["x"] + b["width"] <= card["x"] + card["width"], (b, card)
    questions = []
    page.on("dialog", lambda dialog: (questions.append(dialog.message), dialog.dismiss()))
    page.get_by_label("Role of vic@example.com").select_option("operator")
    page.locator("tr", has_text="vic@example.com").get_by_role("button", name="Save").click()
    assert questions == ["Change the role of vic@example.com?"]
    assert sql("SELECT role FROM jobsweb_users WHERE email = 'vic@example.com'") == [("viewer",)]


def test_the_definition_form_shows_only_what_an_external_definition_uses(make_user, open_context):
    page = open_context()
    sign_in_page(page, make_user("admin"))
    page.goto("/definitions/new")
    run_only = ["Job type", "Payload", "Max attempts", "Timeout", "If the previous run is still going"]
    for label in run_only:
        expect(page.get_by_label(label, exact=False).first).to_be_visible()
    page.get_by_label("External: jobsweb watches it, never runs it").check()
    for label in run_only:
        expect(page.get_by_label(label, exact=False).first).to_be_hidden()
    page.get_by_label("Name", exact=True).fill("nightly backup")
    page.get_by_label("Schedule", exact=False).first.fill("0 3 * * *")
    page.get_by_role("button", name="Create definition").click()
    expect(page.get_by_role("heading", name=re.compile("nightly backup"))).to_be_visible()
    facts = page.locator("dl.facts")
    expect(facts).not_to_contain_text("Max attempts")
    expect(facts).not_to_contain_text("3× the p95")


def test_a_definitions_chart_labels_stay_body_sized_on_a_wide_page_and_its_heading_counts_right(
        app, make_user, open_context, sql):
    definition = define(app, "nightly")
    sql("INSERT INTO job_runs (definition_id, job_type, status, started_at, finished_at) "
        "VALUES (%s, 'jobsweb.noop', 'succeeded', now() - interval '1 minute', now())", [definition])
    page = open_context(viewport={"width": 1366, "height": 900})
    sign_in_page(page, make_user("viewer"))
    page.goto(f"/definitions/{definition}")
    expect(page.locator("#definition-chart h2")).to_have_text("Its one run so far")
    heights = [t.bounding_box()["height"] for t in page.locator("#definition-chart svg text").all()]
    assert heights and max(heights) <= 18, heights


def test_a_runs_page_shows_exact_local_times_in_text_and_its_scheduled_slot(app, make_user, open_context, sql):
    definition = define(app, "nightly")
    [(run,)] = sql("INSERT INTO job_runs (definition_id, job_type, scheduled_for, created_at) VALUES "
                   "(%s, 'jobsweb.noop', '2026-01-15 10:00:00+00', '2026-01-15 10:00:01+00') RETURNING id",
                   [definition])
    page = open_context(timezone_id="Asia/Kolkata")
    sign_in_page(page, make_user("viewer"))
    page.goto(f"/runs/{run}")
    expect(page.locator("dt:text-is('Scheduled for') + dd time")).to_have_text(re.compile(r"^\d+ d ago · 15 Jan,? 15:30$"))
    expect(page.locator("dt:text-is('Created') + dd time")).to_have_text(re.compile(r"· 15 Jan,? 15:30$"))


def test_an_overdue_incident_shows_its_due_time_like_the_rest_of_the_page(app, make_user, open_context, sql):
    incident = overdue_incident(app, sql, name="nightly report", due="2026-01-15 10:00:00+00")
    page = open_context(timezone_id="Asia/Kolkata")
    # The browser's clock an hour after the slot, at a fixed moment: the exact time carries its
    # day whenever that is not the reader's today, so a clock near local midnight would change it.
    page.clock.set_fixed_time(datetime(2026, 1, 15, 11, 0, 30, tzinfo=timezone.utc))
    sign_in_page(page, make_user("viewer"))
    page.goto("/incidents")
    alert = page.locator(f".attention #incident-{incident}")
    expect(alert).to_contain_text("due at 1 h ago · 15:30:00")  # 10:00 UTC is 15:30 in India
    assert " UTC" not in alert.inner_text()


def test_on_a_phone_the_runs_come_first_and_every_tap_target_is_at_least_24_px(
        make_user, open_context, sql):
    sql("INSERT INTO job_runs (job_type) SELECT 'jobsweb.noop' FROM generate_series(1, 3)")
    sql("INSERT INTO job_queues (name, concurrency_limit) VALUES ('billing', 2)")
    page = open_context(viewport=SIZES["phone"])
    sign_in_page(page, make_user("admin"))
    page.goto("/runs")
    assert page.locator("#runs-table").bounding_box()["y"] < 450
    expect(page.get_by_label("Job type")).to_be_hidden()
    page.get_by_label("More filters").check()
    expect(page.get_by_label("Job type")).to_be_visible()
    axe = AXE.read_text()
    small = []
    for path in ("/runs", "/", "/queues", "/users", "/incidents", "/audit"):
        page.goto(path)
        page.evaluate(axe)
        small += [(path, v) for v in page.evaluate(
            """async () => (await axe.run(document, {runOnly: ["target-size"]})).violations
                .map(v => v.nodes.map(n => n.target.join(" ")))""")]
    assert small == []
    page.goto("/queues")
    page.screenshot(path="/tmp/28a-phone-queues.png", full_page=True)
    row = page.locator("#queues tbody tr", has_text="billing")
    expect(row.locator("td[data-label=limit]")).to_be_visible()
    assert page.evaluate("""() => getComputedStyle(document.querySelector('#queues td[data-label=limit]'), '::before')
                            .content""") == '"limit "'
