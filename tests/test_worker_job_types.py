"""A web process that imports none of the handlers (JOBSWEB_HANDLERS on the worker only) offers,
defines, edits and enqueues the job types a live worker registered in the last week, marked as a
worker's; and its runs filters list the same ones (issue 49, item 2)."""

import re
import sys

import pytest
from flask import Flask
from playwright import sync_api

from jobsweb import JobsWeb, enqueue, enqueue_many
from jobsweb.core.database import db
from jobsweb.core.errors import ConfigError, InvalidInput
from jobsweb.engine.jobs import registry
from jobsweb.ops.job_type_names import job_type_names
from tests.conftest import SECRET_KEY, csrf_token, wait_for
from tests.test_web_look import sign_in as sign_in_page

expect = sync_api.expect

WORKER_ONLY = "tests.worker_only_jobs"  # registers billing.send_invoice; only the spawned worker imports it


@pytest.fixture
def server(app, serve):
    return serve(app)


@pytest.fixture
def page(browser, server):
    context = browser.new_context(base_url=server, viewport={"width": 1280, "height": 800})
    context.set_default_timeout(15_000)
    expect.set_options(timeout=15_000)
    yield context.new_page()
    context.close()


def worker_seen(sql, job_types, ago="0 days"):
    sql("INSERT INTO job_workers (id, host, pid, job_types, last_seen_at) "
        "VALUES (gen_random_uuid()::text, 'h', 1, %s, now() - %s::interval)", [job_types, ago])


def test_a_web_process_without_the_handlers_defines_edits_and_enqueues_its_workers_job_type(
        page, make_user, sql, spawn_worker):
    worker = spawn_worker("--forever", "--poll-interval", "0.2", JOBSWEB_HANDLERS=WORKER_ONLY)
    wait_for(lambda: sql("SELECT 1 FROM job_workers WHERE pid = %s AND 'billing.send_invoice' = ANY (job_types)",
                         [worker.pid]), message="the worker's registration")
    assert WORKER_ONLY not in sys.modules and registry.get("billing.send_invoice") is None  # the web side

    sign_in_page(page, make_user("admin"))
    page.goto("/definitions/new")
    job_type = page.locator("select[name=job_type]")
    expect(job_type.locator('option[value="billing.send_invoice"]')).to_have_text("billing.send_invoice — a worker's")
    expect(job_type.locator('option[value="jobsweb.noop"]')).to_have_text("jobsweb.noop")
    page.locator("input[name=name]").fill("monthly invoices")
    job_type.select_option("billing.send_invoice")
    page.locator("input[name=schedule]").fill("0 6 1 * *")
    page.get_by_role("button", name="Create definition").click()
    expect(page.get_by_role("heading", name="monthly invoices")).to_be_visible()

    page.get_by_role("link", name="Edit").click()
    expect(job_type).to_have_value("billing.send_invoice")  # it opened with "choose a job type"
    page.locator("input[name=grace_seconds]").fill("900")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("monthly invoices is saved.")).to_be_visible()
    assert sql("SELECT job_type, grace_seconds, queue, priority, max_attempts FROM job_definitions") == [
        ("billing.send_invoice", 900, "default", 0, 5)]

    page.goto("/enqueue")
    expect(job_type.locator('option[value="billing.send_invoice"]')).to_have_text("billing.send_invoice — a worker's")
    job_type.select_option("billing.send_invoice")
    page.locator("textarea[name=payload]").fill('{"invoice_id": 812}')
    page.get_by_role("button", name="Enqueue").click()
    expect(page.locator("h1 .badge")).to_have_text("Succeeded", timeout=60_000)  # the run page refreshes itself
    assert sql("SELECT job_type, status, attempts, result, queue, priority, max_attempts FROM job_runs") == [
        ("billing.send_invoice", "succeeded", 1, {"sent": 812}, "default", 0, 5)]


def test_the_edit_form_keeps_a_job_type_no_worker_has_now_and_offers_none_of_a_worker_gone_a_week(sign_in, sql):
    worker_seen(sql, ["reports.old"], ago="8 days")
    sql("INSERT INTO job_definitions (name, job_type, schedule) VALUES ('old report', 'reports.old', '@daily')")
    client = sign_in("admin")
    for path in ("/definitions/new", "/enqueue"):
        assert "reports.old" not in client.get(path).get_data(as_text=True), path
    html = client.get("/definitions/1/edit").get_data(as_text=True)
    assert '<option selected value="reports.old">reports.old — no worker has it now</option>' in html
    # Saved as it is, it is refused naming why, not "None is not a registered job type".
    response = client.post("/definitions/1/edit", data={
        "job_type": "reports.old", "schedule": "@daily", "timezone": "UTC", "payload": "{}", "overlap": "skip",
        "misfire": "latest", "grace_seconds": "900", "csrf_token": csrf_token(client, "/definitions/1/edit")})
    assert response.status_code == 422
    assert "&#39;reports.old&#39; is not a registered job type (known: " in response.get_data(as_text=True)


