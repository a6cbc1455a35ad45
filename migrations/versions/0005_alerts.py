"""Alerts: incidents (overdue, failing, dead), their notification outbox, per-definition routing.

Revision ID: 0005_alerts
Revises: 0004_effects
Create Date: 2026-11-21
"""

from alembic import op

revision = "0005_alerts"
down_revision = "0004_effects"
branch_labels = None
depends_on = None

UPGRADE = """
-- Per definition: how many dead runs in a row open a 'failing' incident, and where its alerts
-- go (NULL: the JOBSWEB_ALERT_WEBHOOK_URL / JOBSWEB_ALERT_EMAIL_TO defaults).
ALTER TABLE job_definitions
    ADD COLUMN alert_after_failures integer NOT NULL DEFAULT 2 CHECK (alert_after_failures > 0),
    ADD COLUMN alert_webhook_url text,
    ADD COLUMN alert_email_to text;

CREATE TABLE jobsweb_alert_incidents (
    id               bigserial PRIMARY KEY,
    kind             text NOT NULL CHECK (kind IN ('overdue', 'failing', 'dead')),
    -- overdue and failing incidents are about a definition; dead ones about a job type (runs
    -- enqueued outside any definition). SET NULL keeps the history of a deleted definition.
    definition_id    bigint REFERENCES job_definitions (id) ON DELETE SET NULL,
    job_type         text,
    subject          text NOT NULL,  -- the definition's name or the job type, as it was
    summary          text NOT NULL,
    since            timestamptz NOT NULL,  -- when the condition began (slot time, death)
    last_failure_at  timestamptz,  -- dead: the newest death counted in this incident
    run_id           bigint,  -- dead: the first run that died (no FK: retention may prune it)
    run_count        integer NOT NULL DEFAULT 0,  -- dead: runs counted while it was open
    checked_at       timestamptz,  -- dead: when a pass last looked for a success
    opened_at        timestamptz NOT NULL DEFAULT now(),
    resolved_at      timestamptz,
    resolution       text
);
-- The exactly-once guard for opening: at most one open incident per definition and kind, and
-- per job type for dead runs. Concurrent workers INSERT ... ON CONFLICT DO NOTHING against
-- these, and only the one whose insert returned a row queues notifications.
CREATE UNIQUE INDEX jobsweb_alert_incidents_open_definition ON jobsweb_alert_incidents (definition_id, kind)
    WHERE resolved_at IS NULL AND definition_id IS NOT NULL;
CREATE UNIQUE INDEX jobsweb_alert_incidents_open_job_type ON jobsweb_alert_incidents (job_type)
    WHERE resolved_at IS NULL AND kind = 'dead';
-- Serves alerts.open_incidents() (incidents page, dashboard) and the RESOLVE_* passes.
CREATE INDEX jobsweb_alert_incidents_opened ON jobsweb_alert_incidents (id) WHERE resolved_at IS NULL;
-- Serves a definition's open incidents on its page, and ON DELETE SET NULL.
CREATE INDEX jobsweb_alert_incidents_definition ON jobsweb_alert_incidents (definition_id, id);

-- Which incident counted each death: a run is alerted about once per death, whichever worker
-- looks. A dead run that an operator retries and that dies again dies at a higher attempt.
CREATE TABLE jobsweb_alert_incident_runs (
    run_id       bigint NOT NULL,
    attempt      integer NOT NULL,
    incident_id  bigint NOT NULL REFERENCES jobsweb_alert_incidents (id) ON DELETE CASCADE,
    PRIMARY KEY (run_id, attempt)
);

-- Serves alerts.NEW_DEAD_RUNS: runs that died in the last hour.
CREATE INDEX job_runs_dead_finished ON job_runs (finished_at) WHERE status = 'dead';

-- The outbox: one row per notification and channel, written in the transaction that opened
-- or resolved the incident, sent later by a worker outside any transaction.
CREATE TABLE jobsweb_alert_deliveries (
    id               bigserial PRIMARY KEY,
    incident_id      bigint REFERENCES jobsweb_alert_incidents (id) ON DELETE CASCADE,  -- NULL: a test alert
    event            text NOT NULL CHECK (event IN ('opened', 'resolved', 'test')),
    channel          text NOT NULL CHECK (channel IN ('webhook', 'email')),
    target           text NOT NULL,  -- the URL, or comma-separated recipients
    subject          text NOT NULL,
    body             text NOT NULL,
    data             jsonb NOT NULL DEFAULT '{}'::jsonb,
    status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
    attempts         integer NOT NULL DEFAULT 0,
    -- pending: when it may be (re)tried. A claim pushes it out by the send lease, so a worker
    -- that dies mid-send leaves the row to be claimed again once the lease has passed.
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    sent_at          timestamptz
);
-- Serves notify.CLAIM_DELIVERIES and notify.ANY_DUE: pending deliveries by due time.
CREATE INDEX jobsweb_alert_deliveries_due ON jobsweb_alert_deliveries (next_attempt_at) WHERE status = 'pending';
-- Serves an incident's deliveries on the incidents page.
CREATE INDEX jobsweb_alert_deliveries_incident ON jobsweb_alert_deliveries (incident_id);
"""

DOWNGRADE = """
DROP TABLE jobsweb_alert_deliveries;
DROP INDEX job_runs_dead_finished;
DROP TABLE jobsweb_alert_incident_runs;
DROP TABLE jobsweb_alert_incidents;
ALTER TABLE job_definitions
    DROP COLUMN alert_email_to,
    DROP COLUMN alert_webhook_url,
    DROP COLUMN alert_after_failures;
"""


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    op.execute(DOWNGRADE)
