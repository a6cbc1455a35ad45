"""Failed attempts as Sentry events, and optionally a transaction per attempt:
`jobsweb.integrations.sentry.init_app(app, transactions=False)` after `sentry_sdk.init(...)`
(the `sentry` extra).

Each attempt runs in a Sentry isolation scope of its own that continues its run's trace: the
enqueuer's, stored with the run as a W3C traceparent in job_runs.trace_context (by this
integration, or by the OpenTelemetry one when both are set up), else a new trace per attempt.
So every event of an attempt (ours, and what the handler sends itself) carries its run's trace
id, not the process's one. With transactions=True each attempt is also a transaction (op
queue.task.jobsweb, named after the job type, sampled as the SDK's traces_sample_rate or the
enqueuer's sampled trace say), as sentry-sdk's Celery and RQ integrations make one per task,
ended when the attempt ends with a status for its outcome and the tag jobsweb.outcome.

Each failed attempt (signals.attempt_failed, on the handler's thread) is one event, tagged
jobsweb.job_type, jobsweb.queue, jobsweb.run_id, jobsweb.attempt and jobsweb.outcome: will_retry,
dead (its last attempt failed) or permanent (a PermanentError or @job(permanent=...): dead at
once), so an alert rule can ignore the failures a retry may still mend. The run's payload is in
the event's "jobsweb" context with the values of JOBSWEB_MASK_KEYS keys masked, and every text
of an attempt's events (the message, stack frames' variables, request headers, breadcrumbs) goes
through jobsweb's one masking rule (core/masking.py), with the payload's secret values masked
wherever they appear (a local named `pw` holding the payload's password): what a viewer cannot
read on the run page does not reach Sentry. An operator's cancel and a worker's shutdown are not
sent, nor a retry the handler asked for (`raise jobsweb.Retry(...)`: a breadcrumb, and an event
only when it was the last attempt and the run is dead).
"""

import contextvars
import re

import sentry_sdk
from sentry_sdk.consts import SPANSTATUS
from sentry_sdk.integrations.logging import ignore_logger
from sqlalchemy import text

from ..core.database import db
from ..engine.enqueue.enqueuing import TRACE_CONTEXT
from ..engine.jobs import signals
from ..core.masking import masked_value, secret_values, shown
from ..engine.jobs.registry import Cancelled, Retry
from . import follow, outcome, stored_trace

SENTRY_TRACE = re.compile(r"([0-9a-f]{32})-([0-9a-f]{16})(?:-([01]))?")
W3C_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
# A transaction's status for each way an attempt ends (signals.OUTCOMES).
STATUS = {"succeeded": SPANSTATUS.OK, "will_retry": SPANSTATUS.INTERNAL_ERROR, "dead": SPANSTATUS.INTERNAL_ERROR,
          "permanent": SPANSTATUS.INTERNAL_ERROR, "timed_out": SPANSTATUS.DEADLINE_EXCEEDED,
          "cancelled": SPANSTATUS.CANCELLED, "interrupted": SPANSTATUS.ABORTED, "lease_lost": SPANSTATUS.ABORTED}
# The attempt whose isolation scope this thread (or async task) entered: (kept, the scope's manager).
_entered = contextvars.ContextVar("jobsweb_sentry_attempt", default=None)


class Attempt:
    """What an attempt keeps between its start and its end: its scope and its transaction."""

    def __init__(self, scope, transaction):
        self.scope = scope  # the attempt's current scope (forked with its isolation scope)
        self.transaction = transaction  # None unless transactions=True


