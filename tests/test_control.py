"""jobsweb.cancel(), jobsweb.retry() and Run.wait() from application code: the admin screen's
actions with the screen's rules and audit entries, and a wait woken by the run's end."""

import threading
import time
from datetime import datetime, timezone

import pytest

import jobsweb
from jobsweb import RunNotFound, RunStateError, cancel, create_app, enqueue, get_run, retry
from jobsweb.core.database import database_url, db
from jobsweb.core.errors import InvalidInput
from jobsweb.engine.runs import run_actions, run_waiting
from tests.conftest import SECRET_KEY, committed, wait_for
from tests.test_pooler import pooled_url  # noqa: F401 - the fixture: PgBouncer in transaction mode


LATER = datetime(2099, 1, 1, tzinfo=timezone.utc)  # a run no worker takes while the test runs


def audit_rows(sql, run_id):
    return sql("SELECT user_email, action, detail FROM jobsweb_audit_log WHERE target_type = 'run' "
               "AND target_id = %s ORDER BY id", [run_id])


def test_cancel_of_a_queued_run_cancels_it_and_audits_the_calling_module(app, sql):
    with app.app_context():
        run = enqueue("jobsweb.noop")
        assert cancel(run, reason="customer left") == "cancelled"
    assert sql("SELECT status, finished_at IS NOT NULL FROM job_runs WHERE id = %s", [run]) == [("cancelled", True)]
    assert audit_rows(sql, run) == [("code:tests.test_control", "cancel",
                                     {"previous_status": "queued", "reason": "customer left"})]


def test_cancel_of_a_waiting_run_cancels_it_and_leaves_the_run_it_waits_for(app, sql):
    with app.app_context():
        first = enqueue("jobsweb.noop", run_at=LATER)
        second = enqueue("jobsweb.noop", after=[first])
        assert get_run(second).status == "waiting"
        assert cancel(second, actor="billing") == "cancelled"
    assert sql("SELECT id, status FROM job_runs ORDER BY id") == [(first, "queued"), (second, "cancelled")]
    assert audit_rows(sql, second) == [("billing", "cancel", {"previous_status": "waiting"})]


def test_cancel_of_a_run_that_others_wait_for_cancels_them_with_it_as_the_screen_does(app, sql):
    with app.app_context():
        first = enqueue("jobsweb.noop", run_at=LATER)
        second = enqueue("jobsweb.noop", after=[first])
        cancel(first)
    assert sql("SELECT id, status, reason FROM job_runs ORDER BY id") == [
        (first, "cancelled", None), (second, "cancelled", f"run {first} ended cancelled")]


def test_cancel_of_a_running_run_asks_its_worker_to_stop_and_wait_returns_it_cancelled(app, sql, spawn_worker):
    with app.app_context():
        run = enqueue("jobsweb.sleep", {"seconds": 60})
    spawn_worker("--poll-interval", "0.1", JOBSWEB_LEASE_SECONDS="0.9")
    wait_for(lambda: sql("SELECT status FROM job_runs WHERE id = %s", [run]) == [("running",)],
             message="the worker to claim the run")
    with app.app_context():
        # Both in one transaction: a heartbeat (every 0.3 s) could see the first, and the worker
        # end the run, before the second asked (CI, a loaded stock run: "run 1 is cancelled").
        assert cancel(run, session=db.session) == "stop_requested"
        with pytest.raises(RunStateError, match="already asked to stop it"):
            cancel(run, session=db.session)
        db.session.commit()
        ended = get_run(run).wait(timeout=30)
    assert (ended.status, ended.id) == ("cancelled", run)
    assert sql("SELECT outcome FROM job_attempts WHERE run_id = %s", [run]) == [("cancelled",)]
    assert audit_rows(sql, run) == [("code:tests.test_control", "request_cancel", {"previous_status": "running"})]


def test_retry_of_a_dead_run_queues_it_again_and_a_worker_runs_it(app, sql, spawn_worker):
    [(run,)] = sql("INSERT INTO job_runs (job_type, payload, status, attempts, max_attempts, finished_at) "
                   "VALUES ('jobsweb.noop', '{}', 'dead', 1, 1, now()) RETURNING id")
    with app.app_context():
        assert retry(run) is None
        assert get_run(run).status == "queued"
    assert audit_rows(sql, run) == [("code:tests.test_control", "retry", {"previous_status": "dead"})]
    spawn_worker("--poll-interval", "0.1")
    with app.app_context():
        ended = get_run(run).wait(timeout=60)
    assert (ended.status, ended.attempts) == ("succeeded", 2)


