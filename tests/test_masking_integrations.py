"""What Sentry and OpenTelemetry receive is masked as the run page is (issue 53, L2: span events
carried the raw exception message and stack; Sentry events showed locals and headers whose names
hold no mask word), and a retry the handler asks for is no Sentry error (issue 52). Real SDKs:
sentry-sdk with a transport keeping envelopes in memory, opentelemetry-sdk with an in-memory
exporter; a real database and drain()."""

import json

import pytest
import sentry_sdk
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import jobsweb
from jobsweb import Retry, enqueue
from jobsweb.integrations import otel, sentry
from jobsweb.testing import drain
from tests.test_integrations import Kept

PAYLOAD = {"password": "pw-Zq9xK7wP", "X-Api-Key": "key-h7kq2lm", "nested": {"session": 4711_0815}, "file": "a.csv"}
SECRETS = ("Zq9xK7wP", "h7kq2lm", "47110815")


def leaky(ctx):
    pw = ctx.payload["password"]  # a local whose name holds no mask word
    headers = {"X-Api-Key": ctx.payload["X-Api-Key"], "Accept": "text/csv"}  # masked by name (L4)
    number = ctx.payload["nested"]["session"]
    raise RuntimeError(f"could not connect to postgres://app:{pw}@db/prod with {headers} ({number})")


@pytest.fixture
def kept():
    transport = Kept()
    sentry_sdk.init(dsn="https://key@sentry.example/1", transport=transport, traces_sample_rate=0,
                    include_local_variables=True)
    yield transport
    sentry_sdk.get_client().close()
    sentry_sdk.init()


def test_sentry_events_hold_no_secret_of_the_payload_in_locals_headers_or_the_message(app, registry_snapshot, kept):
    jobsweb.job("test.mask.leaky", max_attempts=1)(leaky)
    sentry.init_app(app)
    with app.app_context():
        enqueue("test.mask.leaky", PAYLOAD)
        assert [run.status for run in drain()] == ["dead"]
    [event] = kept.events()
    frame = event["exception"]["values"][-1]["stacktrace"]["frames"][-1]
    assert frame["function"] == "leaky" and set(frame["vars"]) >= {"pw", "headers", "number"}
    assert event["exception"]["values"][-1]["value"].startswith("could not connect to postgres://app:••••••@db/prod")
    assert [secret for secret in SECRETS if secret in json.dumps(event)] == []


def test_a_retry_the_handler_asks_for_is_no_sentry_error_unless_it_was_the_last_attempt(app, registry_snapshot, kept):
    @jobsweb.job("test.mask.retrying", max_attempts=2)
    def retrying(ctx):
        raise Retry(0, "rate limited")

    sentry.init_app(app)
    with app.app_context():
        enqueue("test.mask.retrying", {})
        assert [run.status for run in drain()] == ["failed", "dead"]
    # The first attempt's retry was asked for: no event; the second was the last, and the run died.
    [event] = kept.events()
    assert (event["tags"]["jobsweb.attempt"], event["tags"]["jobsweb.outcome"]) == ("2", "dead")
    assert event["exception"]["values"][-1]["type"] == "Retry"


def test_an_attempts_span_records_its_exception_masked(app, registry_snapshot):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    jobsweb.job("test.mask.leaky", max_attempts=1)(leaky)
    otel.init_app(app, tracer_provider=provider)
    with app.app_context():
        enqueue("test.mask.leaky", PAYLOAD)
        assert [run.status for run in drain()] == ["dead"]
    [span] = exporter.get_finished_spans()
    [event] = span.events
    assert event.name == "exception" and event.attributes["exception.type"] == "RuntimeError"
    assert event.attributes["exception.message"].startswith("could not connect to postgres://app:••••••@db/prod")
    assert "Traceback" in event.attributes["exception.stacktrace"]
    seen = json.dumps([dict(span.attributes), [dict(e.attributes) for e in span.events], span.status.description])
    assert [secret for secret in SECRETS if secret in seen] == []
