"""Alerts: incidents that worker ticks open and resolve, and the notifications they queue.

An incident is one problem, notified once when it opens and once when it clears:
- overdue: a definition's slot is past its grace and nothing of it is queued or running
  (the ticks stopped), or its run has waited queued past the grace (no worker takes it, or
  none handles its job type);
- failing: a definition's dead runs in a row reached its alert_after_failures; runs of
  definitions alert only through this threshold, so set it to 1 to hear about every dead run;
  (both from scheduling/definitions.py's problems(), which the dashboard reads too)
- dead: a run enqueued outside any definition died. One open incident per job type counts
  every run of that type that dies while it is open, so a hundred dead invoices are one alert;
- no_worker and slow (stalls.py): runs are due and no worker has been seen for a while; a run
  of a definition is running far longer than expected.
Each clears with the next success: a run of the definition that started after the incident
began; a dead incident once none of the runs it counted is dead any more (retried or deleted).
An overdue or failing incident also clears when its definition is deleted, and an overdue
one when it is paused.

evaluate() does all of this in one transaction, notifications included (rows in
jobsweb_alert_deliveries, sent by notify.py): an incident exists exactly when its notification was
queued. Workers evaluate as a duty of their loop, and each web process on a thread of its own
(web_alerts.py), so alerts fire with no worker running. Exactly once across all of them:
evaluations take a transaction-level advisory lock (an evaluator that finds it taken skips
its turn; nothing is held across transactions, so a pooler in transaction mode is fine), and
the unique partial indexes on open incidents refuse a second one whatever happens.
"""

import logging
import threading
import time

from flask import current_app
from sqlalchemy.exc import OperationalError, ProgrammingError

from . import notify, stalls, why_waiting
from ..core import conflicts, deadlines
from ..core.database import db, execute
from ..core.masking import one_line
from ..core.models import AlertDelivery, AlertIncident, JobRun
from ..engine.worker.duties import Duty
from ..scheduling import definitions

log = logging.getLogger("jobsweb.alerts")

INCIDENT_KINDS = ("overdue", "failing", "dead", "slow", "no_worker")
# Dead runs are looked for among those that died this recently: the anti-join against
# jobsweb_alert_incident_runs then stays small however many dead runs the table keeps. Workers
# and web processes evaluate every few seconds, so only an hour with neither could miss one.
DEAD_LOOKBACK_SECONDS = 3600
DEAD_RUNS_PER_PASS = 1000
ERROR_CHARS = 300  # of a run's error, quoted in a notification
# Seconds one round trip of an evaluation may take (on jobsweb's own engine, core/deadlines.py):
# its statements take milliseconds, the dead-run scan over a large table well under a second.
ROUND_TRIP_LIMIT = 10.0
LOCK_KEY = 0x6A6F6273  # pg advisory lock id of the alerts evaluation ('jobs')

TAKE_TURN = "SELECT pg_try_advisory_xact_lock(%(key)s)"

# Open an overdue or failing incident unless one is open; RETURNING tells the winner.
# Uses unique index jobsweb_alert_incidents_open_definition.
OPEN_DEFINITION_INCIDENT = """
INSERT INTO jobsweb_alert_incidents (kind, definition_id, subject, summary, since, run_id)
VALUES (%(kind)s, %(definition_id)s, %(subject)s, %(summary)s, coalesce(%(since)s, now()), %(run_id)s)
ON CONFLICT (definition_id, kind) WHERE resolved_at IS NULL AND definition_id IS NOT NULL DO NOTHING
RETURNING id
"""

# Close overdue and failing incidents: a run of the definition that started at or after the
# incident began succeeded (last_run_at is the start of its newest finished run), or the
# definition went away. Guarded by resolved_at IS NULL: a second evaluator resolves nothing.
RESOLVE_DEFINITION_INCIDENTS = """
UPDATE jobsweb_alert_incidents i
SET resolved_at = now(),
    resolution = CASE
        WHEN d.id IS NULL THEN 'the definition was deleted'
        WHEN i.kind = 'overdue' AND NOT d.enabled THEN 'the definition was paused'
        ELSE 'a run started at ' || to_char(d.last_run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')
             || ' UTC succeeded'
    END
FROM jobsweb_alert_incidents o
LEFT JOIN job_definitions d ON d.id = o.definition_id
WHERE i.id = o.id AND i.resolved_at IS NULL AND i.kind IN ('overdue', 'failing')
  AND (d.id IS NULL
       OR (i.kind = 'overdue' AND NOT d.enabled)
       OR (d.last_status = 'succeeded' AND d.last_run_at >= i.since))
RETURNING i.id
"""

