"""Sentry and OpenTelemetry on jobsweb.signals (issue 40, item 5), with the real sentry-sdk (its
transport replaced by one keeping envelopes in memory) and the real opentelemetry-sdk (an
in-memory span exporter): no mock of either."""

import pytest
import sentry_sdk
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sentry_sdk.transport import Transport

import jobsweb
from jobsweb import PermanentError, batch, chain, enqueue, signals
from jobsweb.integrations import otel, sentry
from jobsweb.testing import drain

SECRET = "Zq9xK7wP"


class Kept(Transport):
    """A Sentry transport that keeps what it is given."""

    def __init__(self, options=None):
        super().__init__(options)
        self.envelopes = []

    def capture_envelope(self, envelope):
        self.envelopes.append(envelope)

    def events(self):
        return [item.payload.json for envelope in self.envelopes for item in envelope.items if item.type == "event"]


def failing(ctx):
    if ctx.payload.get("permanent"):
        raise PermanentError(f"bad export: password={SECRET}")
    raise ValueError(f"upload refused: password={SECRET}")


@pytest.fixture
def kept():
    transport = Kept()
    client = sentry_sdk.init(dsn="https://key@sentry.example/1", transport=transport, traces_sample_rate=0)
    yield transport
    client.close() if hasattr(client, "close") else sentry_sdk.get_client().close()
    sentry_sdk.init()  # no client: later tests send nothing


def test_sentry_sees_one_event_per_failed_attempt_tagged_and_masked_and_tells_dead_from_permanent(
        app, registry_snapshot, kept):
    jobsweb.job("test.sentry.failing", max_attempts=2, backoff_base=0.01, backoff_cap=0.01)(failing)
    sentry.init_app(app)
    with app.app_context():
        retried = enqueue("test.sentry.failing", {"token": SECRET, "file": "a.csv"}, queue="exports")
        permanent = enqueue("test.sentry.failing", {"permanent": True, "api_key": SECRET})
        assert sorted(r.status for r in drain()) == ["dead", "dead", "failed"]  # each attempt
    events = kept.events()
    tags = sorted((e["tags"]["jobsweb.run_id"], e["tags"]["jobsweb.attempt"], e["tags"]["jobsweb.outcome"],
                   e["tags"]["jobsweb.job_type"], e["tags"]["jobsweb.queue"]) for e in events)
    assert tags == [(str(retried), "1", "will_retry", "test.sentry.failing", "exports"),
                    (str(retried), "2", "dead", "test.sentry.failing", "exports"),
                    (str(permanent), "1", "permanent", "test.sentry.failing", "default")]
    first = next(e for e in events if e["tags"]["jobsweb.outcome"] == "will_retry")
    assert first["contexts"]["jobsweb"]["payload"] == {"token": "••••••", "file": "a.csv"}
    assert first["exception"]["values"][-1]["type"] == "ValueError"
    assert first["exception"]["values"][-1]["value"] == "upload refused: password=••••••"
    assert all(SECRET not in str(e) for e in events)
    assert sum(SECRET in str(e) for e in kept.envelopes) == 0


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def test_an_attempts_span_continues_the_enqueuing_requests_trace_for_a_run_a_chains_third_step_and_a_batch_callback(
        app, registry_snapshot, spans):
    provider, exporter = spans
    jobsweb.job("test.otel.step")(lambda ctx: ctx.payload.get("n"))
    jobsweb.job("test.otel.fails", max_attempts=1)(failing)
    otel.init_app(app, tracer_provider=provider)
    tracer = provider.get_tracer("a host's request")
    with app.app_context():
        with tracer.start_as_current_span("POST /exports") as request:
            plain = enqueue("test.otel.step", {"n": 0})
            steps = chain([("test.otel.step", {"n": 1}), ("test.otel.step", {"n": 2}), ("test.otel.step", {"n": 3})])
            with batch(on_finish="test.otel.step") as b:
                b.enqueue("test.otel.step", {"n": 4})
            fails = enqueue("test.otel.fails")
        outside = enqueue("test.otel.step", {"n": 5})  # no current span: a trace of its own
        assert len(drain()) == 8
    by_run = {s.attributes["jobsweb.run_id"]: s for s in exporter.get_finished_spans() if s.name.startswith("jobsweb ")}
    assert len(by_run) == 8
    trace_id, span_id = request.get_span_context().trace_id, request.get_span_context().span_id
    for run_id in (plain, steps.ids[2], b.callbacks["on_finish"], fails):
        span = by_run[run_id]
        assert (span.context.trace_id, span.parent.span_id) == (trace_id, span_id), run_id
    assert by_run[outside].context.trace_id != trace_id and by_run[outside].parent is None
    assert dict(by_run[steps.ids[2]].attributes) == {"jobsweb.job_type": "test.otel.step", "jobsweb.run_id": steps.ids[2],
                                                     "jobsweb.attempt": 1, "jobsweb.outcome": "succeeded"}
    failed = by_run[fails]
    assert (failed.attributes["jobsweb.outcome"], failed.status.status_code.name) == ("dead", "ERROR")
    assert [e.name for e in failed.events] == ["exception"]


