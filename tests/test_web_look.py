"""How the admin screen reads in a real Chromium: times in the viewer's zone, date inputs read in
it, no sideways scrolling on a phone, no axe-core finding at all (tap targets too) on any page in
light or dark, and the pictures (a definition's last runs, each worker's current runs)."""

import re
from datetime import timedelta

import pytest
from playwright import sync_api

from jobsweb import batch
from tests.conftest import PASSWORD, ROOT, csrf_token
from tests.test_web_incidents import overdue_incident

AXE = ROOT / ".cache" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
SIZES = {"laptop": {"width": 1366, "height": 900}, "phone": {"width": 390, "height": 844}}
# Where issue 39 read every page: a laptop of 1280 x 800 and a phone of 390 x 844.
AXE_SIZES = {"laptop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
PAGES = ["/", "/runs", "/runs?status=dead&sort=finished", "/runs/{running}", "/runs/{paused}", "/runs/{waiting}",
         "/runs/{failed}", "/runs/{succeeded}", "/runs/{dead}", "/runs/{reported}", "/runs/{succeeded}/delete",
         "/definitions", "/definitions?kind=external", "/definitions/new", "/definitions/{definition}",
         "/definitions/{definition}/edit", "/definitions/{definition}/delete", "/definitions/{external}", "/enqueue",
         "/batches", "/batches/{batch}", "/queues", "/workers", "/job-metrics", "/job-metrics?by=queue&window=7d",
         "/incidents", "/users", "/audit"]

expect = sync_api.expect

# axe's findings of the impacts given, as (rule, [where]) pairs; target-size (24 x 24 px tap
# targets, WCAG 2.2), which axe leaves off unless asked, included.
FINDINGS = """async (impacts) => (await axe.run(document, {resultTypes: ["violations"],
                                                    rules: {"target-size": {enabled: true}}})).violations
    .filter(v => impacts.includes(v.impact))
    .map(v => [v.id, v.nodes.slice(0, 4).map(n => n.target.join(" ") + " " + (n.failureSummary || ""))])"""
IMPACTS = ["minor", "moderate", "serious", "critical"]  # no page may have a finding of any of them

# Links among words that only their colour sets apart (issue 54, m10: axe's link-in-text-block at
# 2.78:1 light, 1.86:1 dark), stricter than axe, which passes a link 3:1 from its text: a visible
# link in a block that has text of its own outside links and buttons, with no underline or border
# of its own. As "text where: link" strings.
UNMARKED_LINKS = """() => {
  const inline = e => getComputedStyle(e).display.startsWith("inline");
  return [...document.querySelectorAll("main a[href]")].filter(a => a.getClientRects().length).filter(a => {
    const style = getComputedStyle(a);
    if (!inline(a) || style.textDecorationLine.includes("underline") || style.borderBottomStyle !== "none") return false;
    let block = a.parentElement;
    while (inline(block)) block = block.parentElement;
    const texts = document.createTreeWalker(block, NodeFilter.SHOW_TEXT);
    for (let t; (t = texts.nextNode());) {
      if (t.data.trim() && !t.parentElement.closest("a, button, [aria-hidden=true]") && t.parentElement.getClientRects().length) return true;
    }
    return false;
  }).map(a => a.textContent.trim().slice(0, 40) + " in: " + a.parentElement.textContent.trim().replace(/\\s+/g, " ").slice(0, 60));
}"""
# Pointer targets under 24 x 24 px (issue 54, m11: WCAG 2.5.8's size; axe's target-size lets a small
# target pass when nothing is near it): every control, and every link but those among words or in
# a table's cells, whose size the line's height sets (2.5.8's inline exception). As "what W x H".
SMALL_TARGETS = """() => [...document.querySelectorAll(
      "a[href], button, input:not([type=hidden]), select, textarea, summary")]
  .filter(e => e.getClientRects().length && getComputedStyle(e).visibility !== "hidden")
  .filter(e => !(e.matches("a") && e.closest("p, li, td, dd, h1, h2, .crumbs, .legend, .hint, small")))
  .map(e => [e, e.getBoundingClientRect()]).filter(([e, r]) => r.width < 23.5 || r.height < 23.5)
  .map(([e, r]) => `${e.tagName.toLowerCase()}${e.type ? "[" + e.type + "]" : ""} ${(e.textContent || e.name || "").trim().slice(0, 30)} ${Math.round(r.width)} x ${Math.round(r.height)}`)"""

# Controls that show no ring when they have the focus (issue 54, item 3): each focused in turn (a
# key pressed first, so that the browser shows the focus as after a Tab) and its outline read.
# The stops inside a date input are tests/test_web_keyboard.py's. As "what" strings.
NO_FOCUS_RING = """() => {
  const unringed = [];
  for (const e of document.querySelectorAll(
      "a[href], button, input:not([type=hidden]), select, textarea, summary, [tabindex]:not([tabindex='-1'])")) {
    if (!e.getClientRects().length || getComputedStyle(e).visibility === "hidden" || e.disabled) continue;
    e.focus({preventScroll: true});
    if (document.activeElement !== e) continue;
    const style = getComputedStyle(e);
    if (style.outlineStyle === "none" || parseFloat(style.outlineWidth) < 2) {
      unringed.push(e.tagName.toLowerCase() + " " + (e.getAttribute("name") || e.textContent.trim().slice(0, 30)));
    }
  }
  document.activeElement.blur();
  return unringed;
}"""


def look_at(page, axe, impacts, sizes=SIZES):
    """The open page at each of `sizes`: axe's findings of `impacts` as (size, rule, where), with
    links among words marked by colour alone, targets under 24 px and controls without a focus
    ring (UNMARKED_LINKS, SMALL_TARGETS, NO_FOCUS_RING) as findings too, and (size, [page width,
    window width]) when it scrolls sideways."""
    findings, sideways = [], []
    for size, viewport in sizes.items():
        page.set_viewport_size(viewport)
        # Evaluated through the driver, not a <script> in the page: the CSP refuses those.
        if not page.evaluate("() => typeof axe !== 'undefined'"):
            page.evaluate(axe)
        findings += [(size, rule, where) for rule, where in page.evaluate(FINDINGS, impacts)]
        page.keyboard.press("Shift")  # the keyboard's modality for NO_FOCUS_RING, nothing moved
        findings += [(size, rule, where) for rule, check in (("unmarked-link", UNMARKED_LINKS),
                                                              ("small-target", SMALL_TARGETS),
                                                              ("no-focus-ring", NO_FOCUS_RING))
                     if (where := page.evaluate(check))]
        width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        if width[0] > width[1]:
            sideways.append((size, width))
    return findings, sideways


@pytest.fixture
def server(app, serve):
    return serve(app)


@pytest.fixture
def open_context(browser, server):
    """open_context(**options): a signed-out browser context on the server, closed at the end."""
    contexts = []

    def open_(**options):
        context = browser.new_context(**{"base_url": server, "viewport": SIZES["laptop"], "locale": "en-GB", **options})
        context.set_default_timeout(15_000)
        contexts.append(context)
        return context.new_page()

    expect.set_options(timeout=15_000)
    yield open_
    for context in contexts:
        context.close()


def sign_in(page, email):
    page.goto("/sign-in")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Dashboard")).to_be_visible()


def seed(app, sql):
    """A little of everything the pages show: runs in every state with errors, a definition with
    history, a worker holding a run, an open incident; (run id, definition id)."""
    overdue_incident(app, sql, name="nightly report")
    [(definition,)] = sql("SELECT id FROM job_definitions")
    sql("""INSERT INTO job_runs (definition_id, job_type, status, attempts, created_at, started_at, finished_at,
                                 last_error, error_type)
           SELECT %(d)s, 'jobsweb.noop', s, 1, now() - n * interval '1 hour', now() - n * interval '1 hour',
                  now() - n * interval '1 hour' + n * interval '1 second',
                  CASE WHEN s = 'dead' THEN 'PermanentError: the invoice service said no, twice, at length' END,
                  CASE WHEN s = 'dead' THEN 'PermanentError' END
           FROM unnest(ARRAY['succeeded', 'dead', 'succeeded', 'cancelled']) WITH ORDINALITY AS t(s, n)""",
        {"d": definition})
    sql("INSERT INTO job_runs (definition_id, job_type, status, scheduled_for, finished_at) "
        "VALUES (%s, 'jobsweb.noop', 'missed', now() - interval '30 minutes', now())", [definition])
    sql("INSERT INTO job_workers (id, host, pid) VALUES ('web-1:4242:abc', 'web-1', 4242)")
    [(run,)] = sql("INSERT INTO job_runs (job_type, status, attempts, started_at, locked_by, locked_until) "
                   "VALUES ('send_invoice', 'running', 1, now(), 'web-1:4242:abc', now() + interval '1 minute') "
                   "RETURNING id")
    sql("INSERT INTO job_attempts (run_id, attempt, worker, outcome, started_at, finished_at, error, error_type) "
        "SELECT id, 1, 'web-1:4242:abc', 'failed', now(), now(), last_error, error_type FROM job_runs "
        "WHERE status = 'dead'")
    return run, definition


def more_of_everything(app, sql, make_user):
    """seed()'s runs and more, so that no page the nav or a link reaches is empty: a run behind a
    paused queue, a waiting batch member, a failed run due again, an external definition with its
    reported run, queues with limits, a quieted worker, a deploy mark, users, a notification,
    dead-run incidents open and resolved; the ids the pages' URLs need."""
    app.config["JOBSWEB_ALERT_WEBHOOK_URL"] = "https://hooks.example.com/very-secret"  # a notification row
    running, definition = seed(app, sql)
    [(external,)] = sql("INSERT INTO job_definitions (name, job_type, schedule, external, ping_token, next_run_at) "
                        "VALUES ('nightly backup', 'jobsweb.external', '0 3 * * *', true, 'look-token', "
                        "now() + interval '1 hour') RETURNING id")
    [(reported,)] = sql("INSERT INTO job_runs (definition_id, job_type, status, attempts, started_at, finished_at) "
                        "VALUES (%s, 'jobsweb.external', 'succeeded', 1, now(), now()) RETURNING id", [external])
    sql("INSERT INTO job_attempts (run_id, attempt, outcome, started_at, finished_at, output) "
        "VALUES (%s, 1, 'succeeded', now(), now(), 'pg_dump: <done> & 2 tables dumped')", [reported])
    [(succeeded,)] = sql("SELECT min(id) FROM job_runs WHERE status = 'succeeded' AND definition_id = %s", [definition])
    sql("INSERT INTO job_attempts (run_id, attempt, worker, outcome, started_at, finished_at) "
        "SELECT id, 1, 'web-1:4242:abc', 'succeeded', started_at, finished_at FROM job_runs WHERE id = %s", [succeeded])
    [(dead,)] = sql("SELECT min(id) FROM job_runs WHERE status = 'dead'")
    sql("INSERT INTO job_queues (name, paused) VALUES ('reports', true)")
    sql("INSERT INTO job_queues (name, concurrency_limit, rate_limit, rate_seconds) VALUES ('billing', 2, 10, 60)")
    [(paused,)] = sql("INSERT INTO job_runs (job_type, queue, priority) VALUES ('nightly.ledger', 'reports', 7) "
                      "RETURNING id")
    [(failed,)] = sql("INSERT INTO job_runs (job_type, queue, status, attempts, max_attempts, run_at, last_error, "
                      "error_type) VALUES ('billing.charge', 'billing', 'failed', 1, 3, now() + interval '5 minutes', "
                      "'ConnectionError: the card service timed out', 'ConnectionError') RETURNING id")
    sql("INSERT INTO job_attempts (run_id, attempt, outcome, started_at, finished_at, error, error_type) "
        "SELECT id, 1, 'failed', now(), now(), last_error, error_type FROM job_runs WHERE id = %s", [failed])
    sql("INSERT INTO job_workers (id, host, pid, job_types, quiet_at, quiet_by) "
        "VALUES ('web-2:77:def', 'web-2', 77, ARRAY['billing.charge'], now(), 'ada@example.com')")
    sql("INSERT INTO jobsweb_deploy_marks (label, marked_by, marked_at) VALUES ('v1.2', 'cli:ada', "
        "now() - interval '2 hours')")
    sql("INSERT INTO jobsweb_audit_log (user_email, action, target_type, target_id) "
        "VALUES ('ada@example.com', 'retry', 'run', %s)", [running])
    # Dead-run incidents, open and resolved, whose texts link their runs among words (the
    # Incidents page's history table, the dashboard's alerts: issue 54's link-in-text-block).
    sql("INSERT INTO jobsweb_alert_incidents (kind, job_type, subject, summary, since, run_id, run_count, "
        "resolved_at, resolution) VALUES "
        "('dead', 'billing.charge', 'billing.charge', '3 runs of billing.charge died', now() - interval '3 hours', "
        "%(dead)s, 3, now() - interval '2 hours', 'a run succeeded'), "
        "('dead', 'jobsweb.noop', 'jobsweb.noop', '2 runs of jobsweb.noop died', now() - interval '1 hour', "
        "%(dead)s, 2, NULL, NULL)", {"dead": dead})
    with app.app_context():
        with batch(on_finish="jobsweb.noop", payload={"export": 7}) as export:
            waiting = export.enqueue("jobsweb.noop", after=[export.enqueue("jobsweb.noop")])
    make_user("viewer")
    make_user("operator")
    return dict(running=running, definition=definition, external=external, reported=reported, succeeded=succeeded,
                dead=dead, paused=paused, failed=failed, waiting=waiting, batch=export.id)


def wrong_password(page):
    page.get_by_label("Email").fill("nobody@example.com")
    page.get_by_label("Password").fill("not the password")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_be_visible()


def refused_definition(page):
    """Send the new definition form with a taken name and a bad schedule: it comes back with its errors."""
    page.locator("input[name=name]").fill("nightly report")
    page.locator("input[name=schedule]").fill("61 * * * *")
    page.get_by_role("button", name="Create definition").click()
    expect(page.locator("#definition-form .field-error").first).to_be_visible()


# What a page shows only once something on it is used, looked at again after the page itself:
# {URL: (the step, the sizes it is looked at)}.
PHONE = {"phone": AXE_SIZES["phone"]}
AFTER = {
    "/sign-in": (wrong_password, AXE_SIZES),
    "/": (lambda page: page.locator("details.menu summary").click(), PHONE),  # the phone's menu, open
    "/runs": (lambda page: page.get_by_label("More filters").check(), PHONE),
    "/runs?status=dead&sort=finished": (  # the bulk delete's confirmation page
        lambda page: page.get_by_role("button", name="Delete all matching…").click(), AXE_SIZES),
    "/definitions/new": (refused_definition, AXE_SIZES),
}


def test_every_page_fits_a_phone_and_has_no_axe_finding_at_all_at_both_sizes_light_and_dark(
        app, sql, make_user, open_context):
    if not AXE.exists():
        raise RuntimeError(f"{AXE} is missing: `make test` installs axe-core from the npm registry")
    ids = more_of_everything(app, sql, make_user)
    email = make_user("admin")
    axe = AXE.read_text()
    findings, sideways, refused, looked = [], [], [], 0

    def look(page, scheme, url):
        """The page at `url` at both sizes, then after its step (AFTER) at the step's sizes."""
        nonlocal looked
        page.goto(url)
        after = AFTER.get(url)
        for step, sizes in [(None, AXE_SIZES)] + ([after] if after else []):
            if step:
                page.set_viewport_size(next(iter(sizes.values())))
                step(page)
            found, wide = look_at(page, axe, IMPACTS, sizes)
            findings.extend((scheme, url, *f) for f in found)
            sideways.extend((scheme, url, *w) for w in wide)
            looked += len(sizes)
        page.set_viewport_size(AXE_SIZES["laptop"])

    for scheme in ("light", "dark"):
        page = open_context(color_scheme=scheme, viewport=AXE_SIZES["laptop"])
        page.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)
        look(page, scheme, "/sign-in")
        sign_in(page, email)
        for url in [p.format(**ids) for p in PAGES] + ["/runs/999999"]:  # and an error page
            look(page, scheme, url)
        if scheme == "light":
            page.context.clear_cookies()
    assert findings == [], "\n".join(map(str, findings))
    assert sideways == []
    assert refused == []  # nothing of ours is inline
    # Every page at both sizes, and every step of AFTER at its sizes.
    assert looked == 2 * (2 * (len(PAGES) + 2) + sum(len(sizes) for _, sizes in AFTER.values()))


