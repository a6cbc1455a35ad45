"""Flow control: queues, priorities, unique keys; per-queue limits and pauses; paused job types.

Revision ID: 0010_flow_control
Revises: 0009_own_names
"""

from alembic import op

revision = "0010_flow_control"
down_revision = "0009_own_names"
branch_labels = None
depends_on = None

# Every new job_runs column has a default, so a plain-SQL INSERT written before 0010 still
# works and lands in queue 'default' at priority 0.
UPGRADE = """
ALTER TABLE job_runs
    ADD COLUMN queue       text NOT NULL DEFAULT 'default',
    -- Smaller runs first; the range keeps "urgent" readable and leaves room on both sides.
    ADD COLUMN priority    integer NOT NULL DEFAULT 0 CHECK (priority BETWEEN -1000 AND 1000),
    ADD COLUMN unique_key  text;

ALTER TABLE job_definitions
    ADD COLUMN queue     text NOT NULL DEFAULT 'default',
    ADD COLUMN priority  integer NOT NULL DEFAULT 0 CHECK (priority BETWEEN -1000 AND 1000);

-- A worker started with --queues records them; NULL means every queue.
ALTER TABLE job_workers ADD COLUMN queues text[];

-- One row per queue, created on first use (ENQUEUE, `flask jobs queue`). A queue without a
-- row behaves as an unlimited, unpaused one, so runs inserted by plain SQL are claimed too.
-- rate_starts: the start times inside the current window of the rate limit (a sliding
-- window, at most rate_limit entries). claims: bumped by every claim that takes runs of a
-- limited queue, so that a claimer whose snapshot is older than another's claim can tell
-- (see CLAIM_RUNS).
CREATE TABLE job_queues (
    name               text PRIMARY KEY,
    concurrency_limit  integer CHECK (concurrency_limit > 0),
    rate_limit         integer CHECK (rate_limit > 0),
    rate_seconds       integer CHECK (rate_seconds > 0),
    paused             boolean NOT NULL DEFAULT false,
    rate_starts        timestamptz[] NOT NULL DEFAULT '{}',
    claims             bigint NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_queues_rate_pair CHECK ((rate_limit IS NULL) = (rate_seconds IS NULL))
);

-- Job types an operator paused ("stop send_invoice now"): their runs stay queued.
CREATE TABLE job_paused_types (
    job_type   text PRIMARY KEY,
    paused_at  timestamptz NOT NULL DEFAULT now()
);

-- Serves CLAIM_RUNS' scan of the unlimited queues (engine/statements.py): due runs in claim
-- order (priority, run_at, id). Replaces 0001's (run_at, id); finished runs are still not in
-- it, so the claim stays as fast with a million finished rows as with none.
DROP INDEX job_runs_claimable;
CREATE INDEX job_runs_claimable ON job_runs (priority, run_at, id) WHERE status IN ('queued', 'failed');

-- Serves CLAIM_RUNS' per-queue scans: the limited queues it holds, and the queues of a worker
-- started with --queues; also the Queues page's queued counts and oldest wait.
CREATE INDEX job_runs_queue_claimable ON job_runs (queue, priority, run_at, id)
    WHERE status IN ('queued', 'failed');

-- Serves CLAIM_RUNS' count of a limited queue's running runs, and the Queues page's.
CREATE INDEX job_runs_running_queue ON job_runs (queue) WHERE status = 'running';

-- Serves ENQUEUE's ON CONFLICT on unique_key: at most one unfinished run per key, decided by
-- the database under concurrent enqueuers; a finished run frees its key.
CREATE UNIQUE INDEX job_runs_unique_key ON job_runs (unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('queued', 'running', 'failed');
"""

DOWNGRADE = """
DROP INDEX job_runs_unique_key;
DROP INDEX job_runs_running_queue;
DROP INDEX job_runs_queue_claimable;
DROP INDEX job_runs_claimable;
CREATE INDEX job_runs_claimable ON job_runs (run_at, id) WHERE status IN ('queued', 'failed');
DROP TABLE job_paused_types;
DROP TABLE job_queues;
ALTER TABLE job_workers DROP COLUMN queues;
ALTER TABLE job_definitions DROP COLUMN queue, DROP COLUMN priority;
ALTER TABLE job_runs DROP COLUMN queue, DROP COLUMN priority, DROP COLUMN unique_key;
"""


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    op.execute(DOWNGRADE)
