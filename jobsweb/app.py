"""The standalone app: `create_app()` builds jobsweb as its own Flask app (wsgi.py, `flask --app
jobsweb`, `gunicorn 'jobsweb:create_app()'`): settings, database, job types, commands, pages."""

import secrets
from pathlib import Path

from flask import Flask

from . import commands
from .core import embedded, settings
from .core.database import db, migrate
from .engine import builtin_jobs, registry  # noqa: F401 - importing builtin_jobs registers jobsweb.noop/sleep/fail
from .ops import retention  # noqa: F401 - importing it registers jobsweb.prune
from .web import site

PACKAGE = Path(__file__).resolve().parent


def resource(name):
    """The templates, static or migrations folder: inside the package when installed from the
    wheel, at the repository's top level in a checkout (pyproject.toml maps one to the other)."""
    inside = PACKAGE / name
    return inside if inside.is_dir() else PACKAGE.parent / name


def create_app(test_config=None):
    """Build the Flask app: settings, database, job handlers, CLI commands and pages."""
    app = Flask("jobsweb", instance_relative_config=True,
                template_folder=str(resource("templates")), static_folder=str(resource("static")))
    app.config.from_mapping(SQLALCHEMY_ENGINE_OPTIONS={"pool_pre_ping": True})
    app.config.update(settings.from_environment())
    if test_config:
        app.config.update(test_config)
    settings.check(app.config)

    Path(app.instance_path).mkdir(parents=True, exist_ok=True)
    if not app.config.get("SQLALCHEMY_DATABASE_URI"):
        app.config["SQLALCHEMY_DATABASE_URI"] = embedded.start(Path(app.instance_path) / "pgdata")
    if not app.config.get("SECRET_KEY"):
        app.config["SECRET_KEY"] = _local_secret_key(Path(app.instance_path) / "secret_key")

    db.init_app(app)
    migrate.init_app(app, db, directory=str(resource("migrations")))
    registry.load(app.config["JOBSWEB_HANDLERS"])
    commands.init_app(app)
    site.init_app(app)
    return app


def _local_secret_key(path):
    """Without SECRET_KEY, a random key kept in the instance folder, so sessions survive restarts."""
    if not path.exists():
        path.write_text(secrets.token_hex(32))
        path.chmod(0o600)
    return path.read_text().strip()
