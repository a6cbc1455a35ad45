"""Counts are honest (issue 54, major 2), in Chromium: a bulk action's confirmation states the
number it will change, counted by the action's own condition, or "at least" what it could count
in time; no estimate is below the rows on the page."""

import re

from playwright import sync_api

from jobsweb.web import run_admin_pages, runlist
from tests import test_web_look
from tests.test_web_filters import operator_on
from tests.test_web_look import sign_in as sign_in_page

expect = sync_api.expect
server, open_context = test_web_look.server, test_web_look.open_context  # its fixtures


def stale_statistics(sql, others, status="succeeded"):
    """`others` runs of `status` in queue default, analysed; then 331 dead runs in queue reports
    that the statistics have not seen: the planner expects no run of that queue (the review's shape)."""
    sql("INSERT INTO job_runs (job_type, status, finished_at) SELECT 'jobsweb.noop', %s, now() "
        "FROM generate_series(1, %s)", [status, others])
    sql("ANALYZE job_runs")
    sql("INSERT INTO job_runs (job_type, queue, status, attempts, last_error, error_type, finished_at) "
        "SELECT 'jobsweb.noop', 'reports', 'dead', 1, 'boom', 'RuntimeError', now() FROM generate_series(1, 331)")


def test_retry_all_matching_asks_for_the_exact_number_it_then_retries(sql, make_user, open_context, monkeypatch):
    stale_statistics(sql, 20_000)
    # Dead too, and left alone by a retry: 5 runs reported from outside, and one whose unique key
    # a queued run holds now. The count leaves them out as the retry's own condition does.
    sql("INSERT INTO job_runs (job_type, queue, status, finished_at) "
        "SELECT 'jobsweb.external', 'reports', 'dead', now() FROM generate_series(1, 5)")
    sql("INSERT INTO job_runs (job_type, queue, status, unique_key) "
        "VALUES ('jobsweb.noop', 'reports', 'dead', 'k'), ('jobsweb.noop', 'reports', 'queued', 'k')")
    # The chips' count past its budget: the planner's estimate of the filter, which says 0.
    monkeypatch.setattr(runlist, "COUNT_BUDGET", 0.001)  # 1 ms
    page, questions = operator_on(open_context, make_user, "/runs?queue=reports")
    shown = page.locator(".table-tools .muted").first
    expect(shown).to_contain_text("Showing 50 of")
    # Never below the 50 runs on the page (it said "about 0").
    assert int(re.search(r"of (?:about |at least )?([\d,]+) runs", shown.inner_text())[1].replace(",", "")) >= 50
    page.get_by_role("button", name="Retry all matching").click()
    expect(page.get_by_text("Retried 331 of 337 runs that match.")).to_be_visible()
    assert questions[0].startswith("Retry 331 runs (failed, dead or cancelled) that match this filter? 5 runs "
                                   "reported from outside are left as they are."), questions
    assert sql("SELECT count(*) FROM job_runs WHERE status = 'queued'") == [(332,)]


def test_a_confirmation_that_cannot_count_in_time_says_at_least_the_runs_it_knows(sql, make_user, open_context,
                                                                                  monkeypatch):
    # 100,000 dead runs in another queue: the retry's count reads them all to find the 331.
    stale_statistics(sql, 100_000, "dead")
    monkeypatch.setattr(runlist, "BULK_COUNT_BUDGET", 0.001)  # 1 ms: no count of 100,331 runs ends in it
    page, questions = operator_on(open_context, make_user, "/runs?queue=reports")
    page.get_by_role("button", name="Retry all matching").click()
    expect(page.get_by_text("Retried 331 of 331 runs that match.")).to_be_visible()
    # The 50 dead runs on the page are known to be retried: at least those, never "about 0".
    assert questions[0].startswith("Retry at least 50 runs (failed, dead or cancelled)"), questions


def test_delete_all_matching_says_the_exact_number_or_at_least(sql, make_user, open_context, monkeypatch):
    stale_statistics(sql, 50_000)
    page = open_context()
    sign_in_page(page, make_user("admin"))
    page.goto("/runs?queue=reports")
    page.get_by_role("button", name="Delete all matching…").click()
    expect(page.get_by_role("heading", name="Delete 331 runs?")).to_be_visible()
    monkeypatch.setattr(run_admin_pages, "DELETE_COUNT_BUDGET", 0.001)
    page.goto("/runs?queue=reports")
    page.get_by_role("button", name="Delete all matching…").click()
    expect(page.get_by_role("heading", name="Delete all the matching runs?")).to_be_visible()
    page.get_by_role("button", name=re.compile("Delete all the matching runs")).click()
    expect(page.get_by_text("Deleted 331 runs.")).to_be_visible()
    assert sql("SELECT count(*) FROM job_runs WHERE queue = 'reports'") == [(0,)]