def test_a_run_enqueued_by_a_handler_continues_its_attempts_trace(app, registry_snapshot, spans):
    provider, exporter = spans
    jobsweb.job("test.otel.child")(lambda ctx: None)
    jobsweb.job("test.otel.parent")(lambda ctx: enqueue("test.otel.child"))
    otel.init_app(app, tracer_provider=provider)
    with app.app_context():
        enqueue("test.otel.parent")
        assert len(drain()) == 2
    parent, child = sorted((s for s in exporter.get_finished_spans()), key=lambda s: s.attributes["jobsweb.run_id"])
    assert child.context.trace_id == parent.context.trace_id and child.parent.span_id == parent.context.span_id


@pytest.fixture
def kept_traced():
    """Sentry tracing every transaction (a request's, an attempt's), its envelopes kept."""
    transport = Kept()
    sentry_sdk.init(dsn="https://key@sentry.example/1", transport=transport, traces_sample_rate=1.0)
    yield transport
    sentry_sdk.get_client().close()
    sentry_sdk.init()


def transactions(kept):
    return [item.payload.json for envelope in kept.envelopes for item in envelope.items if item.type == "transaction"]


def test_each_attempts_events_carry_its_runs_trace_not_one_trace_for_the_whole_process(app, registry_snapshot,
                                                                                       kept_traced):
    jobsweb.job("test.sentry.refused", max_attempts=1)(failing)
    sentry.init_app(app)  # errors only: no transaction of its own
    requests = []
    with app.app_context():
        for path in ("POST /exports/1", "POST /exports/2"):
            with sentry_sdk.start_transaction(name=path, op="http.server") as request:
                enqueue("test.sentry.refused", {"path": path})
            requests.append(request)
        assert [r.status for r in drain()] == ["dead", "dead"]
    events = sorted(kept_traced.events(), key=lambda e: int(e["tags"]["jobsweb.run_id"]))
    assert [e["contexts"]["trace"]["trace_id"] for e in events] == [r.trace_id for r in requests]
    assert [t["transaction"] for t in transactions(kept_traced)] == ["POST /exports/1", "POST /exports/2"]


def test_with_transactions_each_attempt_is_a_transaction_continuing_the_enqueuers_trace(app, registry_snapshot,
                                                                                       kept_traced):
    jobsweb.job("test.sentry.flaky", max_attempts=2, backoff_base=0.01, backoff_cap=0.01)(
        lambda ctx: ctx.attempt > 1 or failing(ctx))
    sentry.init_app(app, transactions=True)
    with app.app_context():
        with sentry_sdk.start_transaction(name="POST /exports", op="http.server") as request:
            run = enqueue("test.sentry.flaky", {"token": SECRET})
        assert [r.status for r in drain()] == ["failed", "succeeded"]
    attempts = [t for t in transactions(kept_traced) if t["transaction"] == "test.sentry.flaky"]
    assert [(t["tags"]["jobsweb.run_id"], t["tags"]["jobsweb.attempt"], t["tags"]["jobsweb.outcome"],
             t["contexts"]["trace"]["status"], t["contexts"]["trace"]["op"]) for t in attempts] == [
        (str(run), "1", "will_retry", "internal_error", "queue.task.jobsweb"),
        (str(run), "2", "succeeded", "ok", "queue.task.jobsweb")]
    assert {(t["contexts"]["trace"]["trace_id"], t["contexts"]["trace"]["parent_span_id"]) for t in attempts} == {
        (request.trace_id, request.span_id)}
    [event] = kept_traced.events()
    assert event["contexts"]["trace"]["span_id"] == attempts[0]["contexts"]["trace"]["span_id"]
    assert SECRET not in str(kept_traced.envelopes)


def test_an_attempts_end_is_said_once_whether_the_loop_or_its_handler_says_it_first(app, registry_snapshot):
    from jobsweb.engine.jobs import registry
    from jobsweb.engine.jobs.registry import JobContext
    from jobsweb.engine.worker.execution import Held

    heard = []
    jobsweb.job("test.signals.said_once")(lambda ctx: None)
    job = registry.get("test.signals.said_once")
    held = Held(JobContext(7, "test.signals.said_once", {}, 1, 3), job, lease=60, deadline=None)
    with app.app_context(), signals.attempt_finished.connected_to(
            lambda sender, ctx, outcome, exception, **extra: heard.append((ctx.run_id, outcome))):
        signals.attempt_over(held, "timed_out")  # a handler that never began: nothing
        held.began = 0.0
        signals.attempt_over(held, "timed_out")
        signals.attempt_ended(held, result=None)  # its handler returns after the loop gave it up
        again = Held(JobContext(7, "test.signals.said_once", {}, 2, 3), job, lease=60, deadline=None, began=0.0)
        signals.attempt_ended(again, exc=ValueError("no"))
    assert heard == [(7, "timed_out"), (7, "will_retry")]
