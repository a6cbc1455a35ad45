"""An operator stops a worker from the Workers page (issue 54, item 2; Sidekiq's Stop beside Quiet):
it finishes what it holds and exits as on SIGTERM, at once when it listens, audited."""

from playwright.sync_api import expect

from tests import test_web_look
from tests.conftest import csrf_token, wait_for
from tests.test_web_look import sign_in as sign_in_page

server, open_context = test_web_look.server, test_web_look.open_context  # its fixtures


def test_an_operator_stops_a_listening_worker_which_finishes_its_run_and_exits_long_before_its_heartbeat(
        make_user, open_context, sql, spawn_worker, tmp_path, sign_in):
    log = tmp_path / "worker.log"
    with open(log, "w") as output:
        # An hour's lease: a heartbeat every 20 minutes. The stop reaches it through its listener.
        proc = spawn_worker("--forever", "--poll-interval", "0.05", "--concurrency", "3", output=output,
                            JOBSWEB_LEASE_SECONDS=3600)
    [(held,)] = sql("INSERT INTO job_runs (job_type, payload) VALUES ('jobsweb.sleep', '{\"seconds\": 2}') RETURNING id")
    wait_for(lambda: sql("SELECT status FROM job_runs WHERE id = %s", [held]) == [("running",)], message="the run held")
    wait_for(lambda: sql("SELECT 1 FROM pg_stat_activity WHERE query = 'LISTEN jobsweb_runs'"), message="it listens")
    [(worker,)] = sql("SELECT id FROM job_workers")

    operator = make_user("operator")
    page = open_context()
    sign_in_page(page, operator)
    page.goto("/workers")
    row = page.locator("tr", has_text=worker)
    expect(row.locator('td[data-label="concurrency"]')).to_have_text("3")
    row.get_by_role("button", name="Stop").click()
    expect(page.locator(".flash")).to_contain_text(f"Worker {worker} is asked to stop")
    expect(row).to_contain_text(f"stopping asked by {operator}")
    assert proc.wait(timeout=30) == 0  # well before its next heartbeat (20 min)
    assert f"asked to stop from the admin screen by {operator}" in log.read_text()
    # The run it held was finished or given back, never left running; the worker's row says stopped.
    assert sql("SELECT status FROM job_runs WHERE id = %s", [held]) in ([("succeeded",)], [("queued",)])
    assert sql("SELECT stopped_at IS NOT NULL, stop_requested_by FROM job_workers") == [(True, operator)]
    assert sql("SELECT action, user_email, detail->>'worker' FROM jobsweb_audit_log WHERE target_type = 'worker'") == [
        ("stop", operator, worker)]


def test_stop_is_refused_to_a_viewer_for_a_stopped_worker_and_for_one_that_cannot_read_it(sign_in, sql):
    sql("INSERT INTO job_workers (id, host, pid, concurrency) VALUES ('a:1:up', 'a', 1, 2)")
    sql("INSERT INTO job_workers (id, host, pid, concurrency, stopped_at) VALUES ('c:3:done', 'c', 3, 2, now())")
    sql("INSERT INTO job_workers (id, host, pid) VALUES ('o:4:old', 'o', 4)")  # a worker from before 0034
    viewer = sign_in("viewer")
    assert "Stop</button>" not in viewer.get("/workers").get_data(as_text=True)
    assert viewer.post("/workers/stop", data={"worker": "a:1:up", "csrf_token": csrf_token(viewer, "/workers")}
                       ).status_code == 403
    client = sign_in("operator")
    html = client.get("/workers").get_data(as_text=True)
    rows = {line.split("<code>")[1].split("</code>")[0]: line for line in html.split("<tr>") if "<code>" in line}
    assert "Stop</button>" in rows["a:1:up"] and "Stop</button>" not in rows["o:4:old"]
    token = csrf_token(client, "/workers")
    for worker, words in (("c:3:done", "is not a running worker"), ("o:4:old", "started before 0034_worker_stop")):
        answer = client.post("/workers/stop", data={"worker": worker, "csrf_token": token})
        assert answer.status_code == 404 and words in answer.get_data(as_text=True), worker
    assert client.post("/workers/stop", data={"worker": "a\x00b", "csrf_token": token}).status_code == 400
    assert sql("SELECT id FROM job_workers WHERE stop_requested_at IS NOT NULL") == []
    assert sql("SELECT count(*) FROM jobsweb_audit_log WHERE target_type = 'worker'") == [(0,)]
