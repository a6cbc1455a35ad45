"""The schedule and flow-control commands: `flask jobs define/sync/pause/resume/run-now/
schedules`, and `jobs queue/pause-type/resume-type`."""

import click
from flask import current_app, url_for
from sqlalchemy import select

from ..core.database import db
from ..core.models import JobDefinition
from ..core.errors import InvalidInput, check_job_type_name
from ..engine.jobs import flow
from ..engine.enqueue.enqueuing import parse_payload
from ..engine.jobs.flow import check_priority
from ..scheduling import code_definitions, definitions
from ..scheduling.definitions import MISFIRE_POLICIES, OVERLAP_POLICIES
from ..scheduling.schedule import Schedule
from ..web import audit
from .groups import committed, jobs, plain_errors, when


@jobs.command("define")
@click.argument("name")
@click.option("--type", "job_type", help="The job type each run executes (not with --external).")
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
@click.option("--alert-email", help="This definition's alert recipients, comma-separated [JOBSWEB_ALERT_EMAIL_TO]; "
              "sent through JOBSWEB_SMTP_HOST, which must be set.")
@click.option("--queue", help="Its runs' queue (created on first use) [the job type's, or default].")
@click.option("--priority", help="Its runs' priority, -1000..1000, smaller first [the job type's, or 0].")
@click.option("--max-duration", type=int, help="Seconds after which a still running run opens a 'slow' "
              "incident [3x the p95 of its last 20 successful runs, at least 60].")
@click.option("--external", is_flag=True, help="Watched, never run by jobsweb: its crontab line (flask jobs "
              "exec) or script (its ping URL) reports each run; a slot not reported within --grace is missed.")
@click.option("--grace", type=int, default=definitions.DEFAULT_GRACE, show_default=True,
              help="Seconds a slot may be late (or, --external, unreported) before it counts as overdue.")
def define_command(name, job_type, schedule, timezone, payload, max_attempts, overlap, misfire,
                   alert_after, alert_webhook, alert_email, queue, priority, max_duration, external, grace):
    """Create or update the job definition NAME."""
    with plain_errors():
        if job_type is None and not external:
            raise InvalidInput("type", "is required (or --external for a job jobsweb only watches)")
        payload = parse_payload(payload, current_app.config["JOBSWEB_MAX_PAYLOAD_BYTES"])
        before = audit.settings_of(db.session.scalar(select(JobDefinition).where(JobDefinition.name == name.strip())))
        definition = definitions.define(name, job_type, schedule, timezone=timezone, payload=payload,
                                        max_attempts=max_attempts, overlap=overlap, misfire=misfire,
                                        alert_after_failures=alert_after, alert_webhook_url=alert_webhook,
                                        alert_email_to=alert_email, queue=queue, external=external,
                                        grace_seconds=grace, max_duration=max_duration,
                                        priority=None if priority is None else check_priority(priority))
        if before is None:
            audit.record_command("create", "definition", definition.id, name=definition.name,
                                 schedule=definition.schedule)
        elif edited := audit.changes(before, definition):
            audit.record_command("edit", "definition", definition.id, name=definition.name, changes=edited)
        db.session.commit()
        words = Schedule(definition.schedule, definition.timezone).describe()
    click.echo(f"{definition.name}: {words}; next run {when(definition.next_run_at, definition.timezone)}")
    if definition.external:
        base = current_app.config["JOBSWEB_BASE_URL"]
        with current_app.test_request_context(base_url=base or "http://localhost"):
            url = url_for("jobsweb.pings.ping", token=definition.ping_token, _external=bool(base))
        click.echo(f"external: report its runs with `flask jobs exec {definition.name} -- COMMAND`, "
                   f"or its ping URL {url}")


def _schedule_words(definition):
    """A definition's schedule in words; one stored before a rule refused it is listed, not fatal."""
    try:
        return Schedule(definition.schedule, definition.timezone).describe()
    except InvalidInput as exc:
        return f"(invalid: {exc.message})"


@jobs.command("sync")
def sync_command():
    """Create or update the definitions declared in code (@job(..., schedule=...)); run it at
    every release. Admin-made definitions are left alone; those no longer declared are disabled."""
    changes = committed(_sync)
    if not code_definitions.declared():
        click.echo("no job type declares a schedule in code (are the modules with @job imported?)")
    for change in changes:
        click.echo(str(change))


