"""An operator's statements on runs: retry, cancel, delete, run now and reschedule.

These race with workers claiming and finishing the same runs, so each is one guarded UPDATE (or
DELETE) whose WHERE names the statuses it may act on; READ COMMITTED re-checks that WHERE after
waiting for a worker's row lock, so a run a worker claimed meanwhile is left alone (and, for
cancel, gets a cancellation request instead). What they do to the runs that wait for these, and
to their batches, is the trigger job_runs_workflow's (migrations 0024_seams, 0026_retry_seams);
engine/runs/run_actions.py sends them."""

# Which runs each action changes, as conditions on a row of job_runs, written once: the statements
# below are made of them, and so is the count an operator's confirmation states
# (run_actions.count_changed: "Retry 331 runs?" said "about 0" when it was the planner's estimate).
NOT_REPORTED = "job_type <> 'jobsweb.external'"  # no worker could run a run reported from outside again
RETRYABLE_STATUS = "status IN ('failed', 'dead', 'cancelled')"
# A dead or cancelled run whose unique key another unfinished run holds now is left alone.
UNIQUE_KEY_FREE = """(unique_key IS NULL OR status = 'failed' OR NOT EXISTS (
      SELECT 1 FROM job_runs o WHERE o.unique_key = job_runs.unique_key
                                 AND o.status IN ('queued', 'running', 'failed')))"""
ENDED_AT_ONCE = "status IN ('waiting', 'queued', 'failed')"  # no worker holds them: cancelled at once
ASK_TO_STOP = "status = 'running' AND cancel_requested_at IS NULL"  # its holder is asked to stop
DELETABLE_STATUS = "status IN ('succeeded', 'dead', 'cancelled', 'skipped', 'missed')"
CHANGES = {
    # Of runs matched one at a time, those RETRY_RUNS may queue again; it also leaves alone a run
    # that waits for a run ended dead or cancelled outside the retry, and all but the oldest of
    # several with one key: what only the whole set of runs can say (the bulk flash counts them).
    "retry": f"{NOT_REPORTED} AND {RETRYABLE_STATUS} AND {UNIQUE_KEY_FREE}",
    "cancel": f"({ENDED_AT_ONCE} OR {ASK_TO_STOP})",  # cancelled, or asked to stop
    "delete": f"({ENDED_AT_ONCE} OR {DELETABLE_STATUS})",  # cancelled first (CANCEL_BEFORE_DELETE), then deleted
}

# failed/dead/cancelled -> queued, due now. Attempts and job_attempts stay as history; the
# next claim records attempt n+1. The status guard leaves a run a worker just claimed alone. A
# dead or cancelled run whose unique key another unfinished run holds now is left as it is, and of
# several such runs with one key retried at once, only the oldest is.
# So is a run that waits for one ended dead or cancelled (or a skipped or missed slot), unless it
# runs after failure or that run is retried by this same statement: it would wait for it for
# ever (the trigger's recount). A run left alone so leaves alone what waits for it among these
# (`blocked`, over these runs' own dependencies only). The dependencies not among these are read
# under FOR SHARE, in id order: one a worker is ending now is read as it ended. Those among these
# are not locked here (two retries of overlapping runs would deadlock on the share locks); their
# own status guard, re-checked by the UPDATE, decides them. The trigger's AFTER ROW calls come
# once every row is queued: a run waits for the new attempt of one retried with it.
RETRY_RUNS = f"""
WITH RECURSIVE retryable AS MATERIALIZED (
    SELECT id, run_after_failure FROM job_runs
    WHERE id = ANY(%(ids)s) AND {NOT_REPORTED} AND {RETRYABLE_STATUS}
      AND (unique_key IS NULL OR status = 'failed' OR (NOT EXISTS (
          SELECT 1 FROM job_runs o WHERE o.unique_key = job_runs.unique_key
                                     AND o.status IN ('queued', 'running', 'failed'))
          -- Of several with one key asked for at once, the oldest: two would break the key's index.
          AND id = (SELECT min(k.id) FROM job_runs k WHERE k.id = ANY(%(ids)s) AND k.unique_key = job_runs.unique_key
                                                         AND k.status IN ('dead', 'cancelled'))))
),
edges AS MATERIALIZED (
    SELECT d.run_id, d.after_id FROM job_run_deps d
    WHERE d.run_id IN (SELECT id FROM retryable WHERE NOT run_after_failure)
),
outside AS MATERIALIZED (
    SELECT id, status FROM job_runs
    WHERE id IN (SELECT after_id FROM edges) AND NOT (id = ANY(%(ids)s))
    ORDER BY id FOR SHARE
),
failed_ends AS (
    SELECT id FROM outside WHERE status IN ('dead', 'cancelled', 'skipped', 'missed')
    UNION ALL
    SELECT id FROM job_runs WHERE id = ANY(%(ids)s) AND status IN ('dead', 'cancelled', 'skipped', 'missed')
                              AND id NOT IN (SELECT id FROM retryable)
),
blocked(id) AS (
    SELECT e.run_id FROM edges e JOIN failed_ends f ON f.id = e.after_id
    UNION
    SELECT e.run_id FROM edges e JOIN blocked b ON b.id = e.after_id
)
UPDATE job_runs
SET status = 'queued', run_at = now(), locked_by = NULL, locked_until = NULL,
    finished_at = NULL, cancel_requested_at = NULL, updated_at = now()
WHERE id IN (SELECT id FROM retryable) AND id NOT IN (SELECT id FROM blocked)
  AND {CHANGES["retry"]}
RETURNING id
"""

