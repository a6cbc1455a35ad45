"""`flask jobs runs show/cancel/retry`: one run as JSON, and the admin screen's Cancel and Retry
from a shell, for the runs named or every run a filter matches; audited as `cli:<OS user>`."""

import dataclasses
import getpass
import json

import click
from flask import current_app
from sqlalchemy import func, select
from werkzeug.datastructures import MultiDict

from ..core import conflicts
from ..core.database import db
from ..core.errors import RunStateError
from ..core.logs import json_escaped
from ..core.masking import masked_value
from ..core.models import JobRun
from ..engine.runs import run_actions, run_control
from ..engine.runs.run_status import get_run
from ..engine.statements import CANCELLABLE, RETRYABLE, RUN_STATUSES
from ..web import audit, runlist
from .groups import plain_errors, runs

AUDITED_IDS = 100  # the ids a bulk entry lists, as the screen's bulk delete; the counts cover them all


def _command_user():
    """`cli:<OS user>`, as web/audit.record_command names whoever ran a command."""
    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):  # no USER and no passwd entry (a container's numeric user)
        return "cli:unknown"


@runs.command("show")
@click.argument("run_id", type=click.IntRange(min=1, max=2**63 - 1))
def show_command(run_id):
    """Print run RUN_ID as JSON (jobsweb.get_run's fields)."""
    with plain_errors():
        run = get_run(run_id)
    if run is None:
        raise click.UsageError(f"RUN_ID: there is no run {run_id}")
    fields = dataclasses.asdict(run)
    fields["done"] = run.done
    # Masked as the run page shows it, bidi controls escaped (docs/MASKING.md): a terminal is a reader too.
    fields = masked_value(fields, current_app.config["JOBSWEB_MASK_KEYS"])
    click.echo(json_escaped(json.dumps(fields, default=lambda value: value.isoformat(), indent=2, ensure_ascii=False)))


def _filter_options(command):
    for option in reversed([
        click.option("--job-type", help="Every run of this job type (with the other filters)."),
        click.option("--status", "statuses", multiple=True, type=click.Choice(RUN_STATUSES),
                     help="Every run in this status (repeat for several)."),
        click.option("--queue", help="Every run of this queue."),
        click.option("--dry-run", is_flag=True, help="Only print how many runs the filter would act on."),
    ]):
        command = option(command)
    return command


@runs.command("cancel")
@click.argument("run_ids", metavar="[RUN_ID]...", nargs=-1, type=click.IntRange(min=1, max=2**63 - 1))
@click.option("--reason", help="Why, for the audit log.")
@_filter_options
def cancel_command(run_ids, reason, job_type, statuses, queue, dry_run):
    """Cancel runs as the admin screen does: each RUN_ID, or every run matching --job-type,
    --status and --queue. A waiting, queued or failed run is cancelled with what waits for it;
    a running run's worker is asked to stop it."""
    _act("cancel", run_ids, job_type, statuses, queue, dry_run, reason)


@runs.command("retry")
@click.argument("run_ids", metavar="[RUN_ID]...", nargs=-1, type=click.IntRange(min=1, max=2**63 - 1))
@_filter_options
def retry_command(run_ids, job_type, statuses, queue, dry_run):
    """Queue failed, dead or cancelled runs again, due now, as the admin screen does: each
    RUN_ID, or every run matching --job-type, --status and --queue."""
    _act("retry", run_ids, job_type, statuses, queue, dry_run, None)


def _act(action, run_ids, job_type, statuses, queue, dry_run, reason):
    takes = CANCELLABLE if action == "cancel" else RETRYABLE
    filtered = bool(job_type or statuses or queue)
    if run_ids and filtered:
        raise click.UsageError("RUN_ID: give run ids, or --job-type/--status/--queue, not both")
    if not run_ids and not filtered:
        raise click.UsageError(f"RUN_ID: give the runs to {action}, or --job-type, --status or --queue "
                               "for every run they match")
    if run_ids and dry_run:
        raise click.UsageError("--dry-run: only with --job-type, --status or --queue")
    outside = [status for status in statuses if status not in takes]
    if outside:
        raise click.UsageError(f"--status: {action} takes runs that are {', '.join(takes)}, not {outside[0]}")
    with plain_errors():
        if run_ids:
            _each(action, run_ids, reason)
        else:
            _matching(action, takes, job_type, statuses, queue, dry_run, reason)


