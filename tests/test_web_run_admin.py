"""Deleting runs (one, ticked, all matching; admin), run now and reschedule (operator): roles,
CSRF, what each says first, audit entries that outlive the runs, and running runs left alone."""

import re
from datetime import datetime, timezone

import psycopg
import pytest

from jobsweb.core.database import libpq_url
from tests.conftest import PASSWORD, csrf_token, wait_for
from tests.test_web_runs import add_run, run_ids


def audit(sql, action):
    return sql("SELECT user_email, target_type, target_id, detail FROM jobsweb_audit_log WHERE action = %s", [action])


def test_an_admin_deletes_a_run_and_its_attempts_after_a_page_that_says_what_goes(sign_in, sql):
    client = sign_in("admin")
    run = add_run(sql, "dead", job_type="send_invoice", attempts=2)
    kept = add_run(sql, "dead", job_type="send_invoice")
    sql("INSERT INTO job_attempts (run_id, attempt, outcome) VALUES (%(r)s, 1, 'failed'), (%(r)s, 2, 'failed')",
        {"r": run})
    page = client.get(f"/runs/{run}").get_data(as_text=True)
    assert f'href="/runs/{run}/delete"' in page
    ask = client.get(f"/runs/{run}/delete").get_data(as_text=True)
    assert "1 run, <code>send_invoice</code> (dead), and its 2 recorded attempts will be deleted" in ask
    assert ">Delete 1 run</button>" in ask
    assert sql("SELECT count(*) FROM job_runs") == [(2,)]  # asking deletes nothing
    response = client.post(f"/runs/{run}/delete", data={"csrf_token": csrf_token(client, "/")})
    assert response.status_code == 302 and response.location.endswith("/runs")
    assert sql("SELECT id FROM job_runs") == [(kept,)]
    assert sql("SELECT count(*) FROM job_attempts") == [(0,)]
    assert audit(sql, "delete") == [("admin@example.com", "run", run, {"job_type": "send_invoice", "status": "dead"})]
    assert f"Run {run} (send_invoice) was deleted with its attempts." in client.get(response.location).get_data(as_text=True)
    assert client.get(f"/runs/{run}").status_code == 404


def test_a_running_run_is_not_deleted_and_the_page_says_so(sign_in, sql):
    client = sign_in("admin")
    run = add_run(sql, "running")
    assert "/delete" not in client.get(f"/runs/{run}").get_data(as_text=True)
    assert "is running: a running run is not deleted" in client.get(f"/runs/{run}/delete").get_data(as_text=True)
    response = client.post(f"/runs/{run}/delete", data={"csrf_token": csrf_token(client, "/")})
    assert sql("SELECT status FROM job_runs") == [("running",)]
    assert "a running run is not deleted" in client.get(response.location).get_data(as_text=True)
    assert audit(sql, "delete") == []


def test_delete_selected_asks_with_the_number_keeps_running_runs_and_audits_which(sign_in, sql):
    client = sign_in("admin")
    dead, queued, running, other = (add_run(sql, s) for s in ("dead", "queued", "running", "dead"))
    token = csrf_token(client, "/")
    form = {"csrf_token": token, "action": "delete", "ids": [str(dead), str(queued), str(running)],
            "status": ["dead", "queued", "running"]}
    ask = client.post("/runs/delete", data=form)
    html = ask.get_data(as_text=True)
    assert ask.status_code == 200 and "<h1>Delete 2 runs?</h1>" in html
    assert "Of the 3 ticked runs" in html and "1 running run will not be deleted" in html
    assert ">Delete 2 runs</button>" in html and 'name="confirmed" value="yes"' in html
    assert 'aria-current="page">Runs</a>' in html  # still under Runs in the menu
    assert len(sql("SELECT id FROM job_runs")) == 4
    response = client.post("/runs/delete", data=dict(form, confirmed="yes"))
    assert response.status_code == 302 and "status=dead" in response.location  # back to the same filter
    assert sorted(sql("SELECT id FROM job_runs")) == [(running,), (other,)]
    [(email, target, _, detail)] = audit(sql, "bulk_delete")
    assert (email, target, detail["scope"], detail["deleted"], detail["kept_running"]) == (
        "admin@example.com", "runs", "selected", 2, 1)
    assert sorted(detail["ids"]) == [dead, queued] and detail["job_types"] == {"jobsweb.noop": 2}
    assert "Deleted 2 runs. 1 running run was not deleted." in client.get(response.location).get_data(as_text=True)


