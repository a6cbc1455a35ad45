"""The metrics page: each job type's attempts, failures, durations and waits over a window,
sortable and linked to its runs, read from a rollup that each view brings up to date."""

import re

import pytest

from jobsweb.ops.job_type_metrics import BOUNDS, quantile


def finished(sql, job_type, seconds, ago="1 minute", outcome="succeeded", waited=0.0, n=1):
    """n runs of `job_type` whose one attempt took `seconds`, ended `ago`, after waiting `waited`
    seconds from due to start."""
    status = "succeeded" if outcome == "succeeded" else "dead"
    sql(f"""WITH t AS (SELECT now() - interval '{ago}' AS done),
            runs AS (
                INSERT INTO job_runs (job_type, status, attempts, max_attempts, run_at, started_at, finished_at)
                SELECT %(job_type)s, %(status)s, 1, 1,
                       done - make_interval(secs => %(seconds)s + %(waited)s),
                       done - make_interval(secs => %(seconds)s), done
                FROM t, generate_series(1, %(n)s)
                RETURNING id, started_at, finished_at)
            INSERT INTO job_attempts (run_id, attempt, started_at, finished_at, outcome)
            SELECT id, 1, started_at, finished_at, %(outcome)s FROM runs""",
        {"job_type": job_type, "status": status, "seconds": seconds, "waited": waited, "n": n, "outcome": outcome})


def rows(html):
    """{job type: [runs, failed, failure rate, p50, p95, p95 wait]} as the table shows them (one
    attempt each here: the Attempts column, between runs and failed, is left out)."""
    out = {}
    for row in re.findall(r"<tr>\s*<td><a href=\"/runs\?job_type=[^\"]+\"[^>]*><code>([^<]+)</code></a></td>(.*?)</tr>",
                          html, re.S):
        out[row[0]] = re.findall(r'<td class="num" data-label="(?!attempts")[^"]+">([^<]*)</td>', row[1])
    return out


def test_it_shows_each_job_types_runs_failures_durations_and_waits_linked_to_its_runs(sign_in, sql):
    client = sign_in("viewer")
    finished(sql, "send_invoice", 0.2, n=18, waited=1.0)
    finished(sql, "send_invoice", 30, n=2, outcome="failed", waited=100)
    finished(sql, "resize_image", 2.0, n=3)
    html = client.get("/job-metrics").get_data(as_text=True)
    figures = rows(html)
    assert list(figures) == ["send_invoice", "resize_image"]  # most runs first
    runs, failed, rate, p50, p95, wait = figures["send_invoice"]
    assert (runs, failed, rate) == ("20", "2", "10.0%")
    # Within a bucket of the histogram (a factor of 1.5) of the true 0.2 s, 30 s and 100 s.
    assert p50.endswith(" ms") and 0.2 / 1.5 <= float(p50.split()[0]) / 1000 <= 0.2 * 1.5, p50
    assert p95.endswith(" s") and 30 / 1.5 <= float(p95.split()[0]) <= 30 * 1.5, p95
    assert wait.endswith(" s") and 100 / 1.5 <= float(wait.split()[0]) <= 100 * 1.5, wait
    assert figures["resize_image"][:3] == ["3", "0", "0.0%"]
    assert 'href="/runs?job_type=send_invoice"' in html
    assert 'aria-current="page">Metrics</a>' in html  # in the nav, as the page one is on


def test_the_window_chooses_which_attempts_count(sign_in, sql):
    client = sign_in("viewer")
    finished(sql, "recent", 1, ago="5 minutes")
    finished(sql, "this_morning", 1, ago="3 hours")
    finished(sql, "last_week", 1, ago="5 days")
    finished(sql, "long_ago", 1, ago="9 days")
    assert set(rows(client.get("/job-metrics?window=1h").get_data(as_text=True))) == {"recent"}
    assert set(rows(client.get("/job-metrics?window=24h").get_data(as_text=True))) == {"recent", "this_morning"}
    assert set(rows(client.get("/job-metrics?window=7d").get_data(as_text=True))) == {
        "recent", "this_morning", "last_week"}


def test_each_view_adds_only_the_attempts_finished_since_the_last_one(sign_in, sql):
    client = sign_in("viewer")
    finished(sql, "send_invoice", 1, n=4, ago="2 minutes")
    assert rows(client.get("/job-metrics").get_data(as_text=True))["send_invoice"][0] == "4"
    assert rows(client.get("/job-metrics?window=1h").get_data(as_text=True))["send_invoice"][0] == "4"
    sql("UPDATE job_type_metrics_state SET sealed_until = now() - interval '1 minute'")  # viewed a minute ago
    finished(sql, "send_invoice", 1, n=3, ago="30 seconds")
    finished(sql, "send_invoice", 1, n=5, ago="1 second")  # not settled yet: counted by a later view
    assert rows(client.get("/job-metrics").get_data(as_text=True))["send_invoice"][0] == "7"
    assert sql("SELECT span, sum(runs) FROM job_type_metrics GROUP BY span ORDER BY span") == [
        ("hour", 7), ("minute", 7)]


