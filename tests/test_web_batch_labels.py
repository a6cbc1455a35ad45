"""Batch labels (issue 54, m9): batch(label=...) names a batch on the batch pages, which search
by it, read in a real Chromium; and "Cancel the rest" asks with the number it will cancel."""

import re

import pytest
from playwright import sync_api

from jobsweb import InvalidInput, batch, get_batch
from tests import test_web_look
from tests.conftest import committed
from tests.test_web_look import sign_in as sign_in_page

expect = sync_api.expect
server, open_context = test_web_look.server, test_web_look.open_context  # its fixtures


def labelled(app, label, members):
    with committed(app), batch(on_finish="jobsweb.noop", label=label) as made:
        ids = [made.enqueue("jobsweb.noop", {"n": n}) for n in range(members)]
    return made.id, ids


def test_a_batchs_label_is_shown_and_searched_on_the_batch_pages(app, make_user, open_context, sql):
    march, members = labelled(app, "March invoices", 3)
    april, _ = labelled(app, "April batch_ids", 1)
    plain, _ = labelled(app, None, 1)
    sql("UPDATE job_runs SET status = 'succeeded', finished_at = now() WHERE id = %s", [members[0]])
    with app.app_context():
        assert get_batch(march).label == "March invoices" and get_batch(plain).label is None
    page = open_context()
    page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    asked = []
    sign_in_page(page, make_user("operator"))
    page.goto("/batches")
    rows = page.locator("#batches tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.filter(has_text=f"#{march}").locator("td[data-label=label]")).to_have_text("March invoices")
    page.get_by_label("Label").fill("MARCH")
    page.get_by_role("button", name="Search").click()
    expect(page).to_have_url(re.compile(r"q=MARCH"))
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(f"#{march}")
    # % and _ are themselves: "h_i" finds April's label only ("March invoices" has "h i"), "%" none.
    page.goto("/batches?q=h_i")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(f"#{april}")
    page.goto("/batches?q=%25")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("No batch has a label with “%” in it")

    page.goto("/batches?q=march")
    page.get_by_role("link", name=f"#{march}", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Batch #{march} March invoices")
    # 3 members, one succeeded: the rest is 2, as the confirmation says before it cancels them.
    # After the load event: clicked before confirm.js had run, the form was sent unasked, as
    # without JavaScript (the fresh-clone make test, under load).
    page.wait_for_load_state("load")
    page.get_by_role("button", name="Cancel the rest").click()
    expect(page.locator(".flash").first).to_contain_text("2")
    assert asked == [f"Cancel the 2 members of batch #{march} not yet ended?"]
    assert sql("SELECT count(*) FROM job_runs WHERE batch_id = %s AND batch_callback IS NULL "
               "AND status = 'cancelled'", [march]) == [(2,)]


@pytest.mark.parametrize("label, words", [
    ("", "must be text of 1 to 200 characters"), ("x" * 201, "must be text of 1 to 200 characters"),
    (7, "must be text of 1 to 200 characters"), ("two\nlines", "must not contain the control character"),
])
def test_a_bad_label_is_refused_naming_it(app, label, words):
    with app.app_context(), pytest.raises(InvalidInput) as refused:
        batch(label=label)
    assert refused.value.field == "label" and words in refused.value.message


def test_a_search_longer_than_any_label_is_refused_naming_it(sign_in):
    bad = sign_in("viewer").get("/batches?q=" + "x" * 201)
    assert bad.status_code == 400 and "q (a label) must be at most 200 characters" in bad.get_data(as_text=True)
