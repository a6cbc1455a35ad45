"""Workers record the job types they handle, so due runs that no worker will claim are named.

Revision ID: 0008_worker_job_types
Revises: 0007_retention
"""

from alembic import op

revision = "0008_worker_job_types"
down_revision = "0007_retention"
branch_labels = None
depends_on = None

# A worker claims only the job types it knows (a rolling deploy's old workers leave new types
# alone), so a run of a type no worker handles waits in the queue. The dashboard and /metrics
# name such runs from what the workers themselves registered (stats.UNHANDLED_DUE), not from
# the web process's own handler list, which may differ. NULL: a worker from before 0008.
UPGRADE = """
ALTER TABLE job_workers ADD COLUMN job_types text[];
"""

DOWNGRADE = """
ALTER TABLE job_workers DROP COLUMN job_types;
"""


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    op.execute(DOWNGRADE)
