"""End to end in a real headless Chromium (Debian's package) against a real server and worker.

Screenshots of every page, laptop and phone sized, go to tests/artifacts/ for a person to look at.
"""

import re
from pathlib import Path

import pytest
from playwright import sync_api

from tests.conftest import PASSWORD

ARTIFACTS = Path(__file__).parent / "artifacts"
SIZES = {"laptop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}

expect = sync_api.expect


@pytest.fixture
def server(app, serve):
    """The app on a real HTTP server on 127.0.0.1, for this test."""
    return serve(app)


@pytest.fixture
def page(browser, server):
    context = browser.new_context(viewport=SIZES["laptop"], base_url=server)
    page = context.new_page()
    # A bound on a step under the fresh-clone make test's load (six pytest runs on 2 cores): 15 s
    # passed here with three busy loops beside it, and one step of the first test still outlasted
    # it there; test_deployed's pages wait as long.
    page.set_default_timeout(30_000)
    expect.set_options(timeout=30_000)
    yield page
    context.close()


def shoot(page, name):
    """Save the page at laptop and phone size (the phone shot is the full page)."""
    ARTIFACTS.mkdir(exist_ok=True)
    for size, viewport in SIZES.items():
        page.set_viewport_size(viewport)
        page.screenshot(path=ARTIFACTS / f"{name}-{size}.png", full_page=(size == "phone"))
    page.set_viewport_size(SIZES["laptop"])


def sign_in(page, email):
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/sign-in"))
    shoot(page, "sign-in")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()


def test_an_operator_runs_a_definition_watches_it_live_and_retries_a_dead_run(page, make_user, sql, spawn_worker):
    sql("""INSERT INTO job_definitions (name, job_type, payload, schedule)
           VALUES ('nightly invoices', 'jobsweb.sleep', '{"seconds": 1, "api_token": "tok-secret"}', '0 3 * * *')""")
    sign_in(page, make_user("operator"))
    shoot(page, "dashboard-empty")

    # Run a definition now, then watch the run reach succeeded in the live runs list.
    page.get_by_role("link", name="Definitions").click()
    page.get_by_role("link", name="nightly invoices").click()
    shoot(page, "definition")
    page.get_by_role("button", name="Run now").click()
    expect(page.get_by_text("enqueued")).to_be_visible()
    run_id = int(re.search(r"/runs/(\d+)", page.url).group(1))
    expect(page.locator(".json").first).to_contain_text("••••••")
    page.get_by_role("link", name="Runs").first.click()
    # Ticked before htmx has set the page up (by the load event), Live only ticks the box, as
    # without JavaScript: the table stayed as it was for the whole minute below (fresh-clone run).
    page.wait_for_url(re.compile(r"/runs$"))  # and its load event
    page.get_by_label("Live").check()
    expect(page.locator("#runs-table[hx-trigger]")).to_have_count(1)
    row = page.locator("#runs-table tr", has=page.locator(f'a[href="/runs/{run_id}"]'))
    expect(row).to_contain_text("Queued")
    page.evaluate("window.notReloaded = true")
    spawn_worker("--forever", "--poll-interval", "0.2")
    # A bound on a new process's start, claim and 1 s run: in the fresh-clone make test (six pytest
    # runs on 2 cores) 15 s once passed with the worker not yet registered.
    expect(row).to_contain_text("Succeeded", timeout=60_000)
    assert page.evaluate("window.notReloaded") is True  # htmx swapped the table; no reload
    shoot(page, "runs-live")

    # Enqueue a run that fails for good, open it from the dead filter, see its stack, retry it.
    page.get_by_role("link", name="Enqueue").click()
    page.locator("select[name=job_type]").select_option("jobsweb.fail")
    page.locator("textarea[name=payload]").fill("{nope")
    page.get_by_role("button", name="Enqueue").click()
    expect(page.get_by_text("is not valid JSON")).to_be_visible()
    shoot(page, "enqueue-error")
    page.locator("textarea[name=payload]").fill('{"permanent": true, "password": "hunter2"}')
    page.get_by_role("button", name="Enqueue").click()
    expect(page.get_by_role("heading", name=re.compile(r"Run #\d+"))).to_be_visible()
    expect(page.locator("h1 .badge")).to_have_text("Dead")  # the run page refreshes itself while active
    page.get_by_role("link", name="Runs").first.click()
    # The chip filters in place once htmx has set the page up (its script runs by the load event):
    # clicked before, under load, it only ticked the box, as without JavaScript (fresh-clone run).
    page.wait_for_load_state("load")
    page.get_by_text("dead", exact=True).click()  # the status chip: filters in place
    expect(page).to_have_url(re.compile(r"status=dead"))
    page.locator("#runs-table a[href^='/runs/']").first.click()
    expect(page.locator("details.stack pre")).to_contain_text("PermanentError")
    assert "hunter2" not in page.content()
    shoot(page, "run-dead")
    page.get_by_role("button", name="Retry now").click()
    # "is queued again", or "was queued again; it is now running" when the worker was quicker.
    expect(page.get_by_text(re.compile(r"Run \d+ (is|was) queued again"))).to_be_visible()
    expect(page.locator(".audit")).to_contain_text("retry")
    expect(page.get_by_text("Attempt 2")).to_be_visible()  # the worker ran it again

    page.get_by_role("link", name="Dashboard").click()
    expect(page.get_by_text("Recent dead runs")).to_be_visible()
    shoot(page, "dashboard")
    page.get_by_role("link", name="Workers").click()
    expect(page.get_by_text("alive")).to_be_visible()
    shoot(page, "workers")
    page.get_by_role("link", name="Queues", exact=True).click()
    expect(page.get_by_role("cell", name="default", exact=True)).to_be_visible()
    shoot(page, "queues")
    page.get_by_role("link", name="Definitions").click()
    shoot(page, "definitions")


def test_a_viewer_sees_no_action_buttons(page, make_user, sql):
    sql("INSERT INTO job_runs (job_type, status, last_error, error_type) VALUES ('jobsweb.fail', 'dead', 'boom', 'RuntimeError')")
    sign_in(page, make_user("viewer"))
    page.goto("/runs/1")
    expect(page.get_by_role("heading", name=re.compile("Run #1"))).to_be_visible()
    expect(page.get_by_role("button", name="Retry now")).to_have_count(0)
    expect(page.get_by_role("link", name="Enqueue")).to_have_count(0)


def test_an_admin_creates_a_definition_watching_the_preview_then_runs_it(page, make_user, spawn_worker):
    sign_in(page, make_user("admin"))
    page.get_by_role("link", name="Definitions").click()
    page.get_by_role("link", name="New definition").click()
    page.wait_for_url(re.compile(r"/definitions/new$"))  # and its load event: htmx watches the schedule by then
    page.locator("input[name=name]").fill("weekday report")
    page.locator("select[name=job_type]").select_option("jobsweb.noop")
    page.locator("select[name=timezone]").select_option("Europe/Madrid")
    schedule = page.locator("input[name=schedule]")
    preview = page.locator("#schedule-preview")
    schedule.press_sequentially("0 6 * *", delay=20)
    expect(preview).to_contain_text("has 4 fields")  # the error while the expression is incomplete
    schedule.press_sequentially(" 1-5", delay=20)
    expect(preview).to_contain_text("06:00")
    expect(preview).to_contain_text("Europe/Madrid")
    expect(preview.locator("li")).to_have_count(5)
    shoot(page, "definition-form")
    page.get_by_role("button", name="Create definition").click()
    expect(page.get_by_role("heading", name=re.compile("weekday report"))).to_be_visible()
    page.get_by_role("button", name="Run now").click()
    spawn_worker("--forever", "--poll-interval", "0.2")
    expect(page.locator("h1 .badge")).to_have_text("Succeeded")  # the run page refreshes itself


def test_an_operator_sees_an_incident_and_watches_a_test_alert_get_delivered(page, app, make_user, sql, spawn_worker):
    from tests.conftest import wait_for
    from tests.alert_receivers import Receiver

    receiver = Receiver()
    try:
        app.config["JOBSWEB_ALERT_WEBHOOK_URL"] = receiver.url
        sql("INSERT INTO job_runs (job_type, status, attempts, finished_at, last_error, error_type) "
            "VALUES ('send_invoice', 'dead', 5, now(), 'SMTP refused', 'RuntimeError')")
        spawn_worker("--forever", "--poll-interval", "0.2", JOBSWEB_ALERT_WEBHOOK_URL=receiver.url)
        wait_for(lambda: receiver.texts(), message="the incident's notification")
        sign_in(page, make_user("operator"))
        expect(page.locator(".attention")).to_contain_text("send_invoice is dead after 5 attempts")
        page.get_by_role("link", name="Incidents", exact=True).click()
        page.get_by_role("button", name="Send test alert").click()
        expect(page.get_by_text("Test alert queued on 1 channel")).to_be_visible()
        page.evaluate("window.notReloaded = true")
        test_row = page.locator("#incidents tr", has_text="test")
        expect(test_row.locator(".badge")).to_have_text("sent")  # the page polls while one is pending
        assert page.evaluate("window.notReloaded") is True
        assert any(t.startswith("Test alert from jobsweb") for t in receiver.texts())
        shoot(page, "incidents")
    finally:
        receiver.close()


def test_an_admin_makes_an_external_definition_and_its_ping_shows_as_its_last_report(page, server, make_user, sql):
    import urllib.request

    sign_in(page, make_user("admin"))
    page.goto("/definitions/new")
    page.locator("input[name=name]").fill("nightly pg_dump")
    page.get_by_label("External: jobsweb watches it, never runs it").check()
    page.locator("input[name=schedule]").fill("0 3 * * *")
    page.get_by_role("button", name="Create definition").click()
    expect(page.get_by_role("heading", name=re.compile("nightly pg_dump"))).to_be_visible()
    expect(page.locator("h1")).to_contain_text("external")
    expect(page.get_by_role("button", name="Run now")).to_have_count(0)
    lines = page.locator("#reporting pre").all_inner_texts()  # crontab lines, one per way of reporting
    ping_url = next(m.group(1) for text in lines if (m := re.search(r"(http://[^\s/]+/ping/[\w-]+)", text)))
    assert ping_url.startswith(server)
    shoot(page, "definition-external")

    with urllib.request.urlopen(urllib.request.Request(ping_url + "/0", data=b"dumped 42 tables", method="POST")) as r:
        assert r.status == 200
    page.goto("/definitions?kind=external")
    row = page.locator("#definitions-table tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("external")
    expect(row).to_contain_text("Succeeded")
    shoot(page, "definitions-external")
    page.goto("/")
    expect(page.locator("#external-jobs")).to_contain_text("nightly pg_dump")
    expect(page.locator("#external-jobs")).to_contain_text("last report")
    shoot(page, "dashboard-external")
    page.goto("/definitions?kind=run")
    expect(page.locator("#definitions-table tbody tr")).to_contain_text("No definitions match")
