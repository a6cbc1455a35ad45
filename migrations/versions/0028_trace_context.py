"""The trace a run was enqueued in: a W3C traceparent, so that its attempts' spans continue it.

Revision ID: 0028_trace_context
Revises: 0027_progress_data
Create Date: 2026-11-27

Issue 40, item 5 (OpenTelemetry, jobsweb/integrations/otel.py). One nullable text column on
job_runs (no table rewrite, no default), written by ENQUEUE, ENQUEUE_MANY and CLOSE_BATCH (a
batch's callbacks: the trace the batch was made in) when an integration gives enqueue() a trace
context, NULL otherwise; read once per attempt by that integration only. The payload stays the
caller's. No index: it is read with the run it belongs to. Workers and enqueuers of the previous
release never name it: a rolling deploy leaves it NULL on the runs they make.
"""

from alembic import op

revision = "0028_trace_context"
down_revision = "0027_progress_data"
branch_labels = None
depends_on = None


def upgrade():
    op.execute("ALTER TABLE job_runs ADD COLUMN trace_context text")


def downgrade():
    op.execute("ALTER TABLE job_runs DROP COLUMN trace_context")