# Close dead incidents once none of the runs they counted is dead any more: retried (and not
# dead again), or deleted. A success of some other run of the job type says nothing about these:
# closing on it left their dead runs dead with no open incident mentioning them. Index
# jobsweb_alert_incident_runs_incident (0020) finds an incident's runs.
RESOLVE_DEAD_INCIDENTS = """
UPDATE jobsweb_alert_incidents i
SET resolved_at = now(),
    resolution = CASE WHEN i.run_count = 1 THEN 'its run is' ELSE 'none of its ' || i.run_count || ' runs is' END
                 || ' dead any more'
WHERE i.resolved_at IS NULL AND i.kind = 'dead'
  AND NOT EXISTS (SELECT 1 FROM jobsweb_alert_incident_runs l JOIN job_runs r ON r.id = l.run_id
                  WHERE l.incident_id = i.id AND r.status = 'dead')
RETURNING i.id
"""

# Runs outside any definition that died recently (a deleted definition's runs lost their
# definition_id but were not ad hoc: deleting a failing definition must not alert again) and that no incident has counted yet.
# Uses index job_runs_dead_finished and jobsweb_alert_incident_runs' primary key.
NEW_DEAD_RUNS = """
SELECT r.id, r.job_type, r.finished_at, r.attempts, r.error_type, r.last_error
FROM job_runs r
WHERE r.status = 'dead' AND r.definition_id IS NULL AND r.deleted_definition IS NULL
  AND r.finished_at > now() - make_interval(secs => %(lookback)s)
  AND NOT EXISTS (SELECT 1 FROM jobsweb_alert_incident_runs l WHERE l.run_id = r.id AND l.attempt = r.attempts)
ORDER BY r.id
LIMIT %(limit)s
"""

# Uses unique index jobsweb_alert_incidents_open_job_type.
OPEN_DEAD_INCIDENT = """
INSERT INTO jobsweb_alert_incidents (kind, job_type, subject, summary, since, last_failure_at, run_id)
VALUES ('dead', %(job_type)s, %(job_type)s, %(summary)s, %(since)s, %(last_failure_at)s, %(run_id)s)
ON CONFLICT (job_type) WHERE resolved_at IS NULL AND kind = 'dead' DO NOTHING
RETURNING id
"""

OPEN_DEAD_INCIDENT_ID = """
SELECT id FROM jobsweb_alert_incidents WHERE job_type = %(job_type)s AND kind = 'dead' AND resolved_at IS NULL
"""

# Count deaths into an incident; one already counted (primary key) is not counted again. An
# incident open already takes the summary of its newest death: "dead after 1 attempt" stayed
# after the run was retried and died again on attempt 2; and that death's run, which the
# incident's link opens (its sentence named run 418 while its link opened run 410).
COUNT_DEAD_RUNS = """
WITH counted AS (
    INSERT INTO jobsweb_alert_incident_runs (run_id, attempt, incident_id)
    SELECT run_id, attempt, %(incident_id)s
    FROM unnest(%(run_ids)s::bigint[], %(attempts)s::int[]) AS d(run_id, attempt)
    ON CONFLICT (run_id, attempt) DO NOTHING
    RETURNING run_id
)
UPDATE jobsweb_alert_incidents
SET run_count = run_count + (SELECT count(*) FROM counted),
    last_failure_at = greatest(last_failure_at, %(last_failure_at)s),
    summary = coalesce(%(summary)s, summary),
    run_id = coalesce(%(run_id)s, run_id)
WHERE id = %(incident_id)s
"""


OPEN_DEFINITION_INCIDENT_KEYS = """
SELECT definition_id, kind FROM jobsweb_alert_incidents WHERE resolved_at IS NULL AND definition_id IS NOT NULL
"""

