"""A worker quieted from the admin screen: it finishes what it holds and claims nothing more.

Revision ID: 0029_worker_quiet
Revises: 0028_trace_context
Create Date: 2026-11-27

Issue 39, item 3 (Sidekiq's "quiet", Oban Web's pause on a node). Two nullable columns on
job_workers (no rewrite, no default): when and by whom it was quieted, NULL when it claims.
Written by the Workers page (web/worker_pages.py); read by the worker's own heartbeat
(engine/upkeep.py WORKER_SEEN's RETURNING), so a worker sees it within a third of its lease.
Workers of the previous release never read it: during a rolling deploy they ignore a quiet.
"""

from alembic import op

revision = "0029_worker_quiet"
down_revision = "0028_trace_context"
branch_labels = None
depends_on = None


def upgrade():
    op.execute("ALTER TABLE job_workers ADD COLUMN quiet_at timestamptz, ADD COLUMN quiet_by text")


def downgrade():
    op.execute("ALTER TABLE job_workers DROP COLUMN quiet_at, DROP COLUMN quiet_by")
