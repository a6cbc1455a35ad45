"""jobsweb: scheduled and background jobs run from PostgreSQL, with an admin screen."""

import secrets
from pathlib import Path

from flask import Flask

from .enqueuing import enqueue, enqueue_many
from .errors import InvalidInput
from .handlers import Cancelled, JobContext, PermanentError, job

__all__ = ["create_app", "enqueue", "enqueue_many", "job", "JobContext", "PermanentError", "Cancelled", "InvalidInput"]

ROOT = Path(__file__).resolve().parent.parent


def create_app(test_config=None):
    """Build the Flask app: settings, database, job handlers, CLI commands and pages."""
    from . import auth, cli, config, embedded, handlers, health, metrics, users, views, web
    from .db import db, migrate

    app = Flask(__name__, instance_relative_config=True,
                template_folder=str(ROOT / "templates"), static_folder=str(ROOT / "static"))
    app.config.from_mapping(SQLALCHEMY_ENGINE_OPTIONS={"pool_pre_ping": True})
    app.config.update(config.from_environment())
    if test_config:
        app.config.update(test_config)
    config.check(app.config)

    Path(app.instance_path).mkdir(parents=True, exist_ok=True)
    if not app.config.get("SQLALCHEMY_DATABASE_URI"):
        app.config["SQLALCHEMY_DATABASE_URI"] = embedded.start(Path(app.instance_path) / "pgdata")
    if not app.config.get("SECRET_KEY"):
        app.config["SECRET_KEY"] = _local_secret_key(Path(app.instance_path) / "secret_key")

    db.init_app(app)
    migrate.init_app(app, db, directory=str(ROOT / "migrations"))
    handlers.load(app.config["JOBSWEB_HANDLERS"])
    cli.init_app(app)
    health.init_app(app)
    metrics.init_app(app)
    web.init_app(app)
    auth.init_app(app)
    views.init_app(app)
    users.init_app(app)
    return app


def _local_secret_key(path):
    """Without SECRET_KEY, a random key kept in the instance folder, so sessions survive restarts."""
    if not path.exists():
        path.write_text(secrets.token_hex(32))
        path.chmod(0o600)
    return path.read_text().strip()
