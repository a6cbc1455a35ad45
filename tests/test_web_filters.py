"""The runs list's filters as an operator uses them: every job type present in the runs can be
chosen or typed, counts and bulk confirms follow the filter, and "… all matching" acts on exactly
the runs it says."""

import json
import re

from playwright import sync_api

from tests import test_web_look
from tests.test_web_look import sign_in as sign_in_page
from tests.test_web_runs import CHIP, add_run

expect = sync_api.expect
server, open_context = test_web_look.server, test_web_look.open_context  # its fixtures


def dead_runs(sql, job_type, n, payload="{}"):
    sql("INSERT INTO job_runs (job_type, status, attempts, last_error, error_type, payload, finished_at) "
        "SELECT %s, 'dead', 1, 'boom', 'RuntimeError', %s, now() FROM generate_series(1, %s)", [job_type, payload, n])


def operator_on(open_context, make_user, path):
    """(page, questions): an operator's page at `path` whose confirm dialogs are answered yes and
    kept in `questions`."""
    page = open_context()
    sign_in_page(page, make_user("operator"))
    page.goto(path)
    questions = []
    page.on("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))
    return page, questions


def test_retry_all_matching_a_job_type_only_a_separate_worker_imports_retries_exactly_its_runs(
        sql, make_user, open_context):
    dead_runs(sql, "billing.charge_invoice", 30)  # no module of the web process registers it
    dead_runs(sql, "jobsweb.noop", 5)
    dead_runs(sql, "reports.nightly", 2)
    page, questions = operator_on(open_context, make_user, "/runs")
    expect(page.locator('#job-type-names option[value="billing.charge_invoice"]')).to_have_count(1)
    # Typing a job type and pressing Apply asks twice (a change as the field loses focus, then
    # the submit): only the last answer replaces the table. htmx queued the second behind the
    # first, and its table came in while the next click was under way (busy run 25: that click
    # retried nothing). Here the first is held until the second is sent.
    # (htmx:afterOnLoad: once per answer taken, where each chip swapped out of band has its own
    # htmx:afterSwap.)
    page.evaluate("window.swaps = 0; document.body.addEventListener('htmx:afterOnLoad', () => window.swaps++);"
                  "window.sent = 0; document.body.addEventListener('htmx:beforeSend', () => window.sent++)")
    held = []  # the first request the network sees, until the second is sent; later ones go through

    def runs_list(url):
        return "/runs?" in url

    page.route(runs_list, lambda route: route.continue_() if held else held.append(route))
    page.get_by_label("Job type").fill("billing.charge_invoice")
    page.get_by_role("button", name="Apply").click()
    # Counted in the page, as htmx sends them: the route may never see the first request when the
    # second has replaced (aborted) it before the network layer got to it (make test's load).
    for _ in range(200):  # the second comes at once when it replaces the first; queued, never
        if page.evaluate("window.sent") == 2:
            break
        page.wait_for_timeout(50)
    assert page.evaluate("window.sent") == 2, "the submit's request waited for the change's"
    for route in held:
        route.continue_()
    page.unroute(runs_list)  # the same matcher: Playwright compares them with ==
    expect(page).to_have_url(re.compile(r"job_type=billing\.charge_invoice"))
    expect(page.locator("#runs-table")).to_contain_text("Showing 30 of 30 runs that match")
    expect(page.locator("form.filters")).not_to_have_class(re.compile("htmx-request"))
    assert page.evaluate("window.swaps") == 1
    page.get_by_role("button", name="Retry all matching").click()
    expect(page.get_by_text("Retried 30 of 30 runs that match.")).to_be_visible()
    assert questions[0].startswith("Retry 30 runs (failed, dead or cancelled) that match this filter?")
    assert sql("SELECT job_type, status, count(*) FROM job_runs GROUP BY 1, 2 ORDER BY 1") == [
        ("billing.charge_invoice", "queued", 30), ("jobsweb.noop", "dead", 5), ("reports.nightly", "dead", 2)]


def test_a_job_type_cell_links_to_its_runs_and_a_typed_job_type_survives_apply(sql, make_user, open_context):
    add_run(sql, job_type="billing.charge_invoice")
    add_run(sql, job_type="jobsweb.noop")
    page = open_context()
    sign_in_page(page, make_user("viewer"))
    page.goto("/runs")
    page.locator("#runs-table td a", has_text="billing.charge_invoice").click()
    expect(page).to_have_url(re.compile(r"job_type=billing\.charge_invoice"))
    expect(page.locator("#runs-table tbody tr")).to_have_count(1)
    for path in ("/runs", "/definitions"):
        page.goto(f"{path}?job_type=nobody.imports.this")
        expect(page.get_by_label("Job type")).to_have_value("nobody.imports.this")
        page.locator("form.filters button.primary").click()
        expect(page).to_have_url(re.compile(r"job_type=nobody\.imports\.this"))
        expect(page.get_by_label("Job type")).to_have_value("nobody.imports.this")


def test_pausing_a_job_type_offers_those_of_the_runs_and_preselects_none(sql, make_user, open_context):
    add_run(sql, job_type="billing.charge_invoice")
    page = open_context()
    sign_in_page(page, make_user("operator"))
    page.goto("/queues")
    field = page.get_by_label("Pause a job type")
    expect(field).to_have_value("")
    expect(page.locator('#job-type-names option[value="billing.charge_invoice"]')).to_have_count(1)
    field.fill("billing.charge_invoice")
    page.get_by_role("button", name="Pause", exact=True).last.click()
    expect(page.get_by_text("Job type billing.charge_invoice is paused.")).to_be_visible()


def test_retry_all_matching_says_how_many_it_would_retry_and_which_it_left(sql, make_user, open_context):
    dead_runs(sql, "jobsweb.noop", 37)
    dead_runs(sql, "jobsweb.external", 2)  # reported from outside: nothing can run them again
    page, questions = operator_on(open_context, make_user, "/runs?status=dead")
    page.get_by_role("button", name="Retry all matching").click()
    expect(page.locator(".flash, [role=status]").first).to_contain_text(
        "Retried 37 of 39 runs that match. 2 runs left as they were: reported from outside")
    # The number it asks about is the number it retries: the 2 reported runs are said apart.
    assert questions[0] == ("Retry 37 runs (failed, dead or cancelled) that match this filter? "
                            "2 runs reported from outside are left as they are.")


def test_cancel_selected_with_nothing_ticked_does_not_ask_and_says_so_with_a_number_when_ticked(
        sql, make_user, open_context):
    add_run(sql)
    add_run(sql)
    page, questions = operator_on(open_context, make_user, "/runs")
    page.get_by_role("button", name="Cancel selected").click()
    expect(page.get_by_text("No runs are ticked")).to_be_visible()
    assert questions == []
    page.get_by_label("Select run 1", exact=True).check()
    page.get_by_label("Select run 2", exact=True).check()
    page.get_by_role("button", name="Cancel selected").click()
    expect(page.get_by_text("Cancelled 2 of 2 runs ticked.")).to_be_visible()
    assert questions == ["Cancel the 2 runs ticked?"]


def chips(html):
    return {status: (title, count) for status, title, count in re.findall(CHIP, html)}


def test_with_a_payload_filter_the_chips_and_the_total_count_its_runs_and_rows_show_the_payload(
        sign_in, sql, monkeypatch):
    from jobsweb.web import runlist

    client = sign_in("viewer")
    dead_runs(sql, "send_invoice", 3, json.dumps({"customer": 7, "invoice": 1}))
    for _ in range(2):
        add_run(sql, payload=json.dumps({"customer": 7, "api_token": "s3cret"}))
    dead_runs(sql, "send_invoice", 10, json.dumps({"customer": 8}))
    url = "/runs?" + "payload=" + json.dumps({"customer": 7})
    html = client.get(url).get_data(as_text=True)
    counts = chips(html)
    assert counts["dead"] == ("exactly; runs of the other filters", "3")
    assert counts["queued"][1] == "2" and counts["succeeded"][1] == "0"
    assert "Showing 5 of 5 runs that match" in html
    assert "&#34;invoice&#34;: 1" in html  # each row's payload, escaped
    assert "s3cret" not in html  # and its secrets masked
    # Ticking Dead narrows the total, not the chips.
    html = client.get(url + "&status=dead").get_data(as_text=True)
    assert "Showing 3 of 3 runs that match" in html and chips(html)["queued"][1] == "2"
    # Without a filter the chips count every run.
    assert chips(client.get("/runs").get_data(as_text=True))["dead"][1] == "13"

    # Beyond the cap: the planner's estimates. (With no status ticked, a page that holds every
    # matching run is counted from its rows instead: exact, whatever the cap.)
    monkeypatch.setattr(runlist, "COUNT_CAP", 4)
    sql("ANALYZE job_runs")
    assert chips(client.get(url).get_data(as_text=True))["dead"][1] == "3"
    html = client.get(url + "&status=queued").get_data(as_text=True)
    assert chips(html)["dead"][0].startswith("about") and chips(html)["dead"][1].startswith("≈ ")
    assert re.search(r"Showing 2 of about [\d,]+ runs that match", html)


def test_an_htmx_filter_change_sends_the_chips_new_counts_out_of_band(sign_in, sql):
    client = sign_in("viewer")
    add_run(sql, "dead", job_type="a.b")
    add_run(sql, "dead", job_type="c.d")
    html = client.get("/runs?job_type=a.b", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert re.search(r'<span class="chip-count" id="chip-count-dead" hx-swap-oob="true" [^>]*>1</span>', html)


def test_a_count_past_its_time_budget_is_estimated_and_the_page_still_answers(sign_in, sql, monkeypatch):
    from jobsweb.web import runlist

    client = sign_in("viewer")
    sql("INSERT INTO job_runs (job_type, status, last_error) "
        "SELECT 'x', 'dead', 'boom ' || g FROM generate_series(1, 200000) g")
    sql("ANALYZE job_runs")
    # No run is in that queue, which no index serves: counting reads all 200,000 runs, far past a
    # 1 ms budget. (A status is ticked, so the empty page is not taken for every matching run: it
    # is counted.) An error text search is not estimated: it counts its window (test_search_cost).
    monkeypatch.setattr(runlist, "COUNT_BUDGET", 0.001)  # 1 ms
    response = client.get("/runs?queue=nowhere&status=cancelled")
    html = response.get_data(as_text=True)
    assert response.status_code == 200
    assert chips(html)["dead"][1].startswith("≈ ")
    assert "No runs match these filters." in html  # the page's transaction went on after the cancel


def test_a_first_page_that_holds_every_matching_run_is_its_own_exact_count(sign_in, sql, monkeypatch):
    from jobsweb.web import runlist

    client = sign_in("viewer")
    sql("INSERT INTO job_runs (job_type, status, last_error) "
        "SELECT 'x', CASE WHEN g % 2 = 0 THEN 'dead' ELSE 'failed' END, 'boom ' || g "
        "FROM generate_series(1, 200000) g")
    sql("ANALYZE job_runs")
    # Counting would read all 200,000 errors, past any budget: the page's rows are the count.
    monkeypatch.setattr(runlist, "COUNT_BUDGET", 0.001)  # 1 ms
    html = client.get("/runs?q=no-error-says-this").get_data(as_text=True)
    assert chips(html)["dead"] == ("exactly; runs of the other filters", "0")
    assert "No runs match these filters." in html
    # 199990 to 199999; not 19999, older than the newest 10,000 errors a search reads.
    html = client.get("/runs?q=boom 19999").get_data(as_text=True)
    assert chips(html)["dead"][1] == "5" and chips(html)["failed"][1] == "5"
    assert "Showing 10 of 10 runs that match" in html
