"""Definitions declared in code (`@job(..., schedule=...)` and `flask jobs sync`) are told apart from those made in the admin screen or with `flask jobs define`.

Revision ID: 0011_code_definitions
Revises: 0010_flow_control
"""

from alembic import op

revision = "0011_code_definitions"
down_revision = "0010_flow_control"
branch_labels = None
depends_on = None

# source says who owns a definition:
# - 'admin': made in the admin screen or the CLI (every definition from before 0011); sync never
#   touches it;
# - 'code': created by `flask jobs sync` from a declaration in code; the next sync overwrites
#   edits made elsewhere, but never its enabled flag (an operator's pause stays);
# - 'code-removed': its declaration disappeared from the code; sync disabled it (enabled =
#   false) and keeps it, with its runs and history, instead of deleting it. If the declaration
#   comes back, sync sets 'code' again but leaves it disabled: it cannot tell its own disabling
#   from an operator's pause since, so resuming is a person's decision.
# One column rather than a flag plus a timestamp: the three states are exclusive, and the
# definition's updated_at already says when sync disabled it. No index: sync reads every
# definition anyway (a few hundred rows), and the pages filter by name and enabled.
UPGRADE = """
ALTER TABLE job_definitions ADD COLUMN source text NOT NULL DEFAULT 'admin'
    CONSTRAINT job_definitions_source CHECK (source IN ('admin', 'code', 'code-removed'));
"""

DOWNGRADE = """
ALTER TABLE job_definitions DROP COLUMN source;
"""


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    op.execute(DOWNGRADE)