def test_times_show_in_the_viewers_zone_with_words_and_the_exact_time_on_hover(app, sql, make_user, open_context):
    sql("INSERT INTO job_runs (job_type, status, created_at) VALUES "
        "('old', 'queued', '2026-01-15 10:00:00+00'), ('new', 'queued', now() - interval '3 minutes')")
    [(old, _), (new, created_at)] = sql("SELECT id, created_at FROM job_runs ORDER BY id")
    page = open_context(timezone_id="Asia/Kolkata")
    # The browser's clock stays 3.5 min after the insert, however long the steps below take.
    page.clock.set_fixed_time(created_at + timedelta(minutes=3, seconds=30))
    sign_in(page, make_user("viewer"))

    page.goto(f"/runs/{old}")
    created = page.locator("dt:text-is('Created') + dd time")
    expect(created).to_have_attribute("title", re.compile(r"15 Jan 2026.*15:30:00"))  # 10:00 UTC is 15:30 in India
    expect(created).to_have_text(re.compile(r"^\d+ d ago · 15 Jan,? 15:30$"))  # the exact time in text too
    page.goto(f"/runs/{new}")
    # The time of day alone when it is today in India, else with its day (the insert may fall
    # just before local midnight and the browser's clock just after).
    expect(page.locator("dt:text-is('Created') + dd time")).to_have_text(
        re.compile(r"^3 min ago · (\d\d:\d\d:\d\d|\d+ \w+,? \d\d:\d\d)$"))

    # The dashboard's hour labels are India's half hours, and the legend names the zone.
    page.goto("/")
    labels = page.locator("svg.chart text[data-hour]")
    expect(labels.first).to_have_text(re.compile(r"^\d\d:30$"))
    assert all(re.fullmatch(r"\d\d:30", t) for t in labels.all_text_contents())
    expect(page.locator(".legend")).to_contain_text(re.compile(r"Asia/(Kolkata|Calcutta)"))  # ICU's older name

    # After an htmx swap the words are ours again, not the server's UTC text.
    page.goto("/runs?live=1")
    row = page.locator("#runs-table tr", has=page.locator(f'a[href="/runs/{new}"]'))
    expect(row.locator("time").first).to_have_text("3 min ago")
    page.evaluate("""() => { window.notReloaded = true;
        document.body.addEventListener("htmx:afterSettle", () => { window.swaps = (window.swaps || 0) + 1; }); }""")
    page.wait_for_function("() => window.swaps >= 1")  # Live swapped in the server's table
    assert " UTC" not in row.inner_text()
    expect(row.locator("time").first).to_have_text(re.compile(r"^3 min ago$"))
    assert page.evaluate("window.notReloaded") is True


