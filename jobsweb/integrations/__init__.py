"""Optional set-ups built on jobsweb.signals, one line each in a host's app factory: Sentry
(`jobsweb[sentry]`) and OpenTelemetry (`jobsweb[otel]`). Neither is imported by jobsweb itself."""

import threading

from sqlalchemy import text

from ..core.database import db
from ..engine.jobs import signals

# A failed attempt's jobsweb.outcome: will_retry, dead (its last attempt failed) or permanent (a
# PermanentError or @job(permanent=...): dead at once).
outcome = signals.failure


def stored_trace(run_id):
    """The W3C traceparent its enqueuer stored with run `run_id` (job_runs.trace_context), or None.
    On a connection of its own: a handler may leave db.session's transaction failed."""
    with db.engine.connect() as conn:
        return conn.execute(text("SELECT trace_context FROM job_runs WHERE id = :id"), {"id": run_id}).scalar()


def follow(app, begin, end):
    """Call begin(ctx) as each attempt of `app`'s runs starts (on the handler's thread) and
    end(kept, outcome, exception) once as it ends, with what begin returned: from
    signals.attempt_finished, on the handler's thread as it returns or by the worker's loop as it
    gives the attempt up. An attempt still open when its run is written timed out or cancelled
    (an async handler's task cancelled by force ends with no attempt_finished) ends then."""
    open_attempts = {}  # (run id, attempt) -> what begin returned
    lock = threading.Lock()  # the loop may end an attempt as its handler returns

    def ended(key, said, exception=None):
        with lock:
            kept = open_attempts.pop(key, None)
        if kept is not None:
            end(kept, said, exception)

    def started(sender, ctx, **extra):
        kept = begin(ctx)
        with lock:
            open_attempts[(ctx.run_id, ctx.attempt)] = kept

    def finished(sender, ctx, outcome, exception, **extra):
        ended((ctx.run_id, ctx.attempt), outcome, exception)

    def cancelled(sender, run_id, attempt, **extra):
        ended((run_id, attempt), "cancelled")

    def failed(sender, run_id, attempt, error_type, **extra):
        if error_type == "timeout":  # the handler may run on: its return is ignored
            ended((run_id, attempt), "timed_out")

    signals.attempt_started.connect(started, sender=app, weak=False)
    signals.attempt_finished.connect(finished, sender=app, weak=False)
    signals.run_cancelled.connect(cancelled, sender=app, weak=False)
    signals.run_retried.connect(failed, sender=app, weak=False)
    signals.run_dead.connect(failed, sender=app, weak=False)
