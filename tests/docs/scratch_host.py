"""The scratch host app the docs' blocks run in: Flask, Flask-SQLAlchemy and jobsweb on
DATABASE_URL, the admin screen under /admin/jobs. conftest.py copies it into each document's
scratch directory as docs_host.py, so that `flask` there (FLASK_APP=docs_host) finds it."""

import os

from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from jobsweb import JobsWeb

db = SQLAlchemy()
jobs = JobsWeb()


def create_app(test_config=None):
    """A host app on DATABASE_URL (postgresql:// means psycopg 3 here, as jobsweb reads it)."""
    app = Flask(__name__)
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://")):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    app.config.update(SQLALCHEMY_DATABASE_URI=url, SECRET_KEY=os.environ.get("SECRET_KEY", "docs-scratch-host-key-0123456789abcdef"))
    app.config.update(test_config or {})
    db.init_app(app)
    jobs.init_app(app, url_prefix="/admin/jobs")
    return app
