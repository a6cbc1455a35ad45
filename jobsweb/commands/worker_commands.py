"""Running jobs: `flask run-jobs` (the worker, built here with its duties), and for the
standalone app `flask dev` (web + worker) and `flask jobs demo`."""

import json
import os
import signal
import subprocess
import sys

import click
from flask import current_app
from flask.cli import with_appcontext

from ..core import schema
from ..core.database import db, libpq_url
from ..engine import lease_recovery
from ..engine.enqueuing import enqueue
from ..engine.flow import check_queue
from ..engine.worker import Worker
from ..ops import alerts
from ..scheduling import materialise
from ..web.accounts import ensure_demo_operator
from .groups import jobs, plain_errors, setup_logging


def build_worker(app, **options):
    """A Worker with its duties, in the order each tick runs them: recover expired leases,
    materialise due schedule slots (before the claim, which then takes them), evaluate alerts."""
    with app.app_context():
        conninfo = libpq_url(db.engine)
    direct = app.config["JOBSWEB_DIRECT_DATABASE_URL"]
    duties = [lease_recovery.duty(app.config), materialise.duty(), alerts.Alerter(app).duty()]
    return Worker(app, conninfo, duties=duties, listen_conninfo=direct and libpq_url(direct), **options)


@click.command("run-jobs")
@click.option("--concurrency", type=click.IntRange(min=1), help="Jobs run at once [JOBSWEB_CONCURRENCY, 4].")
@click.option("--forever", is_flag=True, help="Keep polling instead of exiting when nothing is due.")
@click.option("--poll-interval", type=click.FloatRange(min=0, min_open=True),
              help="Seconds between polls when idle [JOBSWEB_POLL_INTERVAL, 5].")
@click.option("--max-runtime", type=click.FloatRange(min=0, min_open=True),
              help="Stop claiming after this many seconds and exit once held runs finish.")
@click.option("--shutdown-timeout", type=click.FloatRange(min=0),
              help="Seconds to let running jobs finish after SIGTERM [JOBSWEB_SHUTDOWN_TIMEOUT, 10].")
@click.option("--queues", help="Comma-separated queues this worker takes runs from [all].")
@with_appcontext
def run_jobs(concurrency, forever, poll_interval, max_runtime, shutdown_timeout, queues):
    """Run due jobs: one cron tick, or a long-running worker with --forever."""
    with plain_errors():
        queues = [check_queue(q.strip()) for q in queues.split(",")] if queues is not None else None
    setup_logging()
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
    with plain_errors():
        worker.run()


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
