"""The metrics page counts a long backlog in one view (issue 54, m8), read in a real Chromium:
it asks again by itself while older attempts are still being counted ("Reload to count more"
took 4 loads for a week of 205,888 runs)."""

import re

from playwright import sync_api

from tests import test_web_look
from tests.conftest import csrf_token
from tests.test_web_job_metrics import finished
from tests.test_web_look import sign_in as sign_in_page

expect = sync_api.expect
server, open_context = test_web_look.server, test_web_look.open_context  # its fixtures


def test_a_backlog_is_counted_to_the_end_in_one_view_without_reloading(make_user, open_context, sql, monkeypatch):
    from jobsweb.ops import job_type_metrics
    from jobsweb.web import metrics_pages

    monkeypatch.setattr(job_type_metrics, "CHUNK", 1)
    monkeypatch.setattr(metrics_pages, "SEAL_BUDGET", 0)  # one chunk per request: 4 requests for these
    for hours in (5, 4, 3, 2):
        finished(sql, "send_invoice", 1, n=2, ago=f"{hours} hours")
    page = open_context()
    sign_in_page(page, make_user("viewer"))
    loads = []
    page.on("load", lambda _: loads.append(page.url) if "/job-metrics" in page.url else None)
    page.goto("/job-metrics")
    row = page.locator("table.metrics tbody tr", has_text="send_invoice")
    expect(row.locator("td[data-label=runs]")).to_have_text("8")
    expect(page.get_by_text("Still counting older attempts")).to_have_count(0)
    assert len(loads) == 1  # one page load: the rest came in by themselves


def test_the_weeks_chart_labels_the_viewers_days_where_they_begin(make_user, open_context, sql):
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo

    finished(sql, "send_invoice", 1, n=3, ago="2 days")
    page = open_context(timezone_id="America/New_York")
    sign_in_page(page, make_user("viewer"))
    page.goto("/job-metrics?window=7d")
    expect(page.locator("#throughput .legend")).to_contain_text("days in America/New_York")
    chart = page.locator("#throughput svg.chart.wide")
    labels = chart.locator("text[data-day]")
    expect(labels).to_have_count(42)  # a bar of 4 hours each
    shown = [(text.get_attribute("data-day"), text.text_content()) for text in labels.all()]
    named = [(start, words) for start, words in shown if words]
    new_york = ZoneInfo("America/New_York")
    # New York is 5 h (4 h in summer) behind UTC: each day label is on the bar in which a day of
    # New York begins, named after it (the UTC days began in other bars). The bars end at the
    # current hour, so which UTC hour they start at moves with the time the test runs.
    assert len(named) in (6, 7), shown
    for start, words in named:
        begins = datetime.fromisoformat(start)
        first, last = begins.astimezone(new_york), (begins + timedelta(hours=4, microseconds=-1)).astimezone(new_york)
        assert first.date() != last.date() or first.hour == 0, (start, first, last)
        assert words == last.strftime("%a %d"), named


def test_by_queue_the_chart_draws_each_queue_as_its_own_line(make_user, open_context, sql):
    finished(sql, "mail.send", 1, n=5, ago="3 hours")
    finished(sql, "mail.send", 1, n=2, ago="1 hour")
    finished(sql, "report.build", 1, n=4, ago="3 hours")  # the same hour as mail's 5: 9 in all
    sql("UPDATE job_runs SET queue = CASE job_type WHEN 'mail.send' THEN 'mail' ELSE 'reports' END")
    page = open_context()
    sign_in_page(page, make_user("viewer"))
    page.goto("/job-metrics?by=queue&window=24h")
    lines = page.locator("#throughput svg.chart.wide polyline.series")
    expect(lines).to_have_count(2)
    drawn = {}
    for line in lines.all():
        name = line.locator("title").text_content()
        drawn[name] = min(float(point.split(",")[1]) for point in line.get_attribute("points").split())
        assert len(line.get_attribute("points").split()) == 24  # a point per hour's bar
    # The axis tops at 5, mail's busiest hour (not at the 9 of both queues): 5 attempts reach its
    # top (y 14), 4 reach 4/5 of it.
    assert drawn == {"mail: 7 attempts": 14.0, "reports: 4 attempts": 36.0}
    page.locator("#throughput .legend").get_by_role("link", name="reports").click()
    expect(page.locator("#throughput h2")).to_contain_text("reports")
    expect(page.locator("#throughput svg.chart.wide polyline.series")).to_have_count(0)
    expect(page.locator("#throughput svg.chart.wide rect.ok")).to_have_count(24)


def test_deploy_labels_close_together_on_the_weeks_chart_do_not_overlap(make_user, open_context, sql):
    # Three deploys within two hours: on bars of 4 hours their lines are a few pixels apart.
    sql("INSERT INTO jobsweb_deploy_marks (label, marked_by, marked_at) VALUES "
        "('v1.2.0', 'cli:ada', now() - interval '3 hours'), ('v1.2.1-hotfix', 'cli:ada', now() - interval '2 hours'), "
        "('v1.2.2', 'cli:ada', now() - interval '1 hour')")
    page = open_context()
    sign_in_page(page, make_user("viewer"))
    page.goto("/job-metrics?window=7d")
    labels = page.locator("#throughput svg.chart.wide g.deploy text")
    expect(labels).to_have_text(["v1.2.0", "v1.2.1-hotfix", "v1.2.2"])
    boxes = [label.bounding_box() for label in labels.all()]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            apart = (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
                     or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])
            assert apart, boxes


def test_an_admin_marks_a_deploy_from_the_metrics_page_audited_and_drawn(app, make_user, open_context, sql, sign_in):
    page = open_context()
    email = make_user("admin")
    sign_in_page(page, email)
    page.goto("/job-metrics?window=7d")
    page.get_by_label("Deploy label").fill("  v2.0 <b>  ")
    page.get_by_role("button", name="Mark a deploy now").click()
    expect(page.locator(".flash").first).to_contain_text("Deploy v2.0 <b> marked at")
    expect(page).to_have_url(re.compile(r"/job-metrics\?window=7d#throughput$"))
    expect(page.locator("#throughput svg.chart.wide g.deploy text")).to_have_text(["v2.0 <b>"])
    assert sql("SELECT label, marked_by FROM jobsweb_deploy_marks") == [("v2.0 <b>", email)]
    assert sql("SELECT action, user_email, target_type, detail->>'label' FROM jobsweb_audit_log "
               "WHERE action = 'mark_deploy'") == [("mark_deploy", email, "deploy", "v2.0 <b>")]

    client = sign_in("operator")  # below admin: no form, and its POST is refused
    assert "Mark a deploy now" not in client.get("/job-metrics").get_data(as_text=True)
    token = csrf_token(client, "/job-metrics")
    assert client.post("/job-metrics/deploys", data={"label": "v3", "csrf_token": token}).status_code == 403


def test_an_empty_or_long_deploy_label_is_refused_naming_it(sign_in, sql):
    client = sign_in("admin")
    token = csrf_token(client, "/job-metrics")
    for label, words in (("   ", "label must not be empty"), ("v" * 101, "label must be at most 100 characters")):
        refused = client.post("/job-metrics/deploys", data={"label": label, "csrf_token": token})
        assert refused.status_code == 400 and words in refused.get_data(as_text=True)
    assert client.post("/job-metrics/deploys", data={"label": "v1"}).status_code == 400  # no CSRF token
    assert sql("SELECT count(*) FROM jobsweb_deploy_marks") == [(0,)]
