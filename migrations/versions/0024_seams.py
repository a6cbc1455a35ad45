"""Seams of workflows: a run deleted before it ended counts as cancelled, and a cancel reaching 100,000 waiting runs finishes in seconds.

Revision ID: 0024_seams
Revises: 0023_queue_throughput
Create Date: 2026-11-27

Delete. engine/run_actions.py's `delete` cancels the runs it deletes that have not ended
(CANCEL_BEFORE_DELETE, which marks them with the reason 'deleted') before DELETE_RUNS, in the
same transaction: this trigger then does what a cancel does (their waiting dependents cancelled,
their batches count them as ended, not succeeded), and writes "run 812 was deleted" on the
dependents instead of "run 812 ended cancelled".

The wide cancel. 0020's cascade was one recursive statement. Measured with auto_explain inside the
function (log_nested_statements), a cancel of a run that 5,000 waiting runs wait for took 4.6 s on
the embedded PostgreSQL 18, and 20,000 took 326 s, when job_runs had been analysed before the
waiting runs were enqueued (autovacuum does so while the table is small; 100,000 new rows in a
large table do not make it analyse again): the planner took 'waiting' for rare (1 row), drove
the recursive term from every waiting run (job_runs_status_id) and joined the work table in a
nested loop, 25,000,000 rows compared for 5,000 dependents: quadratic. With no statistics at
all 100,000 dependents took 4.0 s (3.7 s on PostgreSQL 15): sorts spilled to disk, and the trigger
fired again for each cancelled dependent (its WHEN took `waiting_for IS NOT NULL`), 0.35 s of
calls that did nothing.

Now the cascade goes level by level (jobsweb_cancel_below): each statement reads one table by
key (job_run_deps by after_id; job_runs by id, `= ANY` an array whose length the planner knows,
plan_cache_mode = force_custom_plan), so no estimate of 'waiting' can turn it into a nested loop
over an unindexed side; a level is one statement however wide. Runs the cascade cancels do not
fire the trigger again (its WHEN: a waiting run cancelled inside the trigger, not a batch's
callback, is one of the cascade's): the cascade counts their batches (jobsweb_batch_ended, one
update per batch) and their dependents with after_failure="run" (jobsweb_count_down) itself. The
WHEN also lets through only changes into or out of an end (succeeded, dead, cancelled): a batch
member's claim (queued -> running) no longer calls the function for nothing. The retry's revive
(0020's other recursive statement: retrying that run afterwards took over 120 s) goes level by
level the same way (jobsweb_revive_below): 4.6 s for 100,000 on a loaded machine.
"""

from alembic import op

revision = "0024_seams"
down_revision = "0023_queue_throughput"
branch_labels = None
depends_on = None

