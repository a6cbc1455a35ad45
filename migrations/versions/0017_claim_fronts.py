"""The claim reads only the fronts of the queues it may take from, and runs alike on every server.

Revision ID: 0017_claim_fronts
Revises: 0016_claim_by_id
Create Date: 2026-11-25

Two faults of 0016's jobsweb_claim_runs, both found on the PostgreSQL teams run (Debian's 15,
JIT on, its shipped settings) and not on the embedded 18 the suite used:

- It ran with `enable_seqscan = off`. Before PostgreSQL 18 a disabled plan node costs 1e10, so
  every plan's estimate passed jit_above_cost and the JIT thresholds: each call compiled ~130
  functions, 962 ms for a 16-run claim (2.4 ms with JIT off). The function now sets no planner
  cost: plan_cache_mode = force_custom_plan instead plans each statement at each call with the
  table's size and the arguments as they are then (a plan kept from when job_runs was empty read
  it whole once it held 20,000 runs: the reason 0016 turned sequential scans off), and jit = off,
  because compiling costs milliseconds and no statement here runs that long.
- It read the due runs of every queue in one ordered scan of job_runs_claimable and filtered out
  the ones it could not take, so backlog it would never claim slowed every claim: runs scheduled
  in the future at a smaller priority number (the index's order) were read and skipped, and so
  were the due runs of a paused or limited queue (100,000 in a paused queue: 16 ms a claim
  instead of 1.7).

The claim now works from fronts: each (queue, priority) that has claimable runs, found by a
loose scan of job_runs_queue_claimable (one index descent each), drops the queues it may not
take from (paused, not among the worker's --queues, limited and full), and takes the due runs of
each remaining front through the same index, `queue = q AND priority = p AND run_at <= now()`
in (run_at, id) order: the scan stops at the first run not yet due and never sees another queue.
Priorities are taken smallest first, a level at a time, until the claim has its runs, so the
order stays exact: priority, then run_at, then id, across queues. What a claim locks beyond what
it takes is at most the other queues' runs at its last priority level, released at its commit.

Everything else the claim guarantees is as in 0016 (engine/statements.py, CLAIM_RUNS). The
downgrade puts 0016's function back.
"""

from alembic import context, op

revision = "0017_claim_fronts"
down_revision = "0016_claim_by_id"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE OR REPLACE FUNCTION jobsweb_claim_runs(_worker text, _lease double precision, _job_types text[],
                                   _limit integer, _free integer, _queues text[])
RETURNS TABLE (id bigint, job_type text, payload jsonb, attempts integer, max_attempts integer,
               definition_id bigint, timeout_seconds double precision, lease_seconds double precision,
               backoff_base double precision, backoff_cap double precision)
