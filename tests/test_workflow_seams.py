"""Where workflows meet the other ways runs change: a delete counts as a cancel for what waits
and for batches, and a cancel reaching tens of thousands of waiting runs is a few statements
that the web can afford, or, if the server stops it, one that changed nothing and left nothing
running (migration 0024_seams); a retry never leaves a run waiting for one that ended dead or
cancelled, and puts back to waiting what the retried run's failure released and has not started
(migration 0026_retry_seams)."""

import psycopg
import pytest
from flask_migrate import downgrade, upgrade

from jobsweb import batch, enqueue, enqueue_many
from jobsweb.core.database import db, libpq_url
from jobsweb.engine.runs import run_actions
from jobsweb.web import outage
from tests.conftest import csrf_token
from tests.test_migrations import at
from tests.test_worker import make_worker
from tests.test_workflows import reason_of, statuses, times


def delete(app, *ids):
    with app.app_context():
        deleted = run_actions.delete(ids)
        db.session.commit()
    return deleted


def test_deleting_a_run_that_others_wait_for_cancels_them_with_the_reason(app, sql):
    with app.app_context():
        a = enqueue("test.record", run_at=None, queue="held")
        b = enqueue("test.record", after=[a])
        c = enqueue("test.record", after=[b])
    [deleted] = delete(app, a)
    assert (deleted.id, deleted.status) == (a, "queued")
    assert sql("SELECT count(*) FROM job_runs WHERE id = %s", [a]) == [(0,)]
    assert statuses(sql, b, c) == ["cancelled", "cancelled"]
    assert reason_of(sql, b) == f"run {a} was deleted"
    assert reason_of(sql, c) == f"run {b} ended cancelled"


def test_a_dependent_of_a_deleted_run_retried_waits_only_for_the_runs_it_still_has(app, sql):
    with app.app_context():
        a = enqueue("test.record", run_at=None, queue="held")
        other = enqueue("test.record")
        both = enqueue("test.record", after=[a, other])
        only = enqueue("test.record", after=[a])
    delete(app, a)
    with app.app_context():
        assert sorted(run_actions.retry([both, only])) == [both, only]
        db.session.commit()
    assert statuses(sql, both, only) == ["waiting", "queued"]
    assert sql("SELECT waiting_for FROM job_runs WHERE id = ANY(%s) ORDER BY id", [[both, only]]) == [(1,), (0,)]
    make_worker(app).run()
    assert statuses(sql, other, both, only) == ["succeeded"] * 3


def test_deleting_a_batch_member_counts_it_as_cancelled_so_on_finish_runs_and_on_success_is_cancelled(app, sql):
    with app.app_context():
        with batch(on_finish="test.batch_callback", on_success="test.batch_callback") as export:
            export.enqueue("test.record")
            doomed = export.enqueue("test.record", run_at=None, queue="held")
    delete(app, doomed)
    assert sql("SELECT pending, failures FROM job_batches") == [(1, 1)]
    make_worker(app).run()
    on_finish, on_success = export.callbacks["on_finish"], export.callbacks["on_success"]
    assert statuses(sql, on_finish, on_success) == ["succeeded", "cancelled"]
    assert reason_of(sql, on_success) == f"batch {export.id} finished with 1 member dead or cancelled"


def test_a_run_enqueued_with_after_failure_run_runs_once_what_it_waits_for_is_deleted(app, sql):
    with app.app_context():
        a = enqueue("test.record", run_at=None, queue="held")
        b = enqueue("test.record", after=[a])
        cleanup = enqueue("test.record", after=[a, b], after_failure="run")
    delete(app, a)
    assert statuses(sql, b, cleanup) == ["cancelled", "queued"]


def test_deleting_a_run_that_already_ended_leaves_what_waits_for_the_others_waiting(app, sql):
    with app.app_context():
        done = enqueue("test.record")
        make_worker(app).run()
        later = enqueue("test.record", run_at=None, queue="held")
        waits = enqueue("test.record", after=[done, later])
    [deleted] = delete(app, done)
    assert (deleted.id, deleted.status) == (done, "succeeded")
    assert statuses(sql, waits) == ["waiting"]
    assert sql("SELECT waiting_for FROM job_runs WHERE id = %s", [waits]) == [(1,)]


