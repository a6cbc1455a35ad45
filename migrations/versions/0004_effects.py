"""Exactly-once effects: job_effects, the business keys of effects that already happened.

Revision ID: 0004_effects
Revises: 0003_admin
Create Date: 2026-11-21
"""

from alembic import op

revision = "0004_effects"
down_revision = "0003_admin"
branch_labels = None
depends_on = None

# No foreign key to job_runs: an effect outlives the run that caused it (retention may purge
# old runs, and the invoice must still not be charged twice).
UPGRADE = """
CREATE TABLE job_effects (
    -- The primary key is the guard: effects.once inserts the key in the same transaction as
    -- the effect's own writes, and a second attempt (or a concurrent zombie) conflicts on it.
    key          text PRIMARY KEY CHECK (key <> ''),
    run_id       bigint,
    attempt      integer,
    recorded_at  timestamptz NOT NULL DEFAULT now()
);
"""

DOWNGRADE = """
DROP TABLE job_effects;
"""


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    op.execute(DOWNGRADE)