def test_date_inputs_are_read_in_the_viewers_zone_and_say_so(app, sql, make_user, open_context):
    # 07:00 UTC on the 15th is still the 14th in Los Angeles; 09:00 UTC is 01:00 there on the 15th.
    sql("INSERT INTO job_runs (job_type, created_at) VALUES "
        "('late.on.the.14th', '2026-01-15 07:00:00+00'), ('early.on.the.15th', '2026-01-15 09:00:00+00')")
    page = open_context(timezone_id="America/Los_Angeles")
    sign_in(page, make_user("operator"))
    page.goto("/runs")
    expect(page.locator("form.filters")).to_contain_text("America/Los_Angeles")
    page.locator("input[name=since]").fill("2026-01-15T00:00")
    page.get_by_role("button", name="Apply").click()
    expect(page).to_have_url(re.compile(r"tz=America%2FLos_Angeles"))
    expect(page.locator("#runs-table tbody")).to_contain_text("early.on.the.15th")
    expect(page.locator("#runs-table tbody")).not_to_contain_text("late.on.the.14th")
    page.reload()  # the page drawn by the server shows the filter back in the viewer's zone
    expect(page.locator("form.filters input[name=since]")).to_have_value("2026-01-15T00:00")
    expect(page.locator("#runs-table tbody")).not_to_contain_text("late.on.the.14th")

    page.goto("/enqueue")
    expect(page.locator("#enqueue-form")).to_contain_text("Read as America/Los_Angeles time")
    page.locator("select[name=job_type]").select_option("jobsweb.noop")
    page.locator("input[name=run_at]").fill("2030-01-01T00:00")
    page.get_by_role("button", name="Enqueue").click()
    expect(page.get_by_role("heading", name=re.compile(r"Run #\d+"))).to_be_visible()
    assert sql("SELECT run_at AT TIME ZONE 'UTC' FROM job_runs WHERE job_type = 'jobsweb.noop'")[0][0].isoformat() \
        == "2030-01-01T08:00:00"


