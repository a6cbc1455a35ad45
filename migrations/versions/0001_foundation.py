"""Foundation: job_definitions, job_runs, job_attempts, job_workers.

Revision ID: 0001_foundation
Revises:
Create Date: 2026-11-21
"""

from alembic import op

revision = "0001_foundation"
down_revision = None
branch_labels = None
depends_on = None

# Written as SQL: this schema is the contract that other programs enqueue against with plain
# INSERTs, so it should read exactly as the database holds it.
UPGRADE = """
CREATE TABLE job_definitions (
    id            bigserial PRIMARY KEY,
    name          text NOT NULL UNIQUE,
    job_type      text NOT NULL,
    payload       jsonb NOT NULL DEFAULT '{}'::jsonb,
    schedule      text,
    timezone      text NOT NULL DEFAULT 'UTC',
    max_attempts  integer NOT NULL DEFAULT 5 CHECK (max_attempts > 0),
    enabled       boolean NOT NULL DEFAULT true,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE job_runs (
    id               bigserial PRIMARY KEY,
    -- SET NULL: deleting a definition keeps its runs as history.
    definition_id    bigint REFERENCES job_definitions (id) ON DELETE SET NULL,
    job_type         text NOT NULL,
    payload          jsonb NOT NULL DEFAULT '{}'::jsonb,
    run_at           timestamptz NOT NULL DEFAULT now(),
    status           text NOT NULL DEFAULT 'queued'
                     CONSTRAINT job_runs_status_check
                     CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'dead', 'cancelled')),
    attempts         integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL DEFAULT 5 CHECK (max_attempts > 0),
    locked_by        text,
    locked_until     timestamptz,
    started_at       timestamptz,
    finished_at      timestamptz,
    last_error       text,
    error_type       text,
    last_stack       text,
    idempotency_key  text,
    result           jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

-- Serves CLAIM_RUNS in jobsweb/engine/statements.py: due runs in run_at order. Finished runs are not in
-- it, so the claim stays as fast with a million finished rows as with none.
CREATE INDEX job_runs_claimable ON job_runs (run_at, id) WHERE status IN ('queued', 'failed');

-- Serves EXPIRED_LEASES (engine/lease_recovery.py): running runs whose worker stopped heartbeating.
CREATE INDEX job_runs_running_lease ON job_runs (locked_until) WHERE status = 'running';

-- Serves ENQUEUE's ON CONFLICT: one run per idempotency key, decided by the database.
CREATE UNIQUE INDEX job_runs_idempotency_key ON job_runs (idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Serves a definition's run history, and ON DELETE SET NULL when a definition is deleted.
CREATE INDEX job_runs_definition ON job_runs (definition_id, id) WHERE definition_id IS NOT NULL;

CREATE TABLE job_attempts (
    id           bigserial PRIMARY KEY,
    run_id       bigint NOT NULL REFERENCES job_runs (id) ON DELETE CASCADE,
    attempt      integer NOT NULL,
    worker       text,
    started_at   timestamptz,
    finished_at  timestamptz NOT NULL DEFAULT now(),
    outcome      text NOT NULL CHECK (outcome IN ('succeeded', 'failed', 'interrupted')),
    error_type   text,
    error        text,
    stack        text,
    -- Serves a run's attempt timeline; unique because the guarded completion records each
    -- attempt once, and a second row would mean two workers finished the same attempt.
    CONSTRAINT job_attempts_run_attempt UNIQUE (run_id, attempt)
);

CREATE TABLE job_workers (
    id            text PRIMARY KEY,
    host          text NOT NULL,
    pid           integer NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    runs_done     bigint NOT NULL DEFAULT 0,
    stopped_at    timestamptz
);
"""

DOWNGRADE = """
DROP TABLE job_workers;
DROP TABLE job_attempts;
DROP TABLE job_runs;
DROP TABLE job_definitions;
"""


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    op.execute(DOWNGRADE)