def test_deleting_a_run_with_one_that_waits_for_it_deletes_both_and_cancels_what_waits_below(app, sql):
    with app.app_context():
        a = enqueue("test.record", run_at=None, queue="held")
        b = enqueue("test.record", after=[a])
        c = enqueue("test.record", after=[b])
    assert sorted(row.id for row in delete(app, a, b)) == [a, b]
    assert statuses(sql, c) == ["cancelled"]
    assert reason_of(sql, c) == f"run {b} was deleted"


def wide(app, sql, dependents):
    """A queued root and `dependents` runs waiting for it, enqueued after job_runs was analysed
    without waiting runs (as autovacuum leaves a table): the planner takes 'waiting' for rare."""
    with app.app_context():
        enqueue_many("test.record", [{}] * 1000)
    sql("ANALYZE job_runs")
    sql("ANALYZE job_run_deps")
    with app.app_context():
        root = enqueue("test.record", run_at=None, queue="held")
        enqueue_many("test.record", [{}] * dependents, after=[root])
    return root


def test_cancelling_a_run_that_20000_runs_wait_for_on_its_page_cancels_them_all_with_the_reason(app, sql, sign_in):
    root = wide(app, sql, 20_000)
    client = sign_in("operator")
    response = client.post(f"/runs/{root}/cancel", data={"csrf_token": csrf_token(client, "/")})
    assert response.status_code == 302
    assert sql("SELECT status, reason, count(*) FROM job_runs WHERE id > %s GROUP BY 1, 2", [root]) == [
        ("cancelled", f"run {root} ended cancelled", 20_000)]
    assert f"Run {root} is cancelled." in client.get(response.location).get_data(as_text=True)


def test_a_wide_cancel_counts_its_batches_and_the_runs_after_failure_in_the_same_transaction(app, sql):
    with app.app_context():
        root = enqueue("test.record", run_at=None, queue="held")
        with batch(on_finish="test.batch_callback", on_success="test.batch_callback") as export:
            members = export.enqueue_many("test.record", [{}] * 1000, after=[root])
        below = enqueue("test.record", after=[members[-1]])
        cleanup = enqueue("test.record", after=[root, members[0], below], after_failure="run")
        run_actions.cancel([root])
        db.session.commit()
    assert sql("SELECT count(*) FROM job_runs WHERE batch_id = %s AND batch_callback IS NULL AND status = 'cancelled'",
               [export.id]) == [(1000,)]
    assert sql("SELECT pending, failures, finishes FROM job_batches") == [(0, 1000, 1)]
    assert statuses(sql, export.callbacks["on_finish"], export.callbacks["on_success"], below, cleanup) == [
        "queued", "cancelled", "cancelled", "queued"]
    assert reason_of(sql, below) == f"run {members[-1]} ended cancelled"
    assert sql("SELECT waiting_for FROM job_runs WHERE id = %s", [cleanup]) == [(0,)]


