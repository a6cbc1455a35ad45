"""GET /healthz: whether this process can serve: its database answers and its schema is the one
the code expects. No sign-in, and nothing but a status and a reason in the answer."""

from alembic.config import Config
from alembic.script import ScriptDirectory
from flask import Blueprint, current_app
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from .db import db

bp = Blueprint("health", __name__)

# A database never migrated has no alembic_version table: checked first (a query naming a
# missing table fails however it is written), so that it is a reason to report.
HAS_VERSION_TABLE = text("SELECT to_regclass('alembic_version') IS NOT NULL")
SCHEMA_VERSION = text("SELECT version_num FROM alembic_version")


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
        migrated = db.session.execute(HAS_VERSION_TABLE).scalar()
        current = set(db.session.scalars(SCHEMA_VERSION)) if migrated else set()
    except SQLAlchemyError:
        db.session.rollback()
        return "database unreachable"
    heads, revisions = migrations(current_app)
    if not current:
        return "database schema is not migrated: run `flask db upgrade`"
    if current == heads:
        return None
    if not current & revisions:
        # Newer than this code: the release phase of a deploy migrated before this (old)
        # process was replaced. Migrations are additive, so it still serves; a 503 here would
        # take every old process out of the router before the new ones are up.
        return None
    return (f"database schema is at {', '.join(sorted(current))}, the code expects "
            f"{', '.join(sorted(heads))}: run `flask db upgrade`")


@bp.get("/healthz")
def healthz():
    """200 when the database answers and its schema is at the migration head (or newer than this
    code, mid-deploy), 503 with the reason otherwise."""
    reason = problem()
    if reason is not None:
        return {"status": "unavailable", "reason": reason}, 503
    return {"status": "ok"}


def init_app(app):
    app.register_blueprint(bp)
