"""The admin screen, round five (issue 54), read in a real Chromium: the dashboard names the pause
that holds each due run, "why is it not running" judges a worker alive by the Workers page's rule
and names it and its queue, the Queues page says which live worker takes which queue, the
dashboard marks a quiet worker, an attempt links to its worker, and the smaller words."""

import re
from urllib.parse import unquote

from playwright import sync_api

from tests import test_web_look
from tests.test_web_incidents import overdue_incident
from tests.test_web_look import AXE, AXE_SIZES, FINDINGS, IMPACTS
from tests.test_web_look import sign_in as sign_in_page

expect = sync_api.expect
server, open_context = test_web_look.server, test_web_look.open_context  # its fixtures

WORKER = ("INSERT INTO job_workers (id, host, pid, queues, job_types, last_seen_at, stopped_at, quiet_at, quiet_by) "
          "VALUES (%(id)s, 'h', 1, %(queues)s, %(job_types)s, now() - %(seen_ago)s * interval '1 second', "
          "%(stopped)s, CASE WHEN %(quiet_by)s::text IS NOT NULL THEN now() END, %(quiet_by)s)")


def worker(sql, worker_id, queues=None, job_types=None, seen_ago=0, stopped=None, quiet_by=None):
    """A job_workers row heard from `seen_ago` seconds ago; quieted by `quiet_by` if given."""
    sql(WORKER, {"id": worker_id, "queues": queues, "job_types": job_types, "seen_ago": seen_ago,
                 "stopped": stopped, "quiet_by": quiet_by})


def due_runs(sql, n, job_type, queue, run_at="now() - interval '1 minute'", status="queued"):
    sql(f"INSERT INTO job_runs (job_type, queue, status, run_at) SELECT %s, %s, %s, {run_at} "
        "FROM generate_series(1, %s)", [job_type, queue, status, n])


def words(locator):
    """The locator's text, its runs of white space as one space."""
    return " ".join(locator.inner_text().split())


def at_worker(page, worker_id):
    """The Workers page of one worker is open (its id in the URL, encoded or not)."""
    expect(page).to_have_url(re.compile(r"/workers\?worker="))
    assert unquote(page.url.split("?worker=")[1]) == worker_id


def no_axe_finding(open_context, email, urls):
    """axe at every impact level on `urls`, at a laptop's and a phone's size, light and dark, and
    no sideways scrolling."""
    axe, findings = AXE.read_text(), []
    for scheme in ("light", "dark"):
        page = open_context(color_scheme=scheme, viewport=AXE_SIZES["laptop"])
        sign_in_page(page, email)
        for url in urls:
            page.goto(url)
            for size, viewport in AXE_SIZES.items():
                page.set_viewport_size(viewport)
                if not page.evaluate("() => typeof axe !== 'undefined'"):
                    page.evaluate(axe)  # through the driver: the CSP refuses a <script> of ours
                findings += [(scheme, url, size, *f) for f in page.evaluate(FINDINGS, IMPACTS)]
                width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
                if width[0] > width[1]:
                    findings.append((scheme, url, size, "sideways", width))
    assert findings == [], "\n".join(map(str, findings))


def test_the_dashboard_splits_due_runs_held_by_a_pause_by_the_queue_or_job_type_paused(
        make_user, open_context, sql):
    sql("INSERT INTO job_queues (name, paused) VALUES ('reports', true)")
    sql("INSERT INTO job_paused_types (job_type) VALUES ('search.reindex_user')")
    due_runs(sql, 4, "report.build", "reports")
    # In a paused queue and of a paused job type: its queue holds it first, as the claim and the
    # run's page say.
    due_runs(sql, 2, "search.reindex_user", "reports")
    due_runs(sql, 330, "search.reindex_user", "search")
    due_runs(sql, 2, "search.reindex_user", "search", status="failed")  # retries due now
    due_runs(sql, 5, "search.reindex_user", "search", run_at="now() + interval '1 hour'")  # not due
    due_runs(sql, 3, "mail.send", "default")  # not held
    page = open_context()
    email = make_user("viewer")
    sign_in_page(page, email)
    held = page.locator("#dashboard p.held")
    expect(held).to_contain_text("332 of paused job type")
    assert words(held) == ("paused 338 due runs wait for a pause to be lifted (Queues), not for a worker: "
                           "6 in paused queue reports; 332 of paused job type search.reindex_user.")
    expect(held.get_by_role("link", name="6 in paused queue reports")).to_have_attribute(
        "href", "/runs?queue=reports&status=queued&status=failed")
    held.get_by_role("link", name="332 of paused job type search.reindex_user").click()
    expect(page).to_have_url(re.compile(r"/runs\?job_type=search\.reindex_user&status=queued&status=failed$"))
    expect(page.locator("#runs-table tbody tr").first).to_contain_text("search.reindex_user")
    no_axe_finding(open_context, email, ["/"])


