"""Incidents about work that stopped moving, opened and resolved by alerts.evaluate():

- no_worker: runs are due and no worker has been seen for JOBSWEB_NO_WORKER_MINUTES (a
  cron line removed, every worker dyno crashed). One open at a time (unique index
  jobsweb_alert_incidents_open_no_worker); it resolves when a worker is seen again.
- slow: a run of a definition still running past its expected duration: the definition's
  max_duration_seconds, or else SLOW_FACTOR x the p95 of its last SLOW_HISTORY successful
  runs and at least SLOW_FLOOR seconds (a definition with no successful run has no expected
  duration). One open per definition (jobsweb_alert_incidents_open_definition); it resolves
  when that run ends.

Web processes evaluate these too (web_alerts.py): they are exactly what a team needs to hear
when no worker runs. Each function runs inside evaluate()'s transaction, under its lock.
"""

from .stats import HELD_BY_A_PAUSE
from ..core.database import execute

SLOW_FACTOR = 3
SLOW_HISTORY = 20  # successful runs the p95 is taken over
SLOW_FLOOR = 60.0  # seconds: a run is never "slow" sooner, whatever its history says

# Whether runs are due that only a worker starts, and when a worker was last seen. Due: a
# queued or failed run past its run_at (index job_runs_claimable), or the slot of an enabled
# definition that a worker would materialise (index job_definitions_due; external definitions
# are reported, not run). A run of a paused queue or job type is not due for a worker: it
# waits for a person (its page says so, why_waiting.py), and blaming the workers for it sent
# the on-call person to the wrong place. job_workers keeps one row per process for the
# retention period.
NO_WORKER_STATE = f"""
SELECT least((SELECT min(run_at) FROM job_runs WHERE status IN ('queued', 'failed') AND run_at <= now()
                                                AND NOT {HELD_BY_A_PAUSE}),
             (SELECT min(next_run_at) FROM job_definitions
              WHERE enabled AND NOT external AND next_run_at <= now())) AS due_since,
       (SELECT max(last_seen_at) FROM job_workers) AS last_seen,
       now() - make_interval(secs => %(minutes)s * 60) AS cutoff
"""

# Uses unique index jobsweb_alert_incidents_open_no_worker: a second evaluator inserts nothing.
OPEN_NO_WORKER = """
INSERT INTO jobsweb_alert_incidents (kind, subject, summary, since)
VALUES ('no_worker', 'workers', %(summary)s, %(since)s)
ON CONFLICT (kind) WHERE resolved_at IS NULL AND kind = 'no_worker' DO NOTHING
RETURNING id
"""

# A worker was seen again: after the incident opened (a cron tick that came and went between
# two passes), or within the window (a heartbeat whose transaction began before the incident
# opened and committed after). When it opened, every worker was last seen before the window,
# so either is a new sighting. The one seen last is named. Guarded by resolved_at IS NULL, so a
# second evaluator resolves nothing.
RESOLVE_NO_WORKER = """
UPDATE jobsweb_alert_incidents i
SET resolved_at = now(),
    resolution = 'worker ' || w.id || ' was seen at '
                 || to_char(w.last_seen_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC'
FROM jobsweb_alert_incidents o
CROSS JOIN LATERAL (
    SELECT id, last_seen_at FROM job_workers
    WHERE last_seen_at > least(o.opened_at, now() - make_interval(secs => %(minutes)s * 60))
    ORDER BY last_seen_at DESC LIMIT 1
) w
WHERE i.id = o.id AND i.kind = 'no_worker' AND i.resolved_at IS NULL
RETURNING i.id
"""

