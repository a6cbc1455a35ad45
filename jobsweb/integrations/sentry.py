"""Failed attempts as Sentry events: `jobsweb.integrations.sentry.init_app(app)` after
`sentry_sdk.init(...)` (pip install 'jobsweb[sentry]').

Each failed attempt (signals.attempt_failed, on the handler's thread) is one event, tagged
jobsweb.job_type, jobsweb.queue, jobsweb.run_id, jobsweb.attempt and jobsweb.outcome: will_retry,
dead (its last attempt failed) or permanent (a PermanentError or @job(permanent=...): dead at
once), so an alert rule can ignore the failures a retry may still mend. The run's payload is in
the event's "jobsweb" context with the values of JOBSWEB_MASK_KEYS keys masked, and every text
of the event (the message, stack frames' variables, breadcrumbs) goes through the admin screen's
masking (web/shown_text.py): what a viewer cannot read on the run page does not reach Sentry.
An operator's cancel and a worker's shutdown are not sent.
"""

import sentry_sdk
from sentry_sdk.integrations.logging import ignore_logger
from sqlalchemy import text

from ..core.database import db
from ..engine.jobs import signals
from ..engine.jobs.registry import Cancelled
from ..web.shown_text import MASK, is_secret, shown
from . import outcome


def init_app(app):
    """Send the failed attempts of `app`'s runs to the Sentry client sentry_sdk.init() made."""
    signals.attempt_failed.connect(_capture, sender=app, weak=False)
    # The worker's own line for each failure and death (logged at WARNING and ERROR): Sentry's
    # logging integration would make each dead run a second, untagged and unmasked event.
    ignore_logger("jobsweb.worker")


def _capture(app, ctx, exception, permanent, last_attempt, **extra):
    if isinstance(exception, Cancelled) and not last_attempt:
        return  # a shutdown or a timeout asked it to stop; its run is queued again or retried
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
        scope.add_event_processor(lambda event, hint: _masked(event, words))
        sentry_sdk.capture_exception(exception)


def _masked(value, words):
    """The event with secret-looking keys' values masked and every text masked as pages mask it."""
    if isinstance(value, dict):
        return {key: MASK if isinstance(key, str) and is_secret(key, words) else _masked(item, words)
                for key, item in value.items()}
    if isinstance(value, list):
        return [_masked(item, words) for item in value]
    if isinstance(value, str):
        return shown(value, words)
    return value
