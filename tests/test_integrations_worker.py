"""Sentry and OpenTelemetry in a real worker process (issue 52, item 7): an attempt's span and
transaction end when the attempt does, however it ends, and its events carry its run's trace.
The worker is tests/observed_app.py (the real SDKs, writing what they would send to files)."""

import json
import signal
import subprocess

import pytest
import sentry_sdk

import tests.observed_jobs  # noqa: F401 - the job types, in this process too (enqueue checks them)
from jobsweb import cancel, enqueue, get_run
from jobsweb.integrations import sentry
from tests.conftest import wait_for
from tests.forkserver import python_m
from tests.test_integrations import Kept


@pytest.fixture
def observed(spawn_worker, tmp_path):
    """start(*args, **settings): a worker of tests/observed_app.py; what its SDKs sent is read with
    spans(run_id) and sentry(run_id), each a list of dicts in the order sent."""
    processes = []

    def start(*args, **settings):
        env = spawn_worker.env(JOBSWEB_HANDLERS="tests.observed_jobs", TEST_OBSERVED_DIR=str(tmp_path),
                               JOBSWEB_LEASE_SECONDS="0.9", **settings)
        proc = python_m("flask", ["--app", "tests.observed_app", "run-jobs", "--poll-interval", "0.1", *args],
                        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        processes.append(proc)
        return proc

    def lines(name):
        path = tmp_path / name
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    start.spans = lambda run_id: [s for s in lines("spans.jsonl") if s["attributes"].get("jobsweb.run_id") == run_id]
    start.sentry = lambda run_id: [e for e in lines("sentry.jsonl") if e["tags"].get("jobsweb.run_id") == str(run_id)]
    start.release = tmp_path / "release"
    start.began = tmp_path / "began"  # made by a handler as it begins (tests/observed_jobs.py)
    yield start
    start.release.touch()
    for proc in processes:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def ended_at_ns(sql, run_id):
    """When the worker wrote the run's end (the database's clock, this machine's), in ns."""
    [(at,)] = sql("SELECT extract(epoch FROM finished_at) FROM job_runs WHERE id = %s", [run_id])
    return int(at * 1_000_000_000)


def test_an_operators_cancel_ends_the_attempts_span_and_transaction_as_its_handler_stops(app, sql, observed):
    with app.app_context():
        raises_began = observed.began.with_name("began-raises")
        run = enqueue("test.observed.waits", {"began": str(observed.began)})
        raises = enqueue("test.observed.fails_when_cancelled", {"began": str(raises_began)})
    worker = observed("--forever", "--concurrency", "2")
    # Both handlers begun, not only claimed: a run cancelled before its handler began has no span.
    wait_for(lambda: observed.began.exists() and raises_began.exists(), message="the handlers to start")
    with app.app_context():
        assert cancel(run) == cancel(raises) == "stop_requested"
        assert get_run(run).wait(timeout=30).status == get_run(raises).wait(timeout=30).status == "cancelled"
    # A handler that raises another error once cancelled: its run is not retried, its attempt is
    # no failure waiting for a retry.
    [other] = wait_for(lambda: observed.spans(raises), message="the other attempt's span")
    assert (other["attributes"]["jobsweb.outcome"], other["status"]) == ("cancelled", "UNSET")
    # Exported though the worker starts no other job (before: only as its thread started one,
    # with the outcome `stopped` and the idle time in its duration), ended as the handler
    # returned, before the worker wrote the run's end.
    [span] = wait_for(lambda: observed.spans(run), message="the attempt's span")
    assert (span["attributes"]["jobsweb.outcome"], span["status"]) == ("cancelled", "UNSET")
    assert span["end"] <= ended_at_ns(sql, run) + 1_000_000
    [transaction] = wait_for(lambda: observed.sentry(run), message="the attempt's transaction")
    assert (transaction["type"], transaction["transaction"]) == ("transaction", "test.observed.waits")
    assert transaction["contexts"]["trace"]["status"] == "cancelled"
    assert transaction["tags"]["jobsweb.outcome"] == "cancelled"
    assert worker.poll() is None


def test_an_async_handler_cancelled_by_force_ends_its_span_cancelled(app, sql, observed):
    with app.app_context():
        run = enqueue("test.observed.async_waits", {"began": str(observed.began)})
    observed("--forever")
    wait_for(observed.began.exists, message="the handler to start")
    with app.app_context():
        cancel(run)
        assert get_run(run).wait(timeout=30).status == "cancelled"
    [span] = wait_for(lambda: observed.spans(run), message="the attempt's span")
    assert span["attributes"]["jobsweb.outcome"] == "cancelled"
    [transaction] = wait_for(lambda: observed.sentry(run), message="the attempt's transaction")
    assert transaction["contexts"]["trace"]["status"] == "cancelled"


def test_a_timed_out_attempts_span_ends_at_the_timeout_while_its_handler_runs_on(app, sql, observed):
    with app.app_context():
        run = enqueue("test.observed.too_slow", {"release": str(observed.release)})
        observed("--forever")
        assert get_run(run).wait(timeout=30).status == "dead"
    [span] = wait_for(lambda: observed.spans(run), message="the attempt's span")
    assert (span["attributes"]["jobsweb.outcome"], span["status"]) == ("timed_out", "ERROR")
    transaction = wait_for(lambda: [e for e in observed.sentry(run) if e["type"] == "transaction"],
                           message="the attempt's transaction")[0]
    assert transaction["contexts"]["trace"]["status"] == "deadline_exceeded"
    assert not observed.release.exists()  # the handler still runs: the worker gave it up


def test_a_shutdown_that_stops_a_handler_ends_its_span_interrupted_before_the_worker_exits(app, sql, observed):
    with app.app_context():
        run = enqueue("test.observed.waits", {"began": str(observed.began)})
    worker = observed("--forever")
    wait_for(observed.began.exists, message="the handler to start")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    assert sql("SELECT status FROM job_runs WHERE id = %s", [run]) == [("queued",)]
    [span] = observed.spans(run)
    assert (span["attributes"]["jobsweb.outcome"], span["status"]) == ("interrupted", "UNSET")
    [transaction] = observed.sentry(run)  # no error event: a shutdown is no failure
    assert transaction["contexts"]["trace"]["status"] == "aborted"


def test_a_handler_given_up_at_the_shutdown_deadline_has_its_span_ended_interrupted(app, sql, observed):
    with app.app_context():
        run = enqueue("test.observed.never_looks", {"release": str(observed.release), "began": str(observed.began)})
    worker = observed("--forever", "--shutdown-timeout", "0.5")
    wait_for(observed.began.exists, message="the handler to start")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    [span] = observed.spans(run)
    assert span["attributes"]["jobsweb.outcome"] == "interrupted"


def test_a_handler_whose_lease_was_lost_has_its_span_ended_lease_lost(app, sql, observed):
    with app.app_context():
        run = enqueue("test.observed.never_looks", {"release": str(observed.release), "began": str(observed.began)})
    observed("--forever")
    # The handler's own start, not the claim's `running`: the span begins with the handler, and a
    # run taken over before that never begins here (a loaded make test's failure: no span in 10 s).
    wait_for(observed.began.exists, message="the handler to start")
    sql("UPDATE job_runs SET locked_by = 'another-worker' WHERE id = %s", [run])  # taken over
    [span] = wait_for(lambda: observed.spans(run), timeout=10, message="the attempt's span")
    assert span["attributes"]["jobsweb.outcome"] == "lease_lost"
    assert not observed.release.exists()


@pytest.fixture
def kept_traced():
    """Sentry in this process, tracing every request, its envelopes kept in memory."""
    transport = Kept()
    sentry_sdk.init(dsn="https://key@sentry.example/1", transport=transport, traces_sample_rate=1.0)
    yield transport
    sentry_sdk.get_client().close()
    sentry_sdk.init()


def test_each_runs_events_and_transaction_carry_the_trace_of_the_request_that_enqueued_it(
        app, sql, observed, kept_traced):
    sentry.init_app(app)  # here: the request's trace is stored with the runs it enqueues
    requests, runs = [], []
    with app.app_context():
        for path in ("POST /imports/1", "POST /imports/2"):
            with sentry_sdk.start_transaction(name=path, op="http.server") as request:
                runs.append(enqueue("test.observed.fails"))
            requests.append(request)
        observed()  # runs what is due, then exits
        assert [get_run(r).wait(timeout=30).status for r in runs] == ["dead", "dead"]
    for request, run in zip(requests, runs):
        sent = {e.get("type", "event"): e for e in wait_for(lambda: len(observed.sentry(run)) == 2 and observed.sentry(
            run), message="the event and the transaction")}
        event, transaction = sent["event"], sent["transaction"]
        assert event["tags"]["jobsweb.outcome"] == "dead"
        assert event["contexts"]["trace"]["trace_id"] == request.trace_id
        assert transaction["contexts"]["trace"]["trace_id"] == request.trace_id
        assert transaction["contexts"]["trace"]["parent_span_id"] == request.span_id
        assert transaction["contexts"]["trace"]["status"] == "internal_error"
    # And the OpenTelemetry span of each is in that trace too, the stored traceparent being Sentry's.
    assert [observed.spans(r)[0]["trace_id"] for r in runs] == [r.trace_id for r in requests]
