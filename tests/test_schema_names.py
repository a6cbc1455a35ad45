"""Every table of jobsweb is job_* or jobsweb_*, and installs from before that upgrade in place."""

from pathlib import Path

import psycopg

from jobsweb import create_app
from jobsweb.core import schema
from jobsweb.core.database import libpq_url

LEGACY_SCHEMA = Path(__file__).parent / "fixtures" / "schema_0008.sql"

# The shape of a schema, by name: relations, constraints, index definitions and columns.
SHAPE = {
    "relations": "SELECT relname, relkind FROM pg_class WHERE relnamespace = 'public'::regnamespace "
                 "AND relkind IN ('r', 'i', 'S') ORDER BY 1",
    "constraints": "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
                   "WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2",
    "indexes": "SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index i "
               "JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = 'public'::regnamespace ORDER BY 1",
    "columns": "SELECT table_name, column_name, data_type, column_default, is_nullable "
               "FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1, 2",
}


def shape(url):
    with psycopg.connect(libpq_url(url)) as conn:
        return {name: conn.execute(sql).fetchall() for name, sql in SHAPE.items()}


def migrate(url):
    with create_app({"SQLALCHEMY_DATABASE_URI": url, "TESTING": True, "SECRET_KEY": "0123456789abcdef-test-secret-key-0123456789-x"}).app_context():
        schema.upgrade()


def test_a_new_install_names_every_table_job_or_jobsweb(scratch_database):
    url = scratch_database("jobsweb_names")
    tables = [name for name, kind in shape(url)["relations"] if kind == "r"]
    assert tables and all(name.startswith(("job_", "jobsweb_")) for name in tables), tables


def test_an_install_from_before_0009_upgrades_in_place_to_the_schema_of_a_new_one(scratch_database):
    legacy = scratch_database("jobsweb_legacy", revision=None)
    with psycopg.connect(libpq_url(legacy), autocommit=True) as conn:
        conn.execute(LEGACY_SCHEMA.read_text())
        conn.execute("INSERT INTO users (email, password_hash, role) VALUES ('ann@example.com', 'x', 'admin')")
        conn.execute("INSERT INTO audit_log (user_id, user_email, action, target_type) "
                     "VALUES (1, 'ann@example.com', 'pause', 'definition')")
        conn.execute("INSERT INTO alert_incidents (kind, job_type, subject, summary, since) "
                     "VALUES ('dead', 'x', 'x', 'x', now())")
        conn.execute("INSERT INTO alert_deliveries (incident_id, event, channel, target, subject, body) "
                     "VALUES (1, 'opened', 'webhook', 'http://127.0.0.1/', 's', 'b')")

    migrate(legacy)

    assert shape(legacy) == shape(scratch_database("jobsweb_new"))
    with psycopg.connect(libpq_url(legacy), autocommit=True) as conn:
        [(heads,)] = conn.execute("SELECT array_agg(version_num) FROM jobsweb_alembic_version").fetchall()
        assert set(heads) == schema.revisions()[0]
        # alembic_version held only jobsweb's row: it is gone, for a host's own history to use.
        assert conn.execute("SELECT to_regclass('alembic_version')").fetchone() == (None,)
        assert conn.execute("SELECT u.email, a.action FROM jobsweb_audit_log a "
                            "JOIN jobsweb_users u ON u.id = a.user_id").fetchall() == [("ann@example.com", "pause")]
        assert conn.execute("SELECT d.channel FROM jobsweb_alert_deliveries d "
                            "JOIN jobsweb_alert_incidents i ON i.id = d.incident_id").fetchall() == [("webhook",)]
        # The renamed sequences go on from where they were.
        [(next_id,)] = conn.execute("INSERT INTO jobsweb_users (email, password_hash) VALUES ('b@x.org', 'x') "
                                    "RETURNING id").fetchall()
        assert next_id == 2

    migrate(legacy)  # again: nothing left to do
    assert shape(legacy) == shape(scratch_database("jobsweb_new_again"))


def test_the_move_of_the_version_row_leaves_a_hosts_own_rows_alone(scratch_database):
    legacy = scratch_database("jobsweb_shared_versions", revision=None)
    with psycopg.connect(libpq_url(legacy), autocommit=True) as conn:
        conn.execute(LEGACY_SCHEMA.read_text())
        conn.execute("INSERT INTO alembic_version VALUES ('host_0042')")
    migrate(legacy)
    with psycopg.connect(libpq_url(legacy)) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [("host_0042",)]
