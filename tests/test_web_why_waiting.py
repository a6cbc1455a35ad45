"""Why a run is not running (jobsweb/ops/why_waiting.py), one sentence read in a real Chromium
on the run page, the runs list, the definition page and the overdue incident with its webhook."""

import re

from playwright import sync_api
from sqlalchemy import event

from jobsweb import definitions
from jobsweb.core.database import db
from jobsweb.ops import alerts, why_waiting
from tests import test_web_look
from tests.conftest import committed
from tests.test_web_look import sign_in as sign_in_page

expect = sync_api.expect
server, open_context = test_web_look.server, test_web_look.open_context  # its fixtures

WORKER = ("INSERT INTO job_workers (id, host, pid, job_types, queues) "
          "VALUES (%s, 'web-1', 1, %s, %s)")


def run(sql, job_type="report.build", queue="default", run_at="now() - interval '1 minute'", **columns):
    names = ", ".join(["job_type", "queue", "run_at", *columns])
    values = ", ".join(["%s", "%s", run_at, *["%s"] * len(columns)])
    return sql(f"INSERT INTO job_runs ({names}) VALUES ({values}) RETURNING id",
               [job_type, queue, *columns.values()])[0][0]


def reason_on(page, run_id):
    page.goto(f"/runs/{run_id}")
    return page.locator("#why-not-running")


def test_a_run_page_says_in_one_sentence_why_a_queued_run_is_not_running(make_user, open_context, sql):
    sql(WORKER, ["w-report", ["report.build"], None])
    sql("INSERT INTO job_queues (name, paused) VALUES ('reports', true)")
    paused_queue = run(sql, queue="reports", priority=7)
    paused_and_later = run(sql, queue="reports", run_at="now() + interval '2 hours 5 minutes'")
    sql("INSERT INTO job_paused_types (job_type) VALUES ('report.paused')")
    sql(WORKER, ["w-paused", ["report.paused"], None])
    paused_type = run(sql, job_type="report.paused")
    later = run(sql, run_at="now() + interval '2 hours 5 minutes'")
    unhandled = run(sql, job_type="nobody.handles")
    sql(WORKER, ["w-mail", ["mail.send"], ["mail"]])
    other_queue = run(sql, job_type="mail.send", queue="bulk")
    sql("INSERT INTO job_queues (name, concurrency_limit) VALUES ('single', 1)")
    run(sql, queue="single", status="running")
    at_limit = run(sql, queue="single")
    sql("INSERT INTO job_queues (name, rate_limit, rate_seconds, rate_starts) VALUES ('slow', 1, 3600, ARRAY[now()])")
    rate_limited = run(sql, queue="slow")
    free = run(sql)
    sql(WORKER, ["w-cron", ["cron.only"], None])
    sql("UPDATE job_workers SET stopped_at = now(), last_seen_at = now() - interval '20 minutes' WHERE id = 'w-cron'")
    between_ticks = run(sql, job_type="cron.only")

    page = open_context()
    sign_in_page(page, make_user("viewer"))
    why = reason_on(page, paused_queue)
    expect(why).to_contain_text("Its queue reports is paused: no worker takes its runs until it is resumed.")
    expect(why.get_by_role("link", name="reports")).to_have_attribute("href", "/queues#queue-reports")
    # The run's queue and priority are facts of its page.
    expect(page.locator("dt:text-is('Queue') + dd")).to_have_text("reports")
    expect(page.locator("dt:text-is('Priority') + dd")).to_contain_text("7")
    page.screenshot(path="/tmp/39-why-not-running.png")  # for the closing note, kept out of the repo
    why.get_by_role("link", name="reports").click()
    expect(page.locator("#queue-reports")).to_contain_text("paused")

    # The pause first, as the claim meets it: resumed after its due time, the run still waits.
    expect(reason_on(page, paused_and_later)).to_have_text(
        "Why is it not running? Its queue reports is paused: no worker takes its runs until it is resumed.")
    expect(reason_on(page, paused_type)).to_contain_text("Its job type report.paused is paused")
    expect(reason_on(page, later)).to_contain_text(re.compile(r"Due in 2 h · .+"))
    expect(reason_on(page, unhandled)).to_contain_text(
        "No worker seen in the last hour handles job type nobody.handles")
    expect(reason_on(page, other_queue)).to_contain_text("No worker seen in the last hour takes runs from its queue bulk")
    expect(reason_on(page, at_limit)).to_contain_text("Its queue single is at its limit (1 running of 1).")
    expect(reason_on(page, rate_limited)).to_contain_text(
        re.compile(r"Its queue slow is rate-limited \(1 starts per 3600 s\); its next start is free in 59 min"))
    expect(reason_on(page, between_ticks)).to_contain_text(
        re.compile(r"No worker that takes runs from its queue default and handles cron.only is running now; "
                   r"the last one, w-cron, stopped 20 min ago"))
    expect(reason_on(page, free)).to_contain_text("nothing holds it")
    # A run that is running or ended has nothing to explain.
    page.goto(f"/runs/{at_limit - 1}")
    expect(page.get_by_role("heading", name=re.compile("Run #"))).to_be_visible()
    expect(page.locator("#why-not-running")).to_have_count(0)


