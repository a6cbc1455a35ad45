"""Schedules: definition settings and state, slots on runs, skipped and missed runs.

Revision ID: 0002_schedules
Revises: 0001_foundation
Create Date: 2026-11-21
"""

from alembic import op

revision = "0002_schedules"
down_revision = "0001_foundation"
branch_labels = None
depends_on = None

# Written as SQL like 0001: the schema is the contract other programs read and write.
UPGRADE = """
ALTER TABLE job_definitions
    -- Per-definition settings copied onto each run it creates; NULL means the job type's
    -- setting, then the JOBSWEB_* default. All in seconds. lease_seconds can lengthen the
    -- worker's lease but not shorten it (heartbeats follow the worker's own lease).
    ADD COLUMN backoff_base      double precision CHECK (backoff_base > 0),
    ADD COLUMN backoff_cap       double precision CHECK (backoff_cap > 0),
    ADD COLUMN timeout_seconds   double precision CHECK (timeout_seconds > 0),
    ADD COLUMN lease_seconds     double precision CHECK (lease_seconds > 0),
    ADD COLUMN misfire_policy    text NOT NULL DEFAULT 'latest'
                                 CHECK (misfire_policy IN ('latest', 'all', 'skip')),
    ADD COLUMN overlap_policy    text NOT NULL DEFAULT 'skip'
                                 CHECK (overlap_policy IN ('skip', 'queue', 'allow')),
    -- How late next_run_at may be before the definition counts as overdue, and how late a
    -- slot may start under misfire policy 'skip'.
    ADD COLUMN grace_seconds     integer NOT NULL DEFAULT 300 CHECK (grace_seconds >= 0),
    -- State, as the reliable-cron article keeps it: the next expected slot and how the last
    -- finished run went. failure_count counts consecutive dead runs; a success resets it.
    ADD COLUMN next_run_at       timestamptz,
    ADD COLUMN last_run_at       timestamptz,
    ADD COLUMN last_status       text,
    ADD COLUMN last_duration_ms  bigint,
    ADD COLUMN failure_count     integer NOT NULL DEFAULT 0,
    ADD COLUMN missed_count      bigint NOT NULL DEFAULT 0,
    ADD CONSTRAINT job_definitions_backoff_order CHECK (backoff_cap >= backoff_base);

ALTER TABLE job_runs
    -- The schedule slot this run is for; NULL for enqueued and run-now runs.
    ADD COLUMN scheduled_for     timestamptz,
    -- Why a slot became a 'skipped' or 'missed' run instead of a real one.
    ADD COLUMN reason            text,
    -- Overlap policy 'queue': this run is not claimed until that run has finished.
    ADD COLUMN after_run_id      bigint REFERENCES job_runs (id) ON DELETE SET NULL,
    ADD COLUMN timeout_seconds   double precision CHECK (timeout_seconds > 0),
    ADD COLUMN lease_seconds     double precision CHECK (lease_seconds > 0),
    ADD COLUMN backoff_base      double precision CHECK (backoff_base > 0),
    ADD COLUMN backoff_cap       double precision CHECK (backoff_cap > 0),
    -- The final guard of exactly-once materialisation: whatever the workers do, a slot of a
    -- definition can exist once. NULL slots (enqueued and run-now runs) never conflict.
    ADD CONSTRAINT job_runs_definition_slot UNIQUE (definition_id, scheduled_for),
    DROP CONSTRAINT job_runs_status_check,
    ADD CONSTRAINT job_runs_status_check CHECK (status IN (
        'queued', 'running', 'succeeded', 'failed', 'dead', 'cancelled', 'skipped', 'missed'));

-- Serves DUE_DEFINITIONS in jobsweb/scheduling/materialise.py (every tick) and definitions.overdue().
CREATE INDEX job_definitions_due ON job_definitions (next_run_at) WHERE enabled;

-- Serves "the newest run of this definition still queued or running": the overlap policy in
-- DUE_DEFINITIONS and the "nothing queued" test of definitions.overdue().
CREATE INDEX job_runs_definition_active ON job_runs (definition_id, id)
    WHERE status IN ('queued', 'running', 'failed') AND definition_id IS NOT NULL;
"""

DOWNGRADE = """
DROP INDEX job_runs_definition_active;
DROP INDEX job_definitions_due;
DELETE FROM job_runs WHERE status IN ('skipped', 'missed');
ALTER TABLE job_runs
    DROP CONSTRAINT job_runs_status_check,
    ADD CONSTRAINT job_runs_status_check
        CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'dead', 'cancelled')),
    DROP CONSTRAINT job_runs_definition_slot,
    DROP COLUMN backoff_cap,
    DROP COLUMN backoff_base,
    DROP COLUMN lease_seconds,
    DROP COLUMN timeout_seconds,
    DROP COLUMN after_run_id,
    DROP COLUMN reason,
    DROP COLUMN scheduled_for;
ALTER TABLE job_definitions
    DROP CONSTRAINT job_definitions_backoff_order,
    DROP COLUMN missed_count,
    DROP COLUMN failure_count,
    DROP COLUMN last_duration_ms,
    DROP COLUMN last_status,
    DROP COLUMN last_run_at,
    DROP COLUMN next_run_at,
    DROP COLUMN grace_seconds,
    DROP COLUMN overlap_policy,
    DROP COLUMN misfire_policy,
    DROP COLUMN lease_seconds,
    DROP COLUMN timeout_seconds,
    DROP COLUMN backoff_cap,
    DROP COLUMN backoff_base;
"""


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    op.execute(DOWNGRADE)
