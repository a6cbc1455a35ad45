"""Alembic environment: migrate the database of the Flask app that Flask-Migrate runs in."""

import logging
from logging.config import fileConfig

from alembic import context
from flask import current_app
from sqlalchemy import text

config = context.config
fileConfig(config.config_file_name)
logger = logging.getLogger("alembic.env")

engine = current_app.extensions["migrate"].db.engine
config.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%"))
target_metadata = current_app.extensions["migrate"].db.metadata

# Any number on which every jobsweb process agrees: the web release phase, a worker and a
# developer may all run `flask db upgrade` at once, and only one of them may apply each step.
MIGRATION_LOCK = 7_146_010


def run_migrations_offline():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata,
                      literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online():
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata,
                          **current_app.extensions["migrate"].configure_args)
        with context.begin_transaction():
            # Taken before Alembic reads the current revision, so a second upgrader waits and
            # then finds the work done.
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
