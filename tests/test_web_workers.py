import re
import shlex
import subprocess
import sys
import types

from flask import Flask

from jobsweb.web.rendering import flask_command
from tests import test_web_look

server, open_context = test_web_look.server, test_web_look.open_context  # its fixtures


def test_the_workers_page_tells_alive_from_gone_after_two_lease_periods(sign_in, sql):
    client = sign_in("viewer")
    # The default lease is 60 s: gone after 120 s without a heartbeat.
    sql("INSERT INTO job_workers (id, host, pid, last_seen_at) VALUES "
        "('a:1:alive', 'a', 1, now() - interval '100 seconds'), ('b:2:gone', 'b', 2, now() - interval '130 seconds')")
    sql("INSERT INTO job_workers (id, host, pid, stopped_at) VALUES ('c:3:done', 'c', 3, now())")
    html = client.get("/workers").get_data(as_text=True)
    rows = {line.split("<code>")[1].split("</code>")[0]: line for line in html.split("<tr>") if "<code>" in line}
    assert ">alive<" in rows["a:1:alive"] and ">gone<" in rows["b:2:gone"] and ">stopped<" in rows["c:3:done"]
    assert 'href="/runs?worker=b:2:gone"' in rows["b:2:gone"]


def test_the_runs_list_filtered_by_worker_shows_the_runs_it_executed_or_holds(sign_in, sql):
    client = sign_in("viewer")
    sql("INSERT INTO job_runs (job_type, status) VALUES ('t.executed', 'succeeded'), ('t.other', 'succeeded'), "
        "('t.retried_elsewhere', 'succeeded')")
    sql("INSERT INTO job_runs (job_type, status, locked_by) VALUES ('t.running', 'running', 'h:1:me')")
    sql("INSERT INTO job_attempts (run_id, attempt, worker, outcome) VALUES (1, 1, 'h:1:me', 'succeeded'), "
        "(2, 1, 'h:2:you', 'succeeded'), (3, 1, 'h:1:me', 'failed'), (3, 2, 'h:2:you', 'succeeded')")
    html = client.get("/runs", query_string={"worker": "h:1:me"}).get_data(as_text=True)
    assert "t.executed" in html and "t.running" in html and "t.retried_elsewhere" in html
    assert "t.other" not in html.split('id="runs-table"')[1]
    assert 'name="worker" value="h:1:me"' in html


def test_the_dashboard_points_at_due_runs_of_a_job_type_no_worker_handles(sign_in, sql):
    client = sign_in("viewer")
    sql("INSERT INTO job_workers (id, host, pid, job_types) VALUES ('h:1:a', 'h', 1, '{jobsweb.noop}')")
    sql("INSERT INTO job_runs (job_type) VALUES ('sned_invoice'), ('sned_invoice'), ('jobsweb.noop')")
    sql("INSERT INTO job_runs (job_type, run_at) VALUES ('later.maybe', now() + interval '1 hour')")
    html = client.get("/").get_data(as_text=True)
    assert "2 due runs</a> of job type <code>sned_invoice</code>" in html
    assert "later.maybe" not in html and "<code>jobsweb.noop</code> wait" not in html


def test_the_workers_page_lists_the_job_types_each_worker_handles(sign_in, sql):
    client = sign_in("viewer")
    sql("INSERT INTO job_workers (id, host, pid, job_types) VALUES ('a:1:new', 'a', 1, '{reports.weekly,<b>odd</b>}')")
    sql("INSERT INTO job_workers (id, host, pid) VALUES ('b:2:old', 'b', 2)")
    html = client.get("/workers").get_data(as_text=True)
    rows = {line.split("<code>")[1].split("</code>")[0]: line for line in html.split("<tr>") if "<code>" in line}
    assert "<code>reports.weekly</code>" in rows["a:1:new"] and "&lt;b&gt;odd&lt;/b&gt;" in rows["a:1:new"]
    assert "not recorded" in rows["b:2:old"]


def test_the_workers_page_counts_the_runs_a_worker_did_before_its_next_heartbeat(sign_in, sql, spawn_worker):
    from tests.conftest import wait_for

    client = sign_in("viewer")
    sql("INSERT INTO job_runs (job_type) SELECT 'jobsweb.noop' FROM generate_series(1, 5)")
    # A 600 s lease: the next heartbeat (a third of it) is minutes away.
    spawn_worker("--forever", JOBSWEB_LEASE_SECONDS=600)
    # Counted with the outcomes, or (when the other lane's trip under way carries a count) with the
    # next trip after them: not always in the commit that made the fifth run succeeded (busy run 23
    # read 4 there), but well before the heartbeat.
    wait_for(lambda: sql("SELECT runs_done FROM job_workers") == [(5,)], message="5 runs counted")
    [(worker,)] = sql("SELECT id FROM job_workers")
    row = client.get("/workers").get_data(as_text=True).split(worker)[2].split("</tr>")[0]
    assert '<td data-label="runs done">5</td>' in row


