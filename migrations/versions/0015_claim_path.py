"""The claim as a PL/pgSQL function, planned once per server connection; one index on running runs.

Revision ID: 0015_claim_path
Revises: 0014_payload_search
Create Date: 2026-11-23

jobsweb_claim_runs: CLAIM_RUNS (engine/statements.py calls it; the comment there says what the
claim guarantees) was planned on every call, about 1 ms of a 1.5 ms claim at 1,000,000 finished
runs: workers never prepare statements, which a pooler in transaction mode would lose. PL/pgSQL
keeps the plans of a function's statements in each server connection, so the claim is planned
once per connection, whatever pooler is in front. Its statement is written out here as the
database runs it; a change to the claim is a new migration with CREATE OR REPLACE FUNCTION.

job_runs_running: every claim is a non-HOT update of job_runs (status is indexed), so the new
row version gets an entry in every index whose predicate it meets; a running run met two
partial indexes, job_runs_running_lease (locked_until) and job_runs_running_queue (queue).
Both served small scans of the runs running now, which one index serves as well.

Nothing is removed that the previous release uses: its processes keep working on this schema.
"""

from alembic import op

revision = "0015_claim_path"
down_revision = "0014_payload_search"
branch_labels = None
depends_on = None

UPGRADE = """
-- Serves CLAIM_RUNS' count of a limited queue's running runs and the Queues page's (queue
-- first: an index-only count per queue); EXPIRED_LEASES (engine/upkeep.py) and the health
-- page's stalled runs (locked_until < now(): the few runs running now, read whole and sorted);
-- LOST_CLAIMS and the runs each worker holds (status = 'running' AND locked_by = ...).
CREATE INDEX job_runs_running ON job_runs (queue, locked_until) WHERE status = 'running';
DROP INDEX job_runs_running_lease;
DROP INDEX job_runs_running_queue;

-- CLAIM_RUNS, as engine/statements.py describes it. Parameters start with _ so that no column
-- name can shadow them; the output columns are only ever read by position, and use_column lets
-- the body name the columns they share a name with (id, job_type).
CREATE FUNCTION jobsweb_claim_runs(_worker text, _lease double precision, _job_types text[],
                                   _limit integer, _free integer, _queues text[])
RETURNS TABLE (id bigint, job_type text, payload jsonb, attempts integer, max_attempts integer,
               definition_id bigint, timeout_seconds double precision, lease_seconds double precision,
               backoff_base double precision, backoff_cap double precision)
LANGUAGE plpgsql AS $claim$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS now),
    snapshot AS MATERIALIZED (
        SELECT name, paused, claims, coalesce(concurrency_limit, rate_limit) IS NOT NULL AS limited FROM job_queues),
    -- The no_*_excluded flags keep the planner reading job_runs_claimable in order: with one queue or
    -- job type in the statistics, it estimates that `NOT queue = ANY(e.queues)` leaves no run, and then
    -- read every due run through job_runs_status_id and sorted them (1,000 due: 0.6 ms more a claim).
    excluded AS MATERIALIZED (  -- limited queues are taken from per queue below, or not at all
        SELECT queues, job_types, queues = '{}' AS no_queue_excluded, job_types = '{}' AS no_type_excluded
        FROM (SELECT coalesce(array_agg(name) FILTER (WHERE paused OR limited), '{}') AS queues FROM snapshot) q,
             (SELECT coalesce(array_agg(job_type), '{}') AS job_types FROM job_paused_types) t
    ),
    held AS MATERIALIZED (
        SELECT name, claims, concurrency_limit, rate_limit, ARRAY(SELECT t FROM unnest(rate_starts) t, clock
               WHERE t > clock.now - make_interval(secs => rate_seconds)) AS rate_window
        FROM job_queues
        WHERE NOT paused AND coalesce(concurrency_limit, rate_limit) IS NOT NULL
          AND (_queues IS NULL OR name = ANY(_queues))
        ORDER BY name
        FOR UPDATE SKIP LOCKED
    ),
    per_queue AS (  -- (queue, how many runs it may give)
        SELECT q.name, _limit AS n FROM unnest(_queues) q(name), excluded e
        WHERE NOT q.name = ANY(e.queues)
        UNION ALL
        SELECT h.name, CASE WHEN h.claims <> s.claims OR s.paused THEN 0 ELSE least(_free,
                   h.concurrency_limit - (SELECT count(*) FROM job_runs r
                                          WHERE r.status = 'running' AND r.queue = h.name),
                   h.rate_limit - cardinality(h.rate_window)) END
        FROM held h JOIN snapshot s ON s.name = h.name
    ),
    candidates AS (
        SELECT c.* FROM excluded e, LATERAL (
            SELECT r.id, r.queue, r.priority, r.run_at FROM job_runs r
            WHERE _queues IS NULL AND (e.no_queue_excluded OR NOT r.queue = ANY(e.queues))
              AND r.status IN ('queued', 'failed') AND r.run_at <= now()
              AND r.job_type = ANY(_job_types) AND (e.no_type_excluded OR NOT r.job_type = ANY(e.job_types))
              -- Overlap policy 'queue': not before the run it waits for has finished. A run whose
              -- predecessor is being claimed in this same instant still sees it queued, so the
              -- two are never claimed together.
              AND (r.after_run_id IS NULL OR NOT EXISTS (SELECT 1 FROM job_runs p WHERE p.id = r.after_run_id
                                                         AND p.status IN ('queued', 'running', 'failed')))
            ORDER BY r.priority, r.run_at, r.id
            LIMIT _limit
            FOR UPDATE OF r SKIP LOCKED
        ) c
        UNION ALL
        SELECT c.* FROM per_queue q, excluded e, LATERAL (
            SELECT r.id, r.queue, r.priority, r.run_at FROM job_runs r
            WHERE r.queue = q.name AND r.status IN ('queued', 'failed') AND r.run_at <= now()
              AND r.job_type = ANY(_job_types) AND (e.no_type_excluded OR NOT r.job_type = ANY(e.job_types))
              AND (r.after_run_id IS NULL OR NOT EXISTS (SELECT 1 FROM job_runs p WHERE p.id = r.after_run_id
                                                         AND p.status IN ('queued', 'running', 'failed')))
            ORDER BY r.priority, r.run_at, r.id
            LIMIT greatest(q.n, 0)
            FOR UPDATE OF r SKIP LOCKED
        ) c
    ),
    due AS MATERIALIZED (
        SELECT id, queue FROM candidates ORDER BY priority, run_at, id LIMIT _limit
    ),
    counted AS (
        UPDATE job_queues q
        SET claims = q.claims + 1, rate_starts = CASE WHEN h.rate_limit IS NULL THEN '{}'
                                                      ELSE h.rate_window || array_fill(c.now, ARRAY[d.n]) END
        FROM (SELECT queue, count(*)::int AS n FROM due GROUP BY queue) d JOIN held h ON h.name = d.queue, clock c
        WHERE q.name = d.queue
    )
    UPDATE job_runs r
    SET status = 'running',
        attempts = r.attempts + 1,
        locked_by = _worker,
        -- A run's own lease (from its definition) can only lengthen the worker's: see Worker._start.
        locked_until = clock.now + make_interval(secs => greatest(r.lease_seconds, _lease)),
        started_at = clock.now,
        updated_at = now()
    FROM due, clock
    WHERE r.id = due.id
    RETURNING r.id, r.job_type, r.payload, r.attempts, r.max_attempts, r.definition_id,
              r.timeout_seconds, r.lease_seconds, r.backoff_base, r.backoff_cap;
END
$claim$;
"""

DOWNGRADE = """
DROP FUNCTION jobsweb_claim_runs(text, double precision, text[], integer, integer, text[]);
CREATE INDEX job_runs_running_lease ON job_runs (locked_until) WHERE status = 'running';
CREATE INDEX job_runs_running_queue ON job_runs (queue) WHERE status = 'running';
DROP INDEX job_runs_running;
"""


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    op.execute(DOWNGRADE)
