"""The claim keeps priority order exact when it claims ahead, and returns each run's priority and run_at, so that the worker starts the runs it holds in that order.

Revision ID: 0025_claim_order
Revises: 0024_seams
Create Date: 2026-11-27

Issue 35. 0017's jobsweb_claim_runs took a run on its last attempt only into a free slot (a run
claimed ahead and lost with its worker, SIGKILL, has spent the attempt the claim counted, and lease
recovery would end it dead without its having run), and went on filling the runs it claimed ahead
from the candidates after it, at that priority and the next ones. At --concurrency 1 a slot is free
only when the worker holds nothing: 40 runs of priority 0 on their last attempt and 40 of priority 5
due together, and the priority-5 runs filled the buffer and started before all but the first.

What changed, and nothing else (fronts, queue limits and rates, pauses, SKIP LOCKED,
plan_cache_mode = force_custom_plan and jit = off are 0017's, copied as they were):

- Claiming ahead stops at the first candidate left behind for being on its last attempt: the
  candidates after it, at that level and every later one, are taken only into free slots, which
  come first, so none is; the loop ends there. The order of the runs a worker starts stays
  priority, run_at, id. The cost: fewer runs ahead when runs on their last attempt are at the
  front (none beyond the free slots: the worker claims again as slots free, a round trip a slot).
- The claim returns priority and run_at after its ten columns: the worker keeps the runs it
  holds in that order (engine/execution.py's Pool), across claims too, where it kept them in the
  order the claims came back. A new return type is a new function, jobsweb_claim_runs_in_order,
  which CLAIM_RUNS calls. jobsweb_claim_runs stays, with its ten columns, as a plain SQL call of
  the new one: workers of the previous release go on claiming (with the new rule) during a
  rolling deploy, as DEPLOY.md promises of every migration; a later release may drop it.

The downgrade drops both and puts 0017's function back.
"""

from alembic import context, op

revision = "0025_claim_order"
down_revision = "0024_seams"
branch_labels = None
depends_on = None

ARGUMENTS = "(text, double precision, text[], integer, integer, text[])"

UPGRADE = """
CREATE FUNCTION jobsweb_claim_runs_in_order(_worker text, _lease double precision, _job_types text[],
                                            _limit integer, _free integer, _queues text[])
RETURNS TABLE (id bigint, job_type text, payload jsonb, attempts integer, max_attempts integer,
               definition_id bigint, timeout_seconds double precision, lease_seconds double precision,
               backoff_base double precision, backoff_cap double precision, priority integer,
               run_at timestamptz)
LANGUAGE plpgsql
-- Planned at every call (see 0017_claim_fronts' docstring); never JIT-compiled: each of these
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
        -- The first one left behind ends what is claimed ahead, at this level and every later one:
        -- a run after it taken now would start before it (the worker starts runs in claim order).
        -- Both windows are in (run_at, id) order, the places' own: one sort.
        taken AS (
            SELECT id, queue, place FROM (
                SELECT id, queue, run_at, place,
                       bool_or(place > _free AND attempts + 1 >= max_attempts) OVER (ORDER BY run_at, id) AS behind
                FROM (SELECT id, queue, run_at, attempts, max_attempts,
                             _seen + row_number() OVER (ORDER BY run_at, id) AS place
                      FROM candidates) numbered
            ) ranked
            WHERE NOT behind
            ORDER BY run_at, id LIMIT _limit - cardinality(_ids)
        )
        SELECT (SELECT count(*) FROM candidates), ARRAY(SELECT id FROM taken ORDER BY place),
               ARRAY(SELECT queue FROM taken ORDER BY place)
        INTO _level_seen, _level_ids, _level_queues;
        _ids := _ids || _level_ids;
        _queues_taken := _queues_taken || _level_queues;
        _seen := _seen + _level_seen;
        -- A candidate not taken below the limit was left behind: nothing more is claimed ahead.
        EXIT WHEN cardinality(_ids) >= _limit OR cardinality(_level_ids) < _level_seen;
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
    -- In the claim's order, with the priority and run_at the worker orders the runs it holds by.
    SELECT id, job_type, payload, attempts, max_attempts, definition_id, timeout_seconds,
           lease_seconds, backoff_base, backoff_cap, priority, run_at
    FROM claimed
    ORDER BY priority, run_at, id;
END
$claim$;

-- The previous release's claim, for its workers still running during a rolling deploy: the same
-- claim, its ten columns, in the same order.
CREATE OR REPLACE FUNCTION jobsweb_claim_runs(_worker text, _lease double precision, _job_types text[],
                                              _limit integer, _free integer, _queues text[])
RETURNS TABLE (id bigint, job_type text, payload jsonb, attempts integer, max_attempts integer,
               definition_id bigint, timeout_seconds double precision, lease_seconds double precision,
               backoff_base double precision, backoff_cap double precision)
LANGUAGE sql
AS $claim$
    SELECT id, job_type, payload, attempts, max_attempts, definition_id, timeout_seconds, lease_seconds,
           backoff_base, backoff_cap
    FROM jobsweb_claim_runs_in_order(_worker, _lease, _job_types, _limit, _free, _queues)
$claim$;
"""

def upgrade():
    op.execute(UPGRADE)


def downgrade():
    # 0017's function, from 0017's own file: a migration is a frozen snapshot, read, not copied.
    op.execute(f"DROP FUNCTION jobsweb_claim_runs{ARGUMENTS}; DROP FUNCTION jobsweb_claim_runs_in_order{ARGUMENTS};")
    op.execute(context.script.get_revision("0017_claim_fronts").module.UPGRADE)