def test_an_operator_quiets_a_worker_which_finishes_its_run_claims_nothing_more_and_stays_up_until_resumed(
        make_user, open_context, sql, spawn_worker, tmp_path, sign_in):
    from playwright.sync_api import expect

    from tests.conftest import csrf_token, wait_for
    from tests.test_web_look import sign_in as sign_in_page

    log = tmp_path / "worker.log"
    with open(log, "w") as output:
        # A 3 s lease: a heartbeat, which reads the quiet, every second.
        proc = spawn_worker("--forever", "--poll-interval", "0.05", output=output, JOBSWEB_LEASE_SECONDS=3)
    [(held,)] = sql("INSERT INTO job_runs (job_type, payload) VALUES ('jobsweb.sleep', '{\"seconds\": 3}') RETURNING id")
    wait_for(lambda: sql("SELECT status FROM job_runs WHERE id = %s", [held]) == [("running",)], message="the run held")
    [(worker,)] = sql("SELECT id FROM job_workers")

    operator = make_user("operator")
    page = open_context()
    sign_in_page(page, operator)
    page.goto("/workers")
    row = page.locator("tr", has_text=worker)
    row.get_by_role("button", name="Quiet").click()
    expect(page.locator(".flash")).to_contain_text(f"Worker {worker} is quieted")
    wait_for(lambda: "quieted from the admin screen" in log.read_text(), message="the worker to read its quiet")
    [(later,)] = sql("INSERT INTO job_runs (job_type) VALUES ('jobsweb.noop') RETURNING id")
    # It finishes what it holds...
    wait_for(lambda: sql("SELECT status FROM job_runs WHERE id = %s", [held]) == [("succeeded",)],
             message="the held run to finish")
    # ...and, two heartbeats later, has claimed nothing and is still up.
    [(seen,)] = sql("SELECT last_seen_at FROM job_workers")
    wait_for(lambda: sql("SELECT count(*) FROM job_workers WHERE last_seen_at > %s", [seen]) == [(1,)],
             message="a heartbeat")
    [(seen,)] = sql("SELECT last_seen_at FROM job_workers")
    wait_for(lambda: sql("SELECT count(*) FROM job_workers WHERE last_seen_at > %s", [seen]) == [(1,)],
             message="another heartbeat")
    assert sql("SELECT status FROM job_runs WHERE id = %s", [later]) == [("queued",)]
    assert proc.poll() is None
    page.goto("/workers")
    expect(row).to_contain_text(f"quiet by {operator}")

    row.get_by_role("button", name="Resume").click()
    wait_for(lambda: sql("SELECT status FROM job_runs WHERE id = %s", [later]) == [("succeeded",)],
             message="the resumed worker to run the queued run")
    assert sql("SELECT action, user_email, detail->>'worker' FROM jobsweb_audit_log WHERE target_type = 'worker' "
               "ORDER BY id") == [("quiet", operator, worker), ("resume", operator, worker)]

    # A viewer sees no button and may not post one.
    viewer = sign_in("viewer")
    assert "Quiet</button>" not in viewer.get("/workers").get_data(as_text=True)
    assert viewer.post("/workers/quiet", data={"worker": worker}).status_code in (400, 403)
    # A stopped worker would never read it: refused, and nothing is written.
    sql("INSERT INTO job_workers (id, host, pid, stopped_at) VALUES ('c:3:done', 'c', 3, now())")
    client = sign_in("admin")
    answer = client.post("/workers/quiet", data={"worker": "c:3:done", "csrf_token": csrf_token(client, "/workers")})
    assert answer.status_code == 404 and "is not a running worker" in answer.get_data(as_text=True)
    assert sql("SELECT quiet_at FROM job_workers WHERE id = 'c:3:done'") == [(None,)]


def test_the_hints_to_start_a_worker_name_the_standalone_app_and_run_outside_the_checkout(sign_in, spawn_worker,
                                                                                        tmp_path, sql):
    """`--app jobsweb` (the package, which has create_app) works wherever jobsweb is installed;
    wsgi.py is only in the checkout."""
    client = sign_in("viewer")
    [dashboard] = re.findall(r"Start one with <code>([^<]*)</code>", client.get("/").get_data(as_text=True))
    assert dashboard == "flask --app jobsweb run-jobs --forever"
    [workers] = re.findall(r"Run <code>([^<]*)</code> from cron", client.get("/workers").get_data(as_text=True))
    assert workers == "flask --app jobsweb run-jobs"
    env = {key: value for key, value in spawn_worker.env().items() if key != "JOBSWEB_HANDLERS"}  # tests/ is not here
    done = subprocess.run([sys.executable, "-m", *shlex.split(workers)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sql("SELECT count(*) FROM job_workers WHERE stopped_at IS NOT NULL") == [(1,)]


def test_an_app_run_as_a_script_is_named_by_its_file_in_the_hints(monkeypatch):
    """`python hello.py` (app.run() at its end): the app's import name is __main__, which no
    `--app` imports."""
    script = types.ModuleType("__main__")
    script.__file__ = "/srv/team/hello.py"
    monkeypatch.setitem(sys.modules, "__main__", script)
    app = Flask("__main__")
    with app.test_request_context():
        assert flask_command("run-jobs") == "flask --app hello run-jobs"
