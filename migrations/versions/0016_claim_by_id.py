"""The claim reads job_runs through its indexes only, whatever the statistics said when it was planned, and never claims a run on its last attempt ahead of a free slot.

Revision ID: 0016_claim_by_id
Revises: 0015_claim_path
Create Date: 2026-11-23

jobsweb_claim_runs (migration 0015) ended with `UPDATE job_runs ... FROM due WHERE r.id =
due.id`. The plan PL/pgSQL keeps for it cannot know how many runs `due` holds, and on a table
of a few ten thousand rows it chose a hash join over a sequential scan of job_runs: every
claim read the whole table (3 ms at 20,000 runs, a ~500-run claim). The runs are now found by
`id = ANY(...)` through job_runs_pkey, whatever the table's size, and come back sorted in the
claim's order (priority, run_at, id), the order the worker starts them in.

The plan is made at a connection's first claim and kept: a worker that started while job_runs
was empty (a new install, a drained queue, the benchmark's start) read the due runs with a
sequential scan and a sort for as long as it lived, once the table held 20,000 runs too (10 ms
a claim) until an ANALYZE replaced the plan. The function now runs with enable_seqscan off,
so its plans read job_runs through job_runs_claimable, job_runs_queue_claimable and the primary
key whatever the statistics said.

A run claimed ahead of the free slots (engine/claim_ahead.py) waits in the worker; if the worker
is killed, lease recovery fails the attempt the claim counted. On a run's last attempt that
ended it dead without its ever having run (max_attempts 1: every run). Such runs are now only
claimed for a free slot, where they start at once. The downgrade puts 0015's function back.
"""

from alembic import op

revision = "0016_claim_by_id"
down_revision = "0015_claim_path"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE OR REPLACE FUNCTION jobsweb_claim_runs(_worker text, _lease double precision, _job_types text[],
                                   _limit integer, _free integer, _queues text[])
RETURNS TABLE (id bigint, job_type text, payload jsonb, attempts integer, max_attempts integer,
               definition_id bigint, timeout_seconds double precision, lease_seconds double precision,
               backoff_base double precision, backoff_cap double precision)
-- Its plan is kept for the connection's life, made when job_runs may have been empty (a fresh
-- install, a drained queue): with no seq scan, job_runs is read through its indexes however many
-- runs it holds by then.
LANGUAGE plpgsql SET enable_seqscan = off AS $claim$
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
            SELECT r.id, r.queue, r.priority, r.run_at, r.attempts, r.max_attempts FROM job_runs r
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
            SELECT r.id, r.queue, r.priority, r.run_at, r.attempts, r.max_attempts FROM job_runs r
            WHERE r.queue = q.name AND r.status IN ('queued', 'failed') AND r.run_at <= now()
              AND r.job_type = ANY(_job_types) AND (e.no_type_excluded OR NOT r.job_type = ANY(e.job_types))
              AND (r.after_run_id IS NULL OR NOT EXISTS (SELECT 1 FROM job_runs p WHERE p.id = r.after_run_id
                                                         AND p.status IN ('queued', 'running', 'failed')))
            ORDER BY r.priority, r.run_at, r.id
            LIMIT greatest(q.n, 0)
            FOR UPDATE OF r SKIP LOCKED
        ) c
    ),
    -- The first _free runs fill the free slots; the others wait in the worker (claimed ahead). A run
    -- on its last attempt is never claimed ahead: a worker killed before it started would have
    -- spent that attempt, and lease recovery would end the run dead without its ever running.
    due AS MATERIALIZED (
        SELECT id, queue FROM (
            SELECT id, queue, priority, run_at, attempts, max_attempts,
                   row_number() OVER (ORDER BY priority, run_at, id) AS place
            FROM candidates
        ) ranked
        WHERE place <= _free OR attempts + 1 < max_attempts
        ORDER BY priority, run_at, id LIMIT _limit
    ),
    counted AS (
        UPDATE job_queues q
        SET claims = q.claims + 1, rate_starts = CASE WHEN h.rate_limit IS NULL THEN '{}'
                                                      ELSE h.rate_window || array_fill(c.now, ARRAY[d.n]) END
        FROM (SELECT queue, count(*)::int AS n FROM due GROUP BY queue) d JOIN held h ON h.name = d.queue, clock c
        WHERE q.name = d.queue
    ),
    claimed AS (
        UPDATE job_runs r
        SET status = 'running',
            attempts = r.attempts + 1,
            locked_by = _worker,
            -- A run's own lease (from its definition) can only lengthen the worker's: see Worker._start.
            locked_until = clock.now + make_interval(secs => greatest(r.lease_seconds, _lease)),
            started_at = clock.now,
            updated_at = now()
        FROM clock
        -- By id, through the primary key: as a join, the plan kept for the function (which cannot
        -- know how many runs `due` holds) read the whole of job_runs into a hash table instead,
        -- 3 ms a claim at 20,000 runs, growing with the table.
        WHERE r.id = ANY(ARRAY(SELECT id FROM due))
        RETURNING r.id, r.job_type, r.payload, r.attempts, r.max_attempts, r.definition_id,
                  r.timeout_seconds, r.lease_seconds, r.backoff_base, r.backoff_cap, r.priority, r.run_at
    )
    -- In the claim's order: the worker starts a claim's runs in the order they come back.
    SELECT id, job_type, payload, attempts, max_attempts, definition_id, timeout_seconds,
           lease_seconds, backoff_base, backoff_cap
    FROM claimed
    ORDER BY priority, run_at, id;
END
$claim$;
"""

DOWNGRADE = """
CREATE OR REPLACE FUNCTION jobsweb_claim_runs(_worker text, _lease double precision, _job_types text[],
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


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    op.execute(DOWNGRADE)
