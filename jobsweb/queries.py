"""The worker's hot-path SQL, written as the database runs it.

Every statement that changes a run is guarded by who holds it (`locked_by`) and which attempt
it is (`attempts`), and reports through RETURNING which rows it changed: a worker whose lease
was taken over can never overwrite a newer attempt, and learns that it lost the run.
Times are always the database's `now()`; the worker's clock is never written.
"""

# Enqueue one run. ON CONFLICT lets the unique index on idempotency_key decide between
# concurrent enqueuers: the loser inserts nothing and reads the winner's id afterwards.
ENQUEUE = """
INSERT INTO job_runs (job_type, payload, run_at, max_attempts, idempotency_key)
VALUES (%(job_type)s, %(payload)s, coalesce(%(run_at)s, now()), %(max_attempts)s, %(idempotency_key)s)
ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id
"""

RUN_BY_IDEMPOTENCY_KEY = "SELECT id FROM job_runs WHERE idempotency_key = %(idempotency_key)s"

# Claim up to `limit` due runs in one statement. SKIP LOCKED lets concurrent workers take
# disjoint sets instead of queueing on each other's row locks; the outer UPDATE happens under
# the locks the inner SELECT took, so no run is claimed twice. Only job types this worker can
# execute are claimed, so an older worker in a rolling deploy leaves new job types alone.
# Uses index job_runs_claimable.
CLAIM_RUNS = """
UPDATE job_runs r
SET status = 'running',
    attempts = r.attempts + 1,
    locked_by = %(worker)s,
    locked_until = now() + make_interval(secs => %(lease)s),
    started_at = now(),
    updated_at = now()
FROM (
    SELECT id FROM job_runs
    WHERE status IN ('queued', 'failed')
      AND run_at <= now()
      AND job_type = ANY(%(job_types)s)
    ORDER BY run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) due
WHERE r.id = due.id
RETURNING r.id, r.job_type, r.payload, r.attempts, r.max_attempts, r.definition_id
"""

# Push out the leases of runs this worker still holds. A run missing from RETURNING was taken
# over (its lease had expired) or cancelled: the worker must stop treating it as its own.
# cancel_requested says an operator asked a running run to stop (admin "cancel"): the worker
# sets the handler's cancellation flag, and keeps the lease until the handler returns.
EXTEND_LEASES = """
UPDATE job_runs r
SET locked_until = now() + make_interval(secs => o.lease), updated_at = now()
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(leases)s::float8[]) AS o(id, attempt, lease)
WHERE r.id = o.id
  AND r.attempts = o.attempt
  AND r.locked_by = %(worker)s
  AND r.status = 'running'
RETURNING r.id, r.cancel_requested_at IS NOT NULL AS cancel_requested
"""

# Finish many attempts in one statement and record each in job_attempts. One row per attempt:
# outcome 'succeeded', 'failed' (retry after `delay` seconds unless give_up or out of
# attempts, then dead), 'interrupted' (back to queued, due now) or 'cancelled' (the handler
# stopped because an operator cancelled it). A run whose cancellation was requested is never
# retried or re-queued: whatever else its attempt came to, it ends cancelled. `worker` is the holder the
# guard expects: this worker for its own runs, the dead holder when recovering a lease.
FINISH_RUNS = """
WITH outcome AS (
    SELECT * FROM unnest(
        %(ids)s::bigint[], %(attempts)s::int[], %(workers)s::text[], %(outcomes)s::text[],
        %(results)s::jsonb[], %(error_types)s::text[], %(errors)s::text[], %(stacks)s::text[],
        %(delays)s::float8[], %(give_up)s::bool[]
    ) AS o(id, attempt, worker, outcome, result, error_type, error, stack, delay, give_up)
),
decided AS (
    SELECT o.*,
           CASE
               WHEN o.outcome = 'succeeded' THEN 'succeeded'
               WHEN o.outcome = 'cancelled' OR r.cancel_requested_at IS NOT NULL THEN 'cancelled'
               WHEN o.outcome = 'interrupted' THEN 'queued'
               WHEN o.give_up OR r.attempts >= r.max_attempts THEN 'dead'
               ELSE 'failed'
           END AS new_status
    FROM outcome o JOIN job_runs r ON r.id = o.id
),
finished AS (
    UPDATE job_runs r
    SET status = d.new_status,
        run_at = CASE d.new_status
                     WHEN 'failed' THEN now() + make_interval(secs => d.delay)
                     WHEN 'queued' THEN now()
                     ELSE r.run_at
                 END,
        finished_at = CASE WHEN d.new_status IN ('succeeded', 'dead', 'cancelled') THEN now() END,
        result = CASE WHEN d.outcome = 'succeeded' THEN d.result ELSE r.result END,
        last_error = coalesce(d.error, r.last_error),
        error_type = coalesce(d.error_type, r.error_type),
        last_stack = CASE WHEN d.error IS NULL THEN r.last_stack ELSE d.stack END,
        locked_by = NULL,
        locked_until = NULL,
        updated_at = now()
    FROM decided d
    WHERE r.id = d.id
      AND r.attempts = d.attempt
      AND r.locked_by = d.worker
      AND r.status = 'running'
    RETURNING r.id, r.status, r.run_at, r.started_at, d.attempt, d.worker, d.outcome,
              d.error_type, d.error, d.stack
),
recorded AS (
    INSERT INTO job_attempts (run_id, attempt, worker, started_at, finished_at, outcome,
                              error_type, error, stack)
    SELECT id, attempt, worker, started_at, now(), outcome, error_type, error, stack
    FROM finished
)
SELECT id, status, extract(epoch FROM run_at - now()) AS retry_in FROM finished
"""

# Runs whose holder stopped heartbeating. Locked here (SKIP LOCKED: one recoverer per run)
# and finished with FINISH_RUNS in the same transaction. Uses index job_runs_running_lease.
EXPIRED_LEASES = """
SELECT id, attempts, locked_by, job_type
FROM job_runs
WHERE status = 'running' AND locked_until < now()
ORDER BY locked_until
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
"""

REGISTER_WORKER = """
INSERT INTO job_workers (id, host, pid) VALUES (%(worker)s, %(host)s, %(pid)s)
"""

WORKER_SEEN = """
UPDATE job_workers SET last_seen_at = now(), runs_done = runs_done + %(done)s
WHERE id = %(worker)s
"""

WORKER_STOPPED = """
UPDATE job_workers SET last_seen_at = now(), stopped_at = now(), runs_done = runs_done + %(done)s
WHERE id = %(worker)s
"""
