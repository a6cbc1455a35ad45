"""A run's progress data: the small JSON object its handler said last with ctx.progress(data=...).

Revision ID: 0027_progress_data
Revises: 0026_retry_seams
Create Date: 2026-11-27

Issue 40, item 3 (Celery's update_state(meta={...})). One nullable column on job_runs (no table
rewrite, no default): written by REPORT_PROGRESS (engine/upkeep.py) with the fraction and the note,
at most every PROGRESS_INTERVAL seconds per run and at most PROGRESS_DATA_MAX_BYTES as JSON
(engine/registry.py refuses more), read with the run by its page and jobsweb.get_run(). No index:
it is read with the run it belongs to. Workers of the previous release never name it: a rolling
deploy leaves it NULL on the runs they report.
"""

from alembic import op

revision = "0027_progress_data"
down_revision = "0026_retry_seams"
branch_labels = None
depends_on = None


def upgrade():
    op.execute("ALTER TABLE job_runs ADD COLUMN progress_data jsonb")


def downgrade():
    op.execute("ALTER TABLE job_runs DROP COLUMN progress_data")
