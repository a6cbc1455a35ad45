"""Retry and the runs that wait: nothing waits for a run that ended dead or cancelled, and a run released by a failure that is retried waits for its new attempt.

Revision ID: 0026_retry_seams
Revises: 0025_claim_order
Create Date: 2026-11-27

Issue 35, two bugs the model test of the run lifecycle found (tests/test_lifecycle_model.py).

A revive that made a run wait for a dead one. W waits for A and B (after_failure="cancel"); A dies
and cancels W ("run A ended dead"); B dies too. Retrying A revived W to wait for A and B, and
nobody would end B: W waited for ever. Now jobsweb_revive_below leaves such a run cancelled and
writes the run it still waits for into its reason ("run B ended dead", the smallest id of them),
so that B's retry revives it; nothing below it is revived. Its check reads the revived runs'
dependencies by key in the statement that revives them: a level is still one statement.
(RETRY_RUNS, engine/action_statements.py, likewise leaves alone a run retried directly while a run
it waits for is dead or cancelled and not retried with it.)

A run released by a failure stayed released. R waits for A with after_failure="run"; A dies and
R is queued; A retried left R queued, to be claimed before A's new attempt ended. Now the retry's
trigger puts such a run back to waiting (waiting_for + 1) when it has not started (queued, no
attempt, re-checked under its row lock); one that started is left as it is.

Only jobsweb_revive_below and jobsweb_workflow_step change: the rest is 0024_seams'. The downgrade
puts 0024's two back.
"""

from alembic import context, op

revision = "0026_retry_seams"
down_revision = "0025_claim_order"
branch_labels = None
depends_on = None

