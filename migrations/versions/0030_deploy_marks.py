"""Deploy marks: a release's label and time, drawn on the dashboard's and the metrics page's charts.

Revision ID: 0030_deploy_marks
Revises: 0029_worker_quiet
Create Date: 2026-11-27

Issue 39, item 3 (Sidekiq's deploy markers). Written by `flask jobs mark-deploy LABEL` (a
release phase's line, DEPLOY.md); read by the charts for their window (ops/deploy_marks.py).
A few rows a day at most: kept, as the audit log is.
"""

from alembic import op

revision = "0030_deploy_marks"
down_revision = "0029_worker_quiet"
branch_labels = None
depends_on = None


def upgrade():
    op.execute("""
    CREATE TABLE jobsweb_deploy_marks (
        id bigserial PRIMARY KEY,
        label text NOT NULL,
        marked_at timestamptz NOT NULL DEFAULT now(),
        marked_by text NOT NULL
    );
    -- Serves ops/deploy_marks.within: the marks in a chart's window.
    CREATE INDEX jobsweb_deploy_marks_at ON jobsweb_deploy_marks (marked_at);
    """)


def downgrade():
    op.execute("DROP TABLE jobsweb_deploy_marks")
