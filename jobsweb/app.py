"""The standalone app: `create_app()` builds jobsweb as a site of its own (wsgi.py, `flask --app
jobsweb`, `gunicorn 'jobsweb:create_app()'`), the JobsWeb extension mounted at the root.

Being the whole site, it may set what an extension must not: the session cookie's flags, the
reverse-proxy headers it trusts, its 404 page, an embedded PostgreSQL and a secret key of its own.
"""

import os
import secrets
from pathlib import Path

from flask import Flask, request
from flask.cli import AppGroup
from flask.sessions import SecureCookieSessionInterface
from werkzeug.middleware.proxy_fix import ProxyFix

from . import commands
from .core import embedded, logs, schema, settings
from .core.database import check_database_url, own_db
from .core.package_files import resource
from .extension import JobsWeb
from .web.guards import add_headers
from .web.site import error_page


class SessionInterface(SecureCookieSessionInterface):
    """Session cookies marked Secure whenever the request came over HTTPS."""

    def get_cookie_secure(self, app):
        return super().get_cookie_secure(app) or request.is_secure


class LazyMigrate:
    """app.extensions["migrate"] until something reads it: then Flask-Migrate is set up on the
    app (its `flask db` and its functions, upgrade() and the rest, read that entry), which
    imports Alembic, Mako and Pygments, an eighth of a second that a cron tick does without."""

    jobsweb_tables_hidden = True  # read at every app context (schema.py): nothing to hide here

    def __init__(self, app):
        self.app = app

    def set_up(self):
        schema.alembic()  # quietly, before Flask-Migrate imports it
        from flask_migrate import Migrate

        # Replaces this entry, and the `db` command below with Flask-Migrate's own group.
        Migrate().init_app(self.app, own_db, directory=str(resource("migrations")))
        return self.app.extensions["migrate"]

    def __getattr__(self, name):
        return getattr(self.set_up(), name)


class StandaloneCommands(AppGroup):
    """The app's `flask` commands, with Flask-Migrate's `flask db` set up when it is asked for."""

    def __init__(self, app):
        super().__init__(app.name)
        self.app = app

    def get_command(self, ctx, cmd_name):
        if cmd_name == "db":
            self._set_up_migrate()
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx):
        self._set_up_migrate()
        return super().list_commands(ctx)

    def _set_up_migrate(self):
        if isinstance(self.app.extensions.get("migrate"), LazyMigrate):
            self.app.extensions["migrate"].set_up()


def create_app(test_config=None):
    """Build the standalone app: settings, database, job handlers, CLI commands and pages."""
    # No app-level static route: the admin blueprint serves /static itself.
    app = Flask("jobsweb", instance_relative_config=True, static_folder=None)
    app.cli = StandaloneCommands(app)
    app.config.update(settings.from_environment())
    if test_config:
        app.config.update(test_config)

    Path(app.instance_path).mkdir(parents=True, exist_ok=True)
    if not app.config.get("SQLALCHEMY_DATABASE_URI"):
        app.config["SQLALCHEMY_DATABASE_URI"] = embedded.start(Path(app.instance_path) / "pgdata")
    else:
        # The whole site is jobsweb's: no host command or page could use another database.
        given = "SQLALCHEMY_DATABASE_URI" if "SQLALCHEMY_DATABASE_URI" in (test_config or {}) else "DATABASE_URL"
        check_database_url(given, app.config["SQLALCHEMY_DATABASE_URI"], postgresql=True)
    if not app.config.get("SECRET_KEY"):
        app.config["SECRET_KEY"] = _local_secret_key(Path(app.instance_path) / "secret_key")
    settings.check_secret_key(app.config["SECRET_KEY"])
    # Before app.logger exists: Flask then adds no handler of its own, and the app's lines (a
    # webhook's reply in a warning) are jobsweb's, escaped, under any WSGI server.
    logs.setup(app.config["JOBSWEB_LOG_FORMAT"], app.config["JOBSWEB_LOG_LEVEL"])
    hops = app.config["JOBSWEB_PROXY_HOPS"]
    if hops:
        # Behind a PaaS router: the client's address, scheme (https, for Secure cookies) and host
        # come from the X-Forwarded-* headers the last `hops` proxies set, and only from them.
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops, x_host=hops)
    # Lax: the cookie is not sent on cross-site POSTs (CSRF tokens are the other half).
    app.config["SESSION_COOKIE_SAMESITE"] = app.config.get("SESSION_COOKIE_SAMESITE") or "Lax"
    app.config["SESSION_COOKIE_HTTPONLY"] = True
    app.session_interface = SessionInterface()
    # The whole site is jobsweb here, so the request limit may be app-wide (inside a host app it
    # holds for jobsweb's blueprint only: web/guards.py).
    app.config["MAX_CONTENT_LENGTH"] = app.config["JOBSWEB_MAX_REQUEST_BYTES"]
    # A URL that matches no route never reaches the admin blueprint: the site's own 404 page.
    app.register_error_handler(404, lambda exc: error_page(404, "Not found", exc.description))
    app.after_request(add_headers)  # that 404 page too: every answer of the site has the headers

    JobsWeb(app, url_prefix="")
    app.extensions["migrate"] = LazyMigrate(app)  # `flask db upgrade` too
    commands.init_standalone(app)
    return app


def _local_secret_key(path):
    """Without SECRET_KEY, a random key kept in the instance folder, so sessions survive restarts."""
    if not path.exists():
        # Written to a file created 0600 (never readable by others, not even for a moment), then
        # renamed into place: two processes starting at once both end up with one whole key.
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(secrets.token_hex(32))
        try:
            os.link(temporary, path)  # fails if another process put its key there first
        except FileExistsError:
            pass
        finally:
            temporary.unlink()
    return path.read_text().strip()