def init_app(app, transactions=False):
    """Send the failed attempts of `app`'s runs to the Sentry client sentry_sdk.init() made, each
    attempt in its run's trace; transactions=True: a transaction per attempt too."""
    signals.attempt_failed.connect(_capture, sender=app, weak=False)
    # The worker's own line for each failure and death (logged at WARNING and ERROR): Sentry's
    # logging integration would make each dead run a second, untagged and unmasked event.
    ignore_logger("jobsweb.worker")
    # The OpenTelemetry integration's traceparent, when set up too: one trace for both.
    app.extensions.setdefault(TRACE_CONTEXT, traceparent)
    words = app.config["JOBSWEB_MASK_KEYS"]

    def begin(ctx):
        _leave()  # an attempt this thread ran that the worker's loop said was over (given up)
        stored = stored_trace(ctx.run_id)
        manager = sentry_sdk.isolation_scope()
        manager.__enter__()
        scope = sentry_sdk.get_current_scope()
        secrets = secret_values(ctx.payload, words)
        scope.add_event_processor(lambda event, hint: masked_value(event, words, secrets))
        for name, value in (("job_type", ctx.job_type), ("run_id", str(ctx.run_id)), ("attempt", str(ctx.attempt))):
            scope.set_tag(f"jobsweb.{name}", value)
        # Sets the isolation scope's propagation context, which this attempt's events carry.
        transaction = sentry_sdk.continue_trace(_sentry_trace(stored), op="queue.task.jobsweb", name=ctx.job_type,
                                                source="task", origin="auto.queue.jobsweb")
        kept = Attempt(scope, None)
        if transactions:
            kept.transaction = sentry_sdk.start_transaction(transaction)
            kept.transaction.set_data("messaging.message.id", str(ctx.run_id))
            scope.span = kept.transaction
        _entered.set((kept, manager))
        return kept

    follow(app, begin, _end)


def traceparent():
    """The current Sentry span's (or trace's) W3C traceparent: flags 01 when sampled, else 00."""
    match = SENTRY_TRACE.fullmatch(sentry_sdk.get_traceparent() or "")
    return f"00-{match[1]}-{match[2]}-{'01' if match[3] == '1' else '00'}" if match else None


def _sentry_trace(stored):
    """The sentry-trace header of a stored W3C traceparent ({} when none: a new trace). A trace not
    sampled where it was stored (W3C flags 00) leaves the decision to this process's sampling."""
    match = W3C_TRACEPARENT.fullmatch(stored or "")
    if match is None:
        return {}
    return {"sentry-trace": f"{match[1]}-{match[2]}" + ("-1" if int(match[3], 16) & 1 else "")}


def _end(kept, said, exception):
    if kept.transaction is not None:
        kept.transaction.set_status(STATUS[said])
        kept.transaction.set_tag("jobsweb.outcome", said)
        kept.transaction.finish(scope=kept.scope)
    current = _entered.get()
    if current is not None and current[0] is kept:  # on the handler's own thread: its scope goes
        _leave()


def _leave():
    current = _entered.get()
    if current is not None:
        _entered.set(None)
        current[1].__exit__(None, None, None)


def _capture(app, ctx, exception, permanent, last_attempt, **extra):
    if isinstance(exception, Cancelled) and not last_attempt:
        return  # a shutdown or a timeout asked it to stop; its run is queued again or retried
    if isinstance(exception, Retry) and not last_attempt:  # asked for, not an error: it runs again
        sentry_sdk.add_breadcrumb(category="jobsweb", level="info", message=f"run {ctx.run_id} attempt {ctx.attempt} "
                                  f"asked to retry: {shown(str(exception), app.config['JOBSWEB_MASK_KEYS'])}")
        return
    words = app.config["JOBSWEB_MASK_KEYS"]
    # One read per failed attempt: the claim does not bring the queue (a run may be enqueued to
    # another queue than its job type's).
    # On a connection of its own: the handler may have left db.session's transaction failed.
    with db.engine.connect() as conn:
        queue = conn.execute(text("SELECT queue FROM job_runs WHERE id = :id"), {"id": ctx.run_id}).scalar()
    with sentry_sdk.new_scope() as scope:
        scope.set_tag("jobsweb.job_type", ctx.job_type)
        scope.set_tag("jobsweb.queue", queue)
        scope.set_tag("jobsweb.run_id", str(ctx.run_id))
        scope.set_tag("jobsweb.attempt", str(ctx.attempt))
        scope.set_tag("jobsweb.outcome", outcome(permanent, last_attempt))
        scope.set_context("jobsweb", {"run_id": ctx.run_id, "attempt": ctx.attempt,
                                      "max_attempts": ctx.max_attempts, "payload": ctx.payload})
        # Last, over the whole event: the payload above, the exception's message, the stack
        # frames' variables (a handler's ctx.payload among them) and breadcrumbs.
        secrets = secret_values(ctx.payload, words)
        scope.add_event_processor(lambda event, hint: masked_value(event, words, secrets))
        sentry_sdk.capture_exception(exception)