def test_a_waiting_run_names_each_run_it_waits_for_with_its_state_and_due_time(make_user, open_context, sql):
    sql(WORKER, ["w", None, None])
    first = run(sql, run_at="now() + interval '2 hours 5 minutes'")
    second = run(sql, status="waiting", waiting_for=1)
    third = run(sql, status="waiting", waiting_for=2)
    sql("INSERT INTO job_run_deps (run_id, after_id) VALUES (%s, %s), (%s, %s), (%s, %s)",
        [second, first, third, second, third, first])
    page = open_context()
    sign_in_page(page, make_user("viewer"))
    why = reason_on(page, third)
    # The exact local time carries its day when that is not the reader's today (late evening).
    expect(why).to_contain_text(re.compile(
        rf"Waits for runs #{first} \(queued, due in 2 h · [^)]+\) and #{second} \(waiting\)\."))
    expect(why.get_by_role("link", name=f"#{second}")).to_have_attribute("href", f"/runs/{second}")
    # The exact time carries its day when it is not the reader's today (near midnight). Each awaited run says its own reason under it: #1124 → #1123 → "due in 2 h" without a click.
    waits_for = page.locator("section", has=page.get_by_role("heading", name="Waits for"))
    expect(waits_for.locator("li", has_text=f"#{second}")).to_contain_text(
        re.compile(rf"Waits for run #{first} \(queued, due in 2 h\)"))


def test_a_run_waiting_for_seven_runs_names_the_first_five_and_counts_the_other_two(make_user, open_context, sql):
    sql(WORKER, ["w", None, None])
    awaited = [run(sql, status="running") for _ in range(7)]
    waits = run(sql, status="waiting", waiting_for=7)
    for after in awaited:
        sql("INSERT INTO job_run_deps (run_id, after_id) VALUES (%s, %s)", [waits, after])
    page = open_context()
    sign_in_page(page, make_user("viewer"))
    first_five = ", ".join(f"#{after} (running)" for after in awaited[:5])
    expect(reason_on(page, waits)).to_have_text(f"Why is it not running? Waits for runs {first_five} and 2 more.")


def test_the_runs_list_says_why_each_held_run_waits_in_its_state_column(make_user, open_context, sql):
    sql(WORKER, ["w", None, None])
    sql("INSERT INTO job_queues (name, paused) VALUES ('reports', true)")
    held = run(sql, queue="reports")
    later = run(sql, run_at="now() + interval '3 hours 5 minutes'")
    free = run(sql)
    page = open_context()
    sign_in_page(page, make_user("viewer"))
    page.goto("/runs")
    rows = page.locator("#runs-table tbody tr")
    expect(rows.filter(has_text=f"#{held}").locator(".why")).to_have_text(
        "Its queue reports is paused: no worker takes its runs until it is resumed.")
    expect(rows.filter(has_text=f"#{later}").locator(".why")).to_contain_text("Due in 3 h")
    expect(rows.filter(has_text=f"#{free}").locator(".why")).to_have_count(0)  # nothing holds it


def test_the_runs_list_reads_every_rows_reason_in_one_statement(app, sql):
    sql("INSERT INTO job_queues (name, paused) VALUES ('reports', true)")
    ids = [run(sql, queue="reports") for _ in range(50)]
    statements = []
    with app.app_context():
        engine = db.engine
        listen = lambda *args: statements.append(args[2])  # noqa: E731
        event.listen(engine, "before_cursor_execute", listen)
        try:
            found = why_waiting.reasons(ids)
        finally:
            event.remove(engine, "before_cursor_execute", listen)
    assert len(found) == 50 and {r.kind for r in found.values()} == {"paused_queue"}
    assert len(statements) == 1


def test_the_definition_page_shows_its_queue_priority_and_why_its_run_waits(app, make_user, open_context, sql):
    with committed(app):
        definitions.define("nightly ledger", "jobsweb.noop", "0 6 * * *", queue="reports", priority=3)
    [(definition,)] = sql("SELECT id FROM job_definitions")
    sql("UPDATE job_queues SET paused = true WHERE name = 'reports'")  # defining it made its row
    held = run(sql, job_type="jobsweb.noop", queue="reports", definition_id=definition)
    page = open_context()
    sign_in_page(page, make_user("viewer"))
    page.goto(f"/definitions/{definition}")
    expect(page.locator("dt:text-is('Queue') + dd")).to_have_text("reports")
    expect(page.locator("dt:text-is('Priority') + dd")).to_contain_text("3")
    expect(page.locator("#why-not-running")).to_contain_text(
        f"Why is run #{held} not running? Its queue reports is paused")
    expect(page.locator("#definition-runs .why")).to_have_text(
        "Its queue reports is paused: no worker takes its runs until it is resumed.")


