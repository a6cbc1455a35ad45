"""A team's standalone deployment, driven as its operators drive it (issue 49).

jobsweb from the installed wheel (never the checkout), the Procfile's release, web (gunicorn)
and worker (`flask run-jobs --forever`) lines as separate processes on a fresh database, the
team's handlers imported by the worker alone (tests/deployment.py); the admin screen in headless
Chromium. What the suite's other tests cannot see, since they import handlers beside the app
they drive: a job type only the workers know, scheduled and edited in the form, enqueued from
it, cancelled and retried, its failed attempt reaching Sentry and OpenTelemetry; and the
release line DEPLOY suggests, run as a release phase runs it.
"""

import json
import re

import psycopg
import pytest
from playwright import sync_api

from tests.conftest import wait_for
from tests.deployment import Deployment
from tests.test_deploy_marks import documented_release_line

pytestmark = pytest.mark.slow  # builds and installs the wheel once per pytest process

expect = sync_api.expect
EMAIL, PASSWORD = "ops@example.com", "a long deploy password 42"


@pytest.fixture
def deployment(installed_wheel, scratch_database, tmp_path):
    from jobsweb.core.database import libpq_url

    url = libpq_url(scratch_database("jobsweb_deployed", revision=None))
    deployed = Deployment(installed_wheel[1], tmp_path / "app", url)
    yield deployed
    deployed.stop()


def query(deployment, statement, *args):
    with psycopg.connect(deployment.database_url) as conn:
        return conn.execute(statement, args).fetchall()


def jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_an_operator_schedules_edits_enqueues_cancels_and_retries_a_job_type_only_the_worker_imports(
        deployment, browser):
    # The Procfile's release line, then the one DEPLOY suggests for marking deploys, as Heroku's
    # release phase runs it (dyno metadata on; SOURCE_VERSION is a build's only).
    release = deployment.run(deployment.procfile()["release"])
    assert release.returncode == 0, release.stdout + release.stderr
    release = deployment.run(documented_release_line(), DYNO="release.1", HEROKU_RELEASE_VERSION="v42")
    assert release.returncode == 0, release.stdout + release.stderr
    assert query(deployment, "SELECT label FROM jobsweb_deploy_marks") == [("v42",)]
    created = deployment.run(f"flask users create {EMAIL} --role admin --password '{PASSWORD}'")
    assert created.returncode == 0, created.stdout + created.stderr
    base = deployment.web()
    deployment.start("worker", JOBSWEB_HANDLERS="billing")
    wait_for(lambda: query(deployment, "SELECT 1 FROM job_workers WHERE 'billing.send_invoice' = ANY (job_types)"),
             timeout=60, message="the worker to register its job types")

    context = browser.new_context(base_url=base)
    page = context.new_page()
    page.set_default_timeout(30_000)
    expect.set_options(timeout=30_000)
    page.on("dialog", lambda dialog: dialog.accept())  # the Cancel button's confirmation
    try:
        page.goto("/")
        expect(page).to_have_url(re.compile(r"/sign-in"))
        page.get_by_label("Email").fill(EMAIL)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()

        # A schedule of the worker's job type, made in the form, run now: the worker runs it.
        page.get_by_role("link", name="Definitions").click()
        page.get_by_role("link", name="New definition").click()
        page.locator("input[name=name]").fill("monthly invoices")
        page.locator("select[name=job_type]").select_option("billing.send_invoice")
        page.locator("input[name=schedule]").fill("0 6 1 * *")
        page.locator("textarea[name=payload]").fill('{"invoice": 42}')
        page.get_by_role("button", name="Create definition").click()
        expect(page.get_by_role("heading", name=re.compile("monthly invoices"))).to_be_visible()
        page.get_by_role("button", name="Run now").click()
        expect(page.locator("h1 .badge")).to_have_text("Succeeded")  # the run page refreshes itself

        # Its edit opens on its job type and saves a change of the grace alone.
        page.goto("/definitions")
        page.get_by_role("link", name="monthly invoices").click()
        page.get_by_role("link", name="Edit").click()
        expect(page.locator("select[name=job_type]")).to_have_value("billing.send_invoice")
        page.locator("input[name=grace_seconds]").fill("120")
        page.get_by_role("button", name="Save").click()
        expect(page).to_have_url(re.compile(r"/definitions/\d+$"))  # the definition's page, not the form's
        assert query(deployment, "SELECT job_type, grace_seconds FROM job_definitions WHERE name = 'monthly invoices'") \
            == [("billing.send_invoice", 120)]

        # Enqueued for later from the form, cancelled while it waits, retried: it runs.
        page.get_by_role("link", name="Enqueue").click()
        page.locator("select[name=job_type]").select_option("billing.send_invoice")
        page.locator("input[name=run_at]").fill("2099-01-01T06:00")
        page.get_by_role("button", name="Enqueue").click()
        expect(page.locator("h1 .badge")).to_have_text("Queued")
        page.get_by_role("button", name="Cancel").click()
        expect(page.locator("h1 .badge")).to_have_text("Cancelled")
        page.get_by_role("button", name="Retry now").click()
        expect(page.locator("h1 .badge")).to_have_text("Succeeded")

        # A run whose first attempt fails: retried by the worker; the failure reaches Sentry and
        # both attempts OpenTelemetry, from the worker's process.
        page.get_by_role("link", name="Enqueue").click()
        page.locator("select[name=job_type]").select_option("billing.export")
        page.get_by_role("button", name="Enqueue").click()
        expect(page.locator("h1 .badge")).to_have_text("Succeeded")
        expect(page.get_by_text("Attempt 2")).to_be_visible()
        run_id = re.search(r"/runs/(\d+)", page.url).group(1)
    finally:
        context.close()

    events = jsonl(deployment.observed / "sentry.jsonl")
    assert [(e["tags"]["jobsweb.job_type"], e["tags"]["jobsweb.run_id"], e["tags"]["jobsweb.attempt"],
             e["tags"]["jobsweb.outcome"], e["exception"]["values"][-1]["value"]) for e in events] \
        == [("billing.export", run_id, "1", "will_retry", "upload refused")]
    spans = [(s["name"], s["attributes"]["jobsweb.attempt"], s["attributes"]["jobsweb.outcome"])
             for s in jsonl(deployment.observed / "spans.jsonl") if s["attributes"].get("jobsweb.run_id") == int(run_id)]
    assert sorted(spans) == [("jobsweb billing.export", 1, "will_retry"), ("jobsweb billing.export", 2, "succeeded")]
    # The handlers were the worker's alone: gunicorn never imported them.
    assert deployment.imported_handlers() == ["flask"], deployment.log("web")