def test_delete_all_matching_deletes_every_match_in_batches_but_running_ones(app, sign_in, sql):
    app.config["JOBSWEB_BULK_BATCH"] = 7
    client = sign_in("admin")
    sql("INSERT INTO job_runs (job_type, status) SELECT 'billing.charge_invoice', "
        "(ARRAY['dead', 'succeeded', 'queued'])[n % 3 + 1] FROM generate_series(1, 30) n")
    sql("INSERT INTO job_runs (job_type, status) SELECT 'billing.charge_invoice', 'running' FROM generate_series(1, 2)")
    sql("INSERT INTO job_runs (job_type, status) SELECT 'jobsweb.noop', 'dead' FROM generate_series(1, 5)")
    form = {"csrf_token": csrf_token(client, "/"), "action": "delete-all", "job_type": "billing.charge_invoice"}
    html = client.post("/runs/delete", data=form).get_data(as_text=True)
    assert "<h1>Delete 30 runs?</h1>" in html and "2 running runs will not be deleted" in html
    assert 'name="job_type" value="billing.charge_invoice"' in html
    client.post("/runs/delete", data=dict(form, confirmed="yes"))
    assert dict(sql("SELECT job_type || ' ' || status, count(*) FROM job_runs GROUP BY 1")) == {
        "billing.charge_invoice running": 2, "jobsweb.noop dead": 5}
    [(_, _, _, detail)] = audit(sql, "bulk_delete")
    assert (detail["deleted"], detail["kept_running"], detail["scope"], len(detail["ids"])) == (30, 2, "matching", 30)
    assert detail["filter"] == {"job_type": "billing.charge_invoice"}


def a_graph(app):
    """A queued run `root` that b waits for, c waits for b, and `cleanup` (after_failure="run")
    waits for root; and a batch of two queued members: (root, b, c, cleanup, members)."""
    from jobsweb import batch, enqueue

    with app.app_context():
        root = enqueue("test.record", run_at=None, queue="held")
        b = enqueue("test.record", after=[root])
        c = enqueue("test.record", after=[b])
        cleanup = enqueue("test.record", after=[root], after_failure="run")
        with batch(on_finish="test.batch_callback", on_success="test.batch_callback") as export:
            members = export.enqueue_many("test.record", [{}, {}], run_at=None, queue="held")
    return root, b, c, cleanup, members


def test_the_delete_page_of_a_run_says_what_waits_for_it_will_be_cancelled(app, sign_in, sql):
    client = sign_in("admin")
    root, b, c, cleanup, members = a_graph(app)
    ask = client.get(f"/runs/{root}/delete").get_data(as_text=True)
    assert "2 runs wait for it and will be cancelled (each can be retried afterwards)." in ask
    assert "member of an open batch" not in ask
    member = client.get(f"/runs/{members[0]}/delete").get_data(as_text=True)
    assert "It is a member of an open batch, which will count it as cancelled (its on_success callback " \
           "will not run)." in member and "wait for it" not in member
    client.post(f"/runs/{root}/delete", data={"csrf_token": csrf_token(client, "/")})
    assert sql("SELECT id, status, reason FROM job_runs WHERE id = ANY(%s) ORDER BY id", [[b, c, cleanup]]) == [
        (b, "cancelled", f"run {root} was deleted"), (c, "cancelled", f"run {b} ended cancelled"),
        (cleanup, "queued", None)]
    assert audit(sql, "delete")[0][3] == {"job_type": "test.record", "status": "queued"}


def test_delete_selected_and_all_matching_say_what_waits_and_which_batches_count_them(app, sign_in, sql):
    client = sign_in("admin")
    root, b, c, cleanup, members = a_graph(app)
    token = csrf_token(client, "/")
    ticked = client.post("/runs/delete", data={"csrf_token": token, "action": "delete",
                                               "ids": [str(root), str(members[0]), str(members[1])]})
    html = ticked.get_data(as_text=True)
    assert "2 runs wait for these and will be cancelled" in html
    assert "2 of these are members of open batches, which will count them as cancelled (their on_success " \
           "callbacks will not run)." in html
    # Every waiting run matches too: deleted, so not said to be cancelled.
    every = client.post("/runs/delete", data={"csrf_token": token, "action": "delete-all",
                                              "job_type": "test.record"}).get_data(as_text=True)
    assert "for these and will be cancelled" not in every
    assert "2 of these are members of open batches" in every
    client.post("/runs/delete", data={"csrf_token": token, "action": "delete", "confirmed": "yes",
                                      "ids": [str(root), str(members[0]), str(members[1])]})
    assert sql("SELECT id, status FROM job_runs WHERE id = ANY(%s) ORDER BY id", [[b, c, cleanup]]) == [
        (b, "cancelled"), (c, "cancelled"), (cleanup, "queued")]
    assert sql("SELECT pending, failures FROM job_batches") == [(0, 2)]
    assert sql("SELECT batch_callback, status FROM job_runs WHERE batch_callback IS NOT NULL ORDER BY 1") == [
        ("on_finish", "queued"), ("on_success", "cancelled")]


