import re

import pytest

from tests.conftest import csrf_token


def add_run(sql, status="queued", job_type="jobsweb.noop", error=None, stack=None, payload="{}",
            definition_id=None, attempts=0, created="now()"):
    return sql(f"""INSERT INTO job_runs (job_type, status, last_error, error_type, last_stack, payload,
                                        definition_id, attempts, created_at)
                   VALUES (%s, %s, %s, %s, %s, %s, %s, %s, {created}) RETURNING id""",
               [job_type, status, error, "RuntimeError" if error else None, stack, payload,
                definition_id, attempts])[0][0]


# A status chip: (status, title, count).
CHIP = r'value="(\w+)" > <span>\w+</span> <span class="chip-count" id="chip-count-\w+" title="([^"]+)">([^<]+)</span>'


def run_ids(html):
    return [int(n) for n in re.findall(r'href="/runs/(\d+)"', html)]


def test_the_list_shows_newest_first_and_filters_by_several_statuses(sign_in, sql):
    client = sign_in("viewer")
    queued, dead, done, failed = (add_run(sql, s) for s in ("queued", "dead", "succeeded", "failed"))
    assert run_ids(client.get("/runs").get_data(as_text=True)) == [failed, done, dead, queued]
    html = client.get("/runs?status=dead&status=failed").get_data(as_text=True)
    assert run_ids(html) == [failed, dead]


def test_it_filters_by_job_type_definition_error_text_and_time(sign_in, sql):
    client = sign_in("viewer")
    [(definition,)] = sql("INSERT INTO job_definitions (name, job_type) VALUES ('nightly', 'jobsweb.noop') RETURNING id")
    typed = add_run(sql, job_type="jobsweb.sleep")
    defined = add_run(sql, definition_id=definition)
    errored = add_run(sql, "failed", error="KeyError: 'invoice_100%'")
    old = add_run(sql, created="now() - interval '3 days'")
    assert run_ids(client.get("/runs?job_type=jobsweb.sleep").get_data(as_text=True)) == [typed]
    assert run_ids(client.get(f"/runs?definition={definition}").get_data(as_text=True)) == [defined]
    assert run_ids(client.get("/runs?q=invoice_100%25").get_data(as_text=True)) == [errored]
    assert run_ids(client.get("/runs?q=invoice_1000").get_data(as_text=True)) == []
    assert run_ids(client.get("/runs?until=2000-01-01T00:00").get_data(as_text=True)) == []
    recent = client.get("/runs", query_string={"since": "2001-01-01T00:00"}).get_data(as_text=True)
    assert old in run_ids(recent)
    [(day,)] = sql("SELECT to_char(now() - interval '1 day', 'YYYY-MM-DD\"T\"HH24:MI') ")
    assert old not in run_ids(client.get("/runs", query_string={"since": day}).get_data(as_text=True))


@pytest.mark.parametrize("query, words", [
    ("status=bogus", "status"), ("definition=abc", "definition"), ("since=yesterday", "since"),
    ("before=-1", "before"), ("q=" + "x" * 201, "longer than"),
    ("status=%3Cscript%3Ealert(1)%3C/script%3E", "status"),
])
def test_bad_filter_values_are_a_400_with_a_message(sign_in, query, words):
    client = sign_in("viewer")
    response = client.get(f"/runs?{query}")
    assert response.status_code == 400
    html = response.get_data(as_text=True)
    assert words in html and "<script>alert" not in html
    htmx = client.get(f"/runs?{query}", headers={"HX-Request": "true"})
    assert htmx.status_code == 400 and "<html" not in htmx.get_data(as_text=True)


def test_keyset_pages_cover_every_run_once(sign_in, sql):
    client = sign_in("viewer")
    sql("INSERT INTO job_runs (job_type, status) SELECT 'jobsweb.noop', 'dead' FROM generate_series(1, 120)")
    seen, url = [], "/runs?status=dead"
    while url:
        html = client.get(url).get_data(as_text=True)
        seen += run_ids(html)
        older = re.search(r'href="([^"]+)" rel="next"', html)
        url = older.group(1).replace("&amp;", "&") if older else None
    assert seen == list(range(120, 0, -1))
    assert "status=dead" in client.get("/runs?status=dead&before=71").get_data(as_text=True)


