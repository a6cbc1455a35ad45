"""A jobsweb app set up as a team sets up Sentry and OpenTelemetry (REFERENCE, "Sentry and
OpenTelemetry"), with the real SDKs whose transport and exporter append what they would send to
JSON-line files of TEST_OBSERVED_DIR: `flask --app tests.observed_app run-jobs` is a worker that
reports, for tests/test_integrations_worker.py. Its job types are tests.observed_jobs."""

import json
import os
from pathlib import Path

import sentry_sdk
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from sentry_sdk.transport import Transport

from jobsweb import create_app
from jobsweb.integrations import otel, sentry


def _append(name, record):
    with open(Path(os.environ["TEST_OBSERVED_DIR"]) / name, "a") as file:
        file.write(json.dumps(record, default=str) + "\n")


class KeptEnvelopes(Transport):
    """Events and transactions, as sentry-sdk would send them."""

    def capture_envelope(self, envelope):
        for item in envelope.items:
            if item.type in ("event", "transaction"):
                _append("sentry.jsonl", item.payload.json)


class KeptSpans(SpanExporter):
    """Each span as it is exported (SimpleSpanProcessor: as it ends)."""

    def export(self, spans):
        for span in spans:
            _append("spans.jsonl", {
                "name": span.name, "attributes": dict(span.attributes), "start": span.start_time,
                "end": span.end_time, "status": span.status.status_code.name,
                "trace_id": format(span.context.trace_id, "032x"),
                "parent": format(span.parent.span_id, "016x") if span.parent else None})
        return SpanExportResult.SUCCESS


sentry_sdk.init(dsn="https://key@sentry.example/1", transport=KeptEnvelopes, traces_sample_rate=1.0)
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(KeptSpans()))
app = create_app()
sentry.init_app(app, transactions=True)
otel.init_app(app, tracer_provider=provider)