# The newest dead run of a failing definition, quoted in its notification. Uses index
# job_runs_definition.
NEWEST_DEAD_RUN = """
SELECT id, error_type, last_error FROM job_runs
WHERE definition_id = %(definition_id)s AND status = 'dead'
ORDER BY id DESC LIMIT 1
"""

INCIDENT_WITH_ROUTING = """
SELECT i.*, d.alert_webhook_url, d.alert_email_to FROM jobsweb_alert_incidents i
LEFT JOIN job_definitions d ON d.id = i.definition_id
WHERE i.id = %(id)s
"""


def evaluate():
    """Open and resolve incidents and queue their notifications; commit. Returns
    (opened ids, resolved ids), or None when another worker was evaluating."""
    try:
        if not execute(TAKE_TURN, {"key": LOCK_KEY}).scalar():
            db.session.rollback()
            return None
        config = current_app.config
        resolved = [row[0] for row in execute(RESOLVE_DEFINITION_INCIDENTS)]
        resolved += [row[0] for row in execute(RESOLVE_DEAD_INCIDENTS)]
        resolved += stalls.resolve(config)
        opened = _open_definition_incidents() + _open_dead_incidents() + stalls.open_incidents(config)
        for incident_id in resolved:
            _queue(incident_id, "resolved")
        for incident_id in opened:
            _queue(incident_id, "opened")
        db.session.commit()
    except BaseException:
        db.session.rollback()
        raise
    return opened, resolved


def _open_definition_incidents():
    # Definitions with an incident open already are left out before inserting: ON CONFLICT
    # would refuse them anyway, but only after taking an id from the sequence each pass.
    already = {tuple(row) for row in execute(OPEN_DEFINITION_INCIDENT_KEYS)}
    opened = []
    for problem in definitions.problems(skip=already):
        d, run = problem.definition, problem.run
        if problem.kind == "failing":
            error = execute(NEWEST_DEAD_RUN, {"definition_id": d.id}).first()
            summary = f"{d.name} {definitions.failed_last(d.failure_count)}"
            if error is not None:
                summary += f"; run {error.id} died with {_error(error.error_type, error.last_error)}"
            opened += _open_for_definition("failing", d, summary + ".", d.last_run_at, error.id if error else None)
        elif d.external:
            slot = d.next_run_at if run is None else run.scheduled_for
            summary = (f"{d.name} is overdue: its run due at {_utc(slot)} was not reported within its grace of "
                       f"{d.grace_seconds} s. Is its crontab line (flask jobs exec) or its ping still there?")
            opened += _open_for_definition("overdue", d, summary, slot, run.id if run else None)
        elif run is None:
            summary = (f"{d.name} is overdue: its run due at {_utc(d.next_run_at)} has not started and "
                       "nothing of it is queued or running. Is cron or a worker running?")
            opened += _open_for_definition("overdue", d, summary, d.next_run_at)
        else:
            # Why it is still queued, as its page says it (why_waiting.py): a paused queue is not a missing
            # worker. Its times in UTC alone: "13 min ago" stored here was still read an hour later.
            why = why_waiting.reason(run.id)
            why = why and why_waiting.Reason(why.kind, tuple(why_waiting.Part(_utc(p.time)) if p.time else p for p in why.parts))
            summary = (f"{d.name} is overdue: its run {run.id}, due at {_utc(run.run_at)}, is still queued. "
                       + (why.text if why else f"Is a worker running that handles job type {d.job_type}?"))
            opened += _open_for_definition("overdue", d, summary, run.run_at, run.id)
    return opened


def _open_for_definition(kind, d, summary, since, run_id=None):
    """Open an incident of `d`; `run_id` is the run its summary names, which its link opens."""
    row = execute(OPEN_DEFINITION_INCIDENT, {
        "kind": kind, "definition_id": d.id, "subject": d.name, "summary": summary, "since": since,
        "run_id": run_id,
    }).first()
    return [row[0]] if row else []


