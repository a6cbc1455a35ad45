"""Admin screen: users, the audit log, cancellation requests, and the indexes its pages use.

Revision ID: 0003_admin
Revises: 0002_schedules
Create Date: 2026-11-21
"""

from alembic import op

revision = "0003_admin"
down_revision = "0002_schedules"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE jobsweb_users (
    id               bigserial PRIMARY KEY,
    email            text NOT NULL,
    password_hash    text NOT NULL,
    role             text NOT NULL DEFAULT 'viewer'
                     CONSTRAINT jobsweb_users_role_check CHECK (role IN ('viewer', 'operator', 'admin')),
    created_at       timestamptz NOT NULL DEFAULT now(),
    last_sign_in_at  timestamptz
);
-- Serves sign-in by email; lower() so that Ann@x.org and ann@x.org are one account.
CREATE UNIQUE INDEX jobsweb_users_email ON jobsweb_users (lower(email));

CREATE TABLE jobsweb_audit_log (
    id           bigserial PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT now(),
    -- SET NULL and a copy of the email: removing a user keeps what they did.
    user_id      bigint REFERENCES jobsweb_users (id) ON DELETE SET NULL,
    user_email   text NOT NULL,
    action       text NOT NULL,
    target_type  text NOT NULL,
    target_id    bigint,
    detail       jsonb NOT NULL DEFAULT '{}'::jsonb
);
-- Serves the audit section of a run's and a definition's page (newest first).
CREATE INDEX jobsweb_audit_log_target ON jobsweb_audit_log (target_type, target_id, id);

-- Set by "cancel" on a running run; the worker's heartbeat (EXTEND_LEASES) reads it and sets
-- the handler's cancellation flag. Cleared when the run is retried.
ALTER TABLE job_runs ADD COLUMN cancel_requested_at timestamptz;

ALTER TABLE job_attempts DROP CONSTRAINT job_attempts_outcome_check;
ALTER TABLE job_attempts ADD CONSTRAINT job_attempts_outcome_check
    CHECK (outcome IN ('succeeded', 'failed', 'interrupted', 'cancelled'));

-- Serves the runs list filtered by status (runlist.page), newest first with keyset pagination
-- (WHERE status IN (...) AND id < before ORDER BY id DESC LIMIT n), the dashboard's recent dead
-- runs and status counts of active runs, and the batches of bulk retry/cancel (runlist.
-- matching_ids_in_batches).
CREATE INDEX job_runs_status_id ON job_runs (status, id);

-- Serves the runs list filtered by job type, same keyset order.
CREATE INDEX job_runs_job_type_id ON job_runs (job_type, id);

-- Serves the runs list's time range filter (created_at from since until until).
CREATE INDEX job_runs_created_at ON job_runs (created_at);

-- Serves the dashboard chart: attempts finished per hour over the last 24 hours.
CREATE INDEX job_attempts_finished_at ON job_attempts (finished_at);
"""

DOWNGRADE = """
DROP INDEX job_attempts_finished_at;
DROP INDEX job_runs_created_at;
DROP INDEX job_runs_job_type_id;
DROP INDEX job_runs_status_id;
DELETE FROM job_attempts WHERE outcome = 'cancelled';
ALTER TABLE job_attempts DROP CONSTRAINT job_attempts_outcome_check;
ALTER TABLE job_attempts ADD CONSTRAINT job_attempts_outcome_check
    CHECK (outcome IN ('succeeded', 'failed', 'interrupted'));
ALTER TABLE job_runs DROP COLUMN cancel_requested_at;
DROP TABLE jobsweb_audit_log;
DROP TABLE jobsweb_users;
"""


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    op.execute(DOWNGRADE)
