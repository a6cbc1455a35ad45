"""The database: the Flask-SQLAlchemy instance jobsweb talks through, the URL spellings jobsweb
converts between, and how named SQL runs in a session.

Inside a team's own Flask app, jobsweb uses the app's own Flask-SQLAlchemy (an app may have only
one), so a handler's writes and `enqueue(..., session=db.session)` share its transactions; a
standalone app, or a host without one, gets jobsweb's own (`own_db`). `db` below is the facade
every module imports: it finds the one of the current app.

Every named statement of jobsweb takes psycopg's `%(name)s` parameters, whoever runs it: the
worker on its own psycopg connection, the web app and the CLI in db.session (execute below).
"""

import re

import sqlalchemy as sa
from flask import current_app
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.engine import make_url

from . import conflicts, deadlines
from .errors import ConfigError

own_db = SQLAlchemy()


class Database:
    """The current app's Flask-SQLAlchemy instance, as the attributes jobsweb uses."""

    select = staticmethod(sa.select)
    func = sa.func

    @staticmethod
    def extension():
        return current_app.extensions["sqlalchemy"]

    @property
    def session(self):
        return self.extension().session

    @property
    def engine(self):
        return self.extension().engine

    def get_or_404(self, entity, ident, *, description=None):
        return self.extension().get_or_404(entity, ident, description=description)


db = Database()


# No statement prepared on the server (psycopg does after 5 runs on a connection): behind a
# pooler in transaction mode the next transaction may be on a server connection without it.
# (A team's own engine is its own to configure; README says what it needs behind a pooler.)
# What bounds a wait on jobsweb's own engine (connect_timeout, and the round trips of a web
# request) is set by deadlines.init_engine, whatever SQLALCHEMY_ENGINE_OPTIONS an app gives.
ENGINE_OPTIONS = {"pool_pre_ping": True, "connect_args": {"prepare_threshold": None}}
# SQLSTATE 53300 too_many_connections: "sorry, too many clients already" and "remaining
# connection slots are reserved ..." (at connect time psycopg may give the text alone).
TOO_MANY_CONNECTIONS = ("53300", "too many clients", "remaining connection slots are reserved")


def init_app(app):
    """Bind jobsweb to the app's Flask-SQLAlchemy, creating jobsweb's own if the app has none."""
    if "sqlalchemy" not in app.extensions:
        # A DATABASE_URL was checked as it was read (settings): what fails here is the app's own.
        url = check_database_url("SQLALCHEMY_DATABASE_URI", app.config["SQLALCHEMY_DATABASE_URI"])
        # psycopg's options, and psycopg's connections (deadlines): on another database's engine
        # those were opened with libpq's defaults and PG* variables, at a PostgreSQL nobody named.
        postgresql = url.get_backend_name() == "postgresql"
        if postgresql:
            # Never SQLite's: Flask-SQLAlchemy adds check_same_thread to connect_args in place, and
            # this dict is shared by every app of the process.
            app.config.setdefault("SQLALCHEMY_ENGINE_OPTIONS", ENGINE_OPTIONS)
        own_db.init_app(app)
        if postgresql:
            with app.app_context():
                deadlines.init_engine(own_db.engine)


def outage(exc):
    """What a database error says of the database, in a few words for a page or a probe: it
    has no free connection slot, did not answer in time, or cannot be reached."""
    if isinstance(exc, sa.exc.TimeoutError):  # the pool's: every connection of this process is busy
        return "database connections of this process are all busy"
    orig = getattr(exc, "orig", None) or exc
    if conflicts.kind(exc):  # the database answered: it rolled back a transaction that met another
        return f"conflicting transaction ({conflicts.KINDS[conflicts.kind(exc)]}), rolled back"
    text = str(orig).lower()
    if getattr(orig, "sqlstate", None) == TOO_MANY_CONNECTIONS[0] or any(w in text for w in TOO_MANY_CONNECTIONS[1:]):
        return "database has no free connection slot"
    if "did not answer within" in text or "timeout expired" in text:
        return "database did not answer in time"
    return "database unreachable"


