"""Incident texts that stay true as time passes (issue 54, m12), read in a real Chromium: their
relative phrases are worded when the page shows them, not when the incident opened, and an
overdue incident follows the run it names once that run is no longer queued."""

import jobsweb
from playwright import sync_api

from jobsweb.ops import alerts
from tests import test_web_look
from tests.conftest import committed, define
from tests.test_web_look import sign_in as sign_in_page

expect = sync_api.expect
server, open_context = test_web_look.server, test_web_look.open_context  # its fixtures


def stuck_run(app, sql):
    """An overdue incident of 'nightly': its run, due an hour ago, is queued and the last worker
    that would take it stopped 13 minutes ago. The run's id."""
    definition = define(app, "nightly")
    [(run,)] = sql("INSERT INTO job_runs (definition_id, job_type, run_at) "
                   "VALUES (%s, 'jobsweb.noop', now() - interval '1 hour') RETURNING id", [definition])
    sql("INSERT INTO job_workers (id, host, pid, job_types, last_seen_at, stopped_at) VALUES "
        "('web-1:7:abc', 'web-1', 7, ARRAY['jobsweb.noop'], now() - interval '13 minutes', now() - interval '13 minutes')")
    with app.app_context():
        [opened], _ = alerts.evaluate()
    return run


def test_an_incidents_relative_times_are_worded_as_it_is_viewed_not_as_it_opened(app, make_user, open_context, sql):
    stuck_run(app, sql)
    page = open_context()
    page.clock.install()  # the page's own clock, which the test moves on below
    sign_in_page(page, make_user("viewer"))
    page.goto("/incidents")
    line = page.locator("p.alert", has_text="nightly is overdue")
    expect(line).to_contain_text("13 min ago")
    page.clock.fast_forward("18:00")  # the same page, 18 minutes later
    expect(line).to_contain_text("31 min ago")
    # Said once, as it is now: it read "seen 13 min ago (31 min ago)".
    expect(line).not_to_contain_text("13 min ago")


def test_an_overdue_incident_says_what_became_of_its_run_on_every_page_that_lists_it(app, make_user, open_context, sql):
    run = stuck_run(app, sql)
    [(definition,)] = sql("SELECT id FROM job_definitions")
    page = open_context()
    sign_in_page(page, make_user("viewer"))
    page.goto("/incidents")
    line = page.locator("p.alert", has_text="nightly is overdue")
    expect(line).to_contain_text(f"its run {run}")
    expect(line).to_contain_text("is still queued")
    with committed(app):
        jobsweb.cancel(run, actor="test")
    for url in ("/incidents", f"/definitions/{definition}", "/"):
        page.goto(url)
        expect(line).to_contain_text(f"its run {run}")
        expect(line).to_contain_text("it is cancelled now")
        expect(line).not_to_contain_text("still queued")
