"""Job definitions: define (create or update by name), pause, resume, run now, and what is
wrong with them now (overdue, stuck, failing), which alerts, the dashboard and /metrics read.

Every input is checked before anything is written, and each error names its field. Slot
times come from the database clock (`now()` of the same transaction).

define, pause, resume and run_now write in the caller's db.session and leave the commit to
the caller, so that a change and what goes with it (the admin's audit entry) commit together.
"""

import secrets
from dataclasses import dataclass

from flask import current_app
from sqlalchemy import case, exists, func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import aliased

from ..core.database import db, execute
from ..core.errors import InvalidInput, check_emails, check_url, clean_name
from ..core.models import JobDefinition, JobRun
from ..engine.enqueue.enqueuing import check_job_type, check_max_attempts, check_payload
from ..engine.jobs.flow import check_priority, check_queue, ensure_queue
from ..engine.jobs.retry import MAX_DELAY
from ..engine.statements import ACTIVE_STATUSES, RUN_NOW
from . import definition_job_types
from .schedule import Schedule

NAME_MAX_CHARS = 200
DEFAULT_GRACE = 300  # seconds a slot may be late before the definition counts as overdue
FAILING_AFTER = 2  # default consecutive dead runs that make a definition "failing" (and alert)
URL_MAX_CHARS = 2000
MISFIRE_POLICIES = ("latest", "all", "skip")
OVERLAP_POLICIES = ("skip", "queue", "allow")
MAX_SECONDS = MAX_DELAY  # timeouts, leases and retry delays: 7 days at most
MAX_GRACE = 30 * 86400  # seconds; a monthly job may be days late before it counts as overdue
MAX_ALERT_AFTER = 1000
PING_TOKEN_BYTES = 24  # secrets.token_urlsafe: 32 URL-safe characters


def define(name, job_type, schedule, **options):
    """Create the definition `name`, or update it; return it.

    Options (all checked, see `checked`): timezone="UTC", payload=None, max_attempts=None,
    overlap="skip", misfire="latest", grace_seconds=DEFAULT_GRACE, timeout=None, lease=None,
    backoff_base=None, backoff_cap=None, alert_after_failures=FAILING_AFTER,
    alert_webhook_url=None, alert_email_to=None, queue=None and priority=None (of its runs;
    None: the job type's), max_duration=None (whole seconds: a run still running after it
    opens a 'slow' incident; None: 3x the p95 of its recent successful runs), external=False
    (watched, never run: job_type must be None; its runs are reported by `flask jobs exec` or
    its ping URL).

    next_run_at is recomputed when the schedule or timezone changes (or the definition is
    new); otherwise the pending slot is kept. A paused definition stays paused.
    """
    return upsert(checked(name, job_type, schedule, **options))


def checked(name, job_type, schedule, *, timezone="UTC", payload=None, max_attempts=None,
            overlap="skip", misfire="latest", grace_seconds=DEFAULT_GRACE, timeout=None,
            lease=None, backoff_base=None, backoff_cap=None, alert_after_failures=FAILING_AFTER,
            alert_webhook_url=None, alert_email_to=None, queue=None, priority=None, max_duration=None,
            external=False):
    """The column values of a definition, every input checked (InvalidInput naming its field);
    next_run_at is the first slot after the database's now()."""
    config = current_app.config
    name = _check_name(name)
    if external is True:
        registered, job_type, max_attempts = definition_job_types.external(name, job_type, max_attempts)
    elif external is False:
        # A web process may import no handler; its page's transaction reads the workers' types.
        registered = check_job_type(job_type, workers=True, in_session=True)
    else:
        raise InvalidInput("external", f"must be true or false, got {external!r}")
    parsed = Schedule(schedule, timezone)
    payload = check_payload(payload, config["JOBSWEB_MAX_PAYLOAD_BYTES"])
    max_attempts = check_max_attempts(max_attempts, registered, config)
    check_policies(overlap=overlap, misfire=misfire, grace_seconds=grace_seconds, timeout=timeout,
                   lease=lease, backoff_base=backoff_base, backoff_cap=backoff_cap,
                   alert_after_failures=alert_after_failures)
    alert_webhook_url, alert_email_to = _check_routing(alert_webhook_url, alert_email_to)
    if max_duration is not None:
        _check_whole("max_duration", max_duration, minimum=1, maximum=int(MAX_SECONDS))
    queue = check_queue(registered.queue if queue is None else queue)
    priority = check_priority(registered.priority if priority is None else priority)

    now = db.session.scalar(select(func.now()))
    return dict(name=name, job_type=job_type, payload=payload, schedule=parsed.expression,
                timezone=parsed.tz.key, max_attempts=max_attempts, overlap_policy=overlap,
                misfire_policy=misfire, grace_seconds=grace_seconds, timeout_seconds=timeout,
                lease_seconds=lease, backoff_base=backoff_base, backoff_cap=backoff_cap,
                alert_after_failures=alert_after_failures, alert_webhook_url=alert_webhook_url,
                alert_email_to=alert_email_to, queue=queue, priority=priority,
                max_duration_seconds=max_duration, external=external,
                ping_token=secrets.token_urlsafe(PING_TOKEN_BYTES) if external else None,
                next_run_at=parsed.next_after(now))


