"""The status changes of runs reported from outside: a crontab line wrapped in `flask jobs exec`
or a script calling its ping URL. jobsweb records them but never executes them.

A reported run is born `running` (or `skipped`, by the overlap policy) and ends `succeeded` or
`dead`: it has one attempt (max_attempts 1), so lease recovery, should its reporter vanish
(FINISH_RUNS after EXPIRED_LEASES), can only end it dead, never queue it for a retry. Its
holder (`locked_by`) is the reporter: `exec:<host>:<pid>:<random>`, or PING_HOLDER for a run
opened by /start. The scheduling side (which slot a report counts for) is in
scheduling/reports.py; the engine's other status changes are in statements.py.
"""

PING_HOLDER = "ping"  # locked_by of a run opened by /ping/<token>/start

# The definition a report is for, locked until the report's transaction commits: concurrent
# reports of one definition (two execs of one crontab line, a burst of pings) take their turn
# here, so the statements after this see every run the previous reporter committed (READ
# COMMITTED takes a new snapshot per statement; a check inside this same statement would not).
# materialise's DUE_DEFINITIONS skips a definition locked here, and sees it again next pass.
LOCK_BY_NAME = """
SELECT id, name, job_type, schedule, timezone, next_run_at, grace_seconds, overlap_policy, enabled,
       external, timeout_seconds, now() AS now
FROM job_definitions WHERE name = %(name)s
FOR NO KEY UPDATE
"""
LOCK_BY_TOKEN = """
SELECT id, name, job_type, schedule, timezone, next_run_at, grace_seconds, overlap_policy, enabled,
       external, timeout_seconds, now() AS now
FROM job_definitions WHERE ping_token = %(token)s AND external
FOR NO KEY UPDATE
"""

# [*] -> running, or [*] -> skipped: a reporter starts a run of the locked definition. With
# `skip_if_running`, a run of the definition still running makes this one 'skipped' with the
# reason, and the reporter does not start its command: decided here, after LOCK_BY_*, so of two
# execs started together exactly one runs. `slot` is the schedule slot the report counts for
# (NULL: none). Runs of the definition are found through index job_runs_definition_active.
START_REPORTED = """
INSERT INTO job_runs (definition_id, job_type, payload, run_at, status, attempts, max_attempts,
                      locked_by, locked_until, started_at, finished_at, scheduled_for, reason,
                      queue, priority)
SELECT d.id, d.job_type, d.payload, now(), CASE WHEN a.id IS NULL THEN 'running' ELSE 'skipped' END,
       CASE WHEN a.id IS NULL THEN 1 ELSE 0 END, 1,
       CASE WHEN a.id IS NULL THEN %(holder)s END,
       CASE WHEN a.id IS NULL THEN now() + make_interval(secs => %(lease)s) END,
       CASE WHEN a.id IS NULL THEN now() END, CASE WHEN a.id IS NOT NULL THEN now() END,
       %(slot)s, 'previous run ' || a.id || ' still running', d.queue, d.priority
FROM job_definitions d
LEFT JOIN LATERAL (
    SELECT r.id FROM job_runs r
    WHERE %(skip_if_running)s AND r.definition_id = d.id AND r.status = 'running'
    ORDER BY r.id DESC LIMIT 1
) a ON true
WHERE d.id = %(definition_id)s
RETURNING id, status, reason
"""

# running -> succeeded or dead (`status`), or cancelled: the reporter says how its run ended; a
# run an operator asked to stop (REQUEST_CANCEL, which exec's heartbeat obeys) that did not
# succeed ends cancelled, as FINISH_RUNS has it. Guarded like FINISH_RUNS by the holder, the
# attempt and the status, so a run whose lease ran out and was recovered (dead,
# 'lease_expired') is not finished twice: no row comes back. The attempt is recorded with the
# command's output, and the definition's state follows a succeeded or dead run, as in
# FINISH_RUNS (failure_count counts consecutive dead runs; a success resets it). One run, one
# definition, locked in FINISH_RUNS's order (run, then definition), so the two cannot deadlock.
FINISH_REPORTED = """
WITH finished AS (
    UPDATE job_runs r
    SET status = CASE WHEN %(status)s <> 'succeeded' AND r.cancel_requested_at IS NOT NULL THEN 'cancelled'
                      ELSE %(status)s END,
        finished_at = now(), last_error = %(error)s, error_type = %(error_type)s,
        locked_by = NULL, locked_until = NULL, updated_at = now()
    WHERE r.id = %(run_id)s AND r.locked_by = %(holder)s AND r.attempts = 1 AND r.status = 'running'
    RETURNING r.id, r.status, r.started_at, r.definition_id
),
definition_state AS (
    UPDATE job_definitions d
    SET last_run_at = f.started_at, last_status = f.status,
        last_duration_ms = (extract(epoch FROM now() - f.started_at) * 1000)::bigint,
        failure_count = CASE WHEN f.status = 'succeeded' THEN 0 ELSE d.failure_count + 1 END
    FROM finished f
    WHERE d.id = f.definition_id AND f.status IN ('succeeded', 'dead')
),
recorded AS (
    INSERT INTO job_attempts (run_id, attempt, worker, started_at, finished_at, outcome, error_type,
                              error, output)
    SELECT id, 1, %(holder)s, started_at, now(), CASE WHEN status = 'dead' THEN 'failed' ELSE status END,
           %(error_type)s, %(error)s, %(output)s
    FROM finished
)
SELECT id, status FROM finished
"""

# The run a /start ping opened and no end ping has closed yet (the newest, should there be
# more). Index job_runs_definition_active.
OPEN_PING_RUN = """
SELECT id FROM job_runs
WHERE definition_id = %(definition_id)s AND status = 'running' AND locked_by = 'ping'
ORDER BY id DESC LIMIT 1
"""

# Ping rate limiting, kept in the runs themselves so it holds across every web process: how many
# runs reported for the definition were created in the last `window` seconds, and when the
# oldest of those leaves the window. Missed slots are not reports: one ping after a long
# silence writes up to 51 of them, and must not make the next ping (its end) a 429. Reads at
# most `scan` rows of index job_runs_definition, newest first; more reports than that in one
# window are over any limit anyway.
RECENT_REPORTS = """
SELECT count(*), ceil(extract(epoch FROM min(created_at) + make_interval(secs => %(window)s) - now()))
FROM (SELECT created_at, status FROM job_runs WHERE definition_id = %(definition_id)s ORDER BY id DESC
      LIMIT %(scan)s) newest
WHERE status <> 'missed' AND created_at > now() - make_interval(secs => %(window)s)
"""

# An operator's retry never queues a reported run of an external definition: no worker could
# take it (EXTERNAL_JOB_TYPE has no handler). The job type of a run never changes, so reading
# it before RETRY_RUNS races with nothing.
RETRYABLE_IDS = "SELECT id FROM job_runs WHERE id = ANY(%(ids)s) AND job_type <> 'jobsweb.external'"
