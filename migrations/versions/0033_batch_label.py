"""A batch's label: what a person calls it, shown on the batch pages and searched there.

Revision ID: 0033_batch_label
Revises: 0032_unbegun_claims
Create Date: 2026-12-02

Issue 54, m9 (Sidekiq Pro's batch description, Oban Pro's batch name). One nullable text column on
job_batches (no rewrite, no default), written once by batch(label=...) as the batch is created
(engine/enqueue/workflows.py CREATE_BATCH) and read by the batch pages. No index: the Batches
page's label search (web/batch_pages.py, a part of the label, any case) reads job_batches newest
first along its primary key, a row per batch and not per run, until it has a page of matches.
Code of the previous release never names the column: during a rolling deploy its batches have
no label.
"""

from alembic import op

revision = "0033_batch_label"
down_revision = "0032_unbegun_claims"
branch_labels = None
depends_on = None


def upgrade():
    op.execute("ALTER TABLE job_batches ADD COLUMN label text")


def downgrade():
    op.execute("ALTER TABLE job_batches DROP COLUMN label")
