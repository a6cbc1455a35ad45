"""jobsweb's own names: every table of jobsweb is job_* or jobsweb_*, so it fits in a team's database.

Revision ID: 0009_own_names
Revises: 0008_worker_job_types
Create Date: 2026-11-23

Migrations 0003 and 0005 now create jobsweb_users, jobsweb_audit_log and jobsweb_alert_* (a
fresh install never makes a table a host app may have: `users` above all). Installs from before
carry the old names: this renames them, with their indexes, constraints and sequences, so both
end with one schema. The rename happens only where the old table exists and the new one does
not: in a fresh install next to a host's own `users`, nothing of the host's is touched.

The version row moves too, from Alembic's default alembic_version (which a host's own
migrations use) to jobsweb_alembic_version; migrations/env.py does that before Alembic reads it.
"""

from alembic import op

revision = "0009_own_names"
down_revision = "0008_worker_job_types"
branch_labels = None
depends_on = None

UPGRADE = """
DO $$
DECLARE
    t record;
    item record;
BEGIN
    FOR t IN
        SELECT old, 'jobsweb_' || old AS new
        FROM unnest(ARRAY['users', 'audit_log', 'alert_incidents', 'alert_incident_runs',
                          'alert_deliveries']) AS old
        WHERE to_regclass(old) IS NOT NULL AND to_regclass('jobsweb_' || old) IS NULL
    LOOP
        EXECUTE format('ALTER TABLE %I RENAME TO %I', t.old, t.new);
        -- Indexes, primary keys included (renaming the index renames its constraint).
        FOR item IN
            SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
            WHERE i.indrelid = t.new::regclass AND c.relname LIKE t.old || '\\_%'
        LOOP
            EXECUTE format('ALTER INDEX %I RENAME TO %I', item.relname, 'jobsweb_' || item.relname);
        END LOOP;
        -- Checks, foreign keys and (PostgreSQL 18) NOT NULLs, which have no index of their own.
        FOR item IN
            SELECT conname FROM pg_constraint
            WHERE conrelid = t.new::regclass AND contype IN ('c', 'f', 'n') AND conname LIKE t.old || '\\_%'
        LOOP
            EXECUTE format('ALTER TABLE %I RENAME CONSTRAINT %I TO %I', t.new, item.conname,
                           'jobsweb_' || item.conname);
        END LOOP;
        FOR item IN
            SELECT c.relname FROM pg_class c
            JOIN pg_depend d ON d.objid = c.oid AND d.deptype = 'a'
            WHERE c.relkind = 'S' AND d.refobjid = t.new::regclass AND c.relname LIKE t.old || '\\_%'
        LOOP
            EXECUTE format('ALTER SEQUENCE %I RENAME TO %I', item.relname, 'jobsweb_' || item.relname);
        END LOOP;
    END LOOP;
END
$$;
"""


def upgrade():
    op.execute(UPGRADE)


def downgrade():
    # At 0008 the tables have these names too (0003 and 0005 create them so): nothing to undo.
    pass
