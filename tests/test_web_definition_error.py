"""A definition's page shows its last error with the stack (issue 54, m6), read in a real
Chromium, masked as the run page masks it."""

from playwright import sync_api

from jobsweb.web.shown_text import MASK
from tests import test_web_look
from tests.conftest import define
from tests.test_web_look import sign_in as sign_in_page

expect = sync_api.expect
server, open_context = test_web_look.server, test_web_look.open_context  # its fixtures

SECRET = "S3CR3T"


def test_a_definitions_page_shows_its_last_errors_stack_masked_as_the_run_page_does(app, make_user, open_context, sql):
    definition = define(app, "nightly export")
    [(dead,)] = sql("""INSERT INTO job_runs (definition_id, job_type, status, attempts, finished_at, error_type, last_error,
                                             last_stack)
                       VALUES (%s, 'jobsweb.noop', 'dead', 3, now() - interval '2 hours', 'ConnectionError', %s, %s)
                       RETURNING id""",
                    [definition, f"could not connect: password={SECRET} host=db",
                     'Traceback (most recent call last):\n  File "export.py", line 12, in run\n'
                     f'    connect("postgres://app:{SECRET}@db/prod")\nConnectionError: refused'])
    # A later run succeeded, and newer ones are still to come: the error is still the last one.
    sql("INSERT INTO job_runs (definition_id, job_type, status, attempts, finished_at) "
        "VALUES (%s, 'jobsweb.noop', 'succeeded', 1, now() - interval '1 hour'), (%s, 'jobsweb.noop', 'queued', 0, null)",
        [definition, definition])
    page = open_context()
    sign_in_page(page, make_user("viewer"))
    page.goto(f"/definitions/{definition}")
    card = page.locator("#last-error")
    expect(card.get_by_role("link", name=f"run #{dead}")).to_have_attribute("href", f"/runs/{dead}")
    stack = card.get_by_role("region", name=f"Stack trace of run #{dead}")
    expect(stack).to_be_visible()
    expect(stack).to_contain_text('File "export.py", line 12, in run')
    expect(stack).to_contain_text(f"postgres://app:{MASK}@db/prod")
    expect(card).to_contain_text(f"password={MASK}")
    shown = stack.inner_text()
    assert SECRET not in page.content()
    page.goto(f"/runs/{dead}")
    assert page.get_by_role("region", name="Stack trace", exact=True).inner_text() == shown


def test_a_definition_whose_runs_never_failed_has_no_error_card(app, make_user, open_context, sql):
    definition = define(app, "calm")
    sql("INSERT INTO job_runs (definition_id, job_type, status, attempts, finished_at) "
        "VALUES (%s, 'jobsweb.noop', 'succeeded', 1, now())", [definition])
    page = open_context()
    sign_in_page(page, make_user("viewer"))
    page.goto(f"/definitions/{definition}")
    expect(page.get_by_role("heading", name="calm")).to_be_visible()
    expect(page.locator("#last-error")).to_have_count(0)
