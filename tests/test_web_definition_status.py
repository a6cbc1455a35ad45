"""The Definitions list's status column and filter (issue 54, m3), read in a real Chromium: each
definition's status comes from the rules its incidents open on (overdue, failing, missed), or
its pause, or "ok"."""

import re

from playwright import sync_api

from tests import test_web_look
from tests.conftest import define
from tests.test_web_look import sign_in as sign_in_page

expect = sync_api.expect
server, open_context = test_web_look.server, test_web_look.open_context  # its fixtures


def status_of(page, name):
    row = page.locator("#definitions-table tbody tr", has=page.get_by_role("link", name=name, exact=True))
    return row.locator("td[data-label=status]").inner_text().split()


def test_the_definitions_list_shows_each_definitions_status_and_filters_by_it(app, make_user, open_context, sql):
    for name in ("calm", "late", "broken", "resting"):
        define(app, name)
    # late: its slot fell due an hour ago (grace 300 s) and nothing of it was queued: the tick stopped.
    sql("UPDATE job_definitions SET next_run_at = now() - interval '1 hour' WHERE name = 'late'")
    # broken: its last 3 runs died, and it alerts after 2.
    sql("UPDATE job_definitions SET failure_count = 3, alert_after_failures = 2, last_status = 'dead' "
        "WHERE name = 'broken'")
    sql("UPDATE job_definitions SET enabled = false WHERE name = 'resting'")
    # unheard: an external definition whose newest slot was not reported within its grace.
    [(unheard,)] = sql("INSERT INTO job_definitions (name, job_type, schedule, external, next_run_at) VALUES "
                       "('unheard', 'jobsweb.external', '0 3 * * *', true, now() + interval '1 day') RETURNING id")
    sql("INSERT INTO job_runs (definition_id, job_type, status, scheduled_for, run_at, finished_at) VALUES "
        "(%s, 'jobsweb.external', 'missed', now() - interval '1 hour', now() - interval '1 hour', now())", [unheard])
    page = open_context()
    sign_in_page(page, make_user("viewer"))
    page.goto("/definitions")
    expect(page.get_by_role("columnheader", name="Status", exact=True)).to_be_visible()
    assert {name: status_of(page, name) for name in ("calm", "late", "broken", "resting", "unheard")} == {
        "calm": ["ok"], "late": ["overdue"], "broken": ["failing"], "resting": ["paused"], "unheard": ["missed"]}

    page.get_by_label("Status").select_option("failing")
    expect(page).to_have_url(re.compile(r"status=failing"))
    rows = page.locator("#definitions-table tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("broken")
    for word, name in (("overdue", "late"), ("missed", "unheard"), ("paused", "resting"), ("ok", "calm")):
        page.goto(f"/definitions?status={word}")
        expect(rows).to_have_count(1)
        expect(rows.first.get_by_role("link", name=name, exact=True)).to_be_visible()


def test_a_bad_status_filter_is_refused_naming_it(sign_in):
    bad = sign_in("viewer").get("/definitions?status=late")
    assert bad.status_code == 400
    assert "status must be one of overdue, failing, missed, paused, ok" in bad.get_data(as_text=True)