def test_the_columns_sort_both_ways_and_say_which_is_sorted(sign_in, sql):
    client = sign_in("viewer")
    finished(sql, "b_slow", 20, n=2)
    finished(sql, "a_fast", 0.01, n=5)
    finished(sql, "c_mid", 1, n=3, outcome="failed")
    assert list(rows(client.get("/job-metrics?sort=p95").get_data(as_text=True))) == ["b_slow", "c_mid", "a_fast"]
    html = client.get("/job-metrics?sort=job_type").get_data(as_text=True)
    assert list(rows(html)) == ["a_fast", "b_slow", "c_mid"]
    assert re.search(r'<th aria-sort="ascending"[^>]*>\s*<a href="/job-metrics\?window=24h&amp;sort=job_type&amp;order=desc"', html)
    assert list(rows(client.get("/job-metrics?sort=job_type&order=desc").get_data(as_text=True))) == [
        "c_mid", "b_slow", "a_fast"]
    assert list(rows(client.get("/job-metrics?sort=failures").get_data(as_text=True)))[0] == "c_mid"


def test_the_chart_counts_attempts_per_bar_for_all_job_types_or_the_chosen_one(sign_in, sql):
    client = sign_in("viewer")
    finished(sql, "send_invoice", 1, n=4, ago="3 minutes")
    finished(sql, "send_invoice", 1, n=2, ago="3 minutes", outcome="failed")
    finished(sql, "resize_image", 1, n=7, ago="3 minutes")

    def chart(query):
        html = client.get(f"/job-metrics?window=1h{query}").get_data(as_text=True)
        svg = html[html.index('<svg class="chart wide"'):html.index("</svg>")]
        return svg, re.findall(r'<rect class="(ok|bad)"', svg)

    svg, bars = chart("")
    assert len(bars) == 120  # 60 minutes, a succeeded and a failed bar each
    assert "11 succeeded, 2 failed" in svg and " · 11 succeeded" in svg and " · 2 failed" in svg
    svg, _ = chart("&job_type=send_invoice")
    assert "of send_invoice: 4 succeeded, 2 failed" in svg
    # The week's bars are 4 hours, labelled by day (UTC's, which static/chart-days.js makes the viewer's).
    html = client.get("/job-metrics?window=7d").get_data(as_text=True)
    assert len(re.findall(r'<rect class="ok"', html)) == 2 * 42  # in each drawing: a laptop's and a phone's
    assert re.search(r'<text x="[\d.]+" y="140" data-day="[^"]+">(Mon|Tue|Wed|Thu|Fri|Sat|Sun) \d\d</text>', html)


@pytest.mark.parametrize("query, words", [
    ("window=garbage", "window: &#39;garbage&#39; is not one of 1h, 24h, 7d"),
    ("window=1d", "window"), ("sort=drop%20table", "sort: "), ("order=sideways", "order: "),
    ("job_type=" + "x" * 201, "job_type is longer than 200 characters"),
    ("window=%00", "window"),
])
def test_a_bad_query_string_is_a_400_that_names_the_field(sign_in, query, words):
    client = sign_in("viewer")
    response = client.get(f"/job-metrics?{query}")
    assert response.status_code == 400, response.status_code
    assert words in response.get_data(as_text=True)
    htmx = client.get(f"/job-metrics?{query}", headers={"HX-Request": "true"})
    assert htmx.status_code == 400 and "<html" not in htmx.get_data(as_text=True)


def test_anyone_signed_in_may_see_it_and_nobody_else(client, sign_in):
    response = client.get("/job-metrics")
    assert response.status_code == 302 and "/sign-in" in response.location
    for role in ("viewer", "operator", "admin"):
        assert sign_in(role).get("/job-metrics").status_code == 200
        client.get("/sign-out")


def test_a_job_type_is_escaped(sign_in, sql):
    finished(sql, "<img src=x onerror=alert(1)>", 1)
    html = sign_in("viewer").get("/job-metrics").get_data(as_text=True)
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html


def test_a_quantile_is_interpolated_within_its_bucket():
    cumulative = [0] * len(BOUNDS)
    i = BOUNDS.index(next(b for b in BOUNDS if b >= 1))
    for k in range(i, len(BOUNDS)):
        cumulative[k] = 10  # ten values between BOUNDS[i - 1] and BOUNDS[i]
    assert BOUNDS[i - 1] < quantile(cumulative, 10, 0.5) < BOUNDS[i]
    assert quantile(cumulative, 0, 0.5) is None
    assert quantile([0] * len(BOUNDS), 3, 0.95) == float("inf")  # every value past the last bound


