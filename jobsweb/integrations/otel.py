"""A span per attempt that continues the enqueuer's trace: `jobsweb.integrations.otel.init_app(app)`
(pip install 'jobsweb[otel]'), with the host's OpenTelemetry tracer provider set up as usual.

enqueue(), enqueue_many(), a batch (its members and its callbacks) and chain() store the W3C
traceparent of the span current where they are called (a request's, or an attempt's: a run
enqueued by a handler) in job_runs.trace_context; the payload is left as the caller wrote it.
Each attempt is a span named "jobsweb <job type>" (kind CONSUMER), a child of that context (a
new trace when the run has none), current while the handler runs, with attributes
jobsweb.job_type, jobsweb.run_id, jobsweb.attempt and jobsweb.outcome (succeeded, will_retry,
dead, permanent) and the exception recorded. Its cost: one read of trace_context per attempt.
"""

import contextvars

from opentelemetry import context, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from sqlalchemy import text

from ..core.database import db
from ..engine.jobs import signals
from ..engine.enqueue.enqueuing import TRACE_CONTEXT
from . import outcome

W3C = TraceContextTextMapPropagator()
# The attempt running on this thread (or async task): (span, token of its attached context).
_attempt = contextvars.ContextVar("jobsweb_otel_attempt", default=None)


def init_app(app, tracer_provider=None):
    """Trace `app`'s attempts (tracer_provider: default, the global one)."""
    tracer = trace.get_tracer("jobsweb", tracer_provider=tracer_provider)
    app.extensions[TRACE_CONTEXT] = traceparent

    def started(sender, ctx, **extra):
        _end(None, "stopped")  # an attempt whose end sent no signal (an operator's cancel) on this thread
        with db.engine.connect() as conn:
            stored = conn.execute(text("SELECT trace_context FROM job_runs WHERE id = :id"),
                                  {"id": ctx.run_id}).scalar()
        parent = W3C.extract({"traceparent": stored}) if stored else context.Context()
        span = tracer.start_span(f"jobsweb {ctx.job_type}", context=parent, kind=SpanKind.CONSUMER, attributes={
            "jobsweb.job_type": ctx.job_type, "jobsweb.run_id": ctx.run_id, "jobsweb.attempt": ctx.attempt})
        _attempt.set((span, context.attach(trace.set_span_in_context(span, parent))))

    def succeeded(sender, ctx, **extra):
        _end(None, "succeeded")

    def failed(sender, ctx, exception, permanent, last_attempt, **extra):
        _end(exception, outcome(permanent, last_attempt))

    signals.attempt_started.connect(started, sender=app, weak=False)
    signals.attempt_succeeded.connect(succeeded, sender=app, weak=False)
    signals.attempt_failed.connect(failed, sender=app, weak=False)


def traceparent():
    """The W3C traceparent of the current span, or None outside any."""
    carrier = {}
    W3C.inject(carrier)
    return carrier.get("traceparent")


def _end(exception, said):
    current = _attempt.get()
    if current is None:
        return
    span, token = current
    _attempt.set(None)
    span.set_attribute("jobsweb.outcome", said)
    if exception is not None:
        span.record_exception(exception)
        span.set_status(Status(StatusCode.ERROR, f"{type(exception).__name__}"))
    span.end()
    context.detach(token)
