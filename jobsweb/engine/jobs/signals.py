"""Lifecycle signals (blinker, as Flask's own): a host's error tracker, tracing or metrics hear
each run enqueued and each attempt start and end, as Celery's task_prerun/task_failure/task_retry.

    from jobsweb import signals

    @signals.attempt_failed.connect
    def tell(app, ctx, exception, **extra): ...

Every receiver gets the app as sender and keywords; accept **extra, as later releases may add
some. Sent where the event happens: run_enqueued in the enqueuing code's app context;
attempt_started, attempt_succeeded and attempt_failed on the handler's own thread (or event
loop), in the app context the handler runs in, before and after it; attempt_finished there too
as the handler returns or raises, or by the worker's loop when it gives the attempt up first;
run_retried, run_dead and run_cancelled by the worker once FINISH_RUNS has written the run's new
status. A receiver's exception is logged and swallowed: it never changes a run's outcome nor
stops the others.

Nothing is done for a signal nobody connected to (blinker's `receivers`): the worker's per-run
cost without receivers is a few dictionary checks.
"""

import logging
import threading
import time
import weakref

from blinker import Namespace
from flask import current_app, has_app_context

from .registry import Cancelled

log = logging.getLogger("jobsweb.signals")

_signals = Namespace()

# run_id, job_type, queue, payload (raw): a run created by enqueue() or enqueue_many(), sent
# once the statement ran (with session=, before the caller's commit; one signal per run).
run_enqueued = _signals.signal("jobsweb.run-enqueued")
# ctx (the JobContext: run_id, job_type, payload, attempt, max_attempts): the handler is called next.
attempt_started = _signals.signal("jobsweb.attempt-started")
# ctx, result: the handler returned.
attempt_succeeded = _signals.signal("jobsweb.attempt-succeeded")
# ctx, exception, permanent (a PermanentError or one of @job(permanent=...)), last_attempt (no
# attempt is left): the handler raised. Not sent for an operator's cancel (run_cancelled is).
attempt_failed = _signals.signal("jobsweb.attempt-failed")
# ctx, outcome (one of OUTCOMES), exception (what the handler raised, else None): the attempt is
# over, however it ended; once per attempt whose handler began (a run released unstarted has none).
attempt_finished = _signals.signal("jobsweb.attempt-finished")
# run_id, job_type, attempt, error_type, error, retry_in (seconds): failed, a retry is due.
run_retried = _signals.signal("jobsweb.run-retried")
# run_id, job_type, attempt, error_type, error: dead, no attempt will follow.
run_dead = _signals.signal("jobsweb.run-dead")
# run_id, job_type, attempt: a running run an operator (or jobsweb.cancel) asked to stop ended cancelled.
run_cancelled = _signals.signal("jobsweb.run-cancelled")


def send(signal, **details):
    """Call `signal`'s receivers with the current app as sender; each one's exception is logged,
    never raised. Callers check `signal.receivers` first where the cost of building `details`
    matters."""
    if not signal.receivers:
        return
    sender = current_app._get_current_object() if has_app_context() else None
    for receiver in list(signal.receivers_for(sender)):
        try:
            receiver(sender, **details)
        except Exception:  # noqa: BLE001 - a host's receiver must not change a run's outcome
            log.exception("a receiver of signal %s raised (the run is not affected)", signal.name)


# How an attempt ended (attempt_finished's outcome; the integrations' jobsweb.outcome):
OUTCOMES = {
    "succeeded": "the handler returned",
    "will_retry": "the handler raised; a retry is due",
    "dead": "the handler raised on the run's last attempt",
    "permanent": "the handler raised a PermanentError (or one of @job(permanent=...)): dead at once",
    "timed_out": "the worker gave it up at its timeout (a failure: retried or dead as any other)",
    "cancelled": "the handler raised (ctx.raise_if_cancelled() or any error) after an operator's cancel",
    "interrupted": "the worker's shutdown stopped it, or gave it up at the shutdown deadline: queued again",
    "lease_lost": "the worker lost its lease (another worker took the run over) and gave it up",
}
FAILED = frozenset({"will_retry", "dead", "permanent", "timed_out"})


def failure(permanent, last_attempt):
    """A failed attempt's outcome: will_retry, dead (its last attempt failed) or permanent."""
    return "permanent" if permanent else "dead" if last_attempt else "will_retry"


def attempt_ended(held, result=None, exc=None):
    """attempt_succeeded or attempt_failed, then attempt_finished, for a held run (engine/worker/
    execution.py's Held) whose handler returned or raised, on the handler's thread in its app
    context. No attempt_failed for an operator's cancel (run_cancelled follows its write)."""
    if exc is None:
        send(attempt_succeeded, ctx=held.ctx, result=result)
    elif attempt_failed.receivers and not (isinstance(exc, Cancelled) and held.cancel_requested):
        send(attempt_failed, ctx=held.ctx, exception=exc, permanent=held.job.is_permanent(exc),
             last_attempt=held.ctx.attempt >= held.ctx.max_attempts)
    if attempt_finished.receivers:
        attempt_over(held, _outcome(held, exc), exc)


def _outcome(held, exc):
    """What a handler's return or raise comes to, as the worker will write it (execution.Failures)."""
    if exc is None:
        return "succeeded"
    if held.cancel_requested:
        return "cancelled"  # whatever it raised once an operator asked: the run ends cancelled, no retry
    if isinstance(exc, Cancelled) and held.ctx.cancelled:
        if held.deadline is not None and time.monotonic() >= held.deadline:
            return "timed_out"  # the loop gave it up (and says so first once it calls attempt_over)
        return "interrupted"  # asked by the worker's shutdown (or given up by the loop)
    return failure(held.job.is_permanent(exc), held.ctx.attempt >= held.ctx.max_attempts)


_SAID_LOCK = threading.Lock()
_said = weakref.WeakValueDictionary()  # id(held) -> held whose attempt_finished was sent


def attempt_over(held, outcome, exception=None):
    """attempt_finished for `held`, once: the first of the handler's thread (its return) and the
    worker's loop (a give-up: timed_out, interrupted at the shutdown deadline, lease_lost, before
    it stops the handler) says how the attempt ended; the other is not sent. Nothing for a run
    whose handler never began."""
    if not attempt_finished.receivers or held.began is None:
        return
    with _SAID_LOCK:  # the loop may give an attempt up as its handler returns
        if _said.get(id(held)) is held:
            return
        _said[id(held)] = held
    send(attempt_finished, ctx=held.ctx, outcome=outcome, exception=exception)
