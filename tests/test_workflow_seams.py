"""Where workflows meet the other ways runs change: a delete counts as a cancel for what waits
and for batches, and a cancel reaching tens of thousands of waiting runs is a few statements
that the web can afford, or, if the server stops it, one that changed nothing and left nothing
running (migration 0024_seams)."""

import psycopg
import pytest
from flask_migrate import downgrade, upgrade

from jobsweb import batch, enqueue, enqueue_many
from jobsweb.core.database import db, libpq_url
from jobsweb.engine import run_actions
from jobsweb.web import outage
from tests.conftest import csrf_token
from tests.test_migrations import at
from tests.test_worker import make_worker
from tests.test_workflows import reason_of, statuses


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