def test_an_overdue_incident_behind_a_paused_queue_blames_the_queue_not_the_workers(app, make_user, open_context, sql):
    app.config.update(JOBSWEB_ALERT_WEBHOOK_URL="https://hooks.example.com/x", JOBSWEB_BASE_URL="http://jobs.example.com")
    with committed(app):
        definitions.define("nightly.ledger", "jobsweb.noop", "0 6 * * *", queue="reports", grace_seconds=60)
    [(definition,)] = sql("SELECT id FROM job_definitions")
    sql(WORKER, ["w", ["jobsweb.noop"], None])  # a worker for it is alive
    sql("UPDATE job_queues SET paused = true WHERE name = 'reports'")  # defining it made its row
    held = run(sql, job_type="jobsweb.noop", queue="reports", definition_id=definition,
               run_at="now() - interval '10 minutes'")
    with app.app_context():
        opened, _ = alerts.evaluate()
    assert len(opened) == 1
    [(summary, run_id, body, data)] = sql(
        "SELECT i.summary, i.run_id, d.body, d.data FROM jobsweb_alert_incidents i "
        "JOIN jobsweb_alert_deliveries d ON d.incident_id = i.id")
    sentence = "Its queue reports is paused: no worker takes its runs until it is resumed."
    assert summary.startswith(f"nightly.ledger is overdue: its run {held}, due at ") and summary.endswith(sentence)
    assert "no worker has taken it" not in summary and "Is a worker running" not in summary
    assert sentence in body and data["summary"] == summary  # the webhook's text and its JSON
    assert run_id == held  # its link opens the run it names
    page = open_context()
    sign_in_page(page, make_user("viewer"))
    page.goto("/incidents")
    incident = page.locator(f"#incident-{opened[0]}")
    expect(incident).to_contain_text(sentence)
    expect(incident.get_by_role("link", name=f"Run {held}")).to_have_attribute("href", f"/runs/{held}")


def test_an_incidents_sentence_and_its_link_name_the_same_run(app, make_user, open_context, sql):
    dead = ("INSERT INTO job_runs (job_type, status, attempts, finished_at, error_type, last_error) "
            "VALUES ('billing.charge', 'dead', 1, now(), %s, %s) RETURNING id")
    [(first,)] = sql(dead, ["ConnectionError", "the bank hung up"])
    with app.app_context():
        [incident], _ = alerts.evaluate()
    [(second,)] = sql(dead, ["KeyError", "'invoice'"])
    with app.app_context():
        alerts.evaluate()  # counted into the open incident, whose sentence now names its newest death
    [(summary, run_id)] = sql("SELECT summary, run_id FROM jobsweb_alert_incidents")
    assert summary.startswith(f"run {second} of billing.charge is dead") and run_id == second
    page = open_context()
    sign_in_page(page, make_user("viewer"))
    page.goto("/incidents")
    row = page.locator(f"#incident-{incident}")
    expect(row).to_contain_text(f"run {second} of billing.charge is dead after 1 attempt: KeyError")
    expect(row.get_by_role("link", name=f"Run {second}")).to_have_attribute("href", f"/runs/{second}")
    assert f"run {first} " not in row.inner_text()


def test_the_no_worker_incident_does_not_open_for_runs_that_only_a_pause_holds(app, sql):
    app.config["JOBSWEB_NO_WORKER_MINUTES"] = 1
    sql("INSERT INTO job_workers (id, host, pid, last_seen_at) VALUES ('w:1:a', 'w', 1, now() - interval '2 minutes')")
    sql("INSERT INTO job_queues (name, paused) VALUES ('reports', true)")
    sql("INSERT INTO job_paused_types (job_type) VALUES ('report.paused')")
    held = [run(sql, queue="reports"), run(sql, job_type="report.paused")]
    with app.app_context():
        assert alerts.evaluate() == ([], [])  # they wait for a person, not for a worker
        assert {r.kind for r in why_waiting.reasons(held).values()} == {"paused_queue", "paused_type"}
    run(sql)  # a run that only a worker would start
    with app.app_context():
        [opened], _ = alerts.evaluate()
    assert sql("SELECT kind FROM jobsweb_alert_incidents WHERE id = %s", [opened]) == [("no_worker",)]