# What `input_errors` puts in place of a refused value to find the next error: a value that
# passes its own check and that no other check depends on.
_STAND_INS = {"name": "x", "job_type": "jobsweb.noop", "schedule": "@daily", "timezone": "UTC",
              "payload": None, "max_attempts": None, "overlap": "skip", "misfire": "latest",
              "grace_seconds": DEFAULT_GRACE, "timeout": None, "lease": None, "backoff_base": None,
              "backoff_cap": None, "alert_after_failures": FAILING_AFTER, "alert_webhook_url": None,
              "alert_email_to": None, "queue": None, "priority": None,
              "max_duration": None, "external": False}


def input_errors(name, job_type, schedule, **options):
    """Every InvalidInput `checked` would raise for these arguments, not only the first: each
    refused value is replaced by a stand-in and the check runs again. For a form that shows
    all of its errors at once."""
    values = dict(options, name=name, job_type=job_type, schedule=schedule)
    errors = []
    while len(errors) < len(_STAND_INS):
        try:
            checked(**values)
            break
        except InvalidInput as exc:
            field = "schedule" if exc.field == "n" else exc.field
            errors.append(exc)
            if field not in _STAND_INS or values.get(field) == _STAND_INS[field]:
                break
            values[field] = _STAND_INS[field]
    return errors


def check_policies(*, overlap, misfire, grace_seconds, timeout, lease, backoff_base, backoff_cap,
                   alert_after_failures):
    """The options whose checks need no app or database: also run where @job declares a schedule."""
    _check_choice("overlap", overlap, OVERLAP_POLICIES)
    _check_choice("misfire", misfire, MISFIRE_POLICIES)
    _check_whole("grace_seconds", grace_seconds, minimum=0, maximum=MAX_GRACE)
    for field, value in (("timeout", timeout), ("lease", lease), ("backoff_base", backoff_base),
                         ("backoff_cap", backoff_cap)):
        _check_seconds(field, value)
    if backoff_base and backoff_cap and backoff_cap < backoff_base:
        raise InvalidInput("backoff_cap", "must be at least backoff_base")
    _check_whole("alert_after_failures", alert_after_failures, minimum=1, maximum=MAX_ALERT_AFTER)


def upsert(values, source=None):
    """Write the definition `values` (from `checked`) by name; return it. `source` ('code' for
    `flask jobs sync`) replaces the existing one's; None keeps it ('admin' for a new one)."""
    ensure_queue(values["queue"])  # a queue is created on first use
    table = JobDefinition.__table__
    stmt = insert(table).values(**values, **({"source": source} if source else {}))
    # An unchanged schedule keeps its pending slot: re-running a deploy script that defines
    # every job must not push a slot that is due in a second to the next day.
    keep = (table.c.schedule.is_not_distinct_from(stmt.excluded.schedule)
            & table.c.timezone.is_not_distinct_from(stmt.excluded.timezone)
            & table.c.next_run_at.is_not(None))
    # One statement, so two people defining one name at once cannot both insert.
    stmt = stmt.on_conflict_do_update(index_elements=["name"], set_={
        **{key: stmt.excluded[key] for key in values if key not in ("name", "next_run_at", "ping_token")},
        # An external definition keeps its ping URL when edited (regenerate_token changes it);
        # one that is no longer external has none.
        **({"ping_token": case((stmt.excluded.external, func.coalesce(table.c.ping_token, stmt.excluded.ping_token)),
                               else_=None)} if "ping_token" in values else {}),
        **({"source": source} if source else {}),
        "next_run_at": case((keep, table.c.next_run_at), else_=stmt.excluded.next_run_at),
        "updated_at": func.now(),
    }).returning(table.c.id)
    definition_id = db.session.execute(stmt).scalar_one()
    # populate_existing: the caller may hold this definition already, loaded before the upsert.
    return db.session.get(JobDefinition, definition_id, populate_existing=True)


