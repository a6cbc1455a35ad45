"""`flask jobs users ...` (and `flask users ...` in the standalone app): jobsweb's own users."""

import click

from ..core.models import ROLES
from ..core.errors import InvalidInput
from ..web import throttle
from ..web.accounts import create_user, reset_password, set_active, user_by_email
from ..web.audit import record_command
from .groups import committed, users


@users.command("create")
@click.argument("email")
@click.option("--role", type=click.Choice(ROLES), default="viewer", show_default=True)
@click.password_option(help="Asked for when not given.")
def create_user_command(email, role, password):
    """Create a user who can sign in with EMAIL."""
    user = committed(_create_user, email, password, role)
    click.echo(f"created {user.role} {user.email}")


@users.command("deactivate")
@click.argument("email")
def deactivate_user_command(email):
    """Stop EMAIL from signing in, and end every session they have now."""
    user = committed(_change_user, "deactivate_user", email, set_active, False)
    click.echo(f"deactivated {user.email}; their sessions have ended")


@users.command("reactivate")
@click.argument("email")
def reactivate_user_command(email):
    """Let EMAIL sign in again (with the password they had)."""
    user = committed(_change_user, "reactivate_user", email, set_active, True)
    click.echo(f"reactivated {user.email}")


@users.command("reset-password")
@click.argument("email")
@click.password_option(help="Asked for when not given.")
def reset_password_command(email, password):
    """Give EMAIL a new password; every session they have ends."""
    user = committed(_change_user, "reset_password", email, reset_password, password)
    click.echo(f"new password set for {user.email}; their sessions have ended")


@users.command("unlock")
@click.argument("email", required=False)
@click.option("--address", help="Forget this client address's wrong passwords (for every account).")
def unlock_command(email, address):
    """Forget the wrong passwords of EMAIL (from every address), of an --address, or both, so
    that the sign-in limits start again from nothing. EMAIL need not be a user's."""
    count = committed(_unlock, email, address)
    who = " and ".join(filter(None, [email, address and f"address {address}"]))
    click.echo(f"forgot {count} wrong password{'s' * (count != 1)} of {who}")


def _create_user(email, password, role):
    user = create_user(email, password, role)
    record_command("create_user", "user", user.id, email=user.email, role=user.role)
    return user


def _unlock(email, address):
    if not email and not address:
        raise InvalidInput("email", "give an EMAIL, an --address, or both")
    count = throttle.forget(email=email, address=address)
    record_command("unlock", "user", None, email=email, address=address, forgotten=count)
    return count


def _change_user(action, email, change, *args):
    user = user_by_email(email)
    change(user, *args)
    record_command(action, "user", user.id, email=user.email)
    return user
