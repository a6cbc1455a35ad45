"""Captured output: what a handler logs during an attempt is stored with the attempt and shown
on the run's page."""

import asyncio
import logging
import signal
import threading

from jobsweb.engine.worker import output
from jobsweb.testing import drain
from tests.conftest import wait_for
from tests.processes import add_many, finish


def test_each_attempt_stores_what_its_handler_logged_and_nothing_a_concurrent_attempt_logged(app, sql, spawn_worker):
    first, second = (add_many(app, "test.chatty", 1, {"name": name, "pair": True})[0] for name in ("alpha", "beta"))
    worker = spawn_worker("--forever", "--concurrency", "2", "--poll-interval", "0.05")
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")[0][0] == 2,
             message="both runs to succeed")
    worker.send_signal(signal.SIGTERM)
    assert finish(worker)[0] == 0

    outputs = dict(sql("SELECT run_id, output FROM job_attempts"))
    for run_id, mine, theirs in ((first, "alpha", "beta"), (second, "beta", "alpha")):
        lines = outputs[run_id].splitlines()
        assert [line.split(": ", 1)[1] for line in lines] == [f"{mine} begins", f"{mine} ends"]
        assert " INFO tests.chatty: " in lines[0] and " WARNING tests.chatty: " in lines[1]
        assert theirs not in outputs[run_id]


def test_an_attempt_that_logs_nothing_stores_no_output(app, sql, spawn_worker):
    add_many(app, "jobsweb.noop", 1)
    assert finish(spawn_worker())[0] == 0
    assert sql("SELECT outcome, output FROM job_attempts") == [("succeeded", None)]


def test_the_output_keeps_its_last_characters_up_to_the_setting(app, sql, spawn_worker):
    add_many(app, "test.chatty", 1, {"name": "x" * 30})
    assert finish(spawn_worker(JOBSWEB_OUTPUT_MAX_CHARS=60))[0] == 0
    [(stored,)] = sql("SELECT output FROM job_attempts")
    assert stored.startswith("[earlier output cut]\n")
    assert stored.endswith(f"{'x' * 30} ends\n") and "begins" not in stored
    assert len(stored.removeprefix("[earlier output cut]\n")) <= 60


def test_async_tasks_on_one_event_loop_each_capture_their_own_records():
    log = logging.getLogger("tests.async_output")
    log.setLevel(logging.INFO)

    async def attempt(name, mine_logged, other_logged):
        with output.capture(1000) as tail:
            log.info("%s begins", name)
            mine_logged.set()
            await other_logged.wait()
            log.info("%s ends", name)
        return tail.text()

    async def both():
        a, b = asyncio.Event(), asyncio.Event()
        return await asyncio.gather(attempt("a", a, b), attempt("b", b, a))

    # A thread of its own: a session's browser fixture leaves an event loop running in this one.
    results = []
    runner = threading.Thread(target=lambda: results.extend(asyncio.run(both())))
    try:
        runner.start()
        runner.join(timeout=30)
    finally:
        log.setLevel(logging.NOTSET)
    first, second = results
    assert [line.split(": ", 1)[1] for line in first.splitlines()] == ["a begins", "a ends"]
    assert [line.split(": ", 1)[1] for line in second.splitlines()] == ["b begins", "b ends"]


def test_the_run_page_shows_each_attempts_output_escaped_in_a_collapsed_block(app, sign_in, sql):
    [run_id] = add_many(app, "test.chatty", 1, {"name": "<script>alert('x')</script>"})
    with app.app_context():
        [ran] = drain()
    assert ran.status == "succeeded"
    client = sign_in("viewer")
    html = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert '<details class="output"><summary>Output (' in html
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; ends" in html
    assert "<script>alert" not in html


def test_in_a_browser_without_javascript_the_output_opens_on_a_click_and_shows_the_text_as_written(
        app, browser, serve, make_user):
    from playwright import sync_api

    from tests.conftest import PASSWORD

    [run_id] = add_many(app, "test.chatty", 1, {"name": "<b>bold</b>"})
    with app.app_context():
        drain()
    context = browser.new_context(base_url=serve(app), java_script_enabled=False)
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        page.goto("/sign-in")
        page.get_by_label("Email").fill(make_user("viewer"))
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.goto(f"/runs/{run_id}")
        block = page.locator("details.output pre")
        sync_api.expect(block).to_be_hidden()
        page.locator("details.output summary").click()
        sync_api.expect(block).to_be_visible()
        sync_api.expect(block).to_contain_text("<b>bold</b> ends")
        assert page.locator("details.output b").count() == 0
    finally:
        context.close()


def test_a_timed_out_attempt_keeps_no_output(app, sql, spawn_worker):
    # README, "The worker": "A timed-out attempt keeps none", not even what it logged in time.
    add_many(app, "test.chatty_timeout", 1, max_attempts=1)
    assert finish(spawn_worker())[0] == 0
    assert sql("SELECT outcome, error_type, output FROM job_attempts") == [("failed", "timeout", None)]


def test_records_from_a_thread_the_handler_starts_itself_are_not_captured(app, sql, spawn_worker):
    add_many(app, "test.thread_logs", 1)
    assert finish(spawn_worker())[0] == 0
    [(outcome, stored)] = sql("SELECT outcome, output FROM job_attempts")
    assert outcome == "succeeded" and "from the handler" in stored
    assert "from its own thread" not in stored
