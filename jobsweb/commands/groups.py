"""What every jobsweb command shares: the `jobs` and `users` groups, whose commands refuse
control characters in their arguments, one-line errors, logging, and times as people read them."""

import importlib
from contextlib import contextmanager

import click
import psycopg
from flask import current_app
from flask.cli import AppGroup, ScriptInfo
from sqlalchemy.exc import OperationalError, ProgrammingError

from ..core import conflicts, logs
from ..core.database import db, require_postgresql
from ..core.errors import ConfigError, InvalidInput, clean_text
from ..engine.link import DatabaseUnavailable, describe

MULTILINE_OPTIONS = ("payload",)  # JSON text may span lines


def check_database(ctx):
    """One error, naming the setting and its value, when jobsweb's database is not PostgreSQL:
    checked as one of jobsweb's commands starts (the host's own commands never are)."""
    app = ctx.ensure_object(ScriptInfo).load_app()
    with app.app_context():
        try:
            require_postgresql()
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None


class CleanCommand(click.Command):
    """The command line's part of the input-cleaning layer: every text argument and option is
    refused, naming it, if it holds a NUL or other control character (exit code 2). And
    jobsweb's database must be PostgreSQL (check_database)."""

    def invoke(self, ctx):
        check_database(ctx)
        for name, value in ctx.params.items():
            if isinstance(value, str):
                try:
                    clean_text(name, value, multiline=name in MULTILINE_OPTIONS)
                except InvalidInput as exc:
                    raise click.UsageError(str(exc), ctx) from None
        return super().invoke(ctx)


class CleanGroup(AppGroup):
    """A group whose commands live in `modules` (of this package), imported when one of its
    commands is looked up or listed: a cron tick (`flask run-jobs`) never looks in a group, and
    those modules import most of jobsweb (the web's audit log and run lists among it)."""

    command_class = CleanCommand

    def __init__(self, *args, modules=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.modules = modules

    def _load_commands(self):
        for name in self.modules:
            importlib.import_module(f".{name}", __package__)

    def get_command(self, ctx, cmd_name):
        self._load_commands()
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx):
        self._load_commands()
        return super().list_commands(ctx)


# Every module holding a command of `jobs` (`jobs runs` and `jobs users` among them).
JOBS_MODULES = ("exec_commands", "job_commands", "run_commands", "schedule_commands", "user_commands",
                "worker_commands")
jobs = CleanGroup("jobs", help="Enqueue and inspect jobs.", modules=JOBS_MODULES)
users = CleanGroup("users", help="Manage who may sign in to the admin screen.", modules=("user_commands",))
runs = CleanGroup("runs", help="Show, cancel and retry runs (commands/run_commands.py).", modules=("run_commands",))
jobs.add_command(runs)


@contextmanager
def plain_errors():
    """Turn the errors a person can fix into one-line messages instead of tracebacks."""
    try:
        yield
    except InvalidInput as exc:
        raise click.UsageError(str(exc)) from None
    except (DatabaseUnavailable, OperationalError) as exc:
        if state := conflicts.kind(exc):
            # The database answered, and rolled back a transaction that met another: not an
            # outage, and DATABASE_URL is fine (a statement not run again, or the worker's
            # Conflicted). The run commands say their own conflicts.Conflict, given up.
            raise click.ClickException(f"{conflicts.GAVE_UP} ({conflicts.KINDS[state]}: "
                                       f"{conflicts.first_line(exc)})") from None
        reason = describe(getattr(exc, "orig", None) or exc)
        raise click.ClickException(f"cannot reach the database: {reason}\n"
                                   "Check DATABASE_URL and that PostgreSQL is running.") from None
    except (psycopg.errors.UndefinedTable, ProgrammingError) as exc:
        if "does not exist" not in str(exc):
            raise
        raise click.ClickException("the jobsweb tables do not exist in this database: "
                                   "run `flask jobs migrate` first.") from None


def committed(change, *args, **kwargs):
    """Make one change to the database (a function of the layers below) and commit it; what
    goes wrong is a one-line error, and nothing is half-written. Returns what `change` did."""
    with plain_errors():
        result = change(*args, **kwargs)
        db.session.commit()
    return result


def setup_logging():
    """Log lines to stderr in JOBSWEB_LOG_FORMAT at JOBSWEB_LOG_LEVEL (unless a test runner set
    logging up)."""
    logs.setup(current_app.config["JOBSWEB_LOG_FORMAT"], current_app.config["JOBSWEB_LOG_LEVEL"])


def when(moment, tz_name):
    """A time in the definition's own timezone, as its owners read it."""
    from ..scheduling.schedule import local_time, parse_timezone  # croniter: not for a tick

    return "-" if moment is None else local_time(moment, parse_timezone(tz_name))