def test_without_javascript_date_inputs_say_they_are_read_as_utc(sign_in, sql):
    client = sign_in("viewer")
    sql("INSERT INTO job_runs (job_type, created_at) VALUES ('x', '2026-01-15 07:00:00+00')")
    html = client.get("/runs").get_data(as_text=True)
    assert "(<span data-tz-name>UTC</span>)" in html
    assert "/runs/1" in client.get("/runs?since=2026-01-15T07:00").get_data(as_text=True)
    assert "/runs/1" not in client.get("/runs?since=2026-01-15T07:00&tz=America/New_York").get_data(as_text=True)


def test_run_at_is_read_in_the_zone_the_form_sends_and_as_utc_without_one(sign_in, sql):
    client = sign_in("operator")
    for tz in ("Asia/Kolkata", ""):
        response = client.post("/enqueue", data={"csrf_token": csrf_token(client, "/enqueue"), "job_type": "jobsweb.noop",
                                                 "payload": "{}", "run_at": "2030-01-01T00:00", "tz": tz})
        assert response.status_code == 302, response.get_data(as_text=True)
    assert [r[0].isoformat() for r in sql("SELECT run_at AT TIME ZONE 'UTC' FROM job_runs ORDER BY id")] == [
        "2029-12-31T18:30:00", "2030-01-01T00:00:00"]
    assert "Read as <span data-tz-name>UTC</span> time." in client.get("/enqueue").get_data(as_text=True)