# Of these runs, those left dead or cancelled (or failed) while a run they wait for ended dead or
# cancelled (not with after_failure="run"): that run, by the one named in its reason if it is one
# (whose retry revives it), else the smallest id. For the pages that say why a retry left a run
# alone.
WAITS_FOR_FAILED = """
SELECT DISTINCT ON (r.id) r.id, a.id AS after_id, a.status AS after_status,
       r.reason = 'run ' || a.id || ' ended ' || a.status AS revived_by_its_retry
FROM job_runs r JOIN job_run_deps d ON d.run_id = r.id JOIN job_runs a ON a.id = d.after_id
WHERE r.id = ANY(%(ids)s) AND r.status IN ('failed', 'dead', 'cancelled') AND NOT r.run_after_failure
  AND a.status IN ('dead', 'cancelled', 'skipped', 'missed')
ORDER BY r.id, r.reason = 'run ' || a.id || ' ended ' || a.status DESC, a.id
"""

# waiting/queued/failed -> cancelled at once: no worker holds them. Runs waiting for one that is
# cancelled are cancelled with it (the trigger job_runs_workflow).
CANCEL_WAITING = f"""
UPDATE job_runs
SET status = 'cancelled', finished_at = now(), updated_at = now()
WHERE id = ANY(%(ids)s) AND {ENDED_AT_ONCE}
RETURNING id
"""

# running: ask the holder to stop. Its heartbeat (EXTEND_LEASES) sees the request and sets the
# handler's cancellation flag; FINISH_RUNS then ends the run cancelled. Runs after
# CANCEL_WAITING in the same transaction, so a run claimed between the two is caught here.
CANCEL_CHANNEL = "jobsweb_cancels"
# The holders hear of it at once: a NOTIFY on CANCEL_CHANNEL naming them (delivered at the
# commit; NOTIFY folds the same payload sent once per row into one), which a listening worker
# answers with a heartbeat (engine/worker/wakeup.py), so its handler is told in milliseconds, not
# at the next heartbeat (a third of the lease: 20 s by default). A worker that does not listen
# (a cron tick, a pooler without JOBSWEB_DIRECT_DATABASE_URL) still hears it at its heartbeat.
REQUEST_CANCEL = f"""
WITH asked AS (
    UPDATE job_runs
    SET cancel_requested_at = now(), updated_at = now()
    WHERE id = ANY(%(ids)s) AND {ASK_TO_STOP}
    RETURNING id, locked_by
)
SELECT a.id FROM asked a
LEFT JOIN LATERAL (SELECT pg_notify('jobsweb_cancels', (SELECT string_agg(DISTINCT locked_by, ',') FROM asked))) told
    ON true
"""

# A run deleted before it ended is cancelled first, in the delete's transaction (run_actions.delete),
# so the trigger job_runs_workflow does what a cancel does: what waits for it is cancelled ("run
# 812 was deleted": reason 'deleted' tells it), its batch counts it. Returns the status before.
CANCEL_BEFORE_DELETE = f"""
UPDATE job_runs r SET status = 'cancelled', finished_at = now(), updated_at = now(), reason = 'deleted'
FROM (SELECT id, status FROM job_runs WHERE id = ANY(%(ids)s) AND {ENDED_AT_ONCE}
      ORDER BY id FOR NO KEY UPDATE) was
WHERE r.id = was.id RETURNING r.id, was.status
"""

# Operators delete runs (admin only) once ended (after CANCEL_BEFORE_DELETE), with their attempts
# (ON DELETE CASCADE); never a running one, which a worker would finish into nothing. A run claimed
# meanwhile, or ended failed or queued, is re-checked after the row lock (READ COMMITTED) and kept.
DELETE_RUNS = f"""
DELETE FROM job_runs
WHERE id = ANY(%(ids)s) AND {DELETABLE_STATUS}
RETURNING id, job_type, status
"""

# A queued run due later is made due now ("run now"); the caller sends NOTIFY in the same
# transaction, so listening workers claim it at commit. A run claimed or cancelled meanwhile
# is left alone (status), and so is one already due (nothing to do).
RUN_QUEUED_NOW = """
UPDATE job_runs SET run_at = now(), updated_at = now()
WHERE id = %(id)s AND status = 'queued' AND run_at > now()
RETURNING id
"""

# A queued run moved to another time (later or earlier, never into the past: the view checks).
RESCHEDULE_QUEUED = """
UPDATE job_runs SET run_at = %(run_at)s, updated_at = now()
WHERE id = %(id)s AND status = 'queued'
RETURNING id
"""
