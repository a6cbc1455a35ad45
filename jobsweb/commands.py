"""The `flask` commands: run-jobs (the worker, built here with its duties), jobs migrate/
enqueue/demo/prune, the schedule commands (jobs define/pause/resume/run-now/schedules), jobs
users create, and for the standalone app dev (web + worker) and users create."""

import json
import os
import signal
import subprocess
import sys
from contextlib import contextmanager

import click
import psycopg
from flask import current_app
from flask.cli import AppGroup, with_appcontext
from sqlalchemy.exc import OperationalError, ProgrammingError

from .core import logs, schema
from .core.database import db, libpq_url
from .core.errors import InvalidInput, clean_text
from .core.models import ROLES
from .engine import lease_recovery
from .engine.enqueuing import enqueue, parse_payload, parse_run_at
from .engine.link import DatabaseUnavailable, describe
from .engine.worker import Worker
from .ops import alerts, retention
from .scheduling import definitions, materialise
from .scheduling.definitions import MISFIRE_POLICIES, OVERLAP_POLICIES
from .scheduling.schedule import Schedule, local_time, parse_timezone
from .web.accounts import create_user, ensure_demo_operator, reset_password, set_active, user_by_email

MULTILINE_OPTIONS = ("payload",)  # JSON text may span lines


class CleanCommand(click.Command):
    """The command line's part of the input-cleaning layer: every text argument and option is
    refused, naming it, if it holds a NUL or other control character (exit code 2)."""

    def invoke(self, ctx):
        for name, value in ctx.params.items():
            if isinstance(value, str):
                try:
                    clean_text(name, value, multiline=name in MULTILINE_OPTIONS)
                except InvalidInput as exc:
                    raise click.UsageError(str(exc), ctx) from None
        return super().invoke(ctx)


class CleanGroup(AppGroup):
    command_class = CleanCommand


jobs = CleanGroup("jobs", help="Enqueue and inspect jobs.")
users = CleanGroup("users", help="Manage who may sign in to the admin screen.")


@contextmanager
def plain_errors():
    """Turn the errors a person can fix into one-line messages instead of tracebacks."""
    try:
        yield
    except InvalidInput as exc:
        raise click.UsageError(str(exc)) from None
    except (DatabaseUnavailable, OperationalError) as exc:
        reason = describe(getattr(exc, "orig", None) or exc)
        raise click.ClickException(f"cannot reach the database: {reason}\n"
                                   "Check DATABASE_URL and that PostgreSQL is running.") from None
    except (psycopg.errors.UndefinedTable, ProgrammingError) as exc:
        if "does not exist" not in str(exc):
            raise
        raise click.ClickException("the jobsweb tables do not exist in this database: "
                                   "run `flask jobs migrate` first.") from None


def setup_logging():
    logs.setup(current_app.config["JOBSWEB_LOG_FORMAT"])


def build_worker(app, **options):
    """A Worker with its duties, in the order each tick runs them: recover expired leases,
    materialise due schedule slots (before the claim, which then takes them), evaluate alerts."""
    with app.app_context():
        conninfo = libpq_url(db.engine)
    duties = [lease_recovery.duty(app.config), materialise.duty(), alerts.Alerter(app).duty()]
    return Worker(app, conninfo, duties=duties, **options)


@click.command("run-jobs")
@click.option("--concurrency", type=click.IntRange(min=1), help="Jobs run at once [JOBSWEB_CONCURRENCY, 4].")
@click.option("--forever", is_flag=True, help="Keep polling instead of exiting when nothing is due.")
@click.option("--poll-interval", type=click.FloatRange(min=0, min_open=True),
              help="Seconds between polls when idle [JOBSWEB_POLL_INTERVAL, 5].")
@click.option("--max-runtime", type=click.FloatRange(min=0, min_open=True),
              help="Stop claiming after this many seconds and exit once held runs finish.")
@click.option("--shutdown-timeout", type=click.FloatRange(min=0),
              help="Seconds to let running jobs finish after SIGTERM [JOBSWEB_SHUTDOWN_TIMEOUT, 10].")
