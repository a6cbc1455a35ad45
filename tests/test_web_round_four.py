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


def test_external_definitions_are_named_by_their_own_names_on_the_metrics_page_and_their_runs_pages(
        make_user, open_context, sql):
    for name in ("nightly backup", "ledger export"):
        [(definition,)] = sql("INSERT INTO job_definitions (name, job_type, schedule, external, next_run_at) "
                              "VALUES (%s, 'jobsweb.external', '0 3 * * *', true, now() + interval '1 hour') "
                              "RETURNING id", [name])
        [(reported,)] = sql("INSERT INTO job_runs (definition_id, job_type, status, attempts, max_attempts, run_at, "
                            "started_at, finished_at) VALUES (%s, 'jobsweb.external', 'succeeded', 1, 1, "
                            "now() - interval '3 minutes', now() - interval '3 minutes', now() - interval '2 minutes') "
                            "RETURNING id", [definition])
        sql("INSERT INTO job_attempts (run_id, attempt, started_at, finished_at, outcome) "
            "SELECT id, 1, started_at, finished_at, 'succeeded' FROM job_runs WHERE id = %s", [reported])
    page = open_context()
    sign_in_page(page, make_user("viewer"))
    page.goto("/job-metrics")
    expect(page.locator("table.metrics tbody tr")).to_have_count(2)
    row = page.locator("table.metrics tbody tr", has_text="ledger export")
    expect(row.get_by_role("link", name="ledger export", exact=True)).to_have_attribute("href", f"/runs?definition={definition}")
    assert cells(page, "nightly backup")["runs"] == "1"
    assert "jobsweb.external" not in page.locator("table.metrics").inner_text()
    row.get_by_role("link", name="Chart").click()
    expect(page.locator("#throughput h2")).to_contain_text("ledger export")

    page.goto(f"/runs/{reported}")
    expect(page.get_by_role("heading", name=f"Run #{reported} ledger export external")).to_be_visible()
    page.goto("/runs")
    listed = page.locator("#runs-table tbody tr", has_text=f"#{reported}")
    expect(listed.get_by_role("link", name="ledger export", exact=True)).to_have_attribute("href", f"/runs?definition={definition}")
    assert "jobsweb.external" not in page.locator("#runs-table tbody").inner_text()
