"""Whether this process can serve: its database answers and its schema is the one the code
expects (GET /healthz, web/probes.py, answers with it)."""

from alembic.config import Config
from alembic.script import ScriptDirectory
from flask import current_app
from sqlalchemy.exc import SQLAlchemyError

from ..core.database import db, execute

# A database never migrated has no alembic_version table: checked first (a query naming a
# missing table fails however it is written), so that it is a reason to report.
HAS_VERSION_TABLE = "SELECT to_regclass('alembic_version') IS NOT NULL"
SCHEMA_VERSION = "SELECT version_num FROM alembic_version"


def migrations(app):
    """(heads, every revision) of the code this process runs, read from the scripts once per app."""
    known = app.extensions.get("jobsweb_migrations")
    if known is None:
        config = Config()
        config.set_main_option("script_location", app.extensions["migrate"].directory)
        script = ScriptDirectory.from_config(config)
        known = app.extensions["jobsweb_migrations"] = (
            frozenset(script.get_heads()), frozenset(r.revision for r in script.walk_revisions()))
    return known


def problem():
    """Why this process cannot serve, in words, or None when it can."""
    try:
        migrated = execute(HAS_VERSION_TABLE).scalar()
        current = set(execute(SCHEMA_VERSION).scalars()) if migrated else set()
    except SQLAlchemyError:
        db.session.rollback()
        return "database unreachable"
    heads, revisions = migrations(current_app)
    if not current:
        return "database schema is not migrated: run `flask jobs migrate`"
    if current == heads:
        return None
    if not current & revisions:
        # Newer than this code: the release phase of a deploy migrated before this (old)
        # process was replaced. Migrations are additive, so it still serves; a 503 here would
        # take every old process out of the router before the new ones are up.
        return None
    return (f"database schema is at {', '.join(sorted(current))}, the code expects "
            f"{', '.join(sorted(heads))}: run `flask jobs migrate`")
