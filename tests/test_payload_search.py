"""Free-text payload search (issue 54, m5): words typed in the payload filter are found within the
payloads' values, as the pages show them (secret keys' values masked), bounded like the error
search (web/error_search.py matching): every search reads and masks the same window."""

import random
import time

from playwright import sync_api

from tests import test_web_look
from tests.test_search_cost import mann_whitney_z
from tests.test_web_look import sign_in as sign_in_page
from tests.test_web_runs import add_run, run_ids

expect = sync_api.expect
server, open_context = test_web_look.server, test_web_look.open_context  # its fixtures


def test_words_are_found_within_the_values_of_payloads_never_in_a_masked_one(sign_in, sql):
    client = sign_in("viewer")
    acme = add_run(sql, payload='{"customer": {"name": "Acme Corp", "tier": "gold"}, "invoice_id": 812}')
    add_run(sql, payload='{"customer": {"name": "Globex"}, "invoice_id": 9}')
    add_run(sql, payload='{"api_token": "acme-s3cret", "note": "nightly"}')
    add_run(sql, payload='{}')

    def found(words, **args):
        response = client.get("/runs", query_string={"payload": words, **args})
        assert response.status_code == 200, response.get_data(as_text=True)
        return run_ids(response.get_data(as_text=True))

    assert found("acme") == [acme] and found("CORP") == [acme] and found("81") == [acme]
    assert found("gold", status="queued") == [acme] and found("gold", status="dead") == []
    assert found("s3cret") == [] and found("acme-s") == []  # the token's value is masked on every page
    assert found("nothing like this") == []
    refused = client.get("/runs", query_string={"payload": "acme ••••••"})
    assert refused.status_code == 400 and "hold the mask" in refused.get_data(as_text=True)
    # A JSON object still means containment.
    assert found('{"invoice_id": 812}') == [acme]


def test_a_right_guess_of_a_masked_payload_value_costs_what_a_wrong_one_does(sign_in, sql, figures):
    sql("INSERT INTO job_runs (job_type, status, payload) SELECT 'jobsweb.noop', 'dead', "
        "jsonb_build_object('api_token', 'hx7kq2lm', 'n', n) FROM generate_series(1, 20000) n")
    sql("VACUUM ANALYZE job_runs")
    client = sign_in("viewer")
    for _ in range(2):
        client.get("/runs", query_string={"payload": "zz"})
    times = {"right": [], "wrong": []}
    order = random.Random(54)
    for pair in zip(["hx7kq2", "x7kq2l", "7kq2lm", "hx7kq2lm"] * 4, ["hx7kq9", "x7kq2p", "7kq2ln", "hx7kq2lz"] * 4):
        guesses = list(zip(("right", "wrong"), pair))
        order.shuffle(guesses)
        for kind, words in guesses:
            started = time.monotonic()
            response = client.get("/runs", query_string={"payload": words})
            times[kind].append(time.monotonic() - started)
            assert response.status_code == 200 and "No runs match" in response.get_data(as_text=True)
    z = mann_whitney_z(times["right"], times["wrong"])
    figures(right_median_s=round(sorted(times["right"])[8], 3), wrong_median_s=round(sorted(times["wrong"])[8], 3),
            mann_whitney_z=round(z, 2))
    assert abs(z) < 3, (z, times)


def test_an_operator_finds_a_run_by_a_word_of_its_payload(sql, make_user, open_context):
    acme = add_run(sql, payload='{"customer": "Acme Corp", "invoice_id": 812}')
    add_run(sql, payload='{"customer": "Globex"}')
    page = open_context()
    sign_in_page(page, make_user("viewer"))
    page.goto("/runs")
    page.get_by_label("Payload contains").fill("acme")
    page.get_by_label("Payload contains").press("Enter")
    expect(page.locator(f'#runs-table a[href="/runs/{acme}"]')).to_be_visible()
    expect(page.locator("#runs-table tbody tr")).to_have_count(1)
    expect(page.locator(".table-tools .muted").first).to_contain_text("Showing 1 of 1 run")