def _sync():
    changes = code_definitions.sync()
    for change in changes:
        if change.action != "unchanged":
            definition = definitions.get(change.name)
            audit.record_command(f"sync_{change.action.replace(' ', '_')}", "definition", definition.id,
                                 name=change.name)
    return changes


@jobs.command("pause")
@click.argument("name")
def pause_command(name):
    """Stop creating runs for NAME (runs already queued still run)."""
    committed(_audited, "pause", definitions.pause, name)
    click.echo(f"{name}: paused")


@jobs.command("resume")
@click.argument("name")
def resume_command(name):
    """Create runs for NAME again, from its next slot."""
    definition = committed(_audited, "resume", definitions.resume, name)
    click.echo(f"{name}: resumed; next run {when(definition.next_run_at, definition.timezone)}")


@jobs.command("queue")
@click.argument("name")
@click.option("--limit", help="At most N of its runs running at once, across all workers.")
@click.option("--no-limit", is_flag=True, help="Remove the concurrency limit.")
@click.option("--rate", help="At most N starts per SECONDS, across all workers (5/1: five a second).")
@click.option("--no-rate", is_flag=True, help="Remove the rate limit.")
@click.option("--pause/--resume", default=None, help="Leave its runs queued / claim them again.")
def queue_command(name, limit, no_limit, rate, no_rate, pause):
    """Show queue NAME's settings, or change them (the queue is created on first use)."""
    with plain_errors():
        if limit is not None and no_limit or rate is not None and no_rate:
            raise InvalidInput("limit" if no_limit and limit is not None else "rate",
                               "give a value or --no-..., not both")
        row = flow.configure_queue(name, limit=None if no_limit else flow.UNSET if limit is None else limit,
                                   rate=None if no_rate else flow.UNSET if rate is None else rate,
                                   paused=pause)
        changed = {}
        if limit is not None or no_limit:
            changed["limit"] = row.concurrency_limit
        if rate is not None or no_rate:
            changed["rate"] = row.rate_limit and f"{row.rate_limit}/{row.rate_seconds}"
        if pause is not None:
            changed["paused"] = pause
        if changed:
            audit.record_command("set_queue", "queue", queue=row.name, **changed)
        db.session.commit()
    name, limit, rate_limit, rate_seconds, paused = row
    rate = f"{rate_limit}/{rate_seconds}s" if rate_limit else "none"
    click.echo(f"{name}: limit {limit or 'none'}, rate {rate}, {'paused' if paused else 'running'}")


@jobs.command("pause-type")
@click.argument("job_type")
def pause_type_command(job_type):
    """Leave every run of JOB_TYPE queued until resume-type (runs already running finish)."""
    committed(_pause_type, job_type, True)
    click.echo(f"{job_type}: paused")


@jobs.command("resume-type")
@click.argument("job_type")
def resume_type_command(job_type):
    """Claim runs of JOB_TYPE again."""
    committed(_pause_type, job_type, False)
    click.echo(f"{job_type}: resumed")


def _pause_type(job_type, paused):
    flow.pause_type(check_job_type_name("job_type", job_type), paused)
    audit.record_command("pause_type" if paused else "resume_type", "job_type", job_type=job_type)


@jobs.command("run-now")
@click.argument("name")
def run_now_command(name):
    """Create a run of NAME due now, outside its schedule, and print its id."""
    run_id = committed(_audited, "run_now", definitions.run_now, name)
    click.echo(run_id)


def _audited(action, change, name):
    """`change` to the definition `name`, with its audit entry."""
    result = change(name)
    definition = definitions.get(name)
    audit.record_command(action, "definition", definition.id, name=definition.name,
                         **({"run_id": result} if action == "run_now" else {}))
    return result


@jobs.command("schedules")
def schedules_command():
    """List job definitions: schedule in words, next run, last status, failures."""
    with plain_errors():
        rows = [("NAME", "SCHEDULE", "NEXT RUN", "LAST STATUS", "FAILURES")]
        for d in definitions.all_definitions():
            words = _schedule_words(d) if d.schedule else "(no schedule)"
            rows.append((d.name, words,
                         when(d.next_run_at, d.timezone) if d.enabled else "paused",
                         d.last_status or "-", str(d.failure_count)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
