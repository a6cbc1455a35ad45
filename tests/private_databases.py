"""A private server with a migrated database, and a FaultProxy in front of it: for tests that
stop the server or break the path to it, which the suite's shared server must never see."""

import os
from contextlib import contextmanager

import psycopg

from jobsweb import create_app
from jobsweb.core.database import database_url, libpq_url
from tests import servers
from tests.conftest import SECRET_KEY
from tests.fault_proxy import FaultProxy


@contextmanager
def migrated(kind, name, settings=None):
    """(server, libpq URL of database `name` on it, migrated); the server is deleted afterwards."""
    server = servers.start(kind, {"fsync": "off", **(settings or {})})
    try:
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        url = database_url(server.get_uri(name))
        with create_app({"SQLALCHEMY_DATABASE_URI": url, "TESTING": True, "SECRET_KEY": SECRET_KEY}).app_context():
            from flask_migrate import upgrade

            upgrade()
        yield server, libpq_url(url)
    finally:
        server.cleanup()


@contextmanager
def migrated_with_executions(kind, name):
    """migrated(), with the test_executions table the test handlers record their runs in."""
    with migrated(kind, name) as (server, url):
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE test_executions (run_id bigint NOT NULL, pid integer NOT NULL)")
        yield server, url


def proxy_to(url):
    """A FaultProxy in front of the server of libpq URL `url` (its TCP port or its Unix socket)."""
    params = psycopg.conninfo.conninfo_to_dict(url)
    if "port" not in params or params.get("host", "").startswith("/"):  # the embedded server: a socket
        return FaultProxy(os.path.join(params["host"], f".s.PGSQL.{params.get('port', '5432')}"))
    return FaultProxy((params["host"], int(params["port"])))
