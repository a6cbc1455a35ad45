"""Retention and metrics: the built-in jobsweb.prune definition, indexes, duration totals.

Revision ID: 0007_retention
Revises: 0006_performance
Create Date: 2026-11-21
"""

from alembic import op

revision = "0007_retention"
down_revision = "0006_performance"
branch_labels = None
depends_on = None

UPGRADE = """
-- Serves PRUNE_RUNS in jobsweb/engine/statements.py: the oldest finished runs of one status, a batch at a
-- time. Without it each batch would walk job_runs_status_id past every younger run.
CREATE INDEX job_runs_prunable ON job_runs (status, finished_at) WHERE finished_at IS NOT NULL;

-- Serves ON DELETE SET NULL of job_runs.after_run_id when pruning deletes a run: without it
-- every deleted run costs a scan of job_runs for runs queued behind it.
CREATE INDEX job_runs_after_run ON job_runs (after_run_id) WHERE after_run_id IS NOT NULL;

-- Serves the runs list filtered by worker (runlist.RunFilter.worker): the runs a worker
-- process executed, from the attempts it recorded.
CREATE INDEX job_attempts_worker ON job_attempts (worker, run_id);

-- The attempt duration histogram of /metrics (jobsweb/ops/durations.py): cumulative counts of
-- attempts finished before sealed_until, so that a scrape reads only the attempts since then,
-- and pruning old attempts does not lower a Prometheus counter. One row of state, locked by
-- the scrape that advances it.
CREATE TABLE job_metrics_state (
    id            integer PRIMARY KEY CHECK (id = 1),
    sealed_until  timestamptz,  -- NULL: nothing counted yet
    bounds        double precision[]  -- the bucket bounds the totals were counted with
);
INSERT INTO job_metrics_state (id) VALUES (1);

CREATE TABLE job_duration_totals (
    job_type     text PRIMARY KEY,
    buckets      bigint[] NOT NULL,  -- cumulative: attempts that took at most each bound
    count        bigint NOT NULL,
    sum_seconds  double precision NOT NULL
);

-- The built-in retention job, daily at 03:17 UTC (off the hour, when most cron jobs start).
-- Created here rather than at worker start: it exists as soon as the schema does, an operator
-- may edit, pause or delete it like any definition, and a deleted one stays deleted (a worker
-- start that re-created it would undo the operator's choice).
INSERT INTO job_definitions (name, job_type, schedule, timezone, max_attempts, next_run_at)
VALUES ('jobsweb.prune', 'jobsweb.prune', '17 3 * * *', 'UTC', 3,
        date_trunc('day', now() - interval '3 hours 17 minutes', 'UTC')
            + interval '1 day 3 hours 17 minutes')
ON CONFLICT (name) DO NOTHING;
"""

DOWNGRADE = """
DROP TABLE job_duration_totals;
DROP TABLE job_metrics_state;
DELETE FROM job_definitions WHERE name = 'jobsweb.prune' AND job_type = 'jobsweb.prune';
DROP INDEX job_attempts_worker;
DROP INDEX job_runs_after_run;
DROP INDEX job_runs_prunable;
"""


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    op.execute(DOWNGRADE)
