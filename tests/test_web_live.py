"""static/live.js in a real headless Chromium: Live mode pauses while rows are ticked, live
regions say when their refreshes fail, and the select-all checkbox. Timers run on Playwright's
clock, so "3 s later" is a call, not a wait."""

import re

import pytest
from playwright import sync_api

from tests.conftest import PASSWORD

expect = sync_api.expect


@pytest.fixture
def server(app, serve):
    return serve(app)


@pytest.fixture
def open_page(browser, server):
    """open_page(email, clock=True, javascript=True): a page signed in as `email`, its context
    closed at the end (else a live page went on asking a server that had stopped)."""
    contexts = []

    def open_(email, clock=True, javascript=True):
        context = browser.new_context(base_url=server, java_script_enabled=javascript)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        expect.set_options(timeout=15_000)
        if clock:
            page.clock.install()
        page.goto("/sign-in")
        page.get_by_label("Email").fill(email)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(re.compile(r"/$"))
        return page

    yield open_
    for context in contexts:
        context.close()


def sent_requests(page):
    """Count, in the page, the refreshes htmx really sends (after live.js had its say)."""
    page.evaluate("window.sent = 0; document.addEventListener('htmx:beforeSend', () => window.sent++)")


def test_live_mode_pauses_while_rows_are_ticked_and_keeps_them_ticked(open_page, make_user, sql):
    sql("INSERT INTO job_runs (job_type) VALUES ('jobsweb.noop'), ('jobsweb.noop')")
    page = open_page(make_user("operator"))
    page.goto("/runs?live=1")
    state = page.locator("#runs-table [data-live-state]")
    expect(state).to_have_text("Live")
    sent_requests(page)
    with page.expect_response(re.compile(r"/runs\?live=1")):
        page.clock.run_for(3100)  # one refresh, as usual

    sql("INSERT INTO job_runs (job_type) VALUES ('jobsweb.sleep')")  # a refresh would show it
    page.get_by_label("Select run 1", exact=True).check()
    expect(state).to_have_text("paused while rows are ticked")
    before = page.evaluate("window.sent")
    page.clock.run_for(10_000)  # three refreshes' worth
    assert page.evaluate("window.sent") == before
    expect(page.get_by_label("Select run 1", exact=True)).to_be_checked()
    expect(page.locator('#runs-table a[href="/runs/3"]')).to_have_count(0)

    page.get_by_label("Select run 1", exact=True).uncheck()
    expect(state).to_have_text("Live")
    with page.expect_response(re.compile(r"/runs\?live=1")):
        page.clock.run_for(3100)
    expect(page.locator('#runs-table a[href="/runs/3"]')).to_have_count(1)


def test_a_tick_while_a_refresh_is_on_its_way_is_not_undone_by_it(open_page, make_user, sql):
    sql("INSERT INTO job_runs (job_type) VALUES ('jobsweb.noop')")
    page = open_page(make_user("operator"))
    page.goto("/runs?live=1")
    # The refresh is held at the network until the row is ticked, then answered.
    held = []
    page.route(re.compile(r"/runs\?live=1"), lambda route: held.append(route))
    page.clock.run_for(3100)
    page.wait_for_function("document.querySelector('#runs-table').classList.contains('htmx-request')")
    page.get_by_label("Select run 1", exact=True).check()
    with page.expect_response(re.compile(r"/runs\?live=1")):
        held[0].continue_()
    expect(page.get_by_label("Select run 1", exact=True)).to_be_checked()


@pytest.mark.parametrize("path, region", [("/", "#dashboard"), ("/runs?live=1", "#runs-table")])
def test_a_live_region_says_it_is_stale_when_its_refreshes_fail(open_page, server, make_user, sql, path, region):
    sql("INSERT INTO job_runs (job_type) VALUES ('jobsweb.noop')")
    page = open_page(make_user("viewer"))
    page.goto(path)
    state = page.locator(f"{region} [data-live-state]")
    expect(state).not_to_contain_text("stale")
    page.route(re.compile(re.escape(server) + re.escape(path.split("?")[0]) + r"(\?.*)?$"),
               lambda route: route.abort())  # the server is gone
    page.clock.run_for(30_000)
    expect(state).to_have_text(re.compile(r"^stale — last update (29|30|31) s ago$"))
    page.clock.run_for(60_000)
    expect(state).to_have_text(re.compile(r"^stale — last update 1 min ago$"))
    page.unroute_all()
    with page.expect_response(re.compile(re.escape(path.split("?")[0]))):
        page.clock.run_for(10_000)
    expect(state).not_to_contain_text("stale")


