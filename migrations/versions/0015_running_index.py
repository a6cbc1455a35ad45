"""One index on running runs instead of two: a claim adds one index entry fewer per run.

Revision ID: 0015_running_index
Revises: 0014_payload_search
Create Date: 2026-11-23

Every claim is a non-HOT update of job_runs (status is indexed), so the new row version gets an
entry in every index whose predicate it meets; a running run met two partial indexes,
job_runs_running_lease (locked_until) and job_runs_running_queue (queue). Both served small
scans of the runs running now, which one index on (queue, locked_until) serves as well.
Index changes only: processes of the previous release keep working against this schema.
"""

from alembic import op

revision = "0015_running_index"
down_revision = "0014_payload_search"
branch_labels = None
depends_on = None

UPGRADE = """
-- Serves CLAIM_RUNS' count of a limited queue's running runs and the Queues page's (queue
-- first: an index-only count per queue); EXPIRED_LEASES (engine/upkeep.py) and the health
-- page's stalled runs (locked_until < now(): the few runs running now, read whole and sorted);
-- LOST_CLAIMS and the runs each worker holds (status = 'running' AND locked_by = ...).
CREATE INDEX job_runs_running ON job_runs (queue, locked_until) WHERE status = 'running';
DROP INDEX job_runs_running_lease;
DROP INDEX job_runs_running_queue;
"""

DOWNGRADE = """
CREATE INDEX job_runs_running_lease ON job_runs (locked_until) WHERE status = 'running';
CREATE INDEX job_runs_running_queue ON job_runs (queue) WHERE status = 'running';
DROP INDEX job_runs_running;
"""


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    op.execute(DOWNGRADE)