UPGRADE_BEFORE = """
-- Runs waiting for `_ended` runs count them as ended: each waiting_for drops by the number of
-- them it waits for, and at zero it is queued (due at its run_at or now). `_after_failure_only`:
-- only the runs enqueued with after_failure="run" (the `_ended` runs ended dead or cancelled).
-- Returns how many were queued. Rows are locked in id order, as every count-down locks them.
-- Called by jobsweb_workflow_step only, under its SET jit = off.
CREATE FUNCTION jobsweb_count_down(_ended bigint[], _after_failure_only boolean) RETURNS integer
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan  -- the arrays' lengths known to the planner
AS $count$
DECLARE
    _ids bigint[];
    _counts integer[];
    _locked bigint[];
    _released integer;
BEGIN
    -- Unordered (the lock below orders); both arrays from the same rows, in the same order.
    SELECT array_agg(c.id), array_agg(c.n) INTO _ids, _counts
    FROM (SELECT d.run_id AS id, count(*)::int AS n FROM job_run_deps d
          WHERE d.after_id = ANY(_ended) GROUP BY d.run_id) c;
    IF _ids IS NULL THEN
        RETURN 0;
    END IF;
    SELECT array_agg(l.id) INTO _locked
    FROM (SELECT id FROM job_runs
          WHERE id = ANY(_ids) AND status = 'waiting' AND (run_after_failure OR NOT _after_failure_only)
          ORDER BY id FOR NO KEY UPDATE) l;
    IF _locked IS NULL THEN
        RETURN 0;
    END IF;
    WITH counted AS (
        UPDATE job_runs w
        SET waiting_for = w.waiting_for - c.n,
            status = CASE WHEN w.waiting_for = c.n THEN 'queued' ELSE 'waiting' END,
            run_at = CASE WHEN w.waiting_for = c.n THEN greatest(w.run_at, now()) ELSE w.run_at END,
            updated_at = now()
        FROM unnest(_ids, _counts) AS c(id, n)
        WHERE w.id = c.id AND w.id = ANY(_locked)
        RETURNING w.status
    )
    SELECT count(*) FILTER (WHERE status = 'queued') INTO _released FROM counted;
    RETURN _released;
END
$count$;

-- `_ended` members of batch `_batch_id` ended, `_failed` of them dead or cancelled: its pending
-- count drops under its row's lock, and the transaction that takes it to zero releases the
-- callbacks (on_success cancelled if any member failed). Returns 1 if it finished, else 0.
CREATE FUNCTION jobsweb_batch_ended(_batch_id bigint, _ended integer, _failed integer) RETURNS integer
LANGUAGE plpgsql
AS $ended$
DECLARE
    _batch job_batches%ROWTYPE;
BEGIN
    UPDATE job_batches
    SET pending = pending - _ended, failures = failures + _failed,
        finished_at = CASE WHEN pending = _ended THEN now() END,
        finishes = finishes + (pending = _ended)::int
    WHERE id = _batch_id
    RETURNING * INTO _batch;
    IF _batch.pending <> 0 THEN
        RETURN 0;
    END IF;
    -- Statuses only: the trigger fired by this update (a callback is never one of the cascade's)
    -- cancels what waits for a cancelled on_success.
    UPDATE job_runs c
    SET status = CASE WHEN c.batch_callback = 'on_success' AND _batch.failures > 0
                      THEN 'cancelled' ELSE 'queued' END,
        finished_at = CASE WHEN c.batch_callback = 'on_success' AND _batch.failures > 0 THEN now() END,
        reason = 'batch ' || _batch.id || ' finished'
                 || CASE WHEN _batch.finishes > 1 THEN ' again (' || _batch.finishes || ' times)' ELSE '' END
                 || CASE WHEN _batch.failures > 0
                         THEN ' with ' || _batch.failures || CASE WHEN _batch.failures = 1 THEN ' member'
                              ELSE ' members' END || ' dead or cancelled' ELSE '' END,
        run_at = now(), updated_at = now()
    FROM (SELECT r.id FROM job_runs r WHERE r.batch_id = _batch.id AND r.status = 'waiting'
            AND r.batch_callback IS NOT NULL ORDER BY r.id FOR NO KEY UPDATE) l
    WHERE c.id = l.id;
    RETURN 1;
END
$ended$;

-- Run `_root` ended dead or cancelled (or is being deleted): cancel every run waiting below it,
-- a level of the graph per statement, each with its reason: "run <_root><_words>" for those
-- waiting for it, "run 813 ended cancelled" below them. Runs enqueued with after_failure="run"
-- are counted down instead (and what waits for them waits on). The runs cancelled here do not
-- fire the trigger (its WHEN): their batches and the count-downs are done here, in one
-- statement each. Returns how many runs or batches were released (to wake the workers).
CREATE FUNCTION jobsweb_cancel_below(_root bigint, _words text) RETURNS integer
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan  -- the arrays' lengths known to the planner
AS $cancel$
DECLARE
    _frontier bigint[] := ARRAY[_root];  -- the runs cancelled at the level above, that others wait for
    _ended bigint[] := ARRAY[_root];  -- every such run: runs with after_failure="run" count them down
    _batches bigint[] := '{}';  -- the batch of each member cancelled, once per member
    _ids bigint[];
    _causes bigint[];
    _locked bigint[];
    _members bigint[];
    _released integer;
    _batch record;
BEGIN
    LOOP
        -- Who waits for the level above, and for which of it first (the smallest id: the reason).
        -- The first level waits for _root alone: no cause to look for, no join (a tenth of the
        -- time of a wide fan-out, where the writing itself is most of it).
        IF _frontier = ARRAY[_root] THEN
            SELECT array_agg(d.run_id) INTO _ids FROM job_run_deps d WHERE d.after_id = _root;
        ELSE
            SELECT array_agg(n.id), array_agg(n.cause) INTO _ids, _causes
            FROM (SELECT d.run_id AS id, min(d.after_id) AS cause FROM job_run_deps d
                  WHERE d.after_id = ANY(_frontier) GROUP BY d.run_id) n;
        END IF;
        EXIT WHEN _ids IS NULL;
        SELECT array_agg(l.id) INTO _locked
        FROM (SELECT id FROM job_runs WHERE id = ANY(_ids) AND status = 'waiting' AND NOT run_after_failure
              ORDER BY id FOR NO KEY UPDATE) l;
        EXIT WHEN _locked IS NULL;
        IF _frontier = ARRAY[_root] THEN
            WITH cancelled AS (
                UPDATE job_runs w
                SET status = 'cancelled', finished_at = now(), updated_at = now(), reason = 'run ' || _root || _words
                WHERE w.id = ANY(_locked)
                RETURNING w.id, w.awaited, w.batch_id
            )
            SELECT array_agg(id) FILTER (WHERE awaited), coalesce(array_agg(batch_id) FILTER (WHERE batch_id IS NOT NULL), '{}')
            INTO _frontier, _members FROM cancelled;
        ELSE
            WITH cancelled AS (
                UPDATE job_runs w
                SET status = 'cancelled', finished_at = now(), updated_at = now(), reason = 'run ' || c.cause || ' ended cancelled'
                FROM unnest(_ids, _causes) AS c(id, cause)
                WHERE w.id = c.id AND w.id = ANY(_locked)
                RETURNING w.id, w.awaited, w.batch_id
            )
            SELECT array_agg(id) FILTER (WHERE awaited), coalesce(array_agg(batch_id) FILTER (WHERE batch_id IS NOT NULL), '{}')
            INTO _frontier, _members FROM cancelled;
        END IF;
        _batches := _batches || _members;
        EXIT WHEN _frontier IS NULL;
        _ended := _ended || _frontier;
    END LOOP;
    _released := jobsweb_count_down(_ended, true);
    -- Batches in id order, as every transaction that counts a batch down locks it.
    FOR _batch IN SELECT b.id, count(*)::int AS n FROM unnest(_batches) AS b(id) GROUP BY b.id ORDER BY b.id LOOP
        _released := _released + jobsweb_batch_ended(_batch.id, _batch.n, _batch.n);
    END LOOP;
    RETURN _released;
END
$cancel$;

"""