def test_a_refresh_never_answered_is_given_up_and_the_next_one_swaps_in(open_page, make_user, sql):
    # htmx sends a region's next refresh only when the one before has ended: unanswered, the
    # table stayed as it was for good, saying "Live".
    sql("INSERT INTO job_runs (job_type) VALUES ('jobsweb.noop')")
    page = open_page(make_user("viewer"), clock=False)
    page.goto("/runs?live=1")
    state = page.locator("#runs-table [data-live-state]")
    page.evaluate("window.timedOut = 0; document.addEventListener('htmx:timeout', () => window.timedOut++)")
    held = []  # the first refresh, never answered; the others go through
    page.route(re.compile(r"/runs\?live=1"), lambda route: route.continue_() if held else held.append(route))
    expect(page.locator("#runs-table.htmx-request")).to_have_count(1)
    sql("INSERT INTO job_runs (job_type) VALUES ('jobsweb.sleep')")
    # The request's timeout runs on the browser's own clock, not the page's timers: waited for.
    expect(page.locator('#runs-table a[href="/runs/2"]')).to_have_count(1, timeout=30_000)
    assert page.evaluate("window.timedOut") == 1
    expect(state).to_have_text("Live")


def test_select_all_ticks_every_row_of_the_page_and_shows_a_partial_selection(open_page, make_user, sql):
    sql("INSERT INTO job_runs (job_type) SELECT 'jobsweb.noop' FROM generate_series(1, 3)")
    page = open_page(make_user("operator"), clock=False)
    page.goto("/runs")
    every = page.get_by_label("Select every run on this page")
    every.check()
    for n in (1, 2, 3):
        expect(page.get_by_label(f"Select run {n}", exact=True)).to_be_checked()
    page.get_by_label("Select run 2", exact=True).uncheck()
    assert page.evaluate("document.querySelector('[data-select-all]').indeterminate") is True
    expect(every).not_to_be_checked()
    every.check()
    expect(page.get_by_label("Select run 2", exact=True)).to_be_checked()


def test_without_javascript_the_select_all_box_is_hidden_and_bulk_actions_still_post(open_page, make_user, sql):
    sql("INSERT INTO job_runs (job_type) SELECT 'jobsweb.noop' FROM generate_series(1, 2)")
    page = open_page(make_user("operator"), clock=False, javascript=False)
    page.goto("/runs")
    expect(page.locator("[data-select-all]")).to_be_hidden()
    page.get_by_label("Select run 2", exact=True).check()
    page.get_by_role("button", name="Cancel selected").click()
    expect(page.get_by_text("Cancelled 1 of 1 run ticked.")).to_be_visible()
    assert sql("SELECT id, status FROM job_runs ORDER BY id") == [(1, "queued"), (2, "cancelled")]


def test_a_running_runs_progress_moves_on_its_page_and_in_the_live_runs_list(open_page, make_user, sql):
    [(run_id,)] = sql("INSERT INTO job_runs (job_type, status, attempts, started_at, locked_by, locked_until, "
                      "progress, progress_note, progress_at) VALUES ('jobsweb.sleep', 'running', 1, now(), 'w', "
                      "now() + interval '1 hour', 0.25, 'page 1 of 4', now()) RETURNING id")
    page = open_page(make_user("viewer"))
    page.goto(f"/runs/{run_id}")
    expect(page.locator("#run")).to_contain_text("25% · page 1 of 4")
    sql("UPDATE job_runs SET progress = 0.5, progress_note = 'page 2 of 4' WHERE id = %s", [run_id])
    with page.expect_response(re.compile(rf"/runs/{run_id}$")):
        page.clock.run_for(2100)  # the run page refreshes itself every 2 s while the run is active
    expect(page.locator("#run")).to_contain_text("50% · page 2 of 4")
    expect(page.get_by_role("progressbar", name="Progress")).to_have_attribute("value", "0.5")

    page.goto("/runs?live=1")
    expect(page.locator("#runs-table")).to_contain_text("50% · page 2 of 4")
    sql("UPDATE job_runs SET progress = 0.75, progress_note = 'page 3 of 4' WHERE id = %s", [run_id])
    with page.expect_response(re.compile(r"/runs\?live=1")):
        page.clock.run_for(3100)
    expect(page.locator("#runs-table")).to_contain_text("75% · page 3 of 4")
