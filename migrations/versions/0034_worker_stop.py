"""A worker says its concurrency, and an operator can ask it to stop from the Workers page.

Revision ID: 0034_worker_stop
Revises: 0033_batch_label
Create Date: 2026-12-02

Issue 54, item 2 (Sidekiq's Busy page: each process's threads; its "Stop" beside "Quiet").
job_workers.concurrency is written once, as the worker registers (upkeep.REGISTER_WORKER), for
the Workers and Queues pages. job_workers.stop_requested_at and stop_requested_by are set by the
page's Stop (web/worker_stop.py, audited) and read by the worker's heartbeat (upkeep.WORKER_SEEN),
which then stops as on SIGTERM: it claims nothing more, finishes what it holds within its
shutdown timeout and exits (a supervisor that restarts it starts a new worker). Nullable columns
with no default: no rewrite of job_workers. A worker of the previous release during a rolling
deploy writes no concurrency (the pages say so) and never reads a stop request (the page offers
Stop only to workers that wrote a concurrency, i.e. that read it).
"""

from alembic import op

revision = "0034_worker_stop"
down_revision = "0033_batch_label"
branch_labels = None
depends_on = None


def upgrade():
    op.execute("ALTER TABLE job_workers ADD COLUMN concurrency integer, "
               "ADD COLUMN stop_requested_at timestamptz, ADD COLUMN stop_requested_by text")


def downgrade():
    op.execute("ALTER TABLE job_workers DROP COLUMN concurrency, DROP COLUMN stop_requested_at, "
               "DROP COLUMN stop_requested_by")