def test_the_forms_read_a_workers_job_types_on_the_requests_one_connection(app, sign_in, sql):
    # A second connection a request, under gunicorn's threads, passes the WEB_THREADS + 1 each
    # process is sized for (DEPLOY.md's connection budget; tests/test_hosted_settings.py).
    from sqlalchemy import event

    worker_seen(sql, ["reports.weekly"])
    held, most = set(), []
    with app.app_context():
        pool = db.engine.pool
    checked_out = lambda conn, record, proxy: (held.add(id(record)), most.append(len(held)))  # noqa: E731
    checked_in = lambda conn, record: held.discard(id(record))  # noqa: E731
    event.listen(pool, "checkout", checked_out)
    event.listen(pool, "checkin", checked_in)
    try:
        client = sign_in("admin")
        most.clear()
        for path in ("/definitions/new", "/enqueue"):
            assert "reports.weekly — a worker&#39;s" in client.get(path).get_data(as_text=True), path
        created = client.post("/definitions/new", data={
            "name": "weekly", "job_type": "reports.weekly", "schedule": "@weekly", "timezone": "UTC", "payload": "{}",
            "overlap": "skip", "misfire": "latest", "grace_seconds": "900",
            "csrf_token": csrf_token(client, "/definitions/new")})
        assert created.status_code == 302, created.get_data(as_text=True)
        enqueued = client.post("/enqueue", data={"job_type": "reports.weekly", "payload": "{}",
                                                 "csrf_token": csrf_token(client, "/enqueue")})
        assert enqueued.status_code == 302, enqueued.get_data(as_text=True)
    finally:
        event.remove(pool, "checkout", checked_out)
        event.remove(pool, "checkin", checked_in)
    assert most and max(most) == 1, most
    assert sql("SELECT job_type FROM job_runs") == [("reports.weekly",)]


def test_enqueue_takes_a_job_type_a_worker_registered_with_the_defaults_and_refuses_an_unknown_one(app, runner, sql):
    worker_seen(sql, ["reports.weekly"], ago="6 days")
    with app.app_context():
        run_id = enqueue("reports.weekly", {"week": 48})
        many = enqueue_many("reports.weekly", [{"week": 49}], queue="reports")
        with pytest.raises(InvalidInput) as refused:
            enqueue("reports.monthly")
    assert refused.value.field == "job_type"
    known = re.search(r"\(known: (.*)\)$", str(refused.value)).group(1).split(", ")
    assert str(refused.value).startswith("job_type: 'reports.monthly' is not a registered job type (known: ")
    assert "reports.weekly" in known and "jobsweb.noop" in known and known == sorted(known)
    cli = runner.invoke(args=["jobs", "enqueue", "reports.weekly", "--priority", "7"])
    assert cli.exit_code == 0, cli.output
    assert sql("SELECT id, job_type, queue, priority, max_attempts FROM job_runs ORDER BY id") == [
        (run_id, "reports.weekly", "default", 0, 5), (many[0], "reports.weekly", "reports", 0, 5),
        (int(cli.output), "reports.weekly", "default", 7, 5)]


def test_inline_mode_enqueues_only_the_job_types_this_process_registers(app, sql):
    worker_seen(sql, ["reports.weekly"])
    app.config["JOBSWEB_INLINE"] = True  # it runs the handler at once: a worker's type has none here
    with app.app_context(), pytest.raises(InvalidInput, match="'reports.weekly' is not a registered job type"):
        enqueue("reports.weekly")


def test_on_sqlite_a_job_type_this_process_lacks_is_refused_naming_the_database_setting(tmp_path):
    host = Flask("host")
    host.config.update(SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path / 'host.db'}", SECRET_KEY=SECRET_KEY)
    JobsWeb(host)
    # The workers' job types are asked of PostgreSQL: not "no such function: unnest".
    with host.app_context(), pytest.raises(ConfigError, match=r"^jobsweb needs PostgreSQL, but SQLALCHEMY_DATABASE_URI"):
        enqueue("reports.weekly")


def test_the_runs_filters_list_the_job_types_of_workers_seen_within_the_week(app, sign_in, sql):
    worker_seen(sql, ["reports.weekly"], ago="6 days")
    worker_seen(sql, ["reports.old"], ago="8 days")
    with app.app_context():
        names = job_type_names()
    assert "reports.weekly" in names and "reports.old" not in names
    html = sign_in("viewer").get("/runs").get_data(as_text=True)
    assert '<option value="reports.weekly">' in html and "reports.old" not in html
