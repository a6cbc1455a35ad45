"""`flask jobs migrate`, `jobs enqueue`, `jobs batch` and `jobs prune`: the schema, ad-hoc runs, a
batch's state, retention."""

import os
from datetime import datetime, timezone

import click
from flask import current_app

from ..core import schema, schema_objects, workflow_repair
from ..engine.enqueue.enqueuing import enqueue, parse_delay, parse_payload, parse_run_at
from ..engine.jobs.flow import check_priority
from ..engine.statements import RUN_STATUSES
from ..engine.runs.batch_status import get_batch
from ..ops import deploy_marks, retention
from ..web import audit
from .groups import committed, jobs, plain_errors, when


@jobs.command("migrate")
def migrate_command():
    """Create jobsweb's tables, or upgrade them to this version (safe to run from several processes)."""
    with plain_errors():
        applied = schema.upgrade()
        at_head = schema.current_revision() == schema_objects.HEAD
        # A restore of jobsweb's tables alone leaves its functions and trigger behind (DEPLOY.md),
        # and a bulk load may leave the trigger disabled.
        fixed = schema_objects.recreate() if at_head else schema_objects.Recreated([], [], [])
        # What ended while the trigger was missing or disabled left its dependents waiting.
        released = workflow_repair.release_stranded(fixed.trigger_back()) if at_head and not fixed.still else None
    if fixed.made:
        click.echo(f"jobsweb's schema: recreated {', '.join(fixed.made)}")
    if fixed.enabled:
        click.echo(f"jobsweb's schema: enabled {', '.join(fixed.enabled)} (it was disabled)")
    if released is not None and sum(released):
        click.echo(f"jobsweb's schema: moved on {sum(released):,} run(s) the workflow trigger had left waiting: "
                   f"{released.queued:,} released to the queue, {released.cancelled:,} cancelled")
    if fixed.still:
        raise click.ClickException(schema_objects.describe(fixed.still))
    if not applied:
        click.echo(f"jobsweb's schema is up to date ({schema.current_revision()})")
    else:
        click.echo(f"jobsweb's schema: applied {len(applied)} migration{'s' * (len(applied) > 1)}, "
                   f"{applied[0]} to {applied[-1]}: it is up to date")


@jobs.command("enqueue")
@click.argument("job_type")
@click.option("--payload", default="{}", help="A JSON object passed to the handler.")
@click.option("--run-at", help="ISO 8601 time with its timezone; default now.")
@click.option("--delay", help="Due this long from the database's now instead: seconds, or 90s, 5m, 2h, 1d.")
@click.option("--idempotency-key", help="Enqueue at most one run for this key.")
@click.option("--max-attempts", type=click.IntRange(min=1), help="Attempts before the run is dead.")
@click.option("--queue", help="The run's queue (created on first use) [the job type's, or default].")
@click.option("--priority", help="-1000..1000, smaller runs first [the job type's, or 0].")
@click.option("--unique-key", help="At most one unfinished run for this key: prints the existing one's id.")
def enqueue_command(job_type, payload, run_at, delay, idempotency_key, max_attempts, queue, priority, unique_key):
    """Enqueue a run of JOB_TYPE and print its id."""
    with plain_errors():
        max_bytes = current_app.config["JOBSWEB_MAX_PAYLOAD_BYTES"]
        run_id = enqueue(job_type, parse_payload(payload, max_bytes),
                         run_at=parse_run_at(run_at) if run_at else None,
                         delay=None if delay is None else parse_delay(delay),
                         idempotency_key=idempotency_key, max_attempts=max_attempts, queue=queue,
                         priority=None if priority is None else check_priority(priority),
                         unique_key=unique_key)
    click.echo(run_id)


@jobs.command("batch")
@click.argument("batch_id", type=click.IntRange(min=1))
def batch_command(batch_id):
    """Print the state of batch BATCH_ID: open or finished, its members by status, its callbacks."""
    with plain_errors():
        state = get_batch(batch_id)
    if state is None:
        raise click.ClickException(f"there is no batch {batch_id}")
    ended = state.members - state.pending
    click.echo(f"batch {state.id}: {'finished ' + when(state.finished_at, 'UTC') if state.finished else 'open'}, "
               f"{ended:,} of {state.members:,} members ended"
               + (f", finished {state.finishes} times" if state.finishes > 1 else ""))
    for status in RUN_STATUSES:
        if status in state.counts:
            click.echo(f"  {status}: {state.counts[status]:,}")
    for callback in state.callbacks:
        click.echo(f"  {callback['callback']}: run {callback['id']} {callback['status']}"
                   + (f" ({callback['reason']})" if callback["reason"] else ""))


@jobs.command("prune")
@click.option("--dry-run", is_flag=True, help="Only say what would be deleted.")
def prune_command(dry_run):
    """Delete finished runs older than their retention (JOBSWEB_RETAIN_*), in small batches."""
    with plain_errors():
        if dry_run:
            for p in retention.dry_run():
                span = f", finished {when(p.oldest, 'UTC')} to {when(p.newest, 'UTC')}" if p.runs else ""
                click.echo(f"{p.status}: would delete {p.runs:,} runs and {p.attempts:,} attempts "
                           f"older than {p.age}{span}")
            return
        pruned, workers = retention.prune()
    for p in pruned:
        click.echo(f"{p.status}: deleted {p.runs:,} runs and {p.attempts:,} attempts older than {p.age}")
    click.echo(f"workers: deleted {workers:,} not seen for {retention.WORKER_RETAIN_DAYS} days")


@jobs.command("mark-deploy")
@click.argument("label", required=False, default="")
def mark_deploy_command(label):
    """Mark a deploy, LABEL (a version or a commit), now: the dashboard's and the metrics page's
    charts draw it as a line. Without LABEL (or with an empty one, a variable the release phase
    lacks), the first platform variable set (SOURCE_VERSION, HEROKU_RELEASE_VERSION, ...) labels
    it, or else the time: a release phase never fails for want of a label."""
    label, source = (label.strip(), None) if label.strip() else deploy_marks.release_label(os.environ)
    said = f" (label from {source})" if source else ""
    if label is None:
        label = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        said = (f" (labelled with its time: no LABEL given, and none of "
                f"{', '.join(deploy_marks.RELEASE_VARIABLES)} is set)")

    def change():
        marked_id, marked_at = deploy_marks.mark(label, by=audit.command_identity())
        audit.record_command("mark_deploy", "deploy", marked_id, label=label)
        return marked_at

    marked_at = committed(change)
    click.echo(f"deploy {label} marked at {when(marked_at, 'UTC')}{said}")
