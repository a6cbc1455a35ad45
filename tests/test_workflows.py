"""Workflows: after=, batches with callbacks, chains; decided in the database."""

import threading

import psycopg
import pytest

from jobsweb import InvalidInput, batch, chain, enqueue, get_batch
from jobsweb.core.database import db, libpq_url
from jobsweb.engine.runs import run_actions
from tests.test_metrics import metrics_app, scrape  # noqa: F401, F811 (a fixture)
from tests.test_worker import make_worker


def statuses(sql, *ids):
    rows = dict(sql("SELECT id, status FROM job_runs WHERE id = ANY(%s)", [list(ids)]))
    return [rows[run_id] for run_id in ids]


def reason_of(sql, run_id):
    return sql("SELECT reason FROM job_runs WHERE id = %s", [run_id])[0][0]


def times(sql, run_id):
    """(started_at, finished_at) of the run's last attempt."""
    return sql("SELECT started_at, finished_at FROM job_runs WHERE id = %s", [run_id])[0]


def test_a_diamond_runs_each_run_only_after_everything_it_waits_for_succeeded(app, sql):
    with app.app_context():
        a = enqueue("test.record")
        b = enqueue("test.record", after=[a])
        c = enqueue("test.record", after=[a])
        d = enqueue("test.record", after=[b, c])
    assert statuses(sql, a, b, c, d) == ["queued", "waiting", "waiting", "waiting"]
    make_worker(app).run()
    assert statuses(sql, a, b, c, d) == ["succeeded"] * 4
    assert times(sql, b)[0] >= times(sql, a)[1] and times(sql, c)[0] >= times(sql, a)[1]
    assert times(sql, d)[0] >= max(times(sql, b)[1], times(sql, c)[1])


def three_steps(first_job_type):
    """a (one attempt), b after a, c after b: their ids."""
    a = enqueue(first_job_type, max_attempts=1)
    b = enqueue("test.record", after=[a])
    return a, b, enqueue("test.record", after=[b])


def test_a_dead_dependency_cancels_everything_below_it_with_the_reason(app, sql):
    with app.app_context():
        a, b, c = three_steps("jobsweb.fail")
        unrelated = enqueue("test.record")
    make_worker(app).run()
    assert statuses(sql, a, b, c, unrelated) == ["dead", "cancelled", "cancelled", "succeeded"]
    assert reason_of(sql, b) == f"run {a} ended dead"
    assert reason_of(sql, c) == f"run {b} ended cancelled"
    assert sql("SELECT count(*) FROM test_executions WHERE run_id IN (%s, %s)", [b, c]) == [(0,)]


def test_retrying_the_dead_run_revives_what_its_end_cancelled_and_the_rest_then_runs(app, sql):
    with app.app_context():
        a, b, c = three_steps("test.fail_first")
        other = enqueue("test.record")
        d = enqueue("test.record", after=[other, b])
        make_worker(app).run()
        assert statuses(sql, a, b, c, d) == ["dead", "cancelled", "cancelled", "cancelled"]
        run_actions.retry([a])
        db.session.commit()
    assert statuses(sql, a, b, c, d) == ["queued", "waiting", "waiting", "waiting"]
    assert sql("SELECT waiting_for FROM job_runs WHERE id = ANY(%s) ORDER BY id", [[b, c, d]]) == [(1,), (1,), (1,)]
    make_worker(app).run()
    assert statuses(sql, a, b, c, d) == ["succeeded"] * 4
    assert times(sql, c)[0] >= times(sql, b)[1] >= times(sql, a)[1]


def test_after_failure_run_runs_it_anyway_once_its_dependencies_ended(app, sql):
    with app.app_context():
        a = enqueue("jobsweb.fail", max_attempts=1)
        b = enqueue("test.record", after=[a])
        cleanup = enqueue("test.record", after=[a, b], after_failure="run")
    make_worker(app).run()
    assert statuses(sql, a, b, cleanup) == ["dead", "cancelled", "succeeded"]
    assert times(sql, cleanup)[0] >= times(sql, b)[1]


def test_a_run_after_one_already_dead_is_cancelled_at_once_and_after_one_succeeded_is_queued(app, sql):
    with app.app_context():
        dead = enqueue("jobsweb.fail", max_attempts=1)
        done = enqueue("test.record")
        make_worker(app).run()
        cancelled = enqueue("test.record", after=[dead])
        queued = enqueue("test.record", after=[done])
    assert statuses(sql, cancelled, queued) == ["cancelled", "queued"]
    assert reason_of(sql, cancelled) == f"run {dead} ended dead"


def test_cancelling_the_first_step_of_a_chain_cancels_every_step_after_it(app, sql):
    with app.app_context():
        first = chain([("test.record", {"step": 1}), ("test.record", {"step": 2}), ("test.record",)])
        run_actions.cancel([first])
        db.session.commit()
    assert statuses(sql, *first.ids) == ["cancelled"] * 3
    assert reason_of(sql, first.last) == f"run {first.ids[1]} ended cancelled"


