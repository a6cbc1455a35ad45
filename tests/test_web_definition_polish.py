"""A definition's page, polished (issue 54): its next run says the date and time in the
definition's own timezone beside the viewer's, and a new definition says "No runs yet." once.
Read in a real Chromium."""

from zoneinfo import ZoneInfo

from playwright import sync_api

from tests import test_web_look
from tests.conftest import define
from tests.test_web_look import sign_in as sign_in_page

expect = sync_api.expect
server, open_context = test_web_look.server, test_web_look.open_context  # its fixtures


def test_a_new_definitions_next_run_has_its_date_and_zone_and_no_runs_is_said_once(app, make_user, open_context, sql):
    definition = define(app, "nightly", schedule="30 23 * * *", timezone="Asia/Tokyo")
    [(next_run_at,)] = sql("SELECT next_run_at FROM job_definitions")
    tokyo = next_run_at.astimezone(ZoneInfo("Asia/Tokyo"))
    assert (tokyo.hour, tokyo.minute) == (23, 30)
    page = open_context(timezone_id="Europe/Paris")
    sign_in_page(page, make_user("viewer"))
    page.goto(f"/definitions/{definition}")
    fact = page.locator("dt:text-is('Next run') + dd")
    # "in 5 h · 15:30:00" (Paris, the viewer's), then the definition's own date, time and zone.
    expect(fact).to_contain_text(f"· {tokyo:%a} {tokyo.day} {tokyo:%b %Y}, 23:30 in Asia/Tokyo, its timezone")
    expect(fact.locator("time")).to_contain_text(next_run_at.astimezone(ZoneInfo("Europe/Paris")).strftime("%H:%M"))
    expect(page.get_by_text("No runs yet.")).to_have_count(1)
    expect(page.locator("#definition-chart")).to_have_count(0)
