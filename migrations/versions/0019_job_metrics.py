"""Per job type metrics: attempts rolled up by minute and by hour, for the metrics page.

Revision ID: 0019_job_metrics
Revises: 0018_run_progress
Create Date: 2026-11-25

The metrics page (web/metrics_pages.py) shows, for each job type over the last hour, day or
week, how many attempts ran, how many failed, their p50/p95 duration and the p95 wait from due
to start. Read from job_attempts at each view, a week is most of a million-run table (a second
or more); read from these rows, it is a few hundred rows whatever the history. The rows are
written by ops/job_type_metrics.py, which adds the attempts finished since `sealed_until` at
each view: one range scan of job_attempts_finished_outcome (0006) and the runs' primary key.
"""

from alembic import op

revision = "0019_job_metrics"
down_revision = "0018_run_progress"
branch_labels = None
depends_on = None

UPGRADE = """
-- One row per job type and minute (kept two hours, for the last hour's page) or hour (kept
-- eight days, for the day's and the week's). The histograms are cumulative counts under the
-- bounds of ops/job_type_metrics.BOUNDS, so rows add up element by element.
CREATE TABLE job_type_metrics (
    span       text NOT NULL CHECK (span IN ('minute', 'hour')),
    bucket     timestamptz NOT NULL,  -- the minute's or hour's start
    job_type   text NOT NULL,
    runs       bigint NOT NULL,  -- attempts that ran to an end: succeeded or failed
    failures   bigint NOT NULL,
    durations  bigint[] NOT NULL,  -- cumulative: attempts that took less than each bound
    waited     bigint NOT NULL,  -- runs whose last attempt ended here (their wait is known)
    waits      bigint[] NOT NULL,  -- cumulative: of those, the ones that waited less than each bound
    -- Serves the page's read: one span, the buckets since the window's start.
    PRIMARY KEY (span, bucket, job_type)
);

-- One row: attempts finished before sealed_until are in job_type_metrics (NULL: none yet);
-- locked by the view that adds the next ones, so two views never add the same attempts.
CREATE TABLE job_type_metrics_state (
    id            integer PRIMARY KEY CHECK (id = 1),
    sealed_until  timestamptz,
    bounds        double precision[]  -- the bounds the rows were counted with
);
INSERT INTO job_type_metrics_state (id) VALUES (1);
"""

DOWNGRADE = """
DROP TABLE job_type_metrics_state;
DROP TABLE job_type_metrics;
"""


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    op.execute(DOWNGRADE)