def database_url(raw):
    """A DATABASE_URL as a SQLAlchemy URL: postgres:// and postgresql:// on the psycopg 3 driver,
    postgresql+<driver>:// as given, several hosts in the query string (_hosts_in_query). Any other
    database is passed on unchanged: the host's own commands and pages may use it; jobsweb's
    refuse it (require_postgresql)."""
    if raw.startswith("postgres://"):
        raw = "postgresql://" + raw[len("postgres://"):]
    if raw.startswith("postgresql://"):
        return _hosts_in_query("postgresql+psycopg://" + raw[len("postgresql://"):])
    if raw.startswith("postgresql+"):
        return _hosts_in_query(raw)
    return raw


# Several hosts, for failover: libpq's URI lists them (postgresql://u:p@h1:5432,h2:5432/db?
# target_session_attrs=read-write, what DEPLOY.md recommends and providers with a standby give),
# and a connection goes to the first that takes writes. SQLAlchemy's URL takes one host (that
# list was "DATABASE_URL has a port that is not a number"), and its own spelling,
# host=h1:p1&host=h2:p2, is one host named "h2:p2" to libpq, which keeps the last of a repeated
# key (the worker's connections, its LISTEN, the processes it starts). host=h1,h2&port=p1,p2 is
# the spelling both read as every host in order, so jobsweb keeps either in that one.
_HOST_PORT = re.compile(r"(\[[^\]]*\]|[^:]*)(?::(.*))?")


def _hosts_in_query(url):
    """`url` (a string) with a list of hosts in its host part moved to host=h1,h2&port=p1,p2 in
    its query string; any other URL, or one whose query already names a host or port, unchanged."""
    scheme, _, tail = url.partition("://")
    ends = [i for i in (tail.find("/"), tail.find("?")) if i >= 0]
    netloc, rest = tail[:min(ends, default=len(tail))], tail[min(ends, default=len(tail)):]
    userinfo, at, hostlist = netloc.rpartition("@")
    path, _, query = rest.partition("?")
    if "," not in hostlist or re.search(r"(^|&)(host|port)=", query):
        return url
    pairs = [_HOST_PORT.fullmatch(part).groups() for part in hostlist.split(",")]
    hosts = ",".join(host.strip("[]") for host, _ in pairs)  # percent-encoded as in the URI (a socket folder)
    ports = ",".join(port or "" for _, port in pairs)
    moved = f"host={hosts}" + (f"&port={ports}" if ports.strip(",") else "")
    return f"{scheme}://{userinfo}{at}{path or '/'}?{moved}" + (f"&{query}" if query else "")


def _host_list(url):
    """(hosts, ports) of a SQLAlchemy URL that names its hosts in the query string (host=h1,h2&
    port=p1,p2, or SQLAlchemy's host=h1:p1&host=h2:p2), ports as given ('' for libpq's default);
    None when the URL's own host part names the host."""
    hosts = url.query.get("host")
    if hosts is None:
        return None
    if isinstance(hosts, tuple):
        pairs = [h.rpartition(":")[::2] if ":" in h else (h, "") for h in hosts]
        return [h for h, _ in pairs], [p for _, p in pairs]
    hosts = hosts.split(",")
    ports = url.query.get("port", "")
    ports = ",".join(ports) if isinstance(ports, tuple) else ports
    return hosts, ports.split(",") if ports else [""] * len(hosts)


EXAMPLE_URL = "postgresql://user:password@host:5432/dbname"
MULTI_HOST_EXAMPLE = "postgresql://user:password@host1:5432,host2:5432/dbname?target_session_attrs=read-write"