def _each(action, run_ids, reason):
    """Act on each run named, one audited transaction each (the screen's button, once per id);
    exit 1 if a run's status did not allow it. Every id must name a run, or nothing is done."""
    run_ids = list(dict.fromkeys(run_ids))
    known = set(db.session.scalars(select(JobRun.id).where(JobRun.id.in_(run_ids))))
    db.session.rollback()
    missing = [run_id for run_id in run_ids if run_id not in known]
    if missing:
        raise click.UsageError(f"RUN_ID: there is no run {', '.join(map(str, missing))}; nothing was changed")
    actor, refused = _command_user(), 0
    for position, run_id in enumerate(run_ids):
        try:
            if action == "cancel":
                done = run_control.cancel(run_id, reason=reason, actor=actor)
                click.echo(f"run {run_id}: " + ("cancelled" if done == run_control.CANCELLED
                                                 else "running: its worker was asked to stop it"))
            else:
                run_control.retry(run_id, actor=actor)
                click.echo(f"run {run_id}: queued again")
        except RunStateError as exc:
            click.echo(f"run {run_id}: not changed: {exc.message}", err=True)
            refused += 1
        except conflicts.Conflict as exc:
            # Seconds of conflicts on one run (cancel() and retry() ran it again meanwhile): the
            # database is busy with these runs; the rest wait for the operator to try again.
            after = len(run_ids) - position - 1
            raise click.ClickException(f"run {run_id}: not changed: {exc}" + (
                f"; the {after} run{'s' * (after != 1)} after it were not tried" if after else "")) from None
    if refused:
        raise click.exceptions.Exit(1)


def _matching(action, takes, job_type, statuses, queue, dry_run, reason):
    """Act on every run the filter matches, in batches of JOBSWEB_BULK_BATCH, one committed
    transaction each, as the screen's "… all matching" does; one audit entry for them all."""
    args = MultiDict([("job_type", job_type or ""), ("queue", queue or "")] + [("status", s) for s in statuses])
    try:
        run_filter = runlist.RunFilter.from_args(args)
    except runlist.BadFilter as exc:
        raise click.UsageError(str(exc)) from None
    wanted = list(statuses or takes)
    if dry_run:
        count = db.session.scalar(select(func.count()).where(*run_filter.conditions(), JobRun.status.in_(wanted)))
        click.echo(f"{count} run{'s' * (count != 1)} to {action} (dry run: nothing was changed)")
        return
    changed, requested, considered, waiting, ids_changed, gave_up = 0, 0, 0, 0, [], None
    try:
        for ids in runlist.matching_ids_in_batches(run_filter, takes, current_app.config["JOBSWEB_BULK_BATCH"]):
            # A conflict with a worker claiming or finishing one of these runs runs the batch
            # again, for seconds if need be (core/conflicts.py: INTERACTIVE).
            if action == "cancel":
                done, asked = conflicts.retried(lambda ids=ids: _committed(run_actions.cancel, ids),
                                                undo=db.session.rollback, patience=conflicts.INTERACTIVE)
                requested += len(asked)
                ids_changed += done + asked
            else:
                done = conflicts.retried(lambda ids=ids: _committed(run_actions.retry, ids),
                                         undo=db.session.rollback, patience=conflicts.INTERACTIVE)
                waiting += len(run_actions.waits_for_failed(set(ids).difference(done)))
                ids_changed += done
            changed += len(done)
            considered += len(ids)
    except conflicts.Conflict as exc:
        gave_up = exc  # the batches before it stay done: audited and said, then the error
        db.session.rollback()
    if gave_up is None or considered:
        audit.record_command(f"bulk_{action}", "runs", None, scope="matching", filter=run_filter.args(),
                             changed=changed, cancel_requested=requested, left=considered - changed - requested,
                             waiting_for_failed=waiting, ids=sorted(ids_changed, reverse=True)[:AUDITED_IDS],
                             **({"reason": reason} if reason else {}), **({"stopped": str(gave_up)} if gave_up else {}))
        db.session.commit()
    if gave_up is not None:
        raise click.ClickException(f"{gave_up}; " + (
            f"{changed + requested} of the runs that match were changed by the batches before it, the rest were not"
            if considered else "nothing was changed")) from None
    verb = "Cancelled" if action == "cancel" else "Retried"
    click.echo(f"{verb} {changed} of {considered} run{'s' * (considered != 1)} that match.")
    if requested:
        click.echo(f"Asked {requested} running run{'s' * (requested != 1)} to stop.")
    left = considered - changed - requested
    if left:
        click.echo(f"{left} left as they were" + (f" ({waiting} wait for a run that ended dead or cancelled)"
                                                 if waiting else "") + ".")


def _committed(change, ids):
    result = change(ids)
    db.session.commit()
    return result