def _open_dead_incidents():
    rows = execute(NEW_DEAD_RUNS, {"lookback": DEAD_LOOKBACK_SECONDS, "limit": DEAD_RUNS_PER_PASS}).all()
    by_type = {}
    for row in rows:
        by_type.setdefault(row.job_type, []).append(row)
    opened = []
    for job_type, runs in by_type.items():
        first = runs[0]  # the oldest run, named in the summary
        since = min(r.finished_at for r in runs)
        last_failure_at = max(r.finished_at for r in runs)
        summary = _death(first)
        if len(runs) > 1:
            summary += f" ({len(runs) - 1} more {job_type} run{'s' if len(runs) > 2 else ''} died with it)"
        incident_id = execute(OPEN_DEAD_INCIDENT_ID, {"job_type": job_type}).scalar()
        newest = newest_id = None
        if incident_id is not None:
            newest_run = max(runs, key=lambda r: r.finished_at)
            newest, newest_id = _death(newest_run) + ".", newest_run.id
        else:
            row = execute(OPEN_DEAD_INCIDENT, {
                "job_type": job_type, "summary": summary + ".", "since": since,
                "last_failure_at": last_failure_at, "run_id": first.id}).first()
            if row is None:
                continue  # another evaluator opened one just now: counted into it next pass
            incident_id = row[0]
            opened.append(incident_id)
        execute(COUNT_DEAD_RUNS, {
            "run_ids": [r.id for r in runs], "attempts": [r.attempts for r in runs], "incident_id": incident_id,
            "last_failure_at": last_failure_at, "summary": newest, "run_id": newest_id})
    return opened


def _death(run):
    """'run 5 of send_invoice is dead after 2 attempts: KeyError: ...'"""
    return (f"run {run.id} of {run.job_type} is dead after {run.attempts} "
            f"attempt{'s' if run.attempts != 1 else ''}: {_error(run.error_type, run.last_error)}")


def _queue(incident_id, event):
    """Add the notifications of one incident event, one per channel, to the session."""
    incident = execute(INCIDENT_WITH_ROUTING, {"id": incident_id}).first()
    if event == "opened":
        subject = f"jobsweb ALERT: {incident.subject} {_KIND_WORDS[incident.kind]}"
        body = incident.summary
        log.warning("incident %d opened: %s", incident.id, incident.summary)
    else:
        subject = f"jobsweb RESOLVED: {incident.subject} {_KIND_WORDS[incident.kind]}"
        body = (f"Resolved: {incident.subject} {_KIND_WORDS[incident.kind]} since {_utc(incident.since)}; "
                f"{incident.resolution}.")
        log.info("incident %d resolved: %s", incident.id, incident.resolution)
    link = notify.incident_link(incident_id)
    if link:
        body += f"\n{link}"
    data = {"event": event, "incident_id": incident.id, "kind": incident.kind,
            "subject": incident.subject, "definition_id": incident.definition_id,
            "job_type": incident.job_type, "summary": incident.summary,
            "since": incident.since.isoformat(), "resolution": incident.resolution, "url": link}
    for channel, target in notify.routes(incident.alert_webhook_url, incident.alert_email_to):
        db.session.add(AlertDelivery(incident_id=incident.id, event=event, channel=channel, target=target,
                                     subject=subject, body=body, data=data))


_KIND_WORDS = {"overdue": "is overdue", "failing": "is failing", "dead": "has dead runs",
               "slow": "is running long", "no_worker": "have not been seen"}
# How the admin screen names each kind.
KIND_LABELS = {"overdue": "overdue", "failing": "failing", "dead": "dead runs", "slow": "slow", "no_worker": "no worker"}


def open_incidents(definition_id=None):
    """Open incidents, oldest first, each with its run's status now (run_status); one definition's when given."""
    stmt = (db.select(AlertIncident, JobRun.status).outerjoin(JobRun, JobRun.id == AlertIncident.run_id)
            .where(AlertIncident.resolved_at.is_(None)).order_by(AlertIncident.id))
    if definition_id is not None:
        stmt = stmt.where(AlertIncident.definition_id == definition_id)
    return [setattr(incident, "run_status", status) or incident for incident, status in db.session.execute(stmt)]


def _utc(moment):
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "never"