def test_a_cancel_the_server_stops_says_nothing_was_cancelled_and_leaves_nothing_running(
        app, sql, sign_in, database_url_for_tests, monkeypatch):
    monkeypatch.setattr(outage, "ACTION_LIMIT", 1.0)
    root = wide(app, sql, 1000)
    client = sign_in("operator")
    token = csrf_token(client, "/")
    # Another transaction holds one waiting run: the cascade waits for it, past the limit.
    with psycopg.connect(libpq_url(database_url_for_tests)) as holder:
        holder.execute("SELECT id FROM job_runs WHERE id = %s FOR UPDATE", [root + 500])
        response = client.post(f"/runs/{root}/cancel", data={"csrf_token": token})
        active = sql("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                     "AND state = 'active' AND pid <> pg_backend_pid()")
    page = response.get_data(as_text=True)
    assert response.status_code == 503
    assert f"Cancelling run {root} took longer than 1 s, and the database stopped it: nothing was cancelled." in page
    assert active == [(0,)]
    assert sql("SELECT status, count(*) FROM job_runs WHERE id >= %s GROUP BY 1 ORDER BY 1", [root]) == [
        ("queued", 1), ("waiting", 1000)]
    assert sql("SELECT count(*) FROM jobsweb_audit_log WHERE action = 'cancel'") == [(0,)]


def workflow_function(url):
    with psycopg.connect(libpq_url(url)) as conn:
        return conn.execute(
            "SELECT pg_get_functiondef('jobsweb_workflow_step'::regproc), "
            "(SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'job_runs_workflow'), "
            "to_regproc('jobsweb_cancel_below') IS NOT NULL").fetchone()


@pytest.mark.parametrize("previous", ["0023_queue_throughput"])
def test_0024_goes_down_to_the_workflow_trigger_of_0020_and_up_again(scratch_database, previous):
    before = workflow_function(scratch_database("jobsweb_before_seams", revision=previous))
    head = scratch_database("jobsweb_seams")
    after = workflow_function(head)
    assert after != before and after[2] and not before[2]
    at(head, downgrade, previous)
    assert workflow_function(head) == before
    at(head, upgrade, "head")
    assert workflow_function(head) == after


def test_retrying_a_run_whose_cancel_reached_20000_runs_on_its_page_makes_them_all_wait_again(app, sql, sign_in):
    root = wide(app, sql, 20_000)
    with app.app_context():
        run_actions.cancel([root])
        db.session.commit()
    client = sign_in("operator")
    response = client.post(f"/runs/{root}/retry", data={"csrf_token": csrf_token(client, "/")})
    assert response.status_code == 302
    assert sql("SELECT status, waiting_for, reason, count(*) FROM job_runs WHERE id > %s GROUP BY 1, 2, 3",
               [root]) == [("waiting", 1, None, 20_000)]


def waiting_for(sql, *ids):
    rows = dict(sql("SELECT id, waiting_for FROM job_runs WHERE id = ANY(%s)", [list(ids)]))
    return [rows[run_id] for run_id in ids]


def retry(app, *ids):
    with app.app_context():
        retried = run_actions.retry(ids)
        db.session.commit()
    return sorted(retried)


def dead_in_turn(app, *queues):
    """Runs each queue's runs alone, one queue after the other: their runs end in that order."""
    for queue in queues:
        make_worker(app, queues=[queue]).run()


def test_retrying_one_of_two_dead_runs_leaves_what_waits_for_both_cancelled_naming_the_other(app, sql):
    with app.app_context():
        a = enqueue("test.fail_first", max_attempts=1)
        b = enqueue("test.fail_first", max_attempts=1, queue="later")
        w = enqueue("test.record", after=[a, b])
        below = enqueue("test.record", after=[w])
    dead_in_turn(app, "default", "later")
    assert statuses(sql, a, b, w, below) == ["dead", "dead", "cancelled", "cancelled"]
    assert reason_of(sql, w) == f"run {a} ended dead"
    assert retry(app, a) == [a]
    assert statuses(sql, a, b, w, below) == ["queued", "dead", "cancelled", "cancelled"]
    assert (reason_of(sql, w), reason_of(sql, below)) == (f"run {b} ended dead", f"run {w} ended cancelled")
    assert retry(app, b) == [b]
    assert statuses(sql, w, below) == ["waiting", "waiting"]
    assert waiting_for(sql, w, below) == [2, 1]
    make_worker(app).run()
    assert statuses(sql, a, b, w, below) == ["succeeded"] * 4


def test_retrying_on_its_page_a_run_that_waits_for_dead_ones_leaves_it_and_names_the_one_that_revives_it(
        app, sql, sign_in):
    with app.app_context():
        a = enqueue("test.fail_first", max_attempts=1)
        b = enqueue("test.fail_first", max_attempts=1, queue="later")
        w = enqueue("test.record", after=[a, b])
    dead_in_turn(app, "later", "default")  # b's death cancelled w, a's came after
    client = sign_in("operator")
    response = client.post(f"/runs/{w}/retry", data={"csrf_token": csrf_token(client, "/")})
    assert response.status_code == 302
    assert statuses(sql, a, b, w) == ["dead", "dead", "cancelled"]
    assert (f"Run {w} waits for run {b}, which ended dead: retry that one and {w} waits for it again."
            in client.get(response.location).get_data(as_text=True))
    assert sql("SELECT count(*) FROM jobsweb_audit_log WHERE action = 'retry'") == [(0,)]


def test_a_bulk_retry_leaves_alone_the_runs_that_wait_for_a_dead_run_and_what_waits_below_them(app, sql, sign_in):
    with app.app_context():
        a = enqueue("test.fail_first", max_attempts=1)
        w = enqueue("test.record", after=[a])
        below = enqueue("test.record", after=[w])
    make_worker(app).run()
    client = sign_in("operator")
    response = client.post("/runs/bulk", data={"csrf_token": csrf_token(client, "/"), "action": "retry",
                                               "ids": [str(w), str(below)]})
    assert statuses(sql, a, w, below) == ["dead", "cancelled", "cancelled"]
    assert ("Retried 0 of 2 runs ticked. 2 left alone: they wait for a run that ended dead or cancelled."
            in client.get(response.location).get_data(as_text=True))


def test_a_bulk_retry_of_a_dead_run_and_what_waits_for_it_makes_that_wait_for_its_new_attempt(app, sql, sign_in):
    with app.app_context():
        a = enqueue("test.fail_first", max_attempts=1)
        w = enqueue("test.record", after=[a])
    make_worker(app).run()
    client = sign_in("operator")
    response = client.post("/runs/bulk", data={"csrf_token": csrf_token(client, "/"), "action": "retry",
                                               "ids": [str(w), str(a)]})
    assert "Retried 2 of 2 runs ticked." in client.get(response.location).get_data(as_text=True)
    assert statuses(sql, a, w) == ["queued", "waiting"]
    assert waiting_for(sql, w) == [1]
    make_worker(app).run()
    assert statuses(sql, a, w) == ["succeeded", "succeeded"]
    assert times(sql, w)[0] >= times(sql, a)[1]


def test_retrying_a_dead_run_puts_back_to_waiting_a_cleanup_its_death_released_that_has_not_started(app, sql):
    with app.app_context():
        a = enqueue("test.fail_first", max_attempts=1)
        cleanup = enqueue("test.record", after=[a], after_failure="run", queue="later")
    dead_in_turn(app, "default")
    assert statuses(sql, a, cleanup) == ["dead", "queued"]
    assert retry(app, a) == [a]
    assert statuses(sql, cleanup) == ["waiting"]
    assert waiting_for(sql, cleanup) == [1]
    make_worker(app).run()
    assert statuses(sql, a, cleanup) == ["succeeded", "succeeded"]
    assert times(sql, cleanup)[0] >= times(sql, a)[1]


def test_retrying_a_dead_run_leaves_a_cleanup_its_death_released_that_has_started_as_it_is(app, sql):
    with app.app_context():
        a = enqueue("test.fail_first", max_attempts=1)
        cleanup = enqueue("test.fail_first", after=[a], after_failure="run", max_attempts=1, queue="later")
    dead_in_turn(app, "default", "later")
    assert retry(app, cleanup) == [cleanup]  # queued again, with its first attempt behind it
    assert retry(app, a) == [a]
    assert statuses(sql, a, cleanup) == ["queued", "queued"]
    assert waiting_for(sql, cleanup) == [0]


def functions(url):
    with psycopg.connect(libpq_url(url)) as conn:
        return conn.execute("SELECT pg_get_functiondef('jobsweb_workflow_step'::regproc), "
                            "pg_get_functiondef('jobsweb_revive_below'::regproc)").fetchone()


def test_0026_goes_down_to_the_functions_of_0024_and_up_again(scratch_database):
    before = functions(scratch_database("jobsweb_before_retry_seams", revision="0025_claim_order"))
    head = scratch_database("jobsweb_retry_seams")
    after = functions(head)
    assert after[0] != before[0] and after[1] != before[1]
    at(head, downgrade, "0025_claim_order")
    assert functions(head) == before
    at(head, upgrade, "head")
    assert functions(head) == after


def test_retrying_on_its_page_a_run_cancelled_before_what_it_waits_for_died_says_to_retry_both_at_once(
        app, sql, sign_in):
    with app.app_context():
        a = enqueue("test.fail_first", max_attempts=1)
        w = enqueue("test.record", after=[a])
        run_actions.cancel([w])
        db.session.commit()
    make_worker(app).run()
    client = sign_in("operator")
    response = client.post(f"/runs/{w}/retry", data={"csrf_token": csrf_token(client, "/")})
    assert statuses(sql, a, w) == ["dead", "cancelled"]
    assert (f"Run {w} waits for run {a}, which ended dead: retry both at once from the runs list and {w} waits "
            f"for {a}&#39;s new attempt." in client.get(response.location).get_data(as_text=True))
