"""A span per attempt that continues the enqueuer's trace: `jobsweb.integrations.otel.init_app(app)`
(the `otel` extra), with the host's OpenTelemetry tracer provider set up as usual.

enqueue(), enqueue_many(), a batch (its members and its callbacks) and chain() store the W3C
traceparent of the span current where they are called (a request's, or an attempt's: a run
enqueued by a handler) in job_runs.trace_context; the payload is left as the caller wrote it.
Each attempt is a span named "jobsweb <job type>" (kind CONSUMER), a child of that context (a
new trace when the run has none), current while the handler runs, with attributes
jobsweb.job_type, jobsweb.run_id, jobsweb.attempt and jobsweb.outcome (signals.OUTCOMES), the
exception recorded and an error status for a failure. The exception's message and stack go
through jobsweb's one masking rule (core/masking.py), with the payload's secret values masked
wherever they appear, as on the run page: a tracing backend reads no more than a viewer. It ends when the attempt does: as the
handler returns or raises, or as the worker gives it up (a timeout, the shutdown deadline, a lost
lease), whichever comes first. Its cost: one read of trace_context per attempt.
"""

import contextvars
import traceback

from opentelemetry import context, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..core.masking import masked_value, secret_values
from ..engine.enqueue.enqueuing import TRACE_CONTEXT
from ..engine.jobs import signals
from . import follow, stored_trace

W3C = TraceContextTextMapPropagator()
# The attempt whose span this thread (or async task) made current: (span, token of that context).
_attached = contextvars.ContextVar("jobsweb_otel_attempt", default=None)


def init_app(app, tracer_provider=None):
    """Trace `app`'s attempts (tracer_provider: default, the global one)."""
    tracer = trace.get_tracer("jobsweb", tracer_provider=tracer_provider)
    app.extensions[TRACE_CONTEXT] = traceparent
    words = app.config["JOBSWEB_MASK_KEYS"]

    def begin(ctx):
        _detach()  # an attempt this thread ran that the worker's loop said was over (given up)
        stored = stored_trace(ctx.run_id)
        parent = W3C.extract({"traceparent": stored}) if stored else context.Context()
        span = tracer.start_span(f"jobsweb {ctx.job_type}", context=parent, kind=SpanKind.CONSUMER, attributes={
            "jobsweb.job_type": ctx.job_type, "jobsweb.run_id": ctx.run_id, "jobsweb.attempt": ctx.attempt})
        _attached.set((span, context.attach(trace.set_span_in_context(span, parent))))
        return span, words, secret_values(ctx.payload, words)

    follow(app, begin, _end)


def traceparent():
    """The W3C traceparent of the current span, or None outside any."""
    carrier = {}
    W3C.inject(carrier)
    return carrier.get("traceparent")


def _end(kept, said, exception):
    span, words, secrets = kept
    span.set_attribute("jobsweb.outcome", said)
    if exception is not None:
        span.record_exception(exception, attributes=masked_value({
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception))}, words, secrets))
    if said in signals.FAILED:
        span.set_status(Status(StatusCode.ERROR, type(exception).__name__ if exception is not None else said))
    span.end()
    current = _attached.get()
    if current is not None and current[0] is span:  # on the handler's own thread: its context goes
        _detach()


def _detach():
    current = _attached.get()
    if current is not None:
        _attached.set(None)
        context.detach(current[1])
