"""A dead-runs incident's runs, found by incident.

Revision ID: 0021_admin_round_three
Revises: 0020_workflows
Create Date: 2026-11-25

A dead incident now clears only when none of the runs it counted is dead any more
(ops/alerts.py, RESOLVE_DEAD_INCIDENTS), rather than on any later success of its job type.
Each evaluation looks up the runs of every open dead incident: the index below serves that
look-up (and the ON DELETE CASCADE of an incident), where the primary key (run_id, attempt)
could not.
"""

from alembic import op

revision = "0021_admin_round_three"
down_revision = "0020_workflows"
branch_labels = None
depends_on = None


def upgrade():
    # Serves alerts.RESOLVE_DEAD_INCIDENTS: the runs an open dead incident counted.
    op.execute("CREATE INDEX jobsweb_alert_incident_runs_incident ON jobsweb_alert_incident_runs (incident_id)")


def downgrade():
    op.execute("DROP INDEX jobsweb_alert_incident_runs_incident")
