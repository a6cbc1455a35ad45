"""Whether this process can serve: its database answers and its schema is the one the code
expects (GET /healthz, web/probes.py, answers with it)."""

from flask import current_app
from sqlalchemy.exc import SQLAlchemyError

from ..core import schema
from ..core.database import db, execute

# A database never migrated has no version table: checked first (a query naming a
# missing table fails however it is written), so that it is a reason to report.
HAS_VERSION_TABLE = f"SELECT to_regclass('{schema.VERSION_TABLE}') IS NOT NULL"
SCHEMA_VERSION = f"SELECT version_num FROM {schema.VERSION_TABLE}"


def migrations(app):
    """(heads, every revision) of the code this process runs, read from the scripts once per app."""
    known = app.extensions.get("jobsweb_migrations")
    if known is None:
        known = app.extensions["jobsweb_migrations"] = schema.revisions()
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
