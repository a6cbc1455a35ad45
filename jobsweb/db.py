"""The database extensions, created once here and bound to the app in create_app."""

from flask_migrate import Migrate
from flask_sqlalchemy import SQLAlchemy

db = SQLAlchemy()
migrate = Migrate()


def conninfo(engine):
    """The libpq connection string behind a SQLAlchemy engine, for the worker's raw psycopg link."""
    return engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
