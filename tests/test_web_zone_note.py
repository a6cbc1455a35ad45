"""A new definition's timezone note says "Your browser's zone." only while that zone is the one
picked (issue 54, polish: it stayed after another zone was picked), in a real Chromium."""

import re

from playwright import sync_api

from tests import test_web_look
from tests.test_web_look import sign_in

expect = sync_api.expect
server, open_context = test_web_look.server, test_web_look.open_context  # its fixtures


def test_the_browser_zone_note_goes_when_another_zone_is_picked_and_comes_back_with_it(make_user, open_context):
    page = open_context(timezone_id="Asia/Kolkata")
    sign_in(page, make_user("admin"))
    page.goto("/definitions/new")
    zone = page.locator("#definition-form select[name=timezone]")
    note = page.locator("[data-browser-zone-note]")
    expect(zone).to_have_value(re.compile(r"^Asia/(Kolkata|Calcutta)$"))  # ICU's older name is a zone too
    kolkata = zone.input_value()
    expect(note).to_have_text("Your browser's zone.")
    zone.select_option("Europe/Madrid")
    expect(note).to_have_text("")
    zone.select_option(kolkata)
    expect(note).to_have_text("Your browser's zone.")