def test_a_long_backlog_is_counted_a_chunk_at_a_time_and_the_page_says_it_is_still_counting(
        sign_in, sql, monkeypatch):
    from jobsweb.ops import job_type_metrics
    from jobsweb.web import metrics_pages

    monkeypatch.setattr(job_type_metrics, "CHUNK", 1)
    monkeypatch.setattr(metrics_pages, "SEAL_BUDGET", 0)  # one chunk per view
    client = sign_in("viewer")
    for hours in (5, 4, 3, 2):
        # Two attempts of one instant, more than a chunk: both are counted by the same view.
        finished(sql, "send_invoice", 1, n=2, ago=f"{hours} hours")
    seen = []
    for _ in range(6):
        html = client.get("/job-metrics").get_data(as_text=True)
        seen.append((rows(html).get("send_invoice", ["0"])[0], "Still counting older attempts" in html))
    assert seen == [("2", True), ("4", True), ("6", True), ("8", True), ("8", False), ("8", False)]


def test_a_view_does_not_wait_for_another_one_that_is_counting(sign_in, sql, database_url_for_tests):
    import psycopg

    from jobsweb.core.database import libpq_url

    client = sign_in("viewer")
    finished(sql, "send_invoice", 1, n=2)
    client.get("/job-metrics")
    finished(sql, "send_invoice", 1, n=5, ago="30 seconds")
    sql("UPDATE job_type_metrics_state SET sealed_until = now() - interval '1 minute'")
    with psycopg.connect(libpq_url(database_url_for_tests)) as other:
        other.execute("SELECT 1 FROM job_type_metrics_state FOR UPDATE")  # counting, in another process
        html = client.get("/job-metrics").get_data(as_text=True)
        assert rows(html)["send_invoice"][0] == "2"
    assert rows(client.get("/job-metrics").get_data(as_text=True))["send_invoice"][0] == "7"


# -- in a real Chromium ------------------------------------------------------------------------

SIZES = {"laptop": {"width": 1366, "height": 900}, "phone": {"width": 390, "height": 844}}
NOT_MINOR = ["moderate", "serious", "critical"]


def test_in_a_browser_the_page_has_no_axe_finding_fits_a_phone_and_sorts_and_links(
        app, sql, make_user, browser, serve):
    from playwright import sync_api

    from tests.test_web_look import AXE, look_at, sign_in as browser_sign_in

    if not AXE.exists():
        raise RuntimeError(f"{AXE} is missing: `make test` installs axe-core from the npm registry")
    finished(sql, "billing.charge_invoice", 0.8, n=30, waited=2)
    finished(sql, "billing.charge_invoice", 12, n=3, outcome="failed", ago="3 hours")
    finished(sql, "reports.nightly_export_of_every_customer_account", 95, n=2, ago="20 hours", waited=40)
    finished(sql, "send_invoice", 0.05, n=12, ago="3 days")
    queued_later = sql("INSERT INTO job_runs (job_type, run_at) VALUES ('send_invoice', now() + interval '1 day') "
                       "RETURNING id")[0][0]
    base = serve(app)
    email = make_user("admin")
    axe = AXE.read_text()
    findings, sideways, refused = [], [], []
    urls = ["/job-metrics", "/job-metrics?window=7d&sort=p95&job_type=send_invoice", "/job-metrics?window=1h",
            f"/runs/{queued_later}", f"/runs/{queued_later}/delete"]
    for scheme in ("light", "dark"):
        context = browser.new_context(base_url=base, viewport=SIZES["laptop"], color_scheme=scheme, locale="en-GB")
        context.set_default_timeout(15_000)
        page = context.new_page()
        page.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)
        browser_sign_in(page, email)
        for url in urls:
            page.goto(url)
            found, wide = look_at(page, axe, NOT_MINOR, SIZES)
            findings += [(scheme, url, *f) for f in found]
            sideways += [(scheme, url, *w) for w in wide]
            if url == "/job-metrics":
                for size, viewport in SIZES.items():
                    page.set_viewport_size(viewport)
                    page.screenshot(path=f"/tmp/28b/metrics-{size}-{scheme}.png", full_page=True)
            page.set_viewport_size(SIZES["laptop"])
        if scheme == "light":
            # Sorting and the links work as a person uses them.
            page.goto("/job-metrics?window=7d")
            page.get_by_role("link", name="p95 duration").click()
            sync_api.expect(page.locator("th[aria-sort=descending]")).to_contain_text("p95 duration")
            first = page.locator("table.metrics tbody tr").first
            sync_api.expect(first).to_contain_text("reports.nightly_export_of_every_customer_account")
            page.get_by_role("link", name="billing.charge_invoice", exact=True).click()
            sync_api.expect(page).to_have_url(re.compile(r"/runs\?job_type=billing.charge_invoice$"))
            page.goto("/")
            page.get_by_role("navigation", name="Pages").get_by_role("link", name="Metrics").click()
            sync_api.expect(page.get_by_role("heading", name="Metrics")).to_be_visible()
        context.close()
    assert findings == []
    assert sideways == []
    assert refused == []