def test_an_unknown_time_zone_is_refused_naming_the_field(sign_in):
    response = sign_in("viewer").get("/runs?since=2026-01-15T07:00&tz=Mars/Olympus_Mons")
    assert response.status_code == 400
    assert "tz: &#39;Mars/Olympus_Mons&#39; is not a known time zone" in response.get_data(as_text=True)


def test_a_time_that_cannot_be_shown_back_in_the_viewers_zone_is_refused_not_a_500(sign_in):
    # The first minute of the year 1 in UTC is still the year 0 in Los Angeles.
    response = sign_in("viewer").get("/runs?since=0001-01-01T00:00%2B00:00&tz=America/Los_Angeles")
    assert response.status_code == 400 and "since: is out of range" in response.get_data(as_text=True)


def test_a_definitions_page_charts_its_last_runs_and_success_rate(app, sign_in, sql):
    client = sign_in("viewer")
    run, definition = seed(app, sql)
    html = client.get(f"/definitions/{definition}").get_data(as_text=True)
    chart = html[html.index('id="definition-chart"'):]
    chart = chart[:chart.index("</section>")]
    assert "67%" in chart and "succeeded: 2 of the 3 that succeeded or died" in chart
    assert re.findall(r'<rect class="o-(\w+)"', chart) == ["succeeded", "dead", "succeeded", "cancelled", "missed"]
    assert re.search(r"<title>#\d+ succeeded in 1 s, created ", chart)