def test_the_delete_buttons_are_an_admins_only(sign_in, sql, client):
    run = add_run(sql, "dead")
    for role, shown in (("operator", False), ("admin", True)):
        sign_in(role)
        assert ("Delete all matching" in client.get("/runs").get_data(as_text=True)) is shown
        assert (f"/runs/{run}/delete" in client.get(f"/runs/{run}").get_data(as_text=True)) is shown
        client.get("/sign-out")


def test_delete_selected_with_nothing_ticked_says_so_and_a_bad_action_is_a_400(sign_in, sql):
    client = sign_in("admin")
    add_run(sql, "dead")
    token = csrf_token(client, "/")
    response = client.post("/runs/delete", data={"csrf_token": token, "action": "delete"})
    assert "No runs are ticked" in client.get(response.location).get_data(as_text=True)
    assert client.post("/runs/delete", data={"csrf_token": token, "action": "drop"}).status_code == 400
    bad = client.post("/runs/delete", data={"csrf_token": token, "action": "delete", "ids": "1;drop"})
    assert bad.status_code == 400 and "ids" in bad.get_data(as_text=True)
    assert sql("SELECT count(*) FROM job_runs") == [(1,)]


def later(sql, hours=24):
    run = add_run(sql, "queued")
    sql(f"UPDATE job_runs SET run_at = now() + interval '{hours} hours' WHERE id = %s", [run])
    return run


def test_run_now_makes_a_queued_run_due_and_wakes_listening_workers(sign_in, sql, database_url_for_tests):
    client = sign_in("operator")
    run = later(sql)
    assert "Run now" in client.get(f"/runs/{run}").get_data(as_text=True)
    with psycopg.connect(libpq_url(database_url_for_tests), autocommit=True) as listener:
        listener.execute("LISTEN jobsweb_runs")
        response = client.post(f"/runs/{run}/run-now", data={"csrf_token": csrf_token(client, "/")})
        woken = []
        wait_for(lambda: woken.extend(listener.notifies(timeout=0.2, stop_after=1)) or woken, timeout=10,
                 message="a notification on jobsweb_runs")
    assert sql("SELECT run_at <= now() FROM job_runs") == [(True,)]
    assert "is due now" in client.get(response.location).get_data(as_text=True)
    [(email, _, target, detail)] = audit(sql, "run_now")
    assert (email, target) == ("operator@example.com", run) and "was_due" in detail
    assert "Run now" not in client.get(f"/runs/{run}").get_data(as_text=True)  # due already


@pytest.mark.parametrize("status", ["running", "succeeded"])
def test_run_now_and_reschedule_leave_a_run_that_is_not_queued_alone(sign_in, sql, status):
    client = sign_in("operator")
    run = add_run(sql, status)
    sql("UPDATE job_runs SET run_at = now() + interval '1 day' WHERE id = %s", [run])
    token = csrf_token(client, "/")
    response = client.post(f"/runs/{run}/run-now", data={"csrf_token": token})
    assert "only a queued run due later can be run now" in client.get(response.location).get_data(as_text=True)
    response = client.post(f"/runs/{run}/reschedule", data={"csrf_token": token, "run_at": "2099-01-01T00:00"})
    assert "only a queued run can be rescheduled" in client.get(response.location).get_data(as_text=True)
    assert sql("SELECT status, run_at > now() + interval '23 hours' FROM job_runs") == [(status, True)]
    assert audit(sql, "run_now") == [] and audit(sql, "reschedule") == []


def test_reschedule_moves_a_queued_run_to_a_time_read_in_the_viewers_zone(sign_in, sql):
    client = sign_in("operator")
    run = later(sql)
    html = client.get(f"/runs/{run}").get_data(as_text=True)
    assert re.search(r'<input type="datetime-local" name="run_at" required>', html)
    year = datetime.now(timezone.utc).year + 1
    response = client.post(f"/runs/{run}/reschedule", data={
        "csrf_token": csrf_token(client, "/"), "run_at": f"{year}-03-01T09:30", "tz": "Asia/Kolkata"})
    assert response.status_code == 302
    [(due,)] = sql("SELECT run_at FROM job_runs")
    assert due == datetime(year, 3, 1, 4, 0, tzinfo=timezone.utc)
    assert f"is due {year}-03-01 09:30 Asia/Kolkata" in client.get(response.location).get_data(as_text=True)
    [(_, _, target, detail)] = audit(sql, "reschedule")
    assert target == run and detail["due"].startswith(f"{year}-03-01T09:30:00+05:30")