def test_a_chain_runs_its_steps_in_order(app, sql):
    with app.app_context():
        first = chain([("test.record", {"step": n}) for n in range(5)])
    assert first == first.ids[0] and statuses(sql, *first.ids) == ["queued"] + ["waiting"] * 4
    make_worker(app).run()
    assert statuses(sql, *first.ids) == ["succeeded"] * 5
    ends = [times(sql, run_id) for run_id in first.ids]
    assert all(later[0] >= earlier[1] for earlier, later in zip(ends, ends[1:]))


def test_waiting_runs_are_never_claimed(app, sql):
    with app.app_context():
        blocker = enqueue("test.record", run_at=None, queue="held")
        waiting = enqueue("test.record", after=[blocker])
    make_worker(app, queues=["default"]).run()
    assert statuses(sql, blocker, waiting) == ["queued", "waiting"]


def test_batch_callbacks_see_dead_and_cancelled_members(app, sql):
    with app.app_context():
        with batch(on_finish="test.batch_callback", on_success="test.batch_callback", payload={"export": 7}) as export:
            export.enqueue_many("test.record", [{}, {}, {}])
            dead = export.enqueue("jobsweb.fail", max_attempts=1)
            cancelled = export.enqueue("test.record", run_at=None, queue="later")
        run_actions.cancel([cancelled])
        db.session.commit()
    assert statuses(sql, dead) == ["queued"]
    make_worker(app).run()
    on_finish, on_success = export.callbacks["on_finish"], export.callbacks["on_success"]
    assert statuses(sql, on_finish, on_success) == ["succeeded", "cancelled"]
    [(result,)] = sql("SELECT result FROM job_runs WHERE id = %s", [on_finish])
    assert result == {"batch": export.id, "payload": {"export": 7}, "finishes": 1,
                      "counts": {"succeeded": 3, "dead": 1, "cancelled": 1}}
    assert reason_of(sql, on_success) == f"batch {export.id} finished with 2 members dead or cancelled"
    with app.app_context():
        state = get_batch(export.id)
    assert (state.finished, state.pending, state.counts) == (True, 0, {"succeeded": 3, "dead": 1, "cancelled": 1})


def test_a_batch_whose_members_all_succeed_runs_both_callbacks_once(app, sql):
    with app.app_context():
        with batch(on_finish="test.batch_callback", on_success="test.batch_callback") as export:
            export.enqueue_many("test.record", [{} for _ in range(20)])
    assert statuses(sql, *export.callbacks.values()) == ["waiting", "waiting"]
    make_worker(app).run()
    assert statuses(sql, *export.callbacks.values()) == ["succeeded", "succeeded"]
    assert sql("SELECT count(*) FROM job_runs WHERE batch_callback IS NOT NULL") == [(2,)]


def test_retrying_a_dead_member_reopens_the_batch_and_its_callbacks_run_again(app, sql):
    with app.app_context():
        with batch(on_finish="test.batch_callback", on_success="test.batch_callback") as export:
            export.enqueue("test.record")
            flaky = export.enqueue("test.fail_first", max_attempts=1)
    make_worker(app).run()
    assert statuses(sql, flaky, *export.callbacks.values()) == ["dead", "succeeded", "cancelled"]
    with app.app_context():
        run_actions.retry([flaky])
        db.session.commit()
        reopened = get_batch(export.id)
    assert (reopened.finished, reopened.pending) == (False, 1)
    assert [c["status"] for c in reopened.callbacks[:2]] == ["waiting", "waiting"]
    make_worker(app).run()
    with app.app_context():
        again = get_batch(export.id)
    assert (again.finished, again.finishes, again.counts) == (True, 2, {"succeeded": 2})
    newest = {c["callback"]: c for c in reversed(again.callbacks)}
    assert [newest[name]["status"] for name in ("on_finish", "on_success")] == ["succeeded", "succeeded"]
    assert newest["on_success"]["reason"] == f"batch {export.id} finished again (2 times)"
    [(result,)] = sql("SELECT result FROM job_runs WHERE id = %s", [newest["on_finish"]["id"]])
    assert result["finishes"] == 2 and result["counts"] == {"succeeded": 2}


def test_a_batch_in_a_rolled_back_transaction_leaves_nothing(app, sql):
    with app.app_context():
        with batch(on_finish="test.batch_callback", session=db.session) as export:
            export.enqueue_many("test.record", [{}, {}])
            export.enqueue("test.record", after=[export.enqueue("test.record")])
        db.session.rollback()
    assert sql("SELECT (SELECT count(*) FROM job_runs), (SELECT count(*) FROM job_batches), "
               "(SELECT count(*) FROM job_run_deps)") == [(0, 0, 0)]


def test_a_batch_whose_block_raises_leaves_nothing(app, sql):
    with app.app_context(), pytest.raises(InvalidInput):
        with batch(on_finish="test.batch_callback") as export:
            export.enqueue("test.record")
            export.enqueue("test.record", {"bad": float("nan")})
    assert sql("SELECT (SELECT count(*) FROM job_runs), (SELECT count(*) FROM job_batches)") == [(0, 0)]


