"""How long ago or how far ahead, in words: one formatter (core/time_words.py) that the server
and the browser (static/local-times.js) both follow, hours and days rounded to the nearest."""

from datetime import datetime, timedelta, timezone

from playwright import sync_api

from jobsweb.core.time_words import relative_words, seconds_words
from jobsweb.web.rendering import time_ago

from tests import test_web_look
from tests.test_web_look import sign_in

expect = sync_api.expect
server, open_context = test_web_look.server, test_web_look.open_context  # its fixtures

# (seconds ago, negative ahead; the words an operator reads)
WORDS = [
    (0, "0 s ago"), (45, "45 s ago"), (59.9, "59 s ago"), (90, "1 min ago"), (3599, "59 min ago"),
    (3600, "1 h ago"), (5399, "1 h ago"), (5400, "2 h ago"),
    (-(2 * 3600 + 55 * 60), "in 3 h"),  # issue 54: "Due in 2 h" for 2 h 55 min
    (-(2 * 3600 + 5 * 60), "in 2 h"), (-(14 * 3600 + 59 * 60), "in 15 h"), (23 * 3600 + 29 * 60, "23 h ago"),
    (23 * 3600 + 31 * 60, "1 d ago"),  # rounds up to a day, so it says a day
    (36 * 3600 - 1, "1 d ago"), (36 * 3600, "2 d ago"), (8 * 86400 + 23 * 3600, "9 d ago"),
]


def test_hours_and_days_are_rounded_to_the_nearest_and_minutes_floored():
    assert [relative_words(seconds) for seconds, _ in WORDS] == [words for _, words in WORDS]
    assert seconds_words(-(2 * 3600 + 55 * 60)) == "3 h"  # a length: its sign ignored
    now = datetime(2026, 12, 2, 6, 0, tzinfo=timezone.utc)
    assert time_ago(now + timedelta(hours=2, minutes=55), now) == "in 3 h"
    assert time_ago(now - timedelta(days=2, hours=20), now) == "3 d ago"


def test_the_browser_words_every_length_as_the_server_does_and_a_run_due_in_2_h_55_min_is_due_in_3_h(
        make_user, open_context, sql):
    [(run, run_at)] = sql("INSERT INTO job_runs (job_type, run_at) VALUES ('report.build', now() + interval "
                          "'2 hours 55 minutes') RETURNING id, run_at")
    page = open_context()
    page.clock.set_fixed_time(run_at - timedelta(hours=2, minutes=55))  # the browser's clock, for its words
    sign_in(page, make_user("viewer"))
    page.wait_for_function("() => typeof window.jobswebWords === 'function'")  # the deferred script ran
    assert page.evaluate("lengths => lengths.map(s => window.jobswebWords(s))", [s for s, _ in WORDS]) \
        == [words for _, words in WORDS]
    page.goto("/runs")
    row = page.locator("#runs-table tbody tr", has=page.locator(f'a[href="/runs/{run}"]'))
    expect(row.locator("td[data-label=due] time")).to_have_text("in 3 h")
    # The server's own words, as a page without JavaScript shows them, are the same.
    html = page.request.get("/runs").text()
    assert ">in 3 h</time>" in html and ">in 2 h</time>" not in html


def test_why_a_run_waits_in_plain_text_words_its_due_time_as_the_pages_do(app, sql):
    # ops/why_waiting's plain text (webhooks, the CLI) had a floored copy of the words: "in 2 h".
    from jobsweb.ops import why_waiting

    [(run,)] = sql("INSERT INTO job_runs (job_type, run_at) VALUES ('jobsweb.noop', now() + interval '2 h 55 min') "
                   "RETURNING id")
    with app.app_context():
        assert "in 3 h (" in why_waiting.reason(run).text
