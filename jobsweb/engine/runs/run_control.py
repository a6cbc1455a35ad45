"""jobsweb.cancel(run_id) and jobsweb.retry(run_id): the admin screen's Cancel and Retry from
application code (Celery's AsyncResult.revoke(), RQ's job.cancel() and requeue()).

Each is the screen's own action: the same statements (run_actions, action_statements.py), hence
the same rules and seams (what waits for the run, its batch, its unique key, a run held by a
worker), and the same audit entry ("cancel", "request_cancel" or "retry"), by `actor`, which
says who: "code:<the calling module>" unless given. What the screen would say in a message, these
raise: RunNotFound, or RunStateError for a run its status does not allow.

Without `session`, each is a transaction of its own, committed before it returns, and run again
whole if it meets a conflict (core/conflicts.py), with a growing wait for conflicts.INTERACTIVE
seconds: past that, conflicts.Conflict ("conflict with concurrent work, try again"), nothing
changed. With `session` (db.session), it joins the caller's transaction: nothing is changed, and
no worker is asked to stop, unless the caller commits (a conflict is the caller's to run again).
"""

import sys

from flask import current_app
from sqlalchemy import insert

from ...core import conflicts
from ...core.database import db, require_postgresql
from ...core.errors import (
    BIGINT_MAX,
    InvalidInput,
    RunNotFound,
    RunStateError,
    clean_name,
    clean_text,
)
from ...core.models import AuditEntry
from ..jobs.registry import EXTERNAL_JOB_TYPE
from . import run_actions
from .run_status import INLINE_RUNS

ACTOR_MAX_CHARS = 200
REASON_MAX_CHARS = 1000
# The run as the action reads it first: for the audit entry's previous_status and the messages.
RUN_AS_IT_IS = "SELECT status, job_type, cancel_requested_at IS NOT NULL AS asked FROM job_runs WHERE id = %(id)s"

CANCELLED = "cancelled"  # cancel(): the run is cancelled now
STOP_REQUESTED = "stop_requested"  # cancel(): a running run's worker was asked to stop it


def cancel(run_id, reason=None, actor=None, session=None):
    """Cancel run `run_id` as the admin screen's Cancel does: a waiting, queued or failed run
    (and what waits for it) is cancelled now, a running one's worker is asked to stop it (it
    ends cancelled at its next heartbeat). Returns CANCELLED or STOP_REQUESTED; RunNotFound or
    RunStateError (an ended run) otherwise. `reason` goes into the audit entry."""
    run_id = _check_run_id(run_id, "cancel")
    actor = _actor(actor)
    if reason is not None:
        if not isinstance(reason, str) or len(reason) > REASON_MAX_CHARS:
            raise InvalidInput("reason", f"must be text of at most {REASON_MAX_CHARS} characters")
        clean_text("reason", reason, multiline=True)

    def act(conn):
        status, _, asked = _read(conn, run_id)
        done, requested = run_actions.cancel([run_id], conn)
        if done:
            _audit(conn, actor, "cancel", run_id, previous_status=status, reason=reason)
            return CANCELLED
        if requested:
            _audit(conn, actor, "request_cancel", run_id, previous_status=status, reason=reason)
            return STOP_REQUESTED
        if status == "running" and asked:
            raise RunStateError(run_id, status, f"run {run_id} is running and its worker was already asked "
                                                "to stop it")
        raise RunStateError(run_id, status, f"run {run_id} is {status}: there is nothing to cancel")

    return _in_transaction(act, session)