def test_a_reschedule_typed_with_its_own_offset_is_said_back_in_the_viewers_zone(sign_in, sql):
    client = sign_in("operator")
    run = later(sql)
    year = datetime.now(timezone.utc).year + 1
    response = client.post(f"/runs/{run}/reschedule", data={
        "csrf_token": csrf_token(client, "/"), "run_at": f"{year}-03-01T09:30+00:00", "tz": "Asia/Kolkata"})
    [(due,)] = sql("SELECT run_at FROM job_runs")
    assert due == datetime(year, 3, 1, 9, 30, tzinfo=timezone.utc)
    assert f"is due {year}-03-01 15:00 Asia/Kolkata" in client.get(response.location).get_data(as_text=True)


@pytest.mark.parametrize("value, tz, words", [
    ("", "", "run_at: is required"), ("tomorrow", "", "run_at: must be a date and time"),
    ("2001-01-01T00:00", "", "run_at: 2001-01-01T00:00 is not in the future"),
    ("2099-01-01T00:00", "Mars/Base", "tz: &#39;Mars/Base&#39; is not a known time zone"),
])
def test_a_bad_reschedule_time_is_a_400_naming_the_field(sign_in, sql, value, tz, words):
    client = sign_in("operator")
    run = later(sql)
    response = client.post(f"/runs/{run}/reschedule", data={"csrf_token": csrf_token(client, "/"),
                                                             "run_at": value, "tz": tz})
    assert response.status_code == 400 and words in response.get_data(as_text=True)
    assert sql("SELECT run_at > now() + interval '23 hours' FROM job_runs") == [(True,)]


ACTIONS = [("delete", "/runs/{run}/delete", {}), ("bulk_delete", "/runs/delete", {"action": "delete", "confirmed": "yes"}),
           ("run_now", "/runs/{run}/run-now", {}), ("reschedule", "/runs/{run}/reschedule", {"run_at": "2099-01-01T00:00"})]
NEEDS = {"delete": "admin", "bulk_delete": "admin", "run_now": "operator", "reschedule": "operator"}


@pytest.mark.parametrize("action, path, form", ACTIONS)
def test_each_action_needs_its_role_and_the_csrf_token(client, sign_in, sql, action, path, form):
    run = later(sql)
    path = path.format(run=run)
    form = dict(form, ids=str(run))
    before = sql("SELECT id, status, run_at FROM job_runs")
    response = client.post(path, data=dict(form, csrf_token=csrf_token(client)))  # nobody signed in
    assert response.status_code == 302 and "/sign-in" in response.location
    for role in ("viewer", "operator", "admin"):
        sign_in(role)
        allowed = role == "admin" or NEEDS[action] == role
        if not allowed:
            response = client.post(path, data=dict(form, csrf_token=csrf_token(client, "/")))
            assert response.status_code == 403 and f"This needs the {NEEDS[action]} role" in response.get_data(as_text=True)
        assert client.post(path, data=form).status_code == 400  # no token
        assert client.post(path, data=form, headers={"X-CSRFToken": "forged"}).status_code == 400
        client.get("/sign-out")
    assert sql("SELECT id, status, run_at FROM job_runs") == before
    assert sql("SELECT count(*) FROM jobsweb_audit_log WHERE action = %s", [action]) == [(0,)]
    client.post("/sign-in", data={"email": f"{NEEDS[action]}@example.com", "password": PASSWORD,
                                  "csrf_token": csrf_token(client)})
    client.post(path, data=dict(form, csrf_token=csrf_token(client, "/")))
    assert sql("SELECT count(*) FROM jobsweb_audit_log WHERE action = %s", [action]) == [(1,)]


def test_a_deleted_runs_audit_entry_stays_on_the_audit_page(sign_in, sql):
    client = sign_in("admin")
    run = add_run(sql, "dead", job_type="send_invoice")
    client.post(f"/runs/{run}/delete", data={"csrf_token": csrf_token(client, "/")})
    html = client.get("/audit?action=delete").get_data(as_text=True)
    assert "send_invoice" in html and run_ids(client.get("/runs").get_data(as_text=True)) == []


def test_reschedule_keeps_the_date_being_typed_across_the_pages_refreshes(sign_in, sql):
    client = sign_in("operator")
    run = later(sql)
    html = client.get(f"/runs/{run}", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert 'id="reschedule" hx-preserve="true"' in html and 'hx-trigger="every 2s"' in html