@with_appcontext
def run_jobs(concurrency, forever, poll_interval, max_runtime, shutdown_timeout):
    """Run due jobs: one cron tick, or a long-running worker with --forever."""
    setup_logging()
    config = current_app.config
    worker = build_worker(
        current_app._get_current_object(),
        concurrency=concurrency or config["JOBSWEB_CONCURRENCY"],
        poll_interval=poll_interval or config["JOBSWEB_POLL_INTERVAL"],
        shutdown_timeout=config["JOBSWEB_SHUTDOWN_TIMEOUT"] if shutdown_timeout is None else shutdown_timeout,
        max_runtime=max_runtime,
        forever=forever,
    )
    with plain_errors():
        worker.run()


@jobs.command("migrate")
def migrate_command():
    """Create jobsweb's tables, or upgrade them to this version (safe to run from several processes)."""
    with plain_errors():
        schema.upgrade()
    click.echo("jobsweb's schema is up to date")


@jobs.command("enqueue")
@click.argument("job_type")
@click.option("--payload", default="{}", help="A JSON object passed to the handler.")
@click.option("--run-at", help="ISO 8601 time with its timezone; default now.")
@click.option("--idempotency-key", help="Enqueue at most one run for this key.")
@click.option("--max-attempts", type=click.IntRange(min=1), help="Attempts before the run is dead.")
def enqueue_command(job_type, payload, run_at, idempotency_key, max_attempts):
    """Enqueue a run of JOB_TYPE and print its id."""
    with plain_errors():
        max_bytes = current_app.config["JOBSWEB_MAX_PAYLOAD_BYTES"]
        run_id = enqueue(job_type, parse_payload(payload, max_bytes),
                         run_at=parse_run_at(run_at) if run_at else None,
                         idempotency_key=idempotency_key, max_attempts=max_attempts)
    click.echo(run_id)


@jobs.command("define")
@click.argument("name")
@click.option("--type", "job_type", required=True, help="The job type each run executes.")
@click.option("--schedule", required=True, help="Cron ('0 6 * * *'), @daily and friends, or '@every 10m'.")
@click.option("--timezone", default="UTC", show_default=True, help="IANA name the schedule is read in.")
@click.option("--payload", default="{}", help="A JSON object passed to every run.")
@click.option("--max-attempts", type=int, help="Attempts before a run is dead.")
@click.option("--overlap", default="skip", show_default=True, help=f"{'|'.join(OVERLAP_POLICIES)}: "
              "while a run of this definition is queued or running, skip the slot, queue it, or allow it.")
@click.option("--misfire", default="latest", show_default=True, help=f"{'|'.join(MISFIRE_POLICIES)}: "
              "after an outage, run the latest missed slot, all of them, or none.")
@click.option("--alert-after", type=int, default=definitions.FAILING_AFTER, show_default=True,
              help="Dead runs in a row that raise a 'failing' alert.")
@click.option("--alert-webhook", help="This definition's alert webhook [JOBSWEB_ALERT_WEBHOOK_URL].")
@click.option("--alert-email", help="This definition's alert recipients, comma-separated [JOBSWEB_ALERT_EMAIL_TO].")
def define_command(name, job_type, schedule, timezone, payload, max_attempts, overlap, misfire,
                   alert_after, alert_webhook, alert_email):
    """Create or update the job definition NAME."""
    with plain_errors():
        payload = parse_payload(payload, current_app.config["JOBSWEB_MAX_PAYLOAD_BYTES"])
        definition = definitions.define(name, job_type, schedule, timezone=timezone, payload=payload,
                                        max_attempts=max_attempts, overlap=overlap, misfire=misfire,
                                        alert_after_failures=alert_after, alert_webhook_url=alert_webhook,
                                        alert_email_to=alert_email)
        db.session.commit()
        words = Schedule(definition.schedule, definition.timezone).describe()
    click.echo(f"{definition.name}: {words}; next run {_when(definition.next_run_at, definition.timezone)}")


@jobs.command("pause")
@click.argument("name")
def pause_command(name):
    """Stop creating runs for NAME (runs already queued still run)."""
    with plain_errors():
        definitions.pause(name)
        db.session.commit()
    click.echo(f"{name}: paused")


@jobs.command("resume")
@click.argument("name")
def resume_command(name):
    """Create runs for NAME again, from its next slot."""
    with plain_errors():
        definition = definitions.resume(name)
        db.session.commit()
    click.echo(f"{name}: resumed; next run {_when(definition.next_run_at, definition.timezone)}")


@jobs.command("run-now")
@click.argument("name")
def run_now_command(name):
    """Create a run of NAME due now, outside its schedule, and print its id."""
    with plain_errors():
        run_id = definitions.run_now(name)
        db.session.commit()
    click.echo(run_id)


