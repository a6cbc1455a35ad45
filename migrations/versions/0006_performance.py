"""Performance: autovacuum settings for the job_runs queue; a covering index for the dashboard chart.

Revision ID: 0006_performance
Revises: 0005_alerts
Create Date: 2026-11-21
"""

from alembic import op

revision = "0006_performance"
down_revision = "0005_alerts"
branch_labels = None
depends_on = None

# job_runs is a queue: every run is updated three times (claimed, finished, maybe retried), so
# dead tuples pile up in the claim's partial index job_runs_claimable at the rate runs are
# processed. The default thresholds (20% of the table) mean that with a million finished runs
# vacuum waits for 200,000 dead rows; 1% (and at least 1,000) keeps the claim's index small
# whatever the history size. job_attempts only grows: vacuum it for visibility maps and
# statistics after 5% new rows instead of 20%.
UPGRADE = """
ALTER TABLE job_runs SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 1
);
ALTER TABLE job_attempts SET (
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05
);

-- Serves stats.HOURLY_OUTCOMES (the dashboard's 24-hour chart) with an index-only scan: with
-- outcome in the index, counting a day of attempts (86,400 at one a second) reads no heap
-- page. Replaces job_attempts_finished_at (0003), which served the same query by heap reads
-- (170 ms at p95 in the benchmark at a million runs).
CREATE INDEX job_attempts_finished_outcome ON job_attempts (finished_at) INCLUDE (outcome);
DROP INDEX job_attempts_finished_at;
"""

DOWNGRADE = """
CREATE INDEX job_attempts_finished_at ON job_attempts (finished_at);
DROP INDEX job_attempts_finished_outcome;
ALTER TABLE job_attempts RESET (autovacuum_vacuum_insert_scale_factor, autovacuum_analyze_scale_factor);
ALTER TABLE job_runs RESET (
    autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, autovacuum_analyze_scale_factor,
    autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_cost_delay
);
"""


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    op.execute(DOWNGRADE)
