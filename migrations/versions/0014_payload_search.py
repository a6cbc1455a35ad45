"""Payload search, the audit page's filters, and the name of a deleted definition on its runs.

Revision ID: 0014_payload_search
Revises: 0013_monitoring
Create Date: 2026-11-23

job_runs.deleted_definition: the name of the definition that made the run, written when that
definition is deleted (definition_id is set NULL then, and its runs would read as ad hoc).
"""

from alembic import op

revision = "0014_payload_search"
down_revision = "0013_monitoring"
branch_labels = None
depends_on = None

UPGRADE = """
-- Serves the runs list's payload filter (payload @> '{"invoice_id": 812}', web/runlist.py).
-- jsonb_path_ops: containment is the only operator the filter uses, and its index is smaller
-- and faster than the default opclass. Partial: runs without a payload (the many no-argument
-- jobs) cost no GIN entry on enqueue; the filter adds the same payload <> '{}' condition.
CREATE INDEX job_runs_payload ON job_runs USING gin (payload jsonb_path_ops) WHERE payload <> '{}'::jsonb;

-- NULL unless the run's definition was deleted; no default, so adding it rewrites nothing.
ALTER TABLE job_runs ADD COLUMN deleted_definition text;

-- Serve the /audit page's filters by user and by action, newest first (web/audit_pages.py);
-- the filter by object uses jobsweb_audit_log_target (0003).
CREATE INDEX jobsweb_audit_log_user ON jobsweb_audit_log (user_email, id);
CREATE INDEX jobsweb_audit_log_action ON jobsweb_audit_log (action, id);
"""

DOWNGRADE = """
DROP INDEX jobsweb_audit_log_action;
DROP INDEX jobsweb_audit_log_user;
ALTER TABLE job_runs DROP COLUMN deleted_definition;
DROP INDEX job_runs_payload;
"""


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    op.execute(DOWNGRADE)
