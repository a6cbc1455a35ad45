"""jobsweb's schema: its Alembic migrations, kept apart from any other history in the database.

The revision lives in jobsweb_alembic_version (migrations/env.py), so a team's app whose own
Alembic history sits in alembic_version is never touched; `flask jobs migrate` upgrades
jobsweb's tables whatever else the app migrates, and /healthz compares the two.
"""

import functools
import importlib
import logging
import re

from flask import appcontext_pushed
from sqlalchemy import text

from .database import db
from .package_files import resource

VERSION_TABLE = "jobsweb_alembic_version"
# Any number on which every jobsweb process agrees: the web release phase, a worker and a
# developer may all migrate at once, and only one of them may apply each step (migrations/env.py)
# or recreate what a schema lacks (schema_objects.py).
MIGRATION_LOCK = 7_146_010
CREATED_TABLE = re.compile(r"CREATE TABLE (\w+)")  # how every migration of ours creates a table


def alembic(module="alembic"):
    """Alembic's `module`, imported by what migrates, not by every `flask run-jobs` (with Mako and
    Pygments, an eighth of a second). Imported at start-up as it was, before logging was set up,
    it never showed the INFO line it logs for each of its plugins: nor does it here."""
    plugins = logging.getLogger("alembic.runtime.plugins")
    level = plugins.level
    plugins.setLevel(logging.WARNING)
    try:
        return importlib.import_module(module)
    finally:
        plugins.setLevel(level)


def alembic_config():
    """Alembic's settings for jobsweb's migrations (no ini file: the host's logging stays as it is)."""
    config = alembic("alembic.config").Config()
    config.set_main_option("script_location", str(resource("migrations")))
    return config


def upgrade():
    """Create jobsweb's tables or bring them to this version, in the current app's database;
    the revisions applied, oldest first (none when it was up to date)."""
    before = current_revision()
    alembic("alembic.command").upgrade(alembic_config(), "head")
    script = alembic("alembic.script").ScriptDirectory.from_config(alembic_config())
    applied = [r.revision for r in script.iterate_revisions("heads", before)]
    return applied[::-1]


def current_revision():
    """The revision of jobsweb's tables in the current app's database; None before any. Read
    with plain SQL: Alembic's MigrationContext logs two INFO lines each time it is made, which
    every `flask run-jobs` printed at start-up once it checked the schema."""
    with db.engine.connect() as conn:
        if conn.execute(text("SELECT to_regclass(:table)"), {"table": VERSION_TABLE}).scalar() is None:
            return None
        return conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()


def revisions():
    """(heads, every revision) of the migrations this code carries."""
    script = alembic("alembic.script").ScriptDirectory.from_config(alembic_config())
    return frozenset(script.get_heads()), frozenset(r.revision for r in script.walk_revisions())


@functools.cache
def tables():
    """The names of jobsweb's tables: every table its migrations create, and its version table."""
    versions = resource("migrations") / "versions"
    return frozenset({VERSION_TABLE}).union(*(CREATED_TABLE.findall(path.read_text())
                                               for path in versions.glob("*.py")))


def alembic_include_name(name, type_, parent_names):
    """For a host's own Alembic env.py: `context.configure(..., include_name=
    jobsweb.alembic_include_name)` keeps autogenerate from dropping jobsweb's tables (and their
    indexes). With Flask-Migrate, init_app sets this up by itself (hide_from_host_autogenerate)."""
    return not (type_ == "table" and name in tables())


def hide_from_host_autogenerate(app):
    """Make the host's `flask db migrate` ignore jobsweb's tables, whether the host sets up
    Flask-Migrate before or after jobsweb: its env.py reads the context arguments from
    app.extensions["migrate"] when a command runs, so they are completed at each app context
    (cheap: a dictionary look-up once set). The host's own include_name, if any, still applies."""
    appcontext_pushed.connect(_exclude_our_tables, app)


def _exclude_our_tables(app, **extra):
    migrate_config = app.extensions.get("migrate")
    if migrate_config is None or getattr(migrate_config, "jobsweb_tables_hidden", False):
        return
    if migrate_config.directory == str(resource("migrations")):
        # The standalone app's `flask db` runs jobsweb's own migrations: nothing to hide. Marked
        # done, as this runs at every app context (one per run a worker starts), and resolving
        # the package's folder each time cost the worker a third of its throughput.
        migrate_config.jobsweb_tables_hidden = True
        return
    host_include = migrate_config.configure_args.get("include_name")

    def include_name(name, type_, parent_names):
        return alembic_include_name(name, type_, parent_names) and (
            host_include is None or host_include(name, type_, parent_names))

    migrate_config.configure_args["include_name"] = include_name
    migrate_config.jobsweb_tables_hidden = True