def test_a_batch_is_invisible_until_its_block_ends(app, sql):
    with app.app_context():
        with batch(on_finish="test.batch_callback") as export:
            export.enqueue("test.record")
            assert sql("SELECT count(*) FROM job_runs") == [(0,)]
    assert sql("SELECT count(*) FROM job_runs") == [(2,)]


def test_an_empty_batch_runs_its_callback_at_once(app, sql):
    with app.app_context():
        with batch(on_finish="test.batch_callback") as export:
            pass
    assert statuses(sql, export.callbacks["on_finish"]) == ["queued"]


def test_a_member_may_wait_and_a_callback_may_be_waited_for(app, sql):
    with app.app_context():
        first = enqueue("test.record")
        with batch(on_finish="test.batch_callback") as export:
            member = export.enqueue("test.record", after=[first])
        archive = enqueue("test.record", after=[export.callbacks["on_finish"]])
    make_worker(app).run()
    assert statuses(sql, first, member, export.callbacks["on_finish"], archive) == ["succeeded"] * 4
    assert times(sql, archive)[0] >= times(sql, export.callbacks["on_finish"])[1]


def test_concurrent_endings_of_the_last_members_release_the_callback_once(app, sql, database_url_for_tests):
    enders = 8
    with app.app_context():
        with batch(on_finish="test.batch_callback") as export:
            members = export.enqueue_many("test.record", [{} for _ in range(enders)])
    barrier = threading.Barrier(enders)
    errors = []

    def end(run_id):
        try:
            with psycopg.connect(libpq_url(database_url_for_tests), autocommit=True) as conn:
                barrier.wait()
                conn.execute("UPDATE job_runs SET status = 'cancelled', finished_at = now() WHERE id = %s", [run_id])
        except Exception as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=end, args=(run_id,)) for run_id in members]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sql("SELECT status FROM job_runs WHERE batch_callback IS NOT NULL") == [("queued",)]
    assert sql("SELECT pending, finishes FROM job_batches") == [(0, 1)]


@pytest.mark.parametrize("after, after_failure, field", [
    ([999999], "cancel", "after"), (["1"], "cancel", "after"), ("1", "cancel", "after"),
    ([True], "cancel", "after"), (None, "sometimes", "after_failure")])
def test_bad_after_is_refused_naming_the_field_and_writes_nothing(app, sql, after, after_failure, field):
    with app.app_context(), pytest.raises(InvalidInput) as refused:
        enqueue("test.record", after=after, after_failure=after_failure)
    assert refused.value.field == field
    assert sql("SELECT count(*) FROM job_runs") == [(0,)]


def test_a_unique_key_with_after_is_refused(app, sql):
    with app.app_context():
        first = enqueue("test.record")
        with pytest.raises(InvalidInput) as refused:
            enqueue("test.record", after=[first], unique_key="nightly")
    assert refused.value.field == "unique_key"
    assert sql("SELECT count(*) FROM job_runs") == [(1,)]


def test_bad_callbacks_and_steps_are_refused_naming_the_field(app, sql):
    with app.app_context():
        with pytest.raises(InvalidInput) as refused:
            batch(on_finish="no.such.job")
        assert refused.value.field == "on_finish"
        with pytest.raises(InvalidInput) as refused:
            chain([])
        assert refused.value.field == "steps"
        with pytest.raises(InvalidInput) as refused:
            chain([("test.record", {}), ("no.such.job", {})])
        assert refused.value.field == "job_type"
    assert sql("SELECT (SELECT count(*) FROM job_runs), (SELECT count(*) FROM job_batches)") == [(0, 0)]


def test_flask_jobs_batch_prints_the_batchs_state(app, runner, sql):
    with app.app_context():
        with batch(on_finish="test.batch_callback") as export:
            export.enqueue_many("test.record", [{}, {}])
            export.enqueue("jobsweb.fail", max_attempts=1)
    make_worker(app).run()
    result = runner.invoke(args=["jobs", "batch", str(export.id)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"batch {export.id}: finished ") and lines[0].endswith("3 of 3 members ended")
    assert lines[1:] == ["  succeeded: 2", "  dead: 1",
                         f"  on_finish: run {export.callbacks['on_finish']} succeeded "
                         f"(batch {export.id} finished with 1 member dead or cancelled)"]
    missing = runner.invoke(args=["jobs", "batch", "999"])
    assert missing.exit_code == 1 and "there is no batch 999" in missing.output


def test_metrics_count_the_open_batches(app, metrics_app, sql):  # noqa: F811 (the fixture)
    with app.app_context():
        for _ in range(2):
            with batch(on_finish="test.batch_callback") as export:
                export.enqueue("test.record")
        with batch() as empty:
            assert empty.id
    assert scrape(metrics_app)[("jobsweb_batches_open", ())] == 2
