"""Monitoring: external definitions, ping tokens, captured output, duration alerts, and the incident kinds that need no worker to be running.

Revision ID: 0013_monitoring
Revises: 0012_security
Create Date: 2026-11-23

job_definitions.external: a definition jobsweb watches but never runs; its slots are reported
by `flask jobs exec` or a ping URL. job_definitions.ping_token: the secret part of its ping
URL. job_definitions.max_duration_seconds: a run still running past it opens a 'slow'
incident (NULL: 3x the p95 of its recent successful runs). job_attempts.output: the tail of
what the attempt printed or logged.
"""

from alembic import op

revision = "0013_monitoring"
down_revision = "0012_security"
branch_labels = None
depends_on = None

UPGRADE = """
ALTER TABLE job_definitions
    ADD COLUMN external boolean NOT NULL DEFAULT false,
    ADD COLUMN ping_token text,
    ADD COLUMN max_duration_seconds integer CHECK (max_duration_seconds > 0);
-- Serves GET|POST /ping/<token>: one definition per token.
CREATE UNIQUE INDEX job_definitions_ping_token ON job_definitions (ping_token) WHERE ping_token IS NOT NULL;

ALTER TABLE job_attempts ADD COLUMN output text;

-- 'slow': a run of a definition running past its expected duration (one open per definition,
-- by jobsweb_alert_incidents_open_definition). 'no_worker': runs are due and no worker has
-- been seen for a while (one open at a time, by the index below).
ALTER TABLE jobsweb_alert_incidents DROP CONSTRAINT jobsweb_alert_incidents_kind_check;
ALTER TABLE jobsweb_alert_incidents ADD CONSTRAINT jobsweb_alert_incidents_kind_check
    CHECK (kind IN ('overdue', 'failing', 'dead', 'slow', 'no_worker'));
-- The exactly-once guard for the 'no_worker' incident, evaluated by workers and web processes.
CREATE UNIQUE INDEX jobsweb_alert_incidents_open_no_worker ON jobsweb_alert_incidents (kind)
    WHERE resolved_at IS NULL AND kind = 'no_worker';
"""

DOWNGRADE = """
DROP INDEX jobsweb_alert_incidents_open_no_worker;
DELETE FROM jobsweb_alert_incidents WHERE kind IN ('slow', 'no_worker');
ALTER TABLE jobsweb_alert_incidents DROP CONSTRAINT jobsweb_alert_incidents_kind_check;
ALTER TABLE jobsweb_alert_incidents ADD CONSTRAINT jobsweb_alert_incidents_kind_check
    CHECK (kind IN ('overdue', 'failing', 'dead'));
ALTER TABLE job_attempts DROP COLUMN output;
DROP INDEX job_definitions_ping_token;
ALTER TABLE job_definitions DROP COLUMN max_duration_seconds, DROP COLUMN ping_token, DROP COLUMN external;
"""


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    op.execute(DOWNGRADE)