# Its own constants: 0026_retry_seams' downgrade puts these two back as they are here.
REVIVE_BELOW = """
-- Run `_root` was retried: the runs its end cancelled (reason `_root_reason`), and those
-- cancelled below them ("run 813 ended cancelled"), wait again, each for those of its runs not
-- succeeded; a level of the graph per statement, as jobsweb_cancel_below. A revived run that
-- others wait for, or a batch's member, fires the trigger (its after_failure="run" dependents
-- wait for it again; its batch reopens): only those.
CREATE OR REPLACE FUNCTION jobsweb_revive_below(_root bigint, _root_reason text) RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_custom_plan  -- the arrays' lengths known to the planner
AS $revive$
DECLARE
    _frontier bigint[] := ARRAY[_root];
    _reasons text[] := ARRAY[_root_reason];  -- what the level above's end wrote on what it cancelled
    _ids bigint[];
    _locked bigint[];
BEGIN
    LOOP
        SELECT array_agg(DISTINCT d.run_id) INTO _ids FROM job_run_deps d WHERE d.after_id = ANY(_frontier);
        EXIT WHEN _ids IS NULL;
        SELECT array_agg(l.id) INTO _locked
        FROM (SELECT id FROM job_runs WHERE id = ANY(_ids) AND status = 'cancelled' AND reason = ANY(_reasons)
              ORDER BY id FOR NO KEY UPDATE) l;
        EXIT WHEN _locked IS NULL;
        WITH revived AS (
            UPDATE job_runs w
            SET status = 'waiting', finished_at = NULL, reason = NULL, updated_at = now(),
                waiting_for = (SELECT count(*) FROM job_run_deps d JOIN job_runs a ON a.id = d.after_id
                               WHERE d.run_id = w.id AND a.status <> 'succeeded')
            WHERE w.id = ANY(_locked)
            RETURNING w.id, w.awaited
        )
        SELECT array_agg(id) FILTER (WHERE awaited) INTO _frontier FROM revived;
        EXIT WHEN _frontier IS NULL;
        SELECT array_agg('run ' || f.id || ' ended cancelled') INTO _reasons FROM unnest(_frontier) AS f(id);
    END LOOP;
END
$revive$;

"""

