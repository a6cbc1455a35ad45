"""GET /healthz: whether this process can reach its database. No sign-in, no data."""

from flask import Blueprint
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from .db import db

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz():
    """200 when the database answers, 503 with the reason otherwise."""
    try:
        db.session.execute(text("SELECT 1"))
    except SQLAlchemyError:
        return {"status": "unavailable", "reason": "database unreachable"}, 503
    return {"status": "ok"}


def init_app(app):
    app.register_blueprint(bp)