def _error(error_type, message):
    # Masked as the run page masks it, before its lines are joined: viewers, notifications and logs read it (issue 53, M1).
    message = one_line(message or "", current_app.config["JOBSWEB_MASK_KEYS"], ERROR_CHARS)
    return f"{error_type or 'error'}: {message}" if message else (error_type or "an error")


class Alerter:
    """A process's share of alerting: evaluate every JOBSWEB_ALERT_INTERVAL seconds (from a
    worker's loop, a few short statements, or a web process's thread), and send due
    notifications on a thread of its own, so that a slow webhook or SMTP server never delays
    claims, heartbeats or completions."""

    def __init__(self, app):
        self.app = app
        self.every = app.config["JOBSWEB_ALERT_INTERVAL"]
        self.sender = None
        self.stopping = threading.Event()
        self.cut_at = None  # time.monotonic() by which an evaluation under way ends (a worker told to stop)
        self.evaluating = None  # the deadlines.Bound of the evaluation under way, if any

    def duty(self):
        """Alerting as a worker duty: it never finds work that keeps a cron tick going."""
        return Duty("alerts", self.evaluate_and_send, every=self.every, stop=self.stop, cut=self.cut_by)

    def cut_by(self, deadline):
        """The evaluation under way on the worker's loop ends by `deadline` (a worker told to stop):
        a dozen round trips of its own, not on the link the stop cuts, held an exit 24 s on a slow
        link. One transaction: nothing is half written. Only assignments (a signal handler's)."""
        self.cut_at = deadline if self.cut_at is None else min(self.cut_at, deadline)
        if (bound := self.evaluating) is not None:
            bound.end_by(self.cut_at)

    def evaluate_and_send(self, link=None):
        """Evaluate, then start the sender if something is waiting to be sent; never raises.

        Runs in its own app context and session, not on the worker's connection (`link`)."""
        unavailable = self.attempt()
        if unavailable and self.cut_at is None:
            log.warning("alerts: database unavailable (%s); next try in %gs", unavailable, self.every)
        return False

    def attempt(self):
        """Evaluate and start the sender if something is due; why the database could not be
        used (down, silent, not migrated yet), or None. Logs only its own bugs."""
        try:
            # Bounded: a silent database must not hold the web thread or the worker's duty.
            with deadlines.bounded(ROUND_TRIP_LIMIT) as bound, self.app.app_context():
                self.evaluating = bound
                if self.cut_at is not None:  # set before this evaluation's Bound was there to cut
                    bound.end_by(self.cut_at)
                # evaluate() is one transaction of jobsweb's own (sending is apart, below): run
                # again whole on a conflict (core/conflicts.py).
                conflicts.retried(evaluate)
                due = notify.any_due()
        except (OperationalError, ProgrammingError) as exc:  # down, or not migrated yet
            if conflicts.kind(exc):
                return None  # not an outage; logged as a conflict; the next evaluation tries again
            return str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        except Exception:  # a bug here must not stop the worker from running jobs
            log.exception("alerts: evaluation failed; next try in %gs", self.every)
            return None
        if due and (self.sender is None or not self.sender.is_alive()):
            self.sender = threading.Thread(target=self._send, name="jobsweb-alerts", daemon=True)
            self.sender.start()
        return None

    def _send(self):
        try:
            with self.app.app_context():
                notify.deliver_due(self.stopping)
        except Exception:
            log.exception("alerts: sending failed; pending notifications are tried again later")

    def stop(self, until=None):
        """At worker exit: give the sender JOBSWEB_ALERT_TIMEOUT to send what is due (a cron
        tick exits right after it opened an incident, and should not leave its notification
        to the next tick), then let a send in progress finish and start no other; all by `until`
        (time.monotonic(), if given: a worker told to stop exits by its deadline; the daemon
        thread, if still sending, ends with the process)."""
        if self.sender is None:
            return
        timeout = self.app.config["JOBSWEB_ALERT_TIMEOUT"]
        until = time.monotonic() + 2 * timeout if until is None else until
        self.sender.join(max(0.0, min(timeout, until - time.monotonic())))
        self.stopping.set()
        self.sender.join(max(0.0, min(timeout, until - time.monotonic())))
