"""Alembic environment: migrate jobsweb's tables in the database of the current Flask app.

Run by `flask jobs migrate` (any app with jobsweb) and, in the standalone app, `flask db upgrade`.
jobsweb keeps its revision in its own jobsweb_alembic_version table, so a team's app that has
its own Alembic history (in alembic_version) is never touched by jobsweb's.
"""

from alembic import context
from flask import current_app
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from jobsweb.core.database import db
from jobsweb.core.models import Model
from jobsweb.core.schema import MIGRATION_LOCK, VERSION_TABLE

# Before 0009, jobsweb's revision sat in Alembic's default table. Moved once, and only a row
# that names one of jobsweb's own revisions: a host's row there is never read or changed.
CREATE_VERSION_TABLE = """
CREATE TABLE jobsweb_alembic_version (
    version_num varchar(32) NOT NULL,
    CONSTRAINT jobsweb_alembic_version_pkc PRIMARY KEY (version_num)
)
"""
MOVE_VERSION = """
WITH moved AS (
    DELETE FROM alembic_version WHERE version_num = ANY(CAST(:ours AS text[])) RETURNING version_num
)
INSERT INTO jobsweb_alembic_version (version_num) SELECT version_num FROM moved;
"""
# Two statements: a query naming a missing table fails however it is written.
TABLES_AS_BEFORE_0009 = """
SELECT to_regclass('jobsweb_alembic_version') IS NULL AND to_regclass('alembic_version') IS NOT NULL
"""
LEGACY_VERSION = "SELECT EXISTS (SELECT 1 FROM alembic_version WHERE version_num = ANY(CAST(:ours AS text[])))"
DROP_IF_EMPTY = """
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM alembic_version) THEN DROP TABLE alembic_version; END IF;
END $$
"""


def adopt_legacy_version(connection):
    """Move a pre-0009 install's revision into jobsweb's own version table (MOVE_VERSION); drop
    alembic_version if nothing else was in it (it was jobsweb's alone)."""
    ours = [script.revision for script in context.script.walk_revisions()]
    if (connection.execute(text(TABLES_AS_BEFORE_0009)).scalar()
            and connection.execute(text(LEGACY_VERSION), {"ours": ours}).scalar()):
        connection.execute(text(CREATE_VERSION_TABLE))
        connection.execute(text(MOVE_VERSION), {"ours": ours})
        connection.execute(text(DROP_IF_EMPTY))


def run_migrations_offline():
    context.configure(url=db.engine.url.render_as_string(hide_password=False), target_metadata=Model.metadata,
                      version_table=VERSION_TABLE, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def engine():
    """The app's engine, or JOBSWEB_DIRECT_DATABASE_URL's when DATABASE_URL goes through a pooler:
    DDL and the migration lock want one server session."""
    direct = current_app.config.get("JOBSWEB_DIRECT_DATABASE_URL")
    return create_engine(direct, poolclass=NullPool) if direct else db.engine


def run_migrations_online():
    with engine().connect() as connection:
        context.configure(connection=connection, target_metadata=Model.metadata, version_table=VERSION_TABLE)
        with context.begin_transaction():
            # Hosted servers often set a statement_timeout on the app's role (5 s is common): waiting
            # for another upgrader's lock, or a step on a large table, must not be cancelled by it
            # halfway. LOCAL: this transaction only, and it ends with the migration.
            connection.execute(text("SET LOCAL statement_timeout = 0"))
            # Taken before Alembic reads the current revision, so a second upgrader waits and
            # then finds the work done.
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
            adopt_legacy_version(connection)
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