@pytest.mark.parametrize("action, status, message", [
    (cancel, "succeeded", "is succeeded: there is nothing to cancel"),
    (retry, "queued", "is queued: only failed, dead or cancelled runs can be retried"),
    (retry, "succeeded", "is succeeded: only failed, dead or cancelled runs can be retried"),
])
def test_an_action_the_runs_status_does_not_allow_raises_and_changes_nothing(app, sql, action, status, message):
    [(run,)] = sql("INSERT INTO job_runs (job_type, payload, status) VALUES ('jobsweb.noop', '{}', %s) RETURNING id",
                   [status])
    with app.app_context(), pytest.raises(RunStateError, match=message) as raised:
        action(run)
    assert (raised.value.field, raised.value.status) == ("run_id", status)
    assert sql("SELECT status FROM job_runs") == [(status,)]
    assert sql("SELECT count(*) FROM jobsweb_audit_log") == [(0,)]


def test_retry_of_a_run_waiting_for_a_dead_one_says_to_retry_that_one(app, sql):
    with app.app_context():
        first = enqueue("jobsweb.noop", run_at=LATER)
        second = enqueue("jobsweb.noop", after=[first])
        sql("UPDATE job_runs SET status = 'dead', finished_at = now() WHERE id = %s", [first])
        assert get_run(second).status == "cancelled"
        with pytest.raises(RunStateError, match=f"waits for run {first}, which ended dead: retry that one"):
            retry(second)
        retry(first)
        assert get_run(second).status == "waiting"


@pytest.mark.parametrize("call, field", [
    (lambda: cancel(10**6), "run_id"), (lambda: retry(10**6), "run_id"),
    (lambda: cancel("7"), "run_id"), (lambda: retry(0), "run_id"), (lambda: cancel(True), "run_id"),
    (lambda: cancel(1, reason="x" * 1001), "reason"), (lambda: retry(1, actor=""), "actor"),
    (lambda: cancel(1, actor="evil\u202etxt"), "actor"),
])
def test_bad_input_raises_naming_the_field_and_writes_nothing(app, sql, call, field):
    with app.app_context(), pytest.raises(InvalidInput) as raised:
        call()
    assert raised.value.field == field
    assert sql("SELECT count(*) FROM jobsweb_audit_log") == [(0,)]


def test_an_unknown_run_id_raises_run_not_found(app):
    with app.app_context(), pytest.raises(RunNotFound, match="there is no run 123456"):
        cancel(123456)


def test_with_session_the_cancel_and_its_audit_entry_are_part_of_the_callers_transaction(app, sql):
    with app.app_context():
        run = enqueue("jobsweb.noop")
        cancel(run, session=db.session)
        assert get_run(run).status == "cancelled"  # seen in the caller's own transaction
        assert sql("SELECT status FROM job_runs") == [("queued",)]  # by no one else
        db.session.rollback()
    assert sql("SELECT status FROM job_runs") == [("queued",)]
    assert sql("SELECT count(*) FROM jobsweb_audit_log") == [(0,)]
    with committed(app):
        retry_or_cancel = cancel(run, session=db.session)
    assert retry_or_cancel == "cancelled"
    assert sql("SELECT status FROM job_runs") == [("cancelled",)]
    assert [row[:2] for row in audit_rows(sql, run)] == [("code:tests.test_control", "cancel")]


def test_wait_is_woken_by_the_runs_end_not_by_its_periodic_read(app, sql, spawn_worker, monkeypatch):
    # Reads of the run every 10 minutes only: a wait that returns saw the worker's notification.
    monkeypatch.setattr(run_waiting, "RECHECK_EVERY", 600.0)
    with app.app_context():
        run = enqueue("jobsweb.sleep", {"seconds": 0.5})
    spawn_worker("--poll-interval", "0.1")
    with app.app_context():
        started = time.monotonic()
        ended = get_run(run).wait(timeout=60)
    # Unwoken, it would read the run again only at the timeout, 60 s; woken, within seconds of
    # the worker's start (the benchmark measures how soon: bench/run_control.py).
    assert time.monotonic() - started < 45
    assert ended.status == "succeeded"
    assert ended.finished_at is not None


def test_wait_raises_timeout_error_at_its_timeout_when_the_run_has_not_ended(app):
    with app.app_context():
        run = enqueue("jobsweb.noop")  # no worker runs here: it stays queued
        waiting = get_run(run)
        # What a wait costs beside its timeout (its own connection and a read of the run; the
        # process's first wait probes LISTEN too), measured with a timeout of 0.
        began = time.monotonic()
        with pytest.raises(TimeoutError, match=f"run {run} had not ended after 0 s: it is queued"):
            waiting.wait(timeout=0)
        cost = time.monotonic() - began
        began = time.monotonic()
        with pytest.raises(TimeoutError, match=f"run {run} had not ended after 0.3 s: it is queued"):
            waiting.wait(timeout=0.3)
        took = time.monotonic() - began
        with pytest.raises(InvalidInput, match="timeout"):
            waiting.wait(timeout=float("nan"))
    # At the timeout, plus that cost and half a second of a loaded machine's lag: not at the next
    # periodic read, RECHECK_EVERY (5 s) after the first, where a last pause not cut to the time
    # left ended it (5.15 s).
    assert 0.3 <= took < 0.3 + cost + 0.5, f"wait(timeout=0.3) took {took:.2f} s, a wait's cost is {cost:.2f} s"


