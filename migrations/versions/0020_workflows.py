"""Workflows: runs that wait for other runs (after=), batches with callbacks, chains.

Revision ID: 0020_workflows
Revises: 0019_job_metrics
Create Date: 2026-11-25

A run enqueued with after= is 'waiting': a status of its own, outside the partial indexes the
claim reads (job_runs_queue_claimable, job_runs_claimable: status IN ('queued', 'failed')), so a
million waiting runs cost a claim nothing. Its `waiting_for` counts the runs it still waits for.

What moves runs in and out of 'waiting', and a batch from open to finished, is the trigger
job_runs_workflow: it fires in the transaction of every status change of a run in a workflow
(its WHEN reads only the changed row: `awaited`, `waiting_for`, `batch_id`), whoever makes
it: a worker's FINISH_RUNS, lease recovery, an operator's retry or cancel, `flask jobs exec`.
So a waiting run becomes queued in the transaction that records its last dependency's
success, and a batch's callbacks are released in the transaction that ends its last member:
no polling loop, and a worker killed before its commit changed nothing. Exactly once because
every count is decremented under the row's lock (job_batches.pending, job_runs.waiting_for):
of two transactions ending a batch's last two members, the second waits for the first's commit
and then reads its count (READ COMMITTED re-reads a row it waited for); only one sees zero.

- A run ending succeeded takes one off each waiting dependent's waiting_for; at zero it is
  queued (due at its run_at or now), and listening workers are woken.
- A run ending dead or cancelled cancels its waiting dependents and everything waiting below
  them in one statement (a recursive query, not one trigger level per step: a 1,000-step chain
  would overflow the stack), each with its reason ("run 812 ended dead"); a dependent enqueued
  with after_failure="run" (run_after_failure) is counted down instead, as for a success.
- A run leaving dead or cancelled (an operator's retry) that itself waits for runs waits again
  for those not succeeded; its dependents that run after failure wait for it again, and the
  runs its end cancelled (and those cancelled below them) wait again, in one recursive statement.
- A batch member ending takes one off job_batches.pending (and counts a dead or cancelled one in
  `failures`); at zero the batch finishes: its waiting on_finish callback run is queued, its
  on_success callback queued if no member failed, else cancelled with the reason (and runs
  waiting for it with it). A member retried after the batch finished reopens it: pending counts
  it again and new callback runs, copies of the last ones, wait for the next finish.
"""

from alembic import op

revision = "0020_workflows"
down_revision = "0019_job_metrics"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE job_runs
    DROP CONSTRAINT job_runs_status_check,
    ADD CONSTRAINT job_runs_status_check CHECK (status IN (
        'queued', 'running', 'succeeded', 'failed', 'dead', 'cancelled', 'skipped', 'missed', 'waiting'));

CREATE TABLE job_batches (
    id           bigserial PRIMARY KEY,
    payload      jsonb NOT NULL DEFAULT '{}',
    on_finish    text,
    on_success   text,
    members      integer NOT NULL DEFAULT 0,
    -- Members not yet ended (succeeded, dead or cancelled); the trigger that takes it to zero
    -- releases the callbacks.
    pending      integer NOT NULL DEFAULT 0 CHECK (pending >= 0),
    failures     integer NOT NULL DEFAULT 0 CHECK (failures >= 0),  -- members ended dead or cancelled
    finishes     integer NOT NULL DEFAULT 0,  -- times it finished: a retried member reopens it
    created_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz
);

-- Serves the Metrics page's and /metrics' count of open batches.
CREATE INDEX job_batches_open ON job_batches (id) WHERE finished_at IS NULL;

ALTER TABLE job_runs
    -- A member of this batch, or (batch_callback set) one of its callback runs.
    ADD COLUMN batch_id bigint REFERENCES job_batches (id),
    ADD COLUMN batch_callback text CHECK (batch_callback IN ('on_finish', 'on_success')),
    -- Runs of after= not yet ended; NULL for a run enqueued without after=.
    ADD COLUMN waiting_for integer CHECK (waiting_for >= 0),
    -- after_failure="run": a dependency ending dead or cancelled counts as ended, not as a cancel.
    ADD COLUMN run_after_failure boolean NOT NULL DEFAULT false,
    -- Some run waits for this one: its status changes go through the workflow trigger.
    ADD COLUMN awaited boolean NOT NULL DEFAULT false;

-- Serves a batch's counts by status (get_batch, the batch page, ctx.batch), its members list
-- and the ?batch= filter of the runs list, and the trigger's look-up of its callback runs.
CREATE INDEX job_runs_batch ON job_runs (batch_id, status, id) WHERE batch_id IS NOT NULL;
-- Serves the trigger's copy of a reopened batch's callbacks, and the batch page's callbacks.
CREATE INDEX job_runs_batch_callbacks ON job_runs (batch_id, id) WHERE batch_callback IS NOT NULL;

CREATE TABLE job_run_deps (
    run_id    bigint NOT NULL REFERENCES job_runs (id) ON DELETE CASCADE,  -- waits for
    after_id  bigint NOT NULL REFERENCES job_runs (id) ON DELETE CASCADE,  -- this run
    PRIMARY KEY (run_id, after_id)
);
-- Serves the trigger's "who waits for this run" and the run page's; the primary key serves
-- "what does this run wait for".
CREATE INDEX job_run_deps_after ON job_run_deps (after_id, run_id);

CREATE FUNCTION jobsweb_workflow_step() RETURNS trigger
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
"""

DOWNGRADE = """
DROP TRIGGER job_runs_workflow ON job_runs;
DROP FUNCTION jobsweb_workflow_step();
DROP TABLE job_run_deps;
DELETE FROM job_runs WHERE status = 'waiting';
ALTER TABLE job_runs
    DROP COLUMN awaited,
    DROP COLUMN run_after_failure,
    DROP COLUMN waiting_for,
    DROP COLUMN batch_callback,
    DROP COLUMN batch_id,
    DROP CONSTRAINT job_runs_status_check,
    ADD CONSTRAINT job_runs_status_check CHECK (status IN (
        'queued', 'running', 'succeeded', 'failed', 'dead', 'cancelled', 'skipped', 'missed'));
DROP TABLE job_batches;
"""


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    op.execute(DOWNGRADE)