def retry(run_id, actor=None, session=None):
    """Queue run `run_id` again, due now, as the admin screen's Retry does: a failed, dead or
    cancelled run (what its end cancelled waits for it again). Its attempts stay as history.
    RunNotFound, or RunStateError for a run in another status, one reported from outside, one
    whose unique key another unfinished run holds, or one that waits for a run that ended dead or
    cancelled (retry that one)."""
    run_id = _check_run_id(run_id, "retry")
    actor = _actor(actor)

    def act(conn):
        status, job_type, _ = _read(conn, run_id)
        if run_actions.retry([run_id], conn):
            _audit(conn, actor, "retry", run_id, previous_status=status)
            return None
        if job_type == EXTERNAL_JOB_TYPE:
            raise RunStateError(run_id, status, f"run {run_id} was reported from outside: jobsweb cannot run it "
                                                "again")
        if blocker := run_actions.waits_for_failed([run_id], conn).get(run_id):
            after = blocker.after_id
            raise RunStateError(run_id, status, f"run {run_id} waits for run {after}, which ended "
                                f"{blocker.after_status}: " + (
                                    f"retry that one and {run_id} waits for it again" if blocker.revived_by_its_retry
                                    else f"retry both at once and {run_id} waits for {after}'s new attempt"))
        if status in ("dead", "cancelled"):
            raise RunStateError(run_id, status, f"run {run_id} is {status}, but another unfinished run holds its "
                                                "unique key: it was not retried")
        raise RunStateError(run_id, status, f"run {run_id} is {status}: only failed, dead or cancelled runs "
                                            "can be retried")

    return _in_transaction(act, session)


def _check_run_id(run_id, action):
    # Inline mode first: on SQLite, require_postgresql's word was to set JOBSWEB_INLINE, set already.
    if current_app.config.get("JOBSWEB_INLINE"):
        _refuse_inline(run_id, action)
    require_postgresql(from_code=True)  # on SQLite, before any other word about the call
    if isinstance(run_id, bool) or not isinstance(run_id, int) or not 1 <= run_id <= BIGINT_MAX:
        raise InvalidInput("run_id", f"must be a run id (a whole number above 0), got {run_id!r}")
    return run_id


def _refuse_inline(run_id, action):
    """Inline mode ran the run before enqueue() returned: it has ended, and there is no queue to
    take it out of or put it back in. As for an ended run on PostgreSQL, RunStateError (or
    RunNotFound for an id inline mode never gave), saying so."""
    record = current_app.extensions.get(INLINE_RUNS, {}).get(run_id) if isinstance(run_id, int) else None
    if record is None:
        raise RunNotFound(run_id)
    raise RunStateError(run_id, record["status"], f"run {run_id} is {record['status']}: inline mode (JOBSWEB_INLINE) "
                                                  f"ran it before enqueue() returned, and has no queue to {action} it in")


def _actor(actor):
    """Who the audit entry names: `actor` checked, or "code:<module>" of the code that called
    cancel() or retry() (two frames up: past this module's own function)."""
    if actor is None:
        return f"code:{sys._getframe(2).f_globals.get('__name__', '?')}"
    if not isinstance(actor, str) or not actor.strip() or len(actor) > ACTOR_MAX_CHARS:
        raise InvalidInput("actor", f"must be a non-empty name of at most {ACTOR_MAX_CHARS} characters")
    return clean_name("actor", actor)


def _read(conn, run_id):
    row = conn.exec_driver_sql(RUN_AS_IT_IS, {"id": run_id}).first()
    if row is None:
        raise RunNotFound(run_id)
    return row


def _audit(conn, actor, action, run_id, **detail):
    """The screen's audit entry (web/audit.py writes the same row), in this transaction."""
    conn.execute(insert(AuditEntry).values(user_id=None, user_email=actor, action=action, target_type="run",
                                           target_id=run_id, detail={k: v for k, v in detail.items() if v is not None}))


def _in_transaction(act, session):
    """act(connection) in the caller's session, or in a transaction of its own, committed and run
    again whole on a conflict, as an operator's action is (the caller may be a request or a
    shell: seconds of backoff, not the worker's 8 quick tries)."""
    if session is not None:
        return act(session.connection())

    def own():
        with db.engine.begin() as conn:
            return act(conn)

    return conflicts.retried(own, patience=conflicts.INTERACTIVE)