def test_the_definition_chart_reads_the_definition_index(app, sql):
    # 200 definitions with 100 runs each; the one charted has only the oldest runs, which a scan
    # of the whole table from the newest id would reach last.
    sql("INSERT INTO job_definitions (name, job_type) SELECT 'd' || n, 'jobsweb.noop' FROM generate_series(1, 200) n")
    [(first,)] = sql("SELECT min(id) FROM job_definitions")
    sql("INSERT INTO job_runs (definition_id, job_type, status) SELECT %(first)s + (n - 1) / 100, 'jobsweb.noop', "
        "'succeeded' FROM generate_series(1, 20000) n", {"first": first})
    sql("ANALYZE job_runs")
    from jobsweb.ops.run_history import DEFINITION_HISTORY

    plan = "\n".join(r[0] for r in sql("EXPLAIN " + DEFINITION_HISTORY, {"definition_id": first, "limit": 50}))
    assert "Index Scan Backward using job_runs_definition" in plan, plan
    assert "Sort" not in plan, plan


def test_the_workers_page_shows_each_workers_current_runs_linked_and_escaped(app, sign_in, sql):
    client = sign_in("viewer")
    sql("INSERT INTO job_workers (id, host, pid) VALUES ('w:1:a', 'h', 1), ('w:2:b', 'h', 2)")
    [(run,)] = sql("INSERT INTO job_runs (job_type, status, started_at, locked_by) "
                   "VALUES ('<img src=x>', 'running', now(), 'w:1:a') RETURNING id")
    html = client.get("/workers").get_data(as_text=True)
    rows = {m.group(1): m.group(0) for m in re.finditer(r'<tr>\s*<td><a href="/runs\?worker=([^"]+)".*?</tr>', html, re.S)}
    assert f'href="/runs/{run}">#{run}</a> <code>&lt;img src=x&gt;</code>' in rows["w:1:a"]
    assert "<img src=x>" not in html
    assert "nothing" in rows["w:2:b"]


