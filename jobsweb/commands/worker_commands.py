"""Running jobs: `flask run-jobs` (the worker, built here with its duties), and for the
standalone app `flask dev` (web + worker) and `flask jobs demo`."""

import gc
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import click
from flask import current_app
from flask.cli import with_appcontext
from sqlalchemy.exc import OperationalError

from ..core import schema, schema_objects, settings
from ..core.database import db, execute, libpq_url
from ..engine.worker import lease_recovery
from ..engine.jobs.flow import check_queue
from ..engine.worker.loop import Worker
from ..ops import alerts, schema_watch
from ..scheduling import materialise
from .finite_floats import FiniteFloatRange
from .groups import CleanCommand, jobs, plain_errors, setup_logging


def build_worker(app, **options):
    """A Worker with its duties, in the order each tick runs them: look at the schema (a function
    or trigger dropped, a trigger disabled since start), recover expired leases, materialise due
    schedule slots (before the claim, which then takes them), evaluate alerts."""
    with app.app_context():
        conninfo = libpq_url(db.engine)
    direct = app.config["JOBSWEB_DIRECT_DATABASE_URL"]
    duties = [schema_watch.duty(app.config), lease_recovery.duty(app.config), materialise.duty(),
              alerts.Alerter(app).duty()]
    return Worker(app, conninfo, duties=duties, listen_conninfo=direct and libpq_url(direct), **options)


@click.command("run-jobs", cls=CleanCommand)
@click.option("--concurrency", type=click.IntRange(min=1, max=settings.MAX_CONCURRENCY),
              help=f"Jobs run at once, at most {settings.MAX_CONCURRENCY} [JOBSWEB_CONCURRENCY, 4].")
@click.option("--forever", is_flag=True, help="Keep polling instead of exiting when nothing is due.")
@click.option("--poll-interval", type=FiniteFloatRange(min=0, min_open=True),
              help="Seconds between polls when idle [JOBSWEB_POLL_INTERVAL, 5].")
@click.option("--max-runtime", type=FiniteFloatRange(min=0, min_open=True),
              help="Stop claiming after this many seconds and exit once held runs finish.")
@click.option("--shutdown-timeout", type=FiniteFloatRange(min=0),
              help="Seconds to let running jobs finish after SIGTERM [JOBSWEB_SHUTDOWN_TIMEOUT, 10].")
@click.option("--queues", help="Comma-separated queues this worker takes runs from [all].")
@with_appcontext
def run_jobs(concurrency, forever, poll_interval, max_runtime, shutdown_timeout, queues):
    """Run due jobs: one cron tick, or a long-running worker with --forever."""
    with plain_errors():
        queues = [check_queue(q.strip()) for q in queues.split(",")] if queues is not None else None
    setup_logging()
    with plain_errors():
        _refuse_an_incomplete_schema()
    config = current_app.config
    worker = build_worker(
        current_app._get_current_object(),
        concurrency=concurrency or config["JOBSWEB_CONCURRENCY"],
        poll_interval=poll_interval or config["JOBSWEB_POLL_INTERVAL"],
        shutdown_timeout=config["JOBSWEB_SHUTDOWN_TIMEOUT"] if shutdown_timeout is None else shutdown_timeout,
        max_runtime=max_runtime,
        forever=forever,
        queues=queues,
    )
    # What the imports and the app built lives as long as the worker: frozen, it is left out of
    # every collection, the interpreter's own at exit among them, which walked it all and took
    # longer than an empty tick's work (issue 41: a tick's exit, 0.1 s after its last line, not 1.2).
    gc.freeze()
    with plain_errors():
        worker.run()


def _refuse_an_incomplete_schema():
    """Stop before the first claim when the schema at the head lacks a table, index, function or
    trigger, or its trigger is disabled (schema_objects.py; a restore of jobsweb's tables alone
    lacks the functions): one line naming them, exit 1, rather than a claim failing at every tick
    or every chain step waiting for ever. A database that does not
    answer is left to the worker, which waits for it (--forever) or reports it; one never migrated
    is told to run `flask jobs migrate` (plain_errors, as the claim would have)."""
    try:
        lacking = schema_objects.missing_at_head()
    except OperationalError:
        lacking = []
    finally:
        db.session.rollback()
    if lacking:
        raise click.ClickException(schema_objects.describe(lacking))


DEMO_RUNS = [
    ("jobsweb.noop", {}),
    ("jobsweb.sleep", {"seconds": 2}),
    ("jobsweb.fail", {"times": 1}),
    ("jobsweb.fail", {"permanent": True}),
]


@jobs.command("demo")
def demo_command():
    """Enqueue a few runs of the built-in job types, to watch a worker at work."""
    from ..engine.enqueue.enqueuing import enqueue

    with plain_errors():
        for job_type, payload in DEMO_RUNS:
            run_id = enqueue(job_type, payload)
            click.echo(f"enqueued run {run_id}: {job_type} {json.dumps(payload)}")


