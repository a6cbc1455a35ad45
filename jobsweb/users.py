"""`flask users create`, and the demo operator `flask dev` makes on a first run."""

import secrets

import click
from flask.cli import AppGroup
from sqlalchemy import func, select

from .auth import create_user
from .db import db
from .errors import InvalidInput
from .models import ROLES, User

users = AppGroup("users", help="Manage who may sign in to the admin screen.")

DEMO_EMAIL = "operator@example.com"


@users.command("create")
@click.argument("email")
@click.option("--role", type=click.Choice(ROLES), default="viewer", show_default=True)
@click.password_option(help="Asked for when not given.")
def create_command(email, role, password):
    """Create a user who can sign in with EMAIL."""
    try:
        user = create_user(email, password, role)
    except InvalidInput as exc:
        raise click.UsageError(str(exc)) from None
    db.session.commit()
    click.echo(f"created {user.role} {user.email}")


def ensure_demo_operator():
    """With no user at all, add an operator with a random password; return (email, password).

    The caller commits."""
    if db.session.scalar(select(func.count()).select_from(User)):
        return None
    password = secrets.token_urlsafe(12)
    create_user(DEMO_EMAIL, password, "operator")
    return DEMO_EMAIL, password


def init_app(app):
    app.cli.add_command(users)
