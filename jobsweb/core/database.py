"""The database: the extensions (created once here, bound to the app by the factory), the URL
spellings jobsweb converts between, and how named SQL runs in a Flask-SQLAlchemy session.

Every named statement of jobsweb takes psycopg's `%(name)s` parameters, whoever runs it: the
worker on its own psycopg connection, the web app and the CLI in db.session (execute below).
"""

from flask_migrate import Migrate
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.engine import make_url

from .errors import ConfigError

db = SQLAlchemy()
migrate = Migrate()


def database_url(raw):
    """A DATABASE_URL (postgres://, postgresql://) as the SQLAlchemy URL of the psycopg 3 driver."""
    if raw.startswith("postgres://"):
        raw = "postgresql://" + raw[len("postgres://"):]
    if raw.startswith("postgresql://"):
        return "postgresql+psycopg://" + raw[len("postgresql://"):]
    if raw.startswith("postgresql+psycopg://"):
        return raw
    raise ConfigError(
        "DATABASE_URL must be a PostgreSQL URL (postgresql://user:password@host:5432/dbname), "
        f"got one starting with {raw.split(':', 1)[0]!r}"
    )


def libpq_url(url):
    """A SQLAlchemy URL (or engine) as the libpq connection string psycopg and child processes take."""
    url = getattr(url, "url", url)
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def execute(statement, params=None):
    """Run one named statement in db.session's transaction (the caller commits); its result."""
    return db.session.connection().exec_driver_sql(statement, params)
