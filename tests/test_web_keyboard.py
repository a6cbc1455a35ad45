"""The runs list by keyboard alone, in a real Chromium (issue 54, item 3): a bulk cancel in a few
keystrokes from the top of the page, and every control shows where the focus is."""

from playwright import sync_api

from tests import test_web_look
from tests.test_web_look import sign_in

expect = sync_api.expect
server, open_context = test_web_look.server, test_web_look.open_context  # its fixtures

FOCUSED = """() => { const e = document.activeElement;
  return [e.tagName.toLowerCase(), e.getAttribute("name") || "", e.getAttribute("value") || "",
          (e.textContent || "").trim().slice(0, 40)]; }"""


def press_until(page, key, wanted, limit=150):
    """Press `key` until the focused element is one that `wanted([tag, name, value, text])` accepts;
    how many presses it took (None when `limit` presses did not reach one)."""
    for presses in range(1, limit + 1):
        page.keyboard.press(key)
        if wanted(page.evaluate(FOCUSED)):
            return presses
    return None


def keys_to_cancel_a_ticked_row(page, at_the_row=lambda: None):
    """From the top of the page, the keys an operator presses to tick the first run and reach
    "Cancel selected": Tab to a "Skip to the runs" link if there is one (Enter) and on to the
    first row's box, Space, then back (Shift+Tab) to the button. [forward, back, total].
    `at_the_row()` is called once the first row's box has the focus."""
    def first_box(f):
        return f[:2] == ["input", "ids"]

    def skip(f):
        return f[0] == "a" and f[3] == "Skip to the runs"

    forward = press_until(page, "Tab", lambda f: skip(f) or first_box(f))
    if skip(page.evaluate(FOCUSED)):
        page.keyboard.press("Enter")
        forward += 1 + press_until(page, "Tab", first_box)
    at_the_row()
    page.keyboard.press("Space")
    back = press_until(page, "Shift+Tab", lambda f: f[0] == "button" and f[2] == "cancel")
    return [forward, back, forward + 1 + back]


def test_a_bulk_cancel_takes_a_few_keystrokes_from_the_top_of_the_runs_page(make_user, open_context, sql):
    sql("INSERT INTO job_runs (job_type, queue) SELECT 'report.build', 'reports' FROM generate_series(1, 30)")
    [(first,)] = sql("SELECT max(id) FROM job_runs")
    page = open_context()
    sign_in(page, make_user("operator"))
    page.goto("/runs", wait_until="load")  # the select-all box shows once the scripts ran

    def bar_in_view():
        # The skip lands on the rows with the bar above them in view, not under the sticky top bar.
        expect(page.get_by_role("button", name="Cancel selected")).to_be_in_viewport()

    forward, back, total = keys_to_cancel_a_ticked_row(page, bar_in_view)
    expect(page.locator(f'input[name=ids][value="{first}"]')).to_be_checked()
    print(f"keys to a ticked row's Cancel selected: {forward} forward, {back} back, {total} in all")
    assert total <= 11, [forward, back, total]  # was 59: 52 forward, Space, 6 back
    page.once("dialog", lambda dialog: dialog.accept())
    page.keyboard.press("Enter")
    expect(page.locator(".flash")).to_have_text("Cancelled 1 of 1 run ticked.")
    assert sql("SELECT status FROM job_runs WHERE id = %s", [first]) == [("cancelled",)]


# The focused element's outline, or null when there is none to see; [what, outline].
FOCUS_RING = """() => { const e = document.activeElement, s = getComputedStyle(e);
  const what = e.tagName.toLowerCase() + (e.type ? "[" + e.type + "]" : "") + " " +
               (e.getAttribute("name") || e.textContent.trim().slice(0, 30));
  const width = parseFloat(s.outlineWidth);
  return [what, s.outlineStyle !== "none" && width >= 2 ? s.outlineStyle + " " + width + "px " + s.outlineColor : null]; }"""


def test_every_stop_on_the_runs_page_shows_where_the_focus_is_light_and_dark(make_user, open_context, sql):
    sql("INSERT INTO job_runs (job_type, queue) SELECT 'report.build', 'reports' FROM generate_series(1, 3)")
    email = make_user("admin")
    for scheme in ("light", "dark"):
        page = open_context(color_scheme=scheme)
        sign_in(page, email)
        page.goto("/runs", wait_until="load")
        stops, unringed = 0, []
        while stops < 200:
            page.keyboard.press("Tab")
            if page.evaluate("() => document.activeElement === document.body"):
                break  # past the last stop
            stops += 1
            what, ring = page.evaluate(FOCUS_RING)
            if ring is None:
                unringed.append(what)
        assert stops > 60, stops  # every stop was reached: the date inputs' fields, the rows, the pager
        assert unringed == [], (scheme, unringed)


def test_a_batch_pages_members_take_as_few_keystrokes_to_cancel_as_the_runs_page(make_user, open_context, sql):
    # The batch page shows its members in the runs list's table, bulk bar first: without the skip
    # link, its filters and the batch's own actions came before the first member's box.
    sql("INSERT INTO job_batches (id, members, pending) VALUES (1, 30, 30)")
    sql("INSERT INTO job_runs (job_type, batch_id) SELECT 'report.build', 1 FROM generate_series(1, 30)")
    page = open_context()
    sign_in(page, make_user("operator"))
    page.goto("/batches/1", wait_until="load")
    forward, back, total = keys_to_cancel_a_ticked_row(page)
    print(f"batch page: {forward} forward, {back} back, {total} in all")
    assert total <= 11, [forward, back, total]
