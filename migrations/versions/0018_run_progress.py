"""A run's progress, reported by its handler (ctx.progress): how far, what it is doing, when said.

Revision ID: 0018_run_progress
Revises: 0017_claim_fronts
Create Date: 2026-11-25

Columns on job_runs only, all nullable (no table rewrite): written by REPORT_PROGRESS
(engine/upkeep.py) at most every PROGRESS_INTERVAL seconds per run, read by the run page, the
runs list and jobsweb.get_run(). No index: they are read with the run they belong to.
"""

from alembic import op

revision = "0018_run_progress"
down_revision = "0017_claim_fronts"
branch_labels = None
depends_on = None


def upgrade():
    op.execute("""
        ALTER TABLE job_runs
            ADD COLUMN progress double precision CHECK (progress BETWEEN 0 AND 1),
            ADD COLUMN progress_note text,
            ADD COLUMN progress_at timestamptz
    """)


def downgrade():
    op.execute("ALTER TABLE job_runs DROP COLUMN progress, DROP COLUMN progress_note, DROP COLUMN progress_at")