def check_database_url(name, url, *, postgresql=False):
    """`url`, the value of setting `name`, as a SQLAlchemy URL, or ConfigError in one line naming
    the setting and what is wrong, never its password: SQLAlchemy's own errors were a traceback,
    and a missing driver (mysql://) made `flask` say "No such command 'jobs'" after it. A URL of
    another database whose driver loads passes (a host's tests on SQLite) unless `postgresql`."""
    try:
        url = make_url(url)
    except ValueError:  # SQLAlchemy's int() of the port
        raise ConfigError(f"{name} has a port that is not a number: expected {EXAMPLE_URL}") from None
    except sa.exc.ArgumentError:
        # Unparsed, nothing of it is shown: where its password begins cannot be told.
        missing = "'://' after the database's name" if "://" not in str(url) else "a database name before '://'"
        raise ConfigError(f"{name} is not a database URL (it lacks {missing}): expected {EXAMPLE_URL}") from None
    if url.port is not None and not 0 < url.port <= 65535:
        raise ConfigError(f"{name} has port {url.port}, which is no port number (1-65535): expected {EXAMPLE_URL}")
    hosts, ports = _host_list(url) or ((), ())
    if len(hosts) > 1 and len(ports) != len(hosts):
        raise ConfigError(f"{name} names {len(hosts)} hosts and {len(ports)} port(s): give each host its port "
                          f"(expected {MULTI_HOST_EXAMPLE})")
    for host, port in zip(hosts, ports):
        if port and not (port.isdigit() and 0 < int(port) <= 65535):
            raise ConfigError(f"{name} has port {port!r} for host {host!r}, which is no port number (1-65535): "
                              f"expected {MULTI_HOST_EXAMPLE}")
    try:
        url.get_dialect().import_dbapi()  # what creating the engine would import
        loaded = True
    except (sa.exc.NoSuchModuleError, ImportError):
        loaded = False
    if url.get_backend_name() != "postgresql" and (postgresql or not loaded):
        raise ConfigError(not_postgresql(name, url))
    if not loaded:
        raise ConfigError(f"{name} is {url.render_as_string(hide_password=True)!r}, whose driver "
                          f"{url.get_driver_name()} is not installed: write postgresql:// (for psycopg, which "
                          "jobsweb installs)")
    return url


def not_postgresql(name, url, hint=""):
    """The refusal of a database that is not PostgreSQL, its URL shown with the password masked."""
    return (f"jobsweb needs PostgreSQL, but {name} is {url.render_as_string(hide_password=True)!r}: "
            f"set it to {EXAMPLE_URL}{hint}")


# What a host's code and tests are told besides: the functions they call (enqueue, get_run,
# jobsweb.testing's helpers) have inline mode, which needs no database at all.
INLINE_HINT = (", or, for tests on SQLite, set JOBSWEB_INLINE=True (enqueue() runs each handler at once "
               "and get_run() reads it; drain() and enqueued() need PostgreSQL)")


def require_postgresql(url=None, *, from_code=False):
    """Raise ConfigError, naming the setting and its value (password masked), if jobsweb's
    database (`url`, or the current app's) is not PostgreSQL. Called by jobsweb's own commands,
    pages and worker, and by the functions a host's code calls (`from_code`: the error points at
    inline mode too), never at import or init_app, so that a host on SQLite for its tests or its
    other commands keeps working. Nothing connects before it."""
    url = make_url(getattr(url, "url", url) if url is not None else db.engine.url)
    if url.get_backend_name() != "postgresql":
        raise ConfigError(not_postgresql("SQLALCHEMY_DATABASE_URI (or DATABASE_URL)", url,
                                         INLINE_HINT if from_code else ""))


def libpq_url(url):
    """A SQLAlchemy URL (or engine) as the libpq connection string psycopg and child processes take.

    Only a PostgreSQL URL: `sqlite://` made `postgresql://`, which libpq completes from its
    defaults and PG* variables, so drain() ran the queued jobs of whatever database those named."""
    require_postgresql(url, from_code=True)
    url = make_url(getattr(url, "url", url))
    if isinstance(url.query.get("host"), tuple):  # SQLAlchemy's host=h1:p1&host=h2:p2: libpq's spelling
        hosts, ports = _host_list(url)
        url = url.difference_update_query(["host", "port"]).update_query_dict(
            {"host": ",".join(hosts), "port": ",".join(ports)})
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def execute(statement, params=None):
    """Run one named statement in db.session's transaction (the caller commits); its result."""
    return db.session.connection().exec_driver_sql(statement, params)