LANGUAGE plpgsql
-- Planned at every call (see the migration's docstring); never JIT-compiled: each of these
-- statements reads a few index pages, and compiling one costs more than it ever runs.
SET plan_cache_mode = force_custom_plan
SET jit = off
AS $claim$
#variable_conflict use_column
DECLARE
    _now timestamptz := clock_timestamp();  -- starts and leases count from here
    _paused_types text[] := ARRAY(SELECT job_type FROM job_paused_types);
    _paused_queues text[];
    _limited_queues text[];  -- not paused, with a concurrency limit or a rate
    _front_queues text[];  -- the fronts this claim may take from: queue, priority, runs it may give
    _front_priorities integer[];
    _front_allowances integer[];
    _level integer;
    _ids bigint[] := '{}';  -- the runs taken, in claim order
    _queues_taken text[] := '{}';  -- the queue of each
    _seen bigint := 0;  -- candidates at the levels before this one, taken or not
    _level_seen bigint;
    _level_ids bigint[];
    _level_queues text[];
BEGIN
    SELECT coalesce(array_agg(name) FILTER (WHERE paused), '{}'),
           coalesce(array_agg(name) FILTER (WHERE NOT paused AND coalesce(concurrency_limit, rate_limit) IS NOT NULL), '{}')
    INTO _paused_queues, _limited_queues
    FROM job_queues;

    -- Each statement here is planned at every call: the common case (no limited queue among the
    -- fronts) plans only small ones.
    WITH RECURSIVE fronts(queue, priority) AS (
        (SELECT r.queue, r.priority FROM job_runs r WHERE r.status IN ('queued', 'failed')
         ORDER BY r.queue, r.priority LIMIT 1)
        UNION ALL
        SELECT n.queue, n.priority FROM fronts f CROSS JOIN LATERAL (
            SELECT r.queue, r.priority FROM job_runs r
            WHERE r.status IN ('queued', 'failed') AND (r.queue, r.priority) > (f.queue, f.priority)
            ORDER BY r.queue, r.priority LIMIT 1) n
    )
    SELECT coalesce(array_agg(f.queue ORDER BY f.priority, f.queue), '{}'),
           coalesce(array_agg(f.priority ORDER BY f.priority, f.queue), '{}')
    INTO _front_queues, _front_priorities
    FROM fronts f
    WHERE (_queues IS NULL OR f.queue = ANY(_queues)) AND NOT f.queue = ANY(_paused_queues);
    _front_allowances := array_fill(_limit, ARRAY[cardinality(_front_queues)]);

    IF _front_queues && _limited_queues THEN
        WITH snapshot AS MATERIALIZED (SELECT name, paused, claims FROM job_queues WHERE name = ANY(_limited_queues)),
        -- A limited queue gives runs to one claim at a time: the others skip it (SKIP LOCKED). Its
        -- count of running runs is only right if no claim took from it since this statement's
        -- snapshot: a row whose claims moved on meanwhile gives nothing now.
        held AS MATERIALIZED (
            SELECT name, claims, concurrency_limit, rate_limit, rate_seconds, rate_starts FROM job_queues
            WHERE name = ANY(_limited_queues) AND name = ANY(_front_queues)
            ORDER BY name
            FOR UPDATE SKIP LOCKED
        ),
        allowance AS (  -- slots free now, none ahead: no run waits holding a limited queue's slot
            SELECT h.name, CASE WHEN h.claims <> s.claims OR s.paused THEN 0 ELSE least(_free,
                       h.concurrency_limit - (SELECT count(*) FROM job_runs r
                                              WHERE r.status = 'running' AND r.queue = h.name),
                       h.rate_limit - (SELECT count(*) FROM unnest(h.rate_starts) t
                                       WHERE t > _now - make_interval(secs => h.rate_seconds))) END AS n
            FROM held h JOIN snapshot s ON s.name = h.name
        )
        -- A limited queue this claim does not hold gives nothing.
        SELECT ARRAY(SELECT CASE WHEN NOT f.queue = ANY(_limited_queues) THEN _limit
                                 ELSE coalesce((SELECT a.n FROM allowance a WHERE a.name = f.queue), 0) END
                     FROM unnest(_front_queues) WITH ORDINALITY f(queue, place) ORDER BY f.place)
        INTO _front_allowances;
    END IF;

    FOR _level IN SELECT DISTINCT p FROM unnest(_front_priorities) p ORDER BY p LOOP
        WITH candidates AS MATERIALIZED (
            SELECT c.* FROM unnest(_front_queues, _front_priorities, _front_allowances) f(queue, priority, n)
            CROSS JOIN LATERAL (
                SELECT r.id, r.queue, r.run_at, r.attempts, r.max_attempts FROM job_runs r
                WHERE r.queue = f.queue AND r.priority = _level
                  AND r.status IN ('queued', 'failed') AND r.run_at <= now()
                  AND r.job_type = ANY(_job_types) AND NOT r.job_type = ANY(_paused_types)
                  -- Overlap policy 'queue': not before the run it waits for has finished. A run whose
                  -- predecessor is being claimed in this same instant still sees it queued, so the
                  -- two are never claimed together.
                  AND (r.after_run_id IS NULL OR NOT EXISTS (SELECT 1 FROM job_runs p WHERE p.id = r.after_run_id
                                                             AND p.status IN ('queued', 'running', 'failed')))
                ORDER BY r.run_at, r.id
                LIMIT greatest(least(f.n - (SELECT count(*) FROM unnest(_queues_taken) t WHERE t = f.queue),
                                     _limit - cardinality(_ids)), 0)
                FOR UPDATE OF r SKIP LOCKED
            ) c
            WHERE f.priority = _level
        ),
        -- The first _free runs fill the free slots; the others wait in the worker (claimed ahead). A
        -- run on its last attempt is never claimed ahead: a worker killed before it started would
        -- have spent that attempt, and lease recovery would end the run dead without its ever running.
        taken AS (
            SELECT id, queue, place FROM (
                SELECT id, queue, attempts, max_attempts, _seen + row_number() OVER (ORDER BY run_at, id) AS place
                FROM candidates
            ) ranked
            WHERE place <= _free OR attempts + 1 < max_attempts
            ORDER BY place LIMIT _limit - cardinality(_ids)
        )
        SELECT (SELECT count(*) FROM candidates), ARRAY(SELECT id FROM taken ORDER BY place),
               ARRAY(SELECT queue FROM taken ORDER BY place)
        INTO _level_seen, _level_ids, _level_queues;
        _ids := _ids || _level_ids;
        _queues_taken := _queues_taken || _level_queues;
        _seen := _seen + _level_seen;
        EXIT WHEN cardinality(_ids) >= _limit;
    END LOOP;

    IF cardinality(_ids) = 0 THEN
        RETURN;
    END IF;

    IF _queues_taken && _limited_queues THEN
        UPDATE job_queues q
        SET claims = q.claims + 1,
            rate_starts = CASE WHEN q.rate_limit IS NULL THEN '{}'
                               ELSE ARRAY(SELECT t FROM unnest(q.rate_starts) t
                                          WHERE t > _now - make_interval(secs => q.rate_seconds))
                                    || array_fill(_now, ARRAY[d.n]) END
        FROM (SELECT t AS queue, count(*)::int AS n FROM unnest(_queues_taken) t GROUP BY t) d
        WHERE q.name = d.queue AND coalesce(q.concurrency_limit, q.rate_limit) IS NOT NULL;
    END IF;

    RETURN QUERY
    WITH claimed AS (
        UPDATE job_runs r
        SET status = 'running',
            attempts = r.attempts + 1,
            locked_by = _worker,
            -- A run's own lease (from its definition) can only lengthen the worker's: see Worker._start.
            locked_until = _now + make_interval(secs => greatest(r.lease_seconds, _lease)),
            started_at = _now,
            updated_at = now()
        -- By id, through the primary key.
        WHERE r.id = ANY(_ids)
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


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    # 0016's function, from 0016's own file: a migration is a frozen snapshot, read, not copied.
    op.execute(context.script.get_revision(down_revision).module.UPGRADE)