DEMO_KEYS = [f"jobsweb-demo:{n}" for n in range(1, len(DEMO_RUNS) + 1)]
STARTUP_TIMEOUT = 30  # seconds `flask dev` waits for the web app and the worker before it says how to sign in
# The worker has started and the demo runs due now have been taken: what it logs at start-up
# is on the screen. Its pid tells it from a worker of an earlier start that did not stop.
STARTED = """
SELECT EXISTS (SELECT 1 FROM job_workers WHERE pid = %(pid)s AND stopped_at IS NULL AND started_at >= %(since)s)
   AND NOT EXISTS (SELECT 1 FROM job_runs WHERE idempotency_key = ANY (%(demo_keys)s)
                   AND (status = 'running' OR (status = 'queued' AND run_at <= now())))
"""


@click.command("dev", cls=CleanCommand)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=5000, show_default=True, type=int)
@click.option("--demo/--no-demo", default=True, show_default=True,
              help="Enqueue the demo runs (once: not again on later starts).")
@with_appcontext
def dev_command(host, port, demo):
    """Migrate, then run the web app (gunicorn) and a worker together until Ctrl-C."""
    # Here, not at the top: `flask run-jobs`, in this module too, needs none of the web.
    from ..engine.enqueue.enqueuing import enqueue
    from ..web.accounts import ensure_demo_admin

    with plain_errors():
        schema.upgrade()
        demo_user = ensure_demo_admin()
        if demo:
            # Idempotency keys: the demo runs are made on the first start only.
            for key, (job_type, payload) in zip(DEMO_KEYS, DEMO_RUNS):
                enqueue(job_type, payload, idempotency_key=key)
        db.session.commit()
    password_file = Path(current_app.instance_path) / "demo_password"
    if demo_user:
        _keep_secret(password_file, demo_user[1])
    since = db.session.scalar(db.select(db.func.now()))
    db.session.commit()
    # The children reach the same database; with the embedded server, this process keeps it
    # running until both have stopped.
    env = dict(os.environ, DATABASE_URL=libpq_url(db.engine), SECRET_KEY=current_app.config["SECRET_KEY"])
    flask = [sys.executable, "-m", "flask", "--app", "jobsweb"]
    children = [
        # One web process is plenty on a laptop; successful htmx refreshes stay out of its log.
        subprocess.Popen([sys.executable, "-m", "gunicorn", "--bind", f"{host}:{port}", "--workers", "1",
                          "--logger-class", "jobsweb.commands.quiet_polls.QuietPollsLogger",
                          "jobsweb:create_app()"], env=env),
        subprocess.Popen(flask + ["run-jobs", "--forever", "--poll-interval", "1"], env=env),
    ]
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        # The sign-in line comes last, after the start-up logs, where a newcomer looks for it.
        _wait_until_started(children, f"http://{host}:{port}/healthz", since)
        click.echo(f"\njobsweb is running: web on http://{host}:{port}/ and a worker. Ctrl-C stops both.")
        click.echo(_sign_in_words(password_file))
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


def _keep_secret(path, text):
    """Write the demo admin's password to the instance folder (mode 0600, like the secret key),
    so that every start can say it again."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(text)


def _sign_in_words(password_file):
    """How to sign in: the demo admin's email and quoted password while that password still
    works; otherwise how to make a user."""
    from ..web.accounts import DEMO_EMAIL, check_credentials

    password = password_file.read_text().strip() if password_file.exists() else None
    if password and check_credentials(DEMO_EMAIL, password) is not None:
        db.session.rollback()
        return (f"Sign in as {DEMO_EMAIL} with password '{password}' (a demo admin; "
                "`.venv/bin/flask --app wsgi users create EMAIL --role admin` makes more users).")
    db.session.rollback()
    return ("Sign in with one of your users; `.venv/bin/flask --app wsgi users create EMAIL --role admin` "
            "makes one.")


def _wait_until_started(children, health_url, since):
    """Until the web app answers and the worker has started and taken the demo runs due now
    (or a child exited, or STARTUP_TIMEOUT passed)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    web_up = worker_up = False
    while time.monotonic() < deadline and all(child.poll() is None for child in children):
        if not web_up:
            try:
                urllib.request.urlopen(health_url, timeout=2).close()
                web_up = True
            except urllib.error.HTTPError:
                web_up = True  # it answered: a 503 names a problem the page will show
            except OSError:
                pass
        if not worker_up:
            worker_up = bool(execute(STARTED, {"pid": children[1].pid, "since": since, "demo_keys": DEMO_KEYS}).scalar())
            db.session.rollback()
        if web_up and worker_up:
            return
        time.sleep(0.2)


def _interrupt(signum, frame):
    raise KeyboardInterrupt
