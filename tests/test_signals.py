"""Lifecycle signals (jobsweb.signals, issue 40 item 4): each sent once per event by a real worker
process, in the app context, and a receiver that raises changes no run's outcome."""

import json

import pytest

import tests.signal_jobs  # noqa: F401 - the job types, in this process too (enqueue checks them)
from jobsweb import batch, cancel, chain, enqueue, enqueue_many, get_run, signals
from tests.conftest import wait_for

WORKER = {"JOBSWEB_HANDLERS": "tests.job_types,tests.signal_jobs", "TEST_RECORD_SIGNALS": "1"}


@pytest.fixture
def heard(sql):
    """What the worker's receivers recorded: (signal, run_id, attempt, detail, app name), in order."""
    sql("CREATE TABLE IF NOT EXISTS test_signals (id bigserial PRIMARY KEY, signal text NOT NULL, run_id bigint,"
        " attempt int, detail text, app text)")
    sql("TRUNCATE test_signals")
    return lambda run_id: [row[0:3] for row in sql(
        "SELECT signal, attempt, detail, app FROM test_signals WHERE run_id = %s ORDER BY id", [run_id])]


def test_each_signal_is_sent_once_per_event_by_a_worker_in_its_app_context(app, sql, spawn_worker, heard):
    with app.app_context():
        ok, async_ok, flaky, doomed, permanent, waits = (
            enqueue(name) for name in ("test.signals.ok", "test.signals.async_ok", "test.signals.flaky",
                                       "test.signals.doomed", "test.signals.permanent", "test.signals.waits"))
    spawn_worker("--forever", "--poll-interval", "0.1", **WORKER)
    wait_for(lambda: heard(waits) == [("attempt_started", 1, "test.signals.waits")], message="the wait to start")
    with app.app_context():
        assert cancel(waits) == "stop_requested"
        for run_id in (ok, async_ok, flaky, doomed, permanent, waits):
            get_run(run_id).wait(timeout=60)
        assert [get_run(r).status for r in (ok, async_ok, flaky, doomed, permanent, waits)] == [
            "succeeded", "succeeded", "succeeded", "dead", "dead", "cancelled"]
    # FINISH_RUNS is written before run_* signals are sent: wait for the last of them.
    wait_for(lambda: sql("SELECT count(*) FROM test_signals WHERE signal LIKE 'run_%'") == [(5,)],
             message="the run signals")

    assert heard(ok) == [("attempt_started", 1, "test.signals.ok"), ("attempt_succeeded", 1, json.dumps({"ok": ok}))]
    assert heard(async_ok) == [("attempt_started", 1, "test.signals.async_ok"),
                               ("attempt_succeeded", 1, '"async"')]
    assert heard(flaky) == [
        ("attempt_started", 1, "test.signals.flaky"),
        ("attempt_failed", 1, "ValueError: first attempt fails; permanent=False last_attempt=False"),
        ("run_retried", 1, "ValueError: first attempt fails; retry_in under 1 s: True"),
        ("attempt_started", 2, "test.signals.flaky"),
        ("attempt_succeeded", 2, '"second"')]
    assert heard(doomed) == [
        ("attempt_started", 1, "test.signals.doomed"),
        ("attempt_failed", 1, "ValueError: attempt 1 fails; permanent=False last_attempt=False"),
        ("run_retried", 1, "ValueError: attempt 1 fails; retry_in under 1 s: True"),
        ("attempt_started", 2, "test.signals.doomed"),
        ("attempt_failed", 2, "ValueError: attempt 2 fails; permanent=False last_attempt=True"),
        ("run_dead", 2, "ValueError: attempt 2 fails")]
    assert heard(permanent) == [
        ("attempt_started", 1, "test.signals.permanent"),
        ("attempt_failed", 1, "PermanentError: no point retrying; permanent=True last_attempt=False"),
        ("run_dead", 1, "PermanentError: no point retrying")]
    # An operator's cancel is no failure: no attempt_failed, one run_cancelled.
    assert heard(waits) == [("attempt_started", 1, "test.signals.waits"),
                            ("run_cancelled", 1, "test.signals.waits")]
    # Every receiver ran in the worker's app context (current_app.name); the one that raises
    # before each of them changed nothing.
    assert {app for (app,) in sql("SELECT DISTINCT app FROM test_signals")} == {"jobsweb"}


def test_an_attempt_over_its_timeout_sends_attempt_failed_and_its_run_dead_names_the_timeout(
        app, sql, spawn_worker, heard):
    # Sentry and OpenTelemetry hear of a failed attempt through attempt_failed alone: a timeout,
    # like an operator's cancel, stops the handler with Cancelled, but unlike it, it is a failure.
    with app.app_context():
        slow = enqueue("test.signals.too_slow")
    spawn_worker("--forever", "--poll-interval", "0.1", **WORKER)
    with app.app_context():
        assert get_run(slow).wait(timeout=60).status == "dead"
    # The handler's thread sends attempt_failed as the worker writes the timeout: either first.
    wait_for(lambda: len(heard(slow)) == 3, message="the three signals of the run")
    first, *then = heard(slow)
    assert first == ("attempt_started", 1, "test.signals.too_slow")
    assert sorted(then) == [
        ("attempt_failed", 1, f"Cancelled: run {slow} was asked to stop; permanent=False last_attempt=True"),
        ("run_dead", 1, "timeout: timed out after 0.5 seconds")]


def test_run_enqueued_is_sent_once_per_run_created_by_enqueue_enqueue_many_a_batch_and_a_chain(app):
    sent = []

    def receiver(sender, run_id, job_type, queue, payload, **extra):
        sent.append((sender.name, run_id, job_type, queue, payload))

    with app.app_context(), signals.run_enqueued.connected_to(receiver):
        one = enqueue("test.signals.ok", {"n": 1}, idempotency_key="k")
        assert enqueue("test.signals.ok", {"n": 1}, idempotency_key="k") == one  # no new run: no signal
        many = enqueue_many("test.signals.ok", [{"n": 2}, {"n": 3}], queue="bulk")
        with batch(on_finish="test.signals.ok") as b:
            member = b.enqueue("test.signals.ok", {"n": 4})
        steps = chain([("test.signals.ok", {"n": 7}), ("test.signals.ok", {"n": 8})])
    ids = [run_id for _, run_id, *_ in sent]
    # The batch's callback run is made by the database as the batch closes: not sent.
    assert len(ids) == len(set(ids)) == 6
    assert sent[:3] == [("jobsweb", one, "test.signals.ok", "default", {"n": 1}),
                        ("jobsweb", many[0], "test.signals.ok", "bulk", {"n": 2}),
                        ("jobsweb", many[1], "test.signals.ok", "bulk", {"n": 3})]
    assert member in ids and set(steps.ids) <= set(ids)
    assert sorted(payload["n"] for *_, payload in sent) == [1, 2, 3, 4, 7, 8]
