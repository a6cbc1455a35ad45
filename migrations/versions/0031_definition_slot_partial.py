"""The slot guard covers the runs of definitions only: an index entry fewer for every other run.

Revision ID: 0031_definition_slot_partial
Revises: 0030_deploy_marks
Create Date: 2026-11-28

Issue 41, item 1. job_runs_definition_slot was a unique constraint on (definition_id,
scheduled_for) over every run, so each version of an enqueued run (definition_id NULL: it never
conflicts) wrote an entry into it: at its insert, at its claim and at its finish, none of which
is HOT (status is in most indexes of job_runs). As a unique index on the runs of definitions
alone it guards the same slots, and an enqueued run's three versions write three entries fewer
(docs/BENCHMARKS.md, "Where a run's cost goes").

INSERT_SLOTS' conflict target has named that predicate since b84f3ac (a bare (definition_id,
scheduled_for) cannot infer a partial index), so the workers of the previous release go on
creating each slot once during a rolling deploy; a release older than that would fail its
scheduler ticks on this schema (CHANGELOG.md, "Migrations").

The new index is built before the constraint goes, so no slot is ever unguarded, and takes the
constraint's name: the catalogue and the logs keep saying job_runs_definition_slot. The build
reads job_runs once, holding off its writes meanwhile (CHANGELOG.md gives the time it took).
"""

from alembic import op

revision = "0031_definition_slot_partial"
down_revision = "0030_deploy_marks"
branch_labels = None
depends_on = None


def upgrade():
    op.execute("""
    CREATE UNIQUE INDEX job_runs_definition_slot_of_definitions ON job_runs (definition_id, scheduled_for)
        WHERE definition_id IS NOT NULL;
    ALTER TABLE job_runs DROP CONSTRAINT job_runs_definition_slot;
    ALTER INDEX job_runs_definition_slot_of_definitions RENAME TO job_runs_definition_slot;
    """)


def downgrade():
    op.execute("""
    ALTER INDEX job_runs_definition_slot RENAME TO job_runs_definition_slot_of_definitions;
    ALTER TABLE job_runs ADD CONSTRAINT job_runs_definition_slot UNIQUE (definition_id, scheduled_for);
    DROP INDEX job_runs_definition_slot_of_definitions;
    """)