def get(name):
    """The definition called `name`, or InvalidInput naming `name`."""
    definition = db.session.scalar(select(JobDefinition).where(JobDefinition.name == name))
    if definition is None:
        raise InvalidInput("name", f"no job definition is called {name!r}")
    return definition


def all_definitions():
    """Every definition, by name."""
    return db.session.scalars(select(JobDefinition).order_by(JobDefinition.name)).all()


def external_definitions(limit=50):
    """External definitions, the most recently reported first (never reported: last)."""
    return db.session.scalars(select(JobDefinition).where(JobDefinition.external)
                              .order_by(JobDefinition.last_run_at.desc().nulls_last(), JobDefinition.name)
                              .limit(limit)).all()


def pause(name):
    """Stop materialising slots of `name`; runs already created are left alone."""
    definition = _locked(name)
    definition.enabled = False
    definition.updated_at = func.now()
    return definition


def resume(name):
    """Materialise `name` again from its next future slot; slots while paused are not owed."""
    definition = _locked(name)
    if not definition.enabled:
        now = db.session.scalar(select(func.now()))
        definition.next_run_at = Schedule(definition.schedule, definition.timezone).next_after(now)
        definition.enabled = True
        definition.updated_at = func.now()
    return definition


def run_now(name):
    """Create a run of `name` due now, outside its schedule (RUN_NOW); return its id.
    next_run_at does not move; listening workers start the run when the caller commits."""
    definition = get(name)
    if definition.external:
        raise InvalidInput("name", f"{name!r} is external: jobsweb does not run it (its crontab line or "
                                   "script reports its runs)")
    return execute(RUN_NOW, {"definition_id": definition.id}).scalar_one()


def regenerate_token(definition):
    """Give an external definition a new ping token (the old URL stops working); the caller commits."""
    if not definition.external:
        raise InvalidInput("external", "only an external definition has a ping URL")
    definition.ping_token = secrets.token_urlsafe(PING_TOKEN_BYTES)
    definition.updated_at = func.now()
    return definition.ping_token


def _in_flight():
    return exists().where(JobRun.definition_id == JobDefinition.id,
                          JobRun.status.in_(ACTIVE_STATUSES))


def overdue():
    """Enabled definitions whose slot is over its grace and nothing of theirs is queued or
    running: the tick did not happen (cron broken, every worker down)."""
    late = JobDefinition.next_run_at < func.now() - func.make_interval(
        0, 0, 0, 0, 0, 0, JobDefinition.grace_seconds)
    return db.session.scalars(
        select(JobDefinition).where(JobDefinition.enabled, late, ~_in_flight())
        .order_by(JobDefinition.next_run_at)).all()


def stuck():
    """[(definition, run)]: enabled definitions whose oldest queued run has been due for more
    than the grace and no worker took it (none is running, or none handles its job type).
    A run queued behind its predecessor (overlap 'queue') is waiting on purpose and left out.
    Uses index job_runs_definition_active."""
    grace = func.make_interval(0, 0, 0, 0, 0, 0, JobDefinition.grace_seconds)
    waiting = aliased(JobRun)
    oldest = (select(waiting.id).where(waiting.definition_id == JobDefinition.id, waiting.status == "queued",
                                       waiting.after_run_id.is_(None), waiting.run_at < func.now() - grace)
              .order_by(waiting.id).limit(1).correlate(JobDefinition).scalar_subquery())
    return db.session.execute(
        select(JobDefinition, JobRun).join(JobRun, JobRun.id == oldest).where(JobDefinition.enabled)
        .order_by(JobRun.run_at)).all()


def unreported():
    """[(definition, run)]: enabled external definitions whose newest run is a slot that was not
    reported within its grace (missed): the crontab line or script stopped reporting. Their
    slots keep being materialised (as missed), so overdue() alone would not see them.
    Uses index job_runs_definition."""
    newest = (select(JobRun.id).where(JobRun.definition_id == JobDefinition.id).order_by(JobRun.id.desc())
              .limit(1).correlate(JobDefinition).scalar_subquery())
    return db.session.execute(
        select(JobDefinition, JobRun).join(JobRun, JobRun.id == newest)
        .where(JobDefinition.enabled, JobDefinition.external, JobRun.status == "missed")
        .order_by(JobRun.scheduled_for)).all()