WORKFLOW_STEP = """
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
            UPDATE job_runs w SET waiting_for = w.waiting_for + 1, updated_at = now()
            FROM (SELECT r.id FROM job_run_deps d JOIN job_runs r ON r.id = d.run_id
                  WHERE d.after_id = NEW.id AND r.status = 'waiting' AND r.run_after_failure
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
$step$;"""

UPGRADE_AFTER = """

-- The WHEN reads only the changed row: a run outside any workflow pays nothing more, and
-- neither does a change that does not enter or leave an end (a member's claim). A waiting run
-- cancelled inside the trigger (pg_trigger_depth() > 0) that is not a batch's callback was
-- cancelled by jobsweb_cancel_below, which has done its part already: 100,000 of them are no
-- longer 100,000 calls.
DROP TRIGGER job_runs_workflow ON job_runs;
CREATE TRIGGER job_runs_workflow AFTER UPDATE OF status ON job_runs
FOR EACH ROW
WHEN ((OLD.status IN ('succeeded', 'dead', 'cancelled')) <> (NEW.status IN ('succeeded', 'dead', 'cancelled'))
      AND (NEW.awaited OR NEW.batch_id IS NOT NULL OR (NEW.waiting_for IS NOT NULL AND NEW.status = 'queued'))
      AND NOT (pg_trigger_depth() > 0 AND OLD.status = 'waiting' AND NEW.status = 'cancelled'
               AND NEW.batch_callback IS NULL))
EXECUTE FUNCTION jobsweb_workflow_step();
"""

UPGRADE = UPGRADE_BEFORE + REVIVE_BELOW + WORKFLOW_STEP + UPGRADE_AFTER