def test_htmx_gets_only_the_table_and_live_mode_polls(sign_in, sql):
    client = sign_in("viewer")
    add_run(sql)
    response = client.get("/runs?live=1", headers={"HX-Request": "true"})
    html = response.get_data(as_text=True)
    assert "HX-Request" in response.headers["Vary"]
    assert html.lstrip().startswith("<section") and "<html" not in html
    assert 'hx-trigger="every 3s"' in html
    assert 'hx-trigger="every 3s"' not in client.get("/runs", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert "<html" in client.get("/runs?live=1").get_data(as_text=True)


def test_hostile_errors_and_payloads_are_escaped(sign_in, sql):
    client = sign_in("viewer")
    run = add_run(sql, "dead", error="<script>alert('e')</script>", stack="Traceback <script>x()</script>",
                  payload='{"note": "<script>alert(1)</script>", "<img src=x onerror=y>": 1}')
    for path in ("/runs", f"/runs/{run}", "/"):
        html = client.get(path).get_data(as_text=True)
        assert "<script>alert" not in html and "<script>x()" not in html and "<img src=x" not in html
    detail = client.get(f"/runs/{run}").get_data(as_text=True)
    assert "&lt;script&gt;alert" in detail and "Traceback &lt;script&gt;x()" in detail


def test_secret_looking_payload_keys_are_masked(sign_in, sql):
    client = sign_in("viewer")
    run = add_run(sql, payload='{"user": "ann", "password": "hunter2", "stripe": {"api_key": "sk_live_1"},'
                               ' "items": [{"access_token": "tok"}]}')
    html = client.get(f"/runs/{run}").get_data(as_text=True)
    assert "ann" in html
    assert "hunter2" not in html and "sk_live_1" not in html and "tok\"" not in html
    assert html.count("••••••") == 3


def test_the_run_page_shows_the_attempts_timeline_and_the_last_stack(sign_in, sql):
    client = sign_in("viewer")
    run = add_run(sql, "dead", error="boom", stack="Traceback: line 1 boom", attempts=2)
    sql("""INSERT INTO job_attempts (run_id, attempt, worker, started_at, outcome, error_type, error, stack)
           VALUES (%(r)s, 1, 'w1', now(), 'failed', 'RuntimeError', 'first boom', 's1'),
                  (%(r)s, 2, 'w2', now(), 'failed', 'RuntimeError', 'boom', 'Traceback: line 1 boom')""", {"r": run})
    html = client.get(f"/runs/{run}").get_data(as_text=True)
    assert "Attempt 2" in html and "Attempt 1" in html and "first boom" in html and "w2" in html
    assert "<details class=\"stack\" open>" in html and "Traceback: line 1 boom" in html
    assert client.get("/runs/999999").status_code == 404


def test_an_operator_retries_a_dead_run_keeping_its_history(sign_in, sql):
    client = sign_in("operator")
    run = add_run(sql, "dead", error="boom", attempts=5)
    sql("UPDATE job_runs SET run_at = now() - interval '1 day', finished_at = now(), locked_by = 'w' WHERE id = %s", [run])
    response = client.post(f"/runs/{run}/retry", data={"csrf_token": csrf_token(client, "/")})
    assert response.status_code == 302
    [(status, due, locked_by, finished, attempts, error)] = sql(
        "SELECT status, run_at > now() - interval '1 minute', locked_by, finished_at, attempts, last_error "
        "FROM job_runs WHERE id = %s", [run])
    assert (status, due, locked_by, finished, attempts, error) == ("queued", True, None, None, 5, "boom")
    html = client.get(f"/runs/{run}").get_data(as_text=True)
    assert "is queued again" in html and "operator@example.com" in html and "retry" in html


def test_retry_of_a_queued_run_changes_nothing(sign_in, sql):
    client = sign_in("operator")
    run = add_run(sql, "running")
    client.post(f"/runs/{run}/retry", data={"csrf_token": csrf_token(client, "/")})
    assert sql("SELECT status FROM job_runs WHERE id = %s", [run]) == [("running",)]


def test_cancel_ends_a_queued_run_and_asks_a_running_one_to_stop(sign_in, sql):
    client = sign_in("operator")
    queued, running = add_run(sql, "queued"), add_run(sql, "running")
    token = csrf_token(client, "/")
    client.post(f"/runs/{queued}/cancel", data={"csrf_token": token})
    client.post(f"/runs/{running}/cancel", data={"csrf_token": token})
    rows = sql("SELECT id, status, cancel_requested_at IS NOT NULL, finished_at IS NOT NULL FROM job_runs ORDER BY id")
    assert rows == [(queued, "cancelled", False, True), (running, "running", True, False)]
    assert "stopping" in client.get(f"/runs/{running}").get_data(as_text=True)


@pytest.mark.parametrize("path", ["/runs/1/retry", "/runs/1/cancel", "/runs/bulk"])
def test_viewers_cannot_act_and_posts_need_the_csrf_token(sign_in, sql, path):
    add_run(sql, "dead")
    client = sign_in("viewer")
    token = csrf_token(client, "/")
    assert client.post(path, data={"csrf_token": token, "action": "retry", "ids": "1"}).status_code == 403
    client.get("/sign-out")
    operator = sign_in("operator")
    assert operator.post(path, data={"action": "retry", "ids": "1"}).status_code == 400
    assert operator.post(path, data={"action": "retry", "ids": "1"},
                         headers={"X-CSRFToken": "forged"}).status_code == 400
    assert sql("SELECT status FROM job_runs") == [("dead",)]


def test_htmx_posts_carry_the_token_in_a_header(sign_in, sql):
    client = sign_in("operator")
    run = add_run(sql, "dead")
    response = client.post(f"/runs/{run}/retry", headers={"X-CSRFToken": csrf_token(client, "/"),
                                                          "HX-Request": "true"})
    assert response.status_code == 204 or response.status_code == 302
    assert sql("SELECT status FROM job_runs") == [("queued",)]


def test_bulk_retry_of_selected_rows(sign_in, sql):
    client = sign_in("operator")
    a, b, c = add_run(sql, "dead"), add_run(sql, "dead"), add_run(sql, "succeeded")
    response = client.post("/runs/bulk", data={"csrf_token": csrf_token(client, "/"), "action": "retry",
                                               "ids": [str(a), str(c)]})
    assert response.status_code == 302
    assert sql("SELECT id, status FROM job_runs ORDER BY id") == [(a, "queued"), (b, "dead"), (c, "succeeded")]
    assert ("Retried 1 of 2 runs ticked. 1 run left as they were: only failed, dead or cancelled runs of "
            "jobsweb&#39;s own job types can be retried.") in client.get(response.headers["Location"]).get_data(as_text=True)


def test_bulk_retry_of_everything_matching_works_in_batches(app, sign_in, sql):
    app.config["JOBSWEB_BULK_BATCH"] = 7
    client = sign_in("operator")
    sql("INSERT INTO job_runs (job_type, status, last_error) SELECT 'jobsweb.noop', 'dead', 'timeout talking to bank' FROM generate_series(1, 30)")
    sql("INSERT INTO job_runs (job_type, status, last_error) SELECT 'jobsweb.noop', 'dead', 'other' FROM generate_series(1, 4)")
    add_run(sql, "succeeded", error="timeout talking to bank")
    response = client.post("/runs/bulk", data={"csrf_token": csrf_token(client, "/"), "action": "retry-all",
                                               "q": "bank"})
    assert response.status_code == 302 and "q=bank" in response.headers["Location"]
    assert dict(sql("SELECT last_error || ' ' || status, count(*) FROM job_runs GROUP BY 1")) == {
        "timeout talking to bank queued": 30, "other dead": 4, "timeout talking to bank succeeded": 1}
    [(detail,)] = sql("SELECT detail FROM jobsweb_audit_log WHERE action = 'bulk_retry'")
    assert detail["changed"] == 30 and detail["scope"] == "matching"


def test_matching_ids_come_in_batches(app, sql):
    from jobsweb.web.runlist import RunFilter, matching_ids_in_batches

    sql("INSERT INTO job_runs (job_type, status) SELECT 'jobsweb.noop', 'failed' FROM generate_series(1, 16)")
    with app.app_context():
        sizes = [len(ids) for ids in matching_ids_in_batches(RunFilter(), ("failed",), 5)]
    assert sizes == [5, 5, 5, 1]


def test_bulk_cancel_of_a_filter_cancels_waiting_runs_and_requests_running_ones(sign_in, sql):
    client = sign_in("operator")
    for status in ("queued", "failed", "running", "succeeded"):
        add_run(sql, status, job_type="jobsweb.sleep")
    add_run(sql, "queued", job_type="jobsweb.noop")
    client.post("/runs/bulk", data={"csrf_token": csrf_token(client, "/"), "action": "cancel-all",
                                    "job_type": "jobsweb.sleep"})
    assert sql("SELECT status, cancel_requested_at IS NOT NULL FROM job_runs ORDER BY id") == [
        ("cancelled", False), ("cancelled", False), ("running", True), ("succeeded", False), ("queued", False)]


def test_bulk_refuses_a_bad_action_or_selection(sign_in):
    client = sign_in("operator")
    token = csrf_token(client, "/")
    assert client.post("/runs/bulk", data={"csrf_token": token, "action": "drop"}).status_code == 400
    assert client.post("/runs/bulk", data={"csrf_token": token, "action": "retry",
                                           "ids": "1;drop"}).status_code == 400


def test_cancel_selected_with_nothing_ticked_stays_on_the_filtered_list_and_says_why(sign_in, sql):
    client = sign_in("operator")
    waiting = add_run(sql, "queued", job_type="jobsweb.sleep")
    response = client.post("/runs/bulk", data={"csrf_token": csrf_token(client, "/"), "action": "cancel",
                                               "status": "queued", "job_type": "jobsweb.sleep"})
    assert response.status_code == 302
    assert "status=queued" in response.location and "job_type=jobsweb.sleep" in response.location
    html = client.get(response.location).get_data(as_text=True)
    assert "No runs are ticked" in html and run_ids(html) == [waiting]
    assert sql("SELECT status FROM job_runs") == [("queued",)]


def test_the_payload_filter_finds_the_runs_whose_payload_contains_that_json(sign_in, sql):
    client = sign_in("viewer")
    invoice = add_run(sql, payload='{"invoice_id": 812, "customer": {"id": 7, "tier": "gold"}}')
    add_run(sql, payload='{"invoice_id": 8120}')
    add_run(sql, payload='{}')
    other_customer = add_run(sql, payload='{"invoice_id": 9, "customer": {"id": 8}}')
    assert run_ids(client.get("/runs", query_string={"payload": '{"invoice_id": 812}'}).get_data(as_text=True)) == [invoice]
    nested = client.get("/runs", query_string={"payload": '{"customer": {"tier": "gold"}}'}).get_data(as_text=True)
    assert run_ids(nested) == [invoice]
    both = client.get("/runs", query_string={"payload": '{"customer": {}}', "status": "queued"}).get_data(as_text=True)
    assert run_ids(both) == [other_customer, invoice]
    # The filter stays in the form and in the links of the page.
    assert 'name="payload" value="{&#34;customer&#34;: {}}"' in both
    assert len(run_ids(client.get("/runs?payload=%7B%7D").get_data(as_text=True))) == 4  # {} filters nothing


@pytest.mark.parametrize("raw, words", [
    ('{"invoice_id": ', "payload filter: is not valid JSON"),
    ("[812]", "payload filter: must be a JSON object"),
    ("812 ••••••", "payload filter: the words to find hold the mask"),  # 812 alone: words (test_payload_search)
    ('{"x": NaN}', "payload filter"),
    ('{"x": "\\u0000"}', "NUL"),
])
def test_a_bad_payload_filter_is_a_400_that_names_the_field(sign_in, raw, words):
    client = sign_in("viewer")
    response = client.get("/runs", query_string={"payload": raw})
    assert response.status_code == 400 and words in response.get_data(as_text=True)
    htmx = client.get("/runs", query_string={"payload": raw}, headers={"HX-Request": "true"})
    assert htmx.status_code == 400 and words in htmx.get_data(as_text=True)


@pytest.mark.parametrize("guess", ['{"password": "hunter2"}', '{"stripe": {"api_key": "sk_live_1"}}',
                                   '{"items": [{"access_token": "tok"}]}', '{"Password": "hunter2"}'])
def test_a_masked_value_cannot_be_confirmed_through_the_payload_filter(sign_in, sql, guess):
    add_run(sql, "dead", payload='{"user": "ann", "password": "hunter2", "stripe": {"api_key": "sk_live_1"},'
                                 ' "items": [{"access_token": "tok"}]}')
    client = sign_in("viewer")
    response = client.get("/runs", query_string={"payload": guess})
    html = response.get_data(as_text=True)
    assert response.status_code == 400 and "is a masked key (JOBSWEB_MASK_KEYS)" in html and run_ids(html) == []
    operator = sign_in("operator")
    bulk = operator.post("/runs/bulk", data={"action": "retry-all", "payload": guess,
                                             "csrf_token": csrf_token(operator, "/runs")})
    assert bulk.status_code == 400 and sql("SELECT status FROM job_runs") == [("dead",)]


@pytest.mark.parametrize("guess", ["password=hunter2", "postgres://app:hunter2@db"])
def test_a_masked_value_in_an_error_cannot_be_confirmed_through_the_error_search(sign_in, sql, guess):
    add_run(sql, "dead", error="connect failed: password=hunter2 url=postgres://app:hunter2@db/prod")
    response = sign_in("viewer").get("/runs", query_string={"q": guess})
    html = response.get_data(as_text=True)
    assert response.status_code == 400 and "holds a masked value" in html and run_ids(html) == []


def test_the_status_chips_count_exactly_up_to_a_cap_and_estimate_beyond(sign_in, sql, monkeypatch):
    from jobsweb.ops import stats

    client = sign_in("viewer")
    for status, n in (("dead", 3), ("queued", 2)):
        for _ in range(n):
            add_run(sql, status)
    chips = re.findall(CHIP,
                       client.get("/runs").get_data(as_text=True))
    assert {status: count for status, _, count in chips} == {
        "waiting": "0", "queued": "0", "running": "0", "succeeded": "0", "failed": "0", "dead": "3", "cancelled": "0",
        "skipped": "0", "missed": "0"} | {"queued": "2"}
    monkeypatch.setattr(stats, "CHIP_COUNT_CAP", 2)
    sql("ANALYZE job_runs")
    # A status ticked: the page is not every run, so the chips are counted (capped) as on a
    # table of more than a page.
    chips = re.findall(CHIP,
                       client.get("/runs?status=failed").get_data(as_text=True))
    counts = {status: (title, count) for status, title, count in chips}
    assert counts["dead"][1] == "≈ 3" and counts["dead"][0].startswith("about")
    assert counts["queued"] == ("exactly; all runs, whatever the other filters", "2")


def test_a_run_that_succeeded_after_failures_shows_no_error_card_and_no_red_error_in_the_list(sign_in, sql):
    client = sign_in("viewer")
    run_id = add_run(sql, "succeeded", error="ConnectionError: upstream went away", stack="Traceback ...", attempts=2)
    sql("INSERT INTO job_attempts (run_id, attempt, outcome, error_type, error) VALUES "
        "(%s, 1, 'failed', 'RuntimeError', 'ConnectionError: upstream went away'), (%s, 2, 'succeeded', NULL, NULL)",
        [run_id, run_id])
    page = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert "Last error" not in page and "error-card" not in page
    assert "ConnectionError: upstream went away" in page.split("<h2>Attempts</h2>")[1]  # the timeline keeps it
    row = client.get("/runs").get_data(as_text=True).split(f'href="/runs/{run_id}"')[1].split("</tr>")[0]
    assert "s-succeeded" in row and "upstream went away" not in row and "error-type" not in row


def test_a_retry_flash_shows_only_while_the_run_is_still_in_the_status_it_announces(sign_in, sql):
    client = sign_in("operator")
    run_id = add_run(sql, "dead", error="boom")
    token = csrf_token(client, "/")
    response = client.post(f"/runs/{run_id}/retry", data={"csrf_token": token})
    page = client.get(response.location).get_data(as_text=True)
    assert "is queued again" in page and "was queued again" not in page
    sql("UPDATE job_runs SET status = 'dead'")
    client.post(f"/runs/{run_id}/retry", data={"csrf_token": token})
    sql("UPDATE job_runs SET status = 'dead'")  # a worker took it and it died before the page loaded
    page = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert "is queued again" not in page and f"Run {run_id} was queued again; it is now dead." in page
    # Nor does the flash stay for the next page, or come back in the panel's refreshes.
    assert "queued again" not in client.get(f"/runs/{run_id}", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert "queued again" not in client.get("/runs").get_data(as_text=True)


def test_the_runs_of_a_deleted_definition_keep_its_name_and_say_it_was_deleted(sign_in, sql):
    client = sign_in("admin")
    [(definition,)] = sql("INSERT INTO job_definitions (name, job_type) VALUES ('nightly', 'jobsweb.noop') RETURNING id")
    run_id = add_run(sql, "dead", definition_id=definition, error="boom")
    ad_hoc = add_run(sql)
    client.post(f"/definitions/{definition}/delete", data={"csrf_token": csrf_token(client, "/")})
    assert sql("SELECT count(*) FROM job_definitions") == [(0,)]
    page = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert "nightly <span class=\"muted\">(deleted definition)</span>" in page and "ad hoc" not in page
    assert "ad hoc" in client.get(f"/runs/{ad_hoc}").get_data(as_text=True)
    assert "nightly (deleted definition)" in client.get("/runs").get_data(as_text=True)


def test_cancel_selected_asks_for_confirmation_like_a_single_cancel(sign_in, sql):
    client = sign_in("operator")
    add_run(sql)
    html = client.get("/runs").get_data(as_text=True)
    assert re.search(r'<button name="action" value="cancel" data-confirm="[^"]+" data-ticked="ids">Cancel selected</button>', html)