@jobs.command("schedules")
def schedules_command():
    """List job definitions: schedule in words, next run, last status, failures."""
    with plain_errors():
        rows = [("NAME", "SCHEDULE", "NEXT RUN", "LAST STATUS", "FAILURES")]
        for d in definitions.all_definitions():
            words = Schedule(d.schedule, d.timezone).describe() if d.schedule else "(no schedule)"
            rows.append((d.name, words,
                         _when(d.next_run_at, d.timezone) if d.enabled else "paused",
                         d.last_status or "-", str(d.failure_count)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def _when(moment, tz_name):
    """A time in the definition's own timezone, as its owners read it."""
    return "-" if moment is None else local_time(moment, parse_timezone(tz_name))


@jobs.command("prune")
@click.option("--dry-run", is_flag=True, help="Only say what would be deleted.")
def prune_command(dry_run):
    """Delete finished runs older than their retention (JOBSWEB_RETAIN_*), in small batches."""
    with plain_errors():
        if dry_run:
            for p in retention.dry_run():
                span = f", finished {_when(p.oldest, 'UTC')} to {_when(p.newest, 'UTC')}" if p.runs else ""
                click.echo(f"{p.status}: would delete {p.runs:,} runs and {p.attempts:,} attempts "
                           f"older than {p.days} days{span}")
            return
        pruned, workers = retention.prune()
    for p in pruned:
        click.echo(f"{p.status}: deleted {p.runs:,} runs and {p.attempts:,} attempts older than {p.days} days")
    click.echo(f"workers: deleted {workers:,} not seen for {retention.WORKER_RETAIN_DAYS} days")


DEMO_RUNS = [
    ("jobsweb.noop", {}),
    ("jobsweb.sleep", {"seconds": 2}),
    ("jobsweb.fail", {"times": 1}),
    ("jobsweb.fail", {"permanent": True}),
]


@jobs.command("demo")
def demo_command():
    """Enqueue a few runs of the built-in job types, to watch a worker at work."""
    with plain_errors():
        for job_type, payload in DEMO_RUNS:
            run_id = enqueue(job_type, payload)
            click.echo(f"enqueued run {run_id}: {job_type} {json.dumps(payload)}")


@click.command("dev")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=5000, show_default=True, type=int)
@click.option("--demo/--no-demo", default=True, show_default=True, help="Enqueue the demo runs first.")
@with_appcontext
def dev_command(host, port, demo):
    """Migrate, then run the web app (gunicorn) and a worker together until Ctrl-C."""
    with plain_errors():
        schema.upgrade()
        demo_user = ensure_demo_operator()
        db.session.commit()
        if demo:
            for job_type, payload in DEMO_RUNS:
                enqueue(job_type, payload)
    # The children reach the same database; with the embedded server, this process keeps it
    # running until both have stopped.
    env = dict(os.environ, DATABASE_URL=libpq_url(db.engine), SECRET_KEY=current_app.config["SECRET_KEY"])
    flask = [sys.executable, "-m", "flask", "--app", "jobsweb"]
    children = [
        subprocess.Popen([sys.executable, "-m", "gunicorn", "--bind", f"{host}:{port}", "jobsweb:create_app()"],
                         env=env),
        subprocess.Popen(flask + ["run-jobs", "--forever", "--poll-interval", "1"], env=env),
    ]
    click.echo(f"jobsweb is running: web on http://{host}:{port}/ and a worker. Ctrl-C stops both.")
    if demo_user:
        click.echo(f"Sign in as {demo_user[0]} with password {demo_user[1]} (a demo operator; "
                   "`flask --app jobsweb users create EMAIL --role admin` makes more users).")
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        while all(child.poll() is None for child in children):
            try:
                children[0].wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
    except KeyboardInterrupt:
        pass
    finally:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            child.wait()


def _interrupt(signum, frame):
    raise KeyboardInterrupt


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


def init_app(app):
    """Add jobsweb's commands to the app's `flask`: `run-jobs` and the `jobs` group (`jobs users`
    inside it, so that a host's own `flask users` is left alone)."""
    app.cli.add_command(run_jobs)
    app.cli.add_command(jobs)


def init_standalone(app):
    """The standalone app's own commands: `flask dev`, and `flask users` as the docs have it."""
    app.cli.add_command(users)
    app.cli.add_command(dev_command)


jobs.add_command(users)