def test_wait_on_an_ended_run_returns_it_at_once(app, sql):
    with app.app_context():
        run = enqueue("jobsweb.noop")
        cancel(run)
        found = get_run(run)
        assert found.wait(timeout=0) is found


def test_wait_returns_when_an_operator_cancels_the_run(app, sql, monkeypatch):
    monkeypatch.setattr(run_waiting, "RECHECK_EVERY", 600.0)
    with app.app_context():
        run = enqueue("jobsweb.noop", run_at=LATER)
        waiting = get_run(run)
    got = {}

    def wait():
        with app.app_context():
            got["run"] = waiting.wait(timeout=60)

    waiter = threading.Thread(target=wait)
    waiter.start()
    with app.app_context():
        wait_for(lambda: _waiting_read(sql), message="the waiter to LISTEN")
        cancel(run)
    # Unwoken, the wait would read the run again only at its timeout, 60 s.
    waiter.join(timeout=30)
    assert not waiter.is_alive()
    assert got["run"].status == "cancelled"


def test_a_run_deleted_while_waited_for_ends_the_wait_with_run_not_found(app, sql, monkeypatch):
    monkeypatch.setattr(run_waiting, "RECHECK_EVERY", 600.0)
    with app.app_context():
        run = enqueue("jobsweb.noop", run_at=LATER)
        waiting = get_run(run)
    got = {}

    def wait():
        with app.app_context():
            try:
                waiting.wait(timeout=60)
            except RunNotFound as exc:
                got["error"] = exc

    waiter = threading.Thread(target=wait)
    waiter.start()
    with committed(app):
        wait_for(lambda: _waiting_read(sql), message="the waiter to LISTEN")
        assert run_actions.delete([run])  # the admin screen's delete
    # Unwoken, the wait would read the run again only at its timeout, 60 s.
    waiter.join(timeout=30)
    assert not waiter.is_alive()
    assert "there is no run" in str(got["error"])


def test_a_run_deleted_without_a_notification_ends_the_wait_at_the_next_read(app, sql, monkeypatch):
    # As retention deletes runs: no notification, the periodic read sees it gone.
    monkeypatch.setattr(run_waiting, "RECHECK_EVERY", 0.2)
    with app.app_context():
        run = enqueue("jobsweb.noop", run_at=LATER)
        waiting = get_run(run)
    sql("DELETE FROM job_runs WHERE id = %s", [run])
    with app.app_context(), pytest.raises(RunNotFound):
        waiting.wait(timeout=60)


def test_cancel_and_retry_are_public(app):
    assert {"cancel", "retry", "RunNotFound", "RunStateError"} <= set(jobsweb.__all__)


def _waiting_read(sql):
    """Whether Run.wait()'s connection has LISTENed and read the run, and waits (idle) after it."""
    return sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'jobsweb-wait' AND state = 'idle' "
               "AND query LIKE 'SELECT % FROM job_runs WHERE id = %%'") == [(1,)]


def test_behind_a_pooler_in_transaction_mode_wait_finds_listen_unusable_and_polls(
        pooled_url, app, sql, monkeypatch, caplog):  # noqa: F811 - pooled_url: the fixture imported above
    # Reads every 10 minutes if it LISTENed: it returns within the test's bound only by polling.
    monkeypatch.setattr(run_waiting, "RECHECK_EVERY", 600.0)
    monkeypatch.setattr(run_waiting, "_listen_works", {})
    pooled_app = create_app({"SQLALCHEMY_DATABASE_URI": database_url(pooled_url), "TESTING": True,
                             "SECRET_KEY": SECRET_KEY})
    with pooled_app.app_context():
        run = enqueue("jobsweb.noop", run_at=LATER)
        waiting = get_run(run)
    got = {}

    def wait():
        with pooled_app.app_context():
            got["run"] = waiting.wait(timeout=60)

    waiter = threading.Thread(target=wait)
    waiter.start()
    wait_for(lambda: run_waiting._listen_works, message="the waiter's probe of LISTEN")
    assert list(run_waiting._listen_works.values()) == [False]
    sql("UPDATE job_runs SET status = 'cancelled', finished_at = now() WHERE id = %s", [run])  # no notification
    waiter.join(timeout=30)
    assert not waiter.is_alive()
    assert got["run"].status == "cancelled"
    assert "Run.wait() polls every 0.5 s" in caplog.text
