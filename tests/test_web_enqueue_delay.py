"""The admin enqueue form's delay, beside Run at (issue 52): read as `flask jobs enqueue --delay`
reads it and handed to enqueue(delay=), so the run is due that long after the database's now()."""

import re

import pytest
from playwright.sync_api import expect

from tests import test_web_look
from tests.conftest import csrf_token

server, open_context = test_web_look.server, test_web_look.open_context  # its fixtures


@pytest.mark.parametrize("delay, seconds", [("30", 30), ("90s", 90), ("5m", 300), ("1.5h", 5400)])
def test_a_delay_makes_the_run_due_that_long_after_the_databases_now(sign_in, sql, delay, seconds):
    client = sign_in("operator")
    answer = client.post("/enqueue", data={"csrf_token": csrf_token(client, "/"), "job_type": "jobsweb.noop",
                                           "payload": "{}", "delay": delay})
    [(run, after)] = sql("SELECT id, extract(epoch FROM run_at - created_at) FROM job_runs")
    assert answer.status_code == 302 and answer.headers["Location"] == f"/runs/{run}"
    assert after == seconds


@pytest.mark.parametrize("fields, message", [
    ({"delay": "30", "run_at": "2030-01-01T00:00"}, "cannot be combined with run_at: give one or the other"),
    ({"delay": "-5"}, "&#39;-5&#39; is not a delay such as 90 (seconds), 90s, 5m, 2h or 1d"),
    ({"delay": "soon"}, "&#39;soon&#39; is not a delay such as 90 (seconds), 90s, 5m, 2h or 1d"),
    ({"delay": "99999999999"}, "must be from 0 to 315360000 seconds (3650 days; for a later time give run_at)"),
    ({"delay": "3" * 33}, "Field cannot be longer than 32 characters."),
])
def test_a_bad_delay_is_a_422_under_its_field_and_writes_nothing(sign_in, sql, fields, message):
    client = sign_in("operator")
    data = {"csrf_token": csrf_token(client, "/"), "job_type": "jobsweb.noop", "payload": "{}", **fields}
    answer = client.post("/enqueue", data=data, headers={"HX-Request": "true"})
    html = answer.get_data(as_text=True)
    assert answer.status_code == 422
    delay_field = html.split('name="delay"')[1].split("</label>")[0]
    assert message in delay_field
    assert sql("SELECT count(*) FROM job_runs") == [(0,)]


def test_an_operator_enqueues_a_run_30_seconds_later_from_the_page(app, sql, make_user, open_context):
    page = open_context()
    test_web_look.sign_in(page, make_user("operator"))
    page.goto("/enqueue")
    page.locator("select[name=job_type]").select_option("jobsweb.noop")
    page.get_by_label("Delay").fill("30")
    page.get_by_role("button", name="Enqueue").click()
    expect(page.get_by_role("heading", name=re.compile(r"Run #\d+"))).to_be_visible()
    assert sql("SELECT extract(epoch FROM run_at - created_at) FROM job_runs") == [(30,)]
