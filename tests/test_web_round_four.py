"""The admin screen, round four's smaller points (issue 39), read in a real Chromium: the metrics
page counts runs apart from attempts and names external definitions, "Retry all matching" says
what it will retry, the runs list sorts by finish time, the Queues page links its Due figure,
and a run's progress reads as its state."""

from playwright import sync_api

from tests import test_web_look
from tests.test_web_look import sign_in as sign_in_page

expect = sync_api.expect
server, open_context = test_web_look.server, test_web_look.open_context  # its fixtures


def cells(page, row_text, table="table.metrics"):
    """{data-label: text} of the row of `table` that has `row_text`."""
    row = page.locator(f"{table} tbody tr", has_text=row_text)
    expect(row).to_have_count(1)
    return {c.get_attribute("data-label"): c.inner_text().strip() for c in row.locator("td[data-label]").all()}


def test_the_metrics_page_counts_runs_apart_from_their_attempts(make_user, open_context, sql):
    # One run that failed twice then succeeded, one that died at its first attempt: 2 runs, 4 attempts.
    sql("""INSERT INTO job_runs (job_type, status, attempts, max_attempts, run_at, started_at, finished_at)
           VALUES ('send_invoice', 'succeeded', 3, 5, now() - interval '5 minutes', now() - interval '2 minutes',
                   now() - interval '2 minutes'),
                  ('send_invoice', 'dead', 1, 1, now() - interval '5 minutes', now() - interval '2 minutes',
                   now() - interval '2 minutes')""")
    sql("""INSERT INTO job_attempts (run_id, attempt, started_at, finished_at, outcome)
           VALUES (1, 1, now() - interval '4 minutes', now() - interval '4 minutes', 'failed'),
                  (1, 2, now() - interval '3 minutes', now() - interval '3 minutes', 'failed'),
                  (1, 3, now() - interval '2 minutes', now() - interval '2 minutes', 'succeeded'),
                  (2, 1, now() - interval '2 minutes', now() - interval '2 minutes', 'failed')""")
    page = open_context()
    sign_in_page(page, make_user("viewer"))
    page.goto("/job-metrics")
    row = cells(page, "send_invoice")
    assert (row["runs"], row["attempts"], row["failed"], row["failure rate"]) == ("2", "4", "3", "75.0%")
    expect(page.get_by_role("columnheader", name="Attempts")).to_be_visible()