# Running runs of definitions past their expected duration, the longest-running one per
# definition, leaving out definitions with a slow incident open. Running runs come from index
# job_runs_running; each definition's history from job_runs_definition, newest first.
# percentile_cont over no rows is NULL, and so is the limit then (greatest() would skip it).
SLOW_RUNS = """
SELECT DISTINCT ON (r.definition_id) r.id, r.definition_id, d.name, r.started_at, l.seconds,
       d.max_duration_seconds IS NULL AS from_history,
       r.started_at + make_interval(secs => l.seconds) AS slow_since
FROM job_runs r
JOIN job_definitions d ON d.id = r.definition_id
CROSS JOIN LATERAL (
    SELECT coalesce(d.max_duration_seconds::float8,
                    CASE WHEN count(*) > 0 THEN greatest(%(floor)s, %(factor)s * percentile_cont(0.95)
                                                         WITHIN GROUP (ORDER BY h.seconds)) END) AS seconds
    FROM (SELECT extract(epoch FROM p.finished_at - p.started_at)::float8 AS seconds FROM job_runs p
          WHERE d.max_duration_seconds IS NULL AND p.definition_id = d.id AND p.status = 'succeeded'
          ORDER BY p.id DESC LIMIT %(history)s) h
) l
WHERE r.status = 'running' AND r.definition_id IS NOT NULL AND NOT (r.definition_id = ANY(%(open)s))
  AND r.started_at < now() - make_interval(secs => l.seconds)
ORDER BY r.definition_id, r.started_at
"""

OPEN_SLOW_DEFINITIONS = "SELECT definition_id FROM jobsweb_alert_incidents WHERE kind = 'slow' AND resolved_at IS NULL"

# Uses unique index jobsweb_alert_incidents_open_definition.
OPEN_SLOW = """
INSERT INTO jobsweb_alert_incidents (kind, definition_id, subject, summary, since, run_id)
VALUES ('slow', %(definition_id)s, %(subject)s, %(summary)s, %(since)s, %(run_id)s)
ON CONFLICT (definition_id, kind) WHERE resolved_at IS NULL AND definition_id IS NOT NULL DO NOTHING
RETURNING id
"""

# The slow run ended (or was deleted by retention). A retried run that runs long again opens
# a new incident.
RESOLVE_SLOW = """
UPDATE jobsweb_alert_incidents i
SET resolved_at = now(),
    resolution = 'run ' || o.run_id || CASE WHEN r.id IS NULL THEN ' was deleted' ELSE ' ended ' || r.status END
FROM jobsweb_alert_incidents o
LEFT JOIN job_runs r ON r.id = o.run_id
WHERE i.id = o.id AND i.resolved_at IS NULL AND i.kind = 'slow' AND (r.id IS NULL OR r.status <> 'running')
RETURNING i.id
"""


def resolve(config):
    """Resolve the no_worker and slow incidents whose cause is gone; their ids."""
    resolved = [row[0] for row in execute(RESOLVE_NO_WORKER, {"minutes": config["JOBSWEB_NO_WORKER_MINUTES"]})]
    return resolved + [row[0] for row in execute(RESOLVE_SLOW)]


def open_incidents(config):
    """Open the no_worker and slow incidents that are due; their ids."""
    return _open_no_worker(config["JOBSWEB_NO_WORKER_MINUTES"]) + _open_slow()


def _open_no_worker(minutes):
    due_since, last_seen, cutoff = execute(NO_WORKER_STATE, {"minutes": minutes}).one()
    # With no worker ever seen, the runs themselves must have waited that long: a web process
    # starting a moment before the first worker of a deploy is not an outage.
    if due_since is None or (last_seen or due_since) >= cutoff:
        return []
    seen = f"since {_utc(last_seen)}" if last_seen else "ever"
    summary = (f"Runs are due (the oldest since {_utc(due_since)}) and no worker has been seen {seen} "
               f"(more than {minutes:g} minutes): is cron or a worker process running?")
    row = execute(OPEN_NO_WORKER, {"summary": summary, "since": max(last_seen or due_since, due_since)}).first()
    return [row[0]] if row else []


def _open_slow():
    already = [row[0] for row in execute(OPEN_SLOW_DEFINITIONS)]
    opened = []
    for run in execute(SLOW_RUNS, {"floor": SLOW_FLOOR, "factor": SLOW_FACTOR, "history": SLOW_HISTORY,
                                   "open": already}).all():
        expected = (f"{SLOW_FACTOR}x the p95 of its last successful runs, at least {SLOW_FLOOR:g} s"
                    if run.from_history else "its maximum duration")
        summary = (f"{run.name}: run {run.id} has been running since {_utc(run.started_at)}, longer than "
                   f"{expected} ({run.seconds:g} s).")
        row = execute(OPEN_SLOW, {"definition_id": run.definition_id, "subject": run.name, "summary": summary,
                                  "since": run.slow_since, "run_id": run.id}).first()
        opened += [row[0]] if row else []
    return opened


def _utc(moment):
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