def test_on_a_phone_the_menu_is_one_row_and_a_runs_row_keeps_status_times_and_error(make_user, open_context, sql):
    sql("INSERT INTO job_runs (job_type, status, finished_at, error_type, last_error) VALUES "
        "('send_invoice', 'dead', now(), 'PermanentError', 'PermanentError: the invoice service refused it')")
    page = open_context(viewport=SIZES["phone"])
    sign_in(page, make_user("admin"))
    page.keyboard.press("Tab")
    expect(page.locator(":focus")).to_have_text("Skip to content")
    header = page.locator("header.top").bounding_box()
    assert header["height"] <= 60, header
    page.locator("summary", has_text="Dashboard").click()
    page.get_by_role("link", name="Runs", exact=True).click()
    row = page.locator("#runs-table tbody tr").first
    for part in (row.locator(".badge"), row.locator("td[data-label=created] time"),
                 row.locator("td[data-label=finished] time"), row.locator(".error-cell")):
        expect(part).to_be_visible()
    # The heading is gone on a phone, so each time says which it is.
    assert row.locator("td[data-label=finished]").evaluate("e => getComputedStyle(e, '::before').content") \
        == '"finished "'
    # Error text wraps between words: a long word breaks only when it alone is wider than the row.
    assert row.locator(".error-cell").evaluate("e => [getComputedStyle(e).wordBreak, getComputedStyle(e).overflowWrap]") \
        == ["normal", "break-word"]