def failing():
    """Definitions whose last alert_after_failures (default FAILING_AFTER) or more runs all
    ended dead."""
    return db.session.scalars(
        select(JobDefinition).where(JobDefinition.failure_count >= JobDefinition.alert_after_failures)
        .order_by(JobDefinition.failure_count.desc(), JobDefinition.name)).all()


@dataclass
class Problem:
    """Something wrong with a definition now, in the words of its incident kind."""

    kind: str  # 'overdue' or 'failing'
    definition: JobDefinition
    # overdue because this queued run waits and no worker takes it (or, for an external
    # definition, because this slot was missed: not reported)
    run: JobRun | None = None


# A deleted definition's runs stay as history. ON DELETE SET NULL would clear definition_id
# and leave them looking ad hoc (and their dead runs would then count into the ad-hoc dead
# incident): they keep the definition's name instead. Index job_runs_definition.
FORGET_DEFINITION = """
UPDATE job_runs SET deleted_definition = %(name)s, definition_id = NULL WHERE definition_id = %(id)s
"""


def delete(definition):
    """Delete a definition; its runs are kept, with its name (the caller commits)."""
    execute(FORGET_DEFINITION, {"id": definition.id, "name": definition.name})
    db.session.delete(definition)


def failed_last(count):
    """'has failed its last 3 runs', or 'its last run' for one, for a failing definition."""
    return "has failed its last run" if count == 1 else f"has failed its last {count} runs"


def problems(skip=()):
    """Overdue definitions (their ticks stopped, or a run waits that no worker takes) and
    failing ones: at most one Problem per definition and kind, leaving out the (definition id,
    kind) pairs in `skip` (those with an open incident). Alerts and the dashboard read this."""
    skip = set(skip)
    found = ([Problem("overdue", d) for d in overdue()]
             + [Problem("overdue", d, run) for d, run in stuck()]
             + [Problem("overdue", d, run) for d, run in unreported()]
             + [Problem("failing", d) for d in failing()])
    out = []
    for problem in found:
        key = (problem.definition.id, problem.kind)
        if key not in skip:
            skip.add(key)
            out.append(problem)
    return out


def _locked(name):
    definition = db.session.scalar(
        select(JobDefinition).where(JobDefinition.name == name).with_for_update())
    if definition is None:
        raise InvalidInput("name", f"no job definition is called {name!r}")
    return definition


def _check_name(name):
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput("name", "is required")
    if len(name) > NAME_MAX_CHARS:
        raise InvalidInput("name", f"must be at most {NAME_MAX_CHARS} characters")
    # A line break in a name once made the alert email's subject raise, unrecorded.
    return clean_name("name", name.strip())


def _check_choice(field, value, choices):
    if value not in choices:
        raise InvalidInput(field, f"must be one of {', '.join(choices)}, got {value!r}")


def _check_whole(field, value, minimum, maximum):
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise InvalidInput(field, f"must be a whole number from {minimum} to {maximum}, got {value!r}")


def _check_routing(webhook_url, email_to):
    """(URL or None, 'a@x, b@y' or None): a definition's own alert channels, checked."""
    webhook_url = check_url("alert_webhook_url", (webhook_url or "").strip())
    emails = check_emails("alert_email_to", email_to or "")
    if webhook_url and len(webhook_url) > URL_MAX_CHARS:
        raise InvalidInput("alert_webhook_url", f"must be at most {URL_MAX_CHARS} characters")
    if emails and not current_app.config["JOBSWEB_SMTP_HOST"]:
        raise InvalidInput("alert_email_to", "needs JOBSWEB_SMTP_HOST set on the server to send email")
    return webhook_url, ", ".join(emails) or None


def _check_seconds(field, value):
    if value is None:
        return
    # not 0 < value <= MAX_SECONDS is also true of NaN; inf and 1e300 are over the maximum.
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= MAX_SECONDS:
        raise InvalidInput(field, f"must be a number of seconds greater than 0 and at most {MAX_SECONDS:g} "
                                  f"(7 days), got {value!r}")
