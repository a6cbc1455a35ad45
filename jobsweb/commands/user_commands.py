"""`flask jobs users ...` (and `flask users ...` in the standalone app): jobsweb's own users."""

import click

from ..core.database import db
from ..core.models import ROLES
from ..web.accounts import create_user, reset_password, set_active, user_by_email
from .groups import plain_errors, users


@users.command("create")
@click.argument("email")
@click.option("--role", type=click.Choice(ROLES), default="viewer", show_default=True)
@click.password_option(help="Asked for when not given.")
def create_user_command(email, role, password):
    """Create a user who can sign in with EMAIL."""
    with plain_errors():
        user = create_user(email, password, role)
        db.session.commit()
    click.echo(f"created {user.role} {user.email}")


@users.command("deactivate")
@click.argument("email")
def deactivate_user_command(email):
    """Stop EMAIL from signing in, and end every session they have now."""
    with plain_errors():
        user = user_by_email(email)
        set_active(user, False)
        db.session.commit()
    click.echo(f"deactivated {user.email}; their sessions have ended")


@users.command("reactivate")
@click.argument("email")
def reactivate_user_command(email):
    """Let EMAIL sign in again (with the password they had)."""
    with plain_errors():
        user = user_by_email(email)
        set_active(user, True)
        db.session.commit()
    click.echo(f"reactivated {user.email}")


@users.command("reset-password")
@click.argument("email")
@click.password_option(help="Asked for when not given.")
def reset_password_command(email, password):
    """Give EMAIL a new password; every session they have ends."""
    with plain_errors():
        user = user_by_email(email)
        reset_password(user, password)
        db.session.commit()
    click.echo(f"new password set for {user.email}; their sessions have ended")