# 0020_workflows' function and trigger, as they were.
DOWNGRADE = """
DROP TRIGGER job_runs_workflow ON job_runs;
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
    -- them. Rows are locked in id order, so two transactions counting down the same runs queue
    -- behind each other instead of deadlocking.
    IF NEW.awaited AND _ended_now AND NOT _ended_before THEN
        IF NEW.status <> 'succeeded' THEN
            WITH RECURSIVE doomed(id, cause, cause_status) AS (
                SELECT w.id, NEW.id, NEW.status FROM job_run_deps d JOIN job_runs w ON w.id = d.run_id
                WHERE d.after_id = NEW.id AND w.status = 'waiting' AND NOT w.run_after_failure
                UNION
                SELECT w.id, x.id, 'cancelled' FROM doomed x
                JOIN job_run_deps d ON d.after_id = x.id JOIN job_runs w ON w.id = d.run_id
                WHERE w.status = 'waiting' AND NOT w.run_after_failure
            ),
            locked AS (
                SELECT r.id FROM job_runs r WHERE r.id IN (SELECT id FROM doomed) AND r.status = 'waiting'
                ORDER BY r.id FOR NO KEY UPDATE
            )
            UPDATE job_runs w
            SET status = 'cancelled', finished_at = now(), updated_at = now(),
                reason = 'run ' || c.cause || ' ended ' || c.cause_status
            FROM (SELECT DISTINCT ON (id) id, cause, cause_status FROM doomed ORDER BY id, cause) c
            JOIN locked l ON l.id = c.id
            WHERE w.id = c.id;
        END IF;
        WITH locked AS (
            SELECT r.id FROM job_run_deps d JOIN job_runs r ON r.id = d.run_id
            WHERE d.after_id = NEW.id AND r.status = 'waiting' AND (NEW.status = 'succeeded' OR r.run_after_failure)
            ORDER BY r.id FOR NO KEY UPDATE OF r
        ), counted AS (
            UPDATE job_runs w
            SET waiting_for = w.waiting_for - 1,
                status = CASE WHEN w.waiting_for = 1 THEN 'queued' ELSE 'waiting' END,
                run_at = CASE WHEN w.waiting_for = 1 THEN greatest(w.run_at, now()) ELSE w.run_at END,
                updated_at = now()
            FROM locked l
            WHERE w.id = l.id
            RETURNING w.status
        )
        SELECT count(*) FILTER (WHERE status = 'queued') INTO _released FROM counted;
    END IF;

    -- Retried (left dead or cancelled): its dependents that ran after failure wait for it again,
    -- and the runs its end cancelled, with everything cancelled below them, wait again: each for
    -- those of its runs not succeeded (this one included). Only the part that failed runs again.
    IF _ended_before AND NOT _ended_now THEN
        IF NEW.awaited AND OLD.status <> 'succeeded' THEN
            UPDATE job_runs w SET waiting_for = w.waiting_for + 1, updated_at = now()
            FROM (SELECT r.id FROM job_run_deps d JOIN job_runs r ON r.id = d.run_id
                  WHERE d.after_id = NEW.id AND r.status = 'waiting' AND r.run_after_failure
                  ORDER BY r.id FOR NO KEY UPDATE OF r) l
            WHERE w.id = l.id;
            WITH RECURSIVE revived(id) AS (
                SELECT w.id FROM job_run_deps d JOIN job_runs w ON w.id = d.run_id
                WHERE d.after_id = NEW.id AND w.status = 'cancelled'
                  AND w.reason = 'run ' || NEW.id || ' ended ' || OLD.status
                UNION
                SELECT w.id FROM revived x
                JOIN job_run_deps d ON d.after_id = x.id JOIN job_runs w ON w.id = d.run_id
                WHERE w.status = 'cancelled' AND w.reason = 'run ' || x.id || ' ended cancelled'
            )
            UPDATE job_runs w
            SET status = 'waiting', finished_at = NULL, reason = NULL, updated_at = now(),
                waiting_for = (SELECT count(*) FROM job_run_deps d JOIN job_runs a ON a.id = d.after_id
                               WHERE d.run_id = w.id AND a.status <> 'succeeded')
            FROM (SELECT r.id FROM job_runs r WHERE r.id IN (SELECT id FROM revived) AND r.status = 'cancelled'
                  ORDER BY r.id FOR NO KEY UPDATE) l
            WHERE w.id = l.id;
        END IF;
        -- ... and, if it waits for runs itself, it waits again for those not ended as it needs.
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
            UPDATE job_batches
            SET pending = pending - 1, failures = failures + (NEW.status <> 'succeeded')::int,
                finished_at = CASE WHEN pending = 1 THEN now() END,
                finishes = finishes + (pending = 1)::int
            WHERE id = NEW.batch_id
            RETURNING * INTO _batch;
            IF _batch.pending = 0 THEN
                -- Statuses only: the trigger fired by this update sets nothing more for them.
                UPDATE job_runs c
                SET status = CASE WHEN c.batch_callback = 'on_success' AND _batch.failures > 0
                                  THEN 'cancelled' ELSE 'queued' END,
                    finished_at = CASE WHEN c.batch_callback = 'on_success' AND _batch.failures > 0 THEN now() END,
                    reason = 'batch ' || _batch.id || ' finished'
                             || CASE WHEN _batch.finishes > 1 THEN ' again (' || _batch.finishes || ' times)' ELSE '' END
                             || CASE WHEN _batch.failures > 0
                                     THEN ' with ' || _batch.failures || CASE WHEN _batch.failures = 1 THEN ' member'
                                          ELSE ' members' END || ' dead or cancelled' ELSE '' END,
                    run_at = now(), updated_at = now()
                FROM (SELECT r.id FROM job_runs r WHERE r.batch_id = _batch.id AND r.status = 'waiting'
                        AND r.batch_callback IS NOT NULL ORDER BY r.id FOR NO KEY UPDATE) l
                WHERE c.id = l.id;
                _released := _released + 1;
            END IF;
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

-- The WHEN reads only the changed row: a run outside any workflow pays nothing more.
CREATE TRIGGER job_runs_workflow AFTER UPDATE OF status ON job_runs
FOR EACH ROW
WHEN (OLD.status IS DISTINCT FROM NEW.status
      AND (NEW.awaited OR NEW.batch_id IS NOT NULL OR NEW.waiting_for IS NOT NULL))
EXECUTE FUNCTION jobsweb_workflow_step();
DROP FUNCTION jobsweb_cancel_below(bigint, text);
DROP FUNCTION jobsweb_revive_below(bigint, text);
DROP FUNCTION jobsweb_batch_ended(bigint, integer, integer);
DROP FUNCTION jobsweb_count_down(bigint[], boolean);
"""


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    op.execute(DOWNGRADE)
