"""A run claimed ahead of a free slot is marked not begun until its handler begins, so that lease recovery gives it back uncharged.

Revision ID: 0032_unbegun_claims
Revises: 0031_definition_slot_partial
Create Date: 2026-12-02

Issue 51, item 7. A worker killed outright (SIGKILL, OOM) left every run it held to lease
recovery, which failed the attempt the claim had counted, also for the runs claimed ahead that
waited in the worker and never ran (153 of 217 lease_expired attempts in the drill). Nothing in
a run's row said whether its handler had begun: started_at is the claim's time until its finish.

job_runs.unbegun_claims is that fact, and the one column it takes: the claims in a row that held
the run ahead of a free slot with no handler known to have begun it. The claim sets it (0 at a
free slot, where a run starts at once; one more ahead), the worker's next round trip sets 0 once
the handler begins (upkeep.RUNS_BEGAN), every finish but a release sets 0 (FINISH_RUNS). Lease
recovery gives a run whose count is 1 to engine/worker/lease_recovery.UNBEGUN_CLAIMS back as
released (no attempt row, the attempt not counted, run_at kept), and charges it as before past
that: a handler that kills its worker before the worker said it began would otherwise be run
again uncharged for ever. A count, not a flag, for that bound: each such release keeps it, so the
next claim ahead counts on from it. smallint NOT NULL DEFAULT 0: no rewrite of job_runs (a
default fills the column in the catalogue), and no index: only lease recovery reads it, in rows
EXPIRED_LEASES has found already.

The claim is jobsweb_claim_runs_in_order as 0025_claim_order wrote it, with the column set in its
UPDATE (the same row version: the mark costs the claim nothing more), and CREATE OR REPLACE: its
arguments and columns are unchanged, so jobsweb_claim_runs, the previous release's ten-column
call of it, stays as it is. Workers of the previous release during a rolling deploy claim through
it too and never say a run began: a run they held ahead, began and lost with a kill is given back
uncharged, at most UNBEGUN_CLAIMS times in a row.

The downgrade puts 0025's function back and drops the column.
"""

from alembic import context, op

revision = "0032_unbegun_claims"
down_revision = "0031_definition_slot_partial"
branch_labels = None
depends_on = None

ARGUMENTS = "(text, double precision, text[], integer, integer, text[])"

UPGRADE = """
ALTER TABLE job_runs ADD COLUMN unbegun_claims smallint NOT NULL DEFAULT 0;

CREATE OR REPLACE FUNCTION jobsweb_claim_runs_in_order(_worker text, _lease double precision, _job_types text[],
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
            -- The first _free runs start at once, as if begun at the claim: 0. A run claimed ahead
            -- waits in the worker, and counts one more claim in a row that held it without its
            -- handler known to have begun (the worker's next round trip sets 0 once it begins:
            -- upkeep.RUNS_BEGAN). _ids is in claim order; _ids[1:0] is empty.
            unbegun_claims = CASE WHEN r.id = ANY(_ids[1:_free]) THEN 0
                                  ELSE least(r.unbegun_claims + 1, 32767) END,
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
"""


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    # 0025's function, from 0025's own file (a migration is a frozen snapshot, read, not copied):
    # it creates the function without OR REPLACE, so this one goes first.
    op.execute(f"DROP FUNCTION jobsweb_claim_runs_in_order{ARGUMENTS}")
    op.execute(context.script.get_revision("0025_claim_order").module.UPGRADE)
    op.execute("ALTER TABLE job_runs DROP COLUMN unbegun_claims")