UPGRADE = """
-- Run `_root` was retried: the runs its end cancelled (reason `_root_reason`), and those
-- cancelled below them ("run 813 ended cancelled"), wait again, each for those of its runs not
-- succeeded; a level of the graph per statement, as jobsweb_cancel_below. A run that also waits
-- for another run ended dead or cancelled (or a skipped or missed slot) would wait for it for
-- ever: it stays cancelled, its reason now naming that run (the smallest id), whose retry
-- revives it, and nothing below it is revived. A revived run that others wait for, or a batch's
-- member, fires the trigger (its after_failure="run" dependents wait for it again; its batch
-- reopens): only those.
CREATE OR REPLACE FUNCTION jobsweb_revive_below(_root bigint, _root_reason text) RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan  -- the arrays' lengths known to the planner
AS $revive$
DECLARE
    _frontier bigint[] := ARRAY[_root];
    _reasons text[] := ARRAY[_root_reason];  -- what the level above's end wrote on what it cancelled
    _ids bigint[];
    _locked bigint[];
    _failed bigint[];  -- what the level's runs also wait for that ended without succeeding
BEGIN
    LOOP
        SELECT array_agg(DISTINCT d.run_id) INTO _ids FROM job_run_deps d WHERE d.after_id = ANY(_frontier);
        EXIT WHEN _ids IS NULL;
        SELECT array_agg(l.id) INTO _locked
        FROM (SELECT id FROM job_runs WHERE id = ANY(_ids) AND status = 'cancelled' AND reason = ANY(_reasons)
              ORDER BY id FOR NO KEY UPDATE) l;
        EXIT WHEN _locked IS NULL;
        -- Their dependencies that ended without succeeding, read by key with arrays (job_run_deps'
        -- primary key, then job_runs'): a join would let an estimate of 'cancelled' (few, when
        -- job_runs was analysed before the cascade) drive it from job_runs' status, one probe with
        -- the whole array per cancelled run. Usually none: then the level is revived as in 0024.
        SELECT array_agg(a.id) INTO _failed FROM job_runs a
        WHERE a.id = ANY(ARRAY(SELECT DISTINCT d.after_id FROM job_run_deps d WHERE d.run_id = ANY(_locked)))
          AND a.status IN ('dead', 'cancelled', 'skipped', 'missed');
        WITH blocked AS MATERIALIZED (
            SELECT DISTINCT ON (d.run_id) d.run_id AS id, 'run ' || a.id || ' ended ' || a.status AS reason
            FROM job_runs a JOIN job_run_deps d ON d.after_id = a.id
            WHERE _failed IS NOT NULL AND a.id = ANY(_failed) AND d.run_id = ANY(_locked)
            ORDER BY d.run_id, a.id
        ), renamed AS (
            UPDATE job_runs w SET reason = b.reason, updated_at = now()
            FROM blocked b
            WHERE w.id = b.id
        ), revived AS (
            UPDATE job_runs w
            SET status = 'waiting', finished_at = NULL, reason = NULL, updated_at = now(),
                waiting_for = (SELECT count(*) FROM job_run_deps d JOIN job_runs a ON a.id = d.after_id
                               WHERE d.run_id = w.id AND a.status <> 'succeeded')
            WHERE w.id = ANY(_locked) AND NOT EXISTS (SELECT 1 FROM blocked b WHERE b.id = w.id)
            RETURNING w.id, w.awaited
        )
        SELECT array_agg(id) FILTER (WHERE awaited) INTO _frontier FROM revived;
        EXIT WHEN _frontier IS NULL;
        SELECT array_agg('run ' || f.id || ' ended cancelled') INTO _reasons FROM unnest(_frontier) AS f(id);
    END LOOP;
END
$revive$;

CREATE OR REPLACE FUNCTION jobsweb_workflow_step() RETURNS trigger
LANGUAGE plpgsql
SET jit = off
AS $step$
DECLARE
    _ended_before boolean := OLD.status IN ('succeeded', 'dead', 'cancelled');
    _ended_now boolean := NEW.status IN ('succeeded', 'dead', 'cancelled');
    _batch job_batches%ROWTYPE;
    _released integer := 0;
BEGIN
    -- Its dependents: on a success counted down, on a failure cancelled with everything below
    -- them. A run cancelled on its way to deletion (CANCEL_BEFORE_DELETE's reason 'deleted') is
    -- named so: its dependents cannot be revived by retrying it, but each can be retried.
    IF NEW.awaited AND _ended_now AND NOT _ended_before THEN
        IF NEW.status = 'succeeded' THEN
            _released := jobsweb_count_down(ARRAY[NEW.id], false);
        ELSE
            _released := jobsweb_cancel_below(NEW.id, CASE WHEN NEW.reason = 'deleted' THEN ' was deleted'
                                                           ELSE ' ended ' || NEW.status END);
        END IF;
    END IF;

    -- Retried (left dead or cancelled): its dependents that ran after failure wait for it again,
    -- and the runs its end cancelled, with everything cancelled below them, wait again: each for
    -- those of its runs not succeeded (this one included). Only the part that failed runs again.
    IF _ended_before AND NOT _ended_now THEN
        IF NEW.awaited AND OLD.status <> 'succeeded' THEN
            -- Those its end released wait again too if they have not started (queued, no attempt);
            -- the lock re-checks that on the newest row, so one a worker claimed meanwhile is left
            -- as it is: a run that started is not undone.
            UPDATE job_runs w SET waiting_for = w.waiting_for + 1, status = 'waiting', updated_at = now()
            FROM (SELECT r.id FROM job_run_deps d JOIN job_runs r ON r.id = d.run_id
                  WHERE d.after_id = NEW.id AND r.run_after_failure
                    AND (r.status = 'waiting' OR (r.status = 'queued' AND r.attempts = 0))
                  ORDER BY r.id FOR NO KEY UPDATE OF r) l
            WHERE w.id = l.id;
            PERFORM jobsweb_revive_below(NEW.id, 'run ' || NEW.id || ' ended ' || OLD.status);
        END IF;
        -- ... and, if it waits for runs itself, it waits again for those not ended as it needs
        -- (recounted from the runs it still has: one deleted meanwhile is no longer waited for).
        -- Their rows are locked (FOR SHARE) so that one ending meanwhile is read as it ends.
        IF NEW.waiting_for IS NOT NULL AND NEW.status = 'queued' THEN
            UPDATE job_runs w
            SET waiting_for = n.pending,
                status = CASE WHEN n.pending > 0 THEN 'waiting' ELSE w.status END
            FROM (SELECT count(*) FILTER (WHERE NOT (a.status = 'succeeded' OR (NEW.run_after_failure
                                                    AND a.status IN ('dead', 'cancelled', 'skipped', 'missed'))))
                         AS pending
                  FROM (SELECT r.status FROM job_run_deps d JOIN job_runs r ON r.id = d.after_id
                        WHERE d.run_id = NEW.id ORDER BY r.id FOR SHARE OF r) a) n
            WHERE w.id = NEW.id;
        END IF;
    END IF;

    IF NEW.batch_id IS NOT NULL AND NEW.batch_callback IS NULL AND _ended_now <> _ended_before THEN
        IF _ended_now THEN
            _released := _released + jobsweb_batch_ended(NEW.batch_id, 1, (NEW.status <> 'succeeded')::int);
        ELSE
            UPDATE job_batches
            SET pending = pending + 1, failures = failures - (OLD.status <> 'succeeded')::int, finished_at = NULL
            WHERE id = NEW.batch_id
            RETURNING * INTO _batch;
            IF _batch.pending = 1 AND _batch.finishes > 0 THEN
                -- Reopened: its callbacks run again at the next finish, as new runs.
                INSERT INTO job_runs (job_type, payload, run_at, status, max_attempts, timeout_seconds, lease_seconds,
                                      backoff_base, backoff_cap, queue, priority, batch_id, batch_callback, reason)
                SELECT DISTINCT ON (c.batch_callback) c.job_type, c.payload, now(), 'waiting', c.max_attempts,
                       c.timeout_seconds, c.lease_seconds, c.backoff_base, c.backoff_cap, c.queue, c.priority,
                       c.batch_id, c.batch_callback, 'batch ' || _batch.id || ' reopened by the retry of run ' || NEW.id
                FROM job_runs c
                WHERE c.batch_id = _batch.id AND c.batch_callback IS NOT NULL
                ORDER BY c.batch_callback, c.id DESC;
            END IF;
        END IF;
    END IF;

    IF _released > 0 THEN
        PERFORM pg_notify('jobsweb_runs', '');
    END IF;
    RETURN NULL;
END
$step$;
"""

def upgrade():
    op.execute(UPGRADE)


def downgrade():
    # 0024_seams' two functions, from 0024's own file: a migration is a frozen snapshot, read, not copied.
    seams = context.script.get_revision("0024_seams").module
    op.execute(seams.REVIVE_BELOW + seams.WORKFLOW_STEP)
