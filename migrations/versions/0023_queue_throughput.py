"""The rollup of attempts (0019_job_metrics) by queue too, for the Queues page's last hour.

Revision ID: 0023_queue_throughput
Revises: 0022_error_search
Create Date: 2026-11-27

The Queues page shows each queue's attempts finished in the last hour. It joined every such
attempt to its run for the run's queue: 16,000 attempts an hour were 20 ms of the page on
PostgreSQL 15, and the cost grows with the rate. With the queue in the rollup's rows the page
sums an hour of minute rows, and joins only the attempts finished since the rollup was last
sealed (seconds of them when the page or the metrics page is viewed).

The rows so far have no queue: they are dropped, and the next view counts the last week again
from job_attempts (as after a first install, the metrics page says "Still counting" until then).
"""

from alembic import op

revision = "0023_queue_throughput"
down_revision = "0022_error_search"
branch_labels = None
depends_on = None

START_OVER = """
DELETE FROM job_type_metrics;
UPDATE job_type_metrics_state SET sealed_until = NULL;
"""


def upgrade():
    op.execute(START_OVER)
    op.execute("""
ALTER TABLE job_type_metrics ADD COLUMN queue text NOT NULL;
ALTER TABLE job_type_metrics DROP CONSTRAINT job_type_metrics_pkey;
ALTER TABLE job_type_metrics ADD PRIMARY KEY (span, bucket, job_type, queue);
""")


def downgrade():
    op.execute(START_OVER)
    op.execute("""
ALTER TABLE job_type_metrics DROP CONSTRAINT job_type_metrics_pkey;
ALTER TABLE job_type_metrics DROP COLUMN queue;
ALTER TABLE job_type_metrics ADD PRIMARY KEY (span, bucket, job_type);
""")