def test_why_not_running_calls_a_silent_worker_gone_when_the_workers_page_does_and_links_it_and_its_queue(
        app, make_user, open_context, sql):
    app.config["JOBSWEB_LEASE_SECONDS"] = 30  # gone after 2 leases: 60 s
    # Killed 90 s ago: no heartbeat since, never stopped. Alive for 5 minutes before this rule.
    worker(sql, "search-1:99:kill", queues=["search"], job_types=["search.reindex_user"], seen_ago=90)
    [(run,)] = sql("INSERT INTO job_runs (job_type, queue, run_at) VALUES ('search.reindex_user', 'search', "
                   "now() - interval '1 minute') RETURNING id")
    page = open_context()
    email = make_user("viewer")
    sign_in_page(page, email)
    page.goto(f"/runs/{run}")
    why = page.locator("#why-not-running")
    expect(why).to_have_text(re.compile(
        r"No worker that takes runs from its queue search and handles search\.reindex_user is running now; "
        r"the last one, search-1:99:kill, was last heard from 1 min ago · [^ ]+ and is gone "
        r"\(no heartbeat for 1 min: killed, frozen or cut off\)\.$"))
    expect(why.get_by_role("link", name="search", exact=True)).to_have_attribute("href", "/queues#queue-search")
    why.get_by_role("link", name="search-1:99:kill").click()
    at_worker(page, "search-1:99:kill")
    rows = page.locator("#workers tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first.locator(".badge")).to_have_text("gone")  # the same worker, the same word
    no_axe_finding(open_context, email, [f"/runs/{run}"])

    # Heard from 45 s ago: alive on both, and nothing holds the run.
    sql("UPDATE job_workers SET last_seen_at = now() - interval '45 seconds'")
    page.goto(f"/runs/{run}")
    expect(why).to_contain_text("nothing holds it")
    page.goto("/workers?worker=search-1:99:kill")
    expect(rows.first.locator(".badge")).to_have_text("alive")

    # Quieted, it is alive but takes nothing: the run's page says so, as Sidekiq's quiet means.
    sql("UPDATE job_workers SET quiet_at = now(), quiet_by = 'ada@example.com'")
    page.goto(f"/runs/{run}")
    expect(why).to_have_text("Why is it not running? No running worker that takes it claims runs: all are quiet "
                             "(an operator's Quiet, until resumed), such as search-1:99:kill.")
    # Another one, not quiet, takes every queue: the run goes to it.
    worker(sql, "any-2")
    page.goto(f"/runs/{run}")
    expect(why).to_contain_text("nothing holds it")


def test_the_queues_page_says_which_live_worker_takes_each_queue_how_busy_and_whether_quiet(
        make_user, open_context, sql):
    worker(sql, "mail-1", queues=["mail"])
    worker(sql, "any-1", quiet_by="ada@example.com")  # every queue (no --queues), quieted
    worker(sql, "old-1", queues=["mail"], seen_ago=600)  # gone
    worker(sql, "done-1", stopped="2026-01-01")  # stopped
    sql("INSERT INTO job_runs (job_type, queue, status, locked_by) VALUES "
        "('mail.send', 'mail', 'running', 'mail-1'), ('mail.send', 'mail', 'running', 'mail-1')")
    due_runs(sql, 1, "report.build", "default")
    page = open_context()
    email = make_user("operator")
    sign_in_page(page, email)
    page.goto("/queues")
    mail = page.locator("#queue-mail td[data-label=workers]")
    expect(mail).to_contain_text("mail-1")
    assert words(mail) == "any-1 quiet 0 running mail-1 2 running"
    assert words(page.locator("#queue-default td[data-label=workers]")) == "any-1 quiet 0 running"
    mail.get_by_role("link", name="mail-1").click()
    at_worker(page, "mail-1")
    expect(page.locator("#workers tbody tr td[data-label=queues]")).to_have_text("mail")
    page.get_by_role("link", name="All workers »").click()
    expect(page.locator("#workers tbody tr", has_text="any-1").locator("td[data-label=queues]")).to_have_text(
        "every queue")
    no_axe_finding(open_context, email, ["/queues", "/workers", "/workers?worker=mail-1"])


def test_the_dashboard_marks_a_quiet_worker_and_an_attempt_links_to_its_worker(make_user, open_context, sql):
    worker(sql, "web-1:1:a")
    worker(sql, "web-2:77:def", quiet_by="ada@example.com")
    worker(sql, "web-3:5:gone", seen_ago=180)  # killed 3 minutes ago: not live any more
    [(run,)] = sql("INSERT INTO job_runs (job_type, status, attempts, finished_at) "
                   "VALUES ('send_invoice', 'succeeded', 1, now()) RETURNING id")
    sql("INSERT INTO job_attempts (run_id, attempt, worker, outcome, started_at, finished_at) "
        "VALUES (%s, 1, 'web-1:1:a', 'succeeded', now(), now())", [run])
    page = open_context()
    sign_in_page(page, make_user("viewer"))
    live = page.locator("#dashboard section", has=page.get_by_role("heading", name="Live workers")).locator("li")
    expect(live).to_have_count(2)
    expect(live.filter(has_text="web-2:77:def").locator(".badge")).to_have_text("quiet")
    expect(live.filter(has_text="web-1:1:a").locator(".badge")).to_have_count(0)

    page.goto(f"/runs/{run}")
    page.locator("ol.timeline").get_by_role("link", name="web-1:1:a").click()
    at_worker(page, "web-1:1:a")
    expect(page.locator("#workers tbody tr")).to_have_count(1)
    expect(page.locator("#workers tbody tr td").first).to_have_text("web-1:1:a")


def test_a_worker_that_does_not_exist_is_a_404_naming_it(sign_in):
    client = sign_in("viewer")
    response = client.get("/workers?worker=nobody:1")
    assert response.status_code == 404 and "There is no worker &#39;nobody:1&#39;." in response.get_data(as_text=True)
    assert client.get("/workers?worker=a%00b").status_code == 400


def test_on_a_phone_the_dashboard_shows_its_counts_before_the_incident_cards(app, make_user, open_context, sql):
    for name in ("nightly report", "hourly export"):
        overdue_incident(app, sql, name=name)
    page = open_context(viewport=AXE_SIZES["phone"])
    sign_in_page(page, make_user("viewer"))
    incidents = page.locator("#dashboard .alert[id^=incident-]")
    expect(incidents).to_have_count(2)
    tiles = page.locator("#dashboard .tiles").bounding_box()
    assert tiles["y"] + tiles["height"] <= incidents.first.bounding_box()["y"]


def test_a_run_waiting_for_one_run_says_it_runs_when_that_one_succeeds(make_user, open_context, sql):
    [(first,)] = sql("INSERT INTO job_runs (job_type) VALUES ('export.build') RETURNING id")
    [(second,)] = sql("INSERT INTO job_runs (job_type, status, waiting_for) VALUES ('export.mail', 'waiting', 1) "
                      "RETURNING id")
    [(anyway,)] = sql("INSERT INTO job_runs (job_type, status, waiting_for, run_after_failure) "
                      "VALUES ('export.clean', 'waiting', 1, true) RETURNING id")
    [(done,)] = sql("INSERT INTO job_runs (job_type, status) VALUES ('export.fetch', 'succeeded') RETURNING id")
    [(third,)] = sql("INSERT INTO job_runs (job_type, status, waiting_for) VALUES ('export.zip', 'waiting', 2) "
                     "RETURNING id")
    sql("INSERT INTO job_run_deps (run_id, after_id) VALUES (%s, %s), (%s, %s), (%s, %s), (%s, %s), (%s, %s)",
        [second, first, anyway, first, third, first, third, second, third, done])
    page = open_context()
    sign_in_page(page, make_user("viewer"))
    waits_for = page.locator("section", has=page.get_by_role("heading", name="Waits for")).locator("p.muted").last
    page.goto(f"/runs/{second}")
    expect(waits_for).to_have_text("Runs when it succeeds; cancelled if it ends dead or cancelled.")
    page.goto(f"/runs/{anyway}")
    expect(waits_for).to_have_text("Runs when it ends, however it ends.")
    page.goto(f"/runs/{third}")
    expect(waits_for).to_have_text("Waiting for 2 of these 3.")
