"""`flask jobs exec NAME -- COMMAND [ARGS...]`: a crontab line's command, run and recorded as a
run of definition NAME (ops/command_runs.py)."""

import sys

import click
from flask import current_app

from ..core.errors import InvalidInput
from ..ops import command_runs
from .finite_floats import FiniteFloatRange
from .groups import jobs, plain_errors


class BadExec(click.ClickException):
    """Bad input to exec: one line on stderr and exit code 2, like a usage error, but without
    the usage text around it (a crontab's mail should say what is wrong and nothing else)."""

    exit_code = 2


@jobs.command("exec", context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.option("--timeout", type=FiniteFloatRange(min=0, min_open=True, max=7 * 86400),
              help="Seconds the command may run; then SIGTERM, and SIGKILL --kill-after seconds later.")
@click.option("--kill-after", type=FiniteFloatRange(min=0, max=3600), default=10.0, show_default=True,
              help="Seconds between a timeout's SIGTERM and its SIGKILL.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def exec_command(name, timeout, kill_after, command):
    """Run COMMAND (no shell) as a run of definition NAME: recorded running, then succeeded or
    dead with its exit code and output. Exits with the command's exit code (128 + the signal if
    one killed it). While a run of NAME is running, records a skipped run and does not start
    COMMAND (unless NAME's overlap policy is allow).

    \b
    * * * * * cd /app && flask jobs exec backup --timeout 3600 -- pg_dump -f /backups/db.sql app
    """
    if not command:
        raise BadExec("give the command to run after --, e.g. flask jobs exec NAME -- ./backup.sh")
    with plain_errors():
        try:
            code = command_runs.run(current_app._get_current_object(), name, list(command), timeout, kill_after)
        except InvalidInput as exc:
            raise BadExec(str(exc)) from None
    sys.exit(code)
