"""Definitions declared in code: `@job("report", schedule="0 6 * * *", ...)` declares a job type
and its definition (named after the job type), and `sync` (`flask jobs sync`, run in the release
phase) writes the declarations into job_definitions.

Sync owns the definitions it created (source 'code') and nothing else:
- a declaration is created, or updated to match the code; an unchanged schedule keeps its
  pending slot (definitions.upsert), and the enabled flag is never written, so an operator's
  pause outlives every deploy;
- a definition made in the admin screen or with `flask jobs define` (source 'admin') is never
  changed: a declaration with its name is an error;
- a code definition whose declaration disappeared is disabled and marked 'code-removed', with
  its runs and history kept; declared again, it is 'code' again but stays disabled until a
  person resumes it (see migration 0011).
"""

import sys
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import func, select

from . import definitions
from ..core.database import db, execute
from ..core.errors import InvalidInput, check_emails, check_url
from ..core.models import JobDefinition
from ..engine.jobs import registry
from ..engine.enqueue.enqueuing import Job, check_payload
from ..engine.jobs.flow import check_priority, check_queue
from .schedule import Schedule

# define()'s options a declaration may give besides its schedule, with define()'s defaults.
# max_attempts, timeout and the backoff are the job type's own (@job's first options): its
# runs take them from there.
OPTIONS = {"timezone": "UTC", "payload": None, "overlap": "skip", "misfire": "latest",
           "grace_seconds": definitions.DEFAULT_GRACE, "lease": None,
           "alert_after_failures": definitions.FAILING_AFTER, "alert_webhook_url": None,
           "alert_email_to": None}

# Two syncs at once (two release phases racing) take turns, so that each sees what the other
# wrote and reports created/updated truthfully.
SYNC_LOCK = "SELECT pg_advisory_xact_lock(hashtext('jobsweb.sync'))"


def job(name, *, max_attempts=None, timeout=None, backoff_base=None, backoff_cap=None, permanent=(),
        queue=None, priority=None, cancel="cooperative", schedule=None, **options):
    """Register the decorated function as the handler of job type `name`; return it as a Job,
    still callable as before, with `.enqueue(payload, ...)`.

    The handler is called with a JobContext. `permanent` lists exception types that mean
    "retrying cannot help" and send the run straight to dead, like PermanentError. `queue`
    and `priority` are the defaults of its runs (enqueue() may override them). `cancel`:
    "cooperative" (a cancel or a timeout turns ctx.cancelled true) or "terminate" (the handler runs
    in a child process the worker ends: engine/worker/child_process.py).

    With `schedule` (cron, @daily, '@every 10m'), it also declares a definition named `name`
    that `flask jobs sync` writes; `options` are define()'s (timezone, payload, overlap,
    misfire, grace_seconds, lease, alert_after_failures, alert_webhook_url, alert_email_to).
    They are checked here, so a bad declaration fails at import with InvalidInput naming the
    field; what needs the app's settings (the payload's size) is checked by sync.
    """
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"job() got unexpected keyword arguments: {', '.join(unknown)}")
    if schedule is None and options:
        raise InvalidInput("schedule", f"is needed for {', '.join(sorted(options))} to mean anything "
                                       f"(in @job({name!r}))")
    definition = None if schedule is None else _declared(name, dict(OPTIONS, **options, schedule=schedule))

    registry.check_cancel(name, cancel, None)
    if queue is not None:
        check_queue(queue)
    if priority is not None:
        check_priority(priority)

    def register(func):
        job_type = registry.JobType(name, func, max_attempts, timeout, backoff_base, backoff_cap,
                                    tuple(permanent), queue=queue, priority=priority, definition=definition,
                                    cancel=cancel)
        registry.add(job_type)
        return Job(job_type)

    return register


def _declared(name, definition):
    """The declaration, with every check that needs no app run; InvalidInput names the field."""
    with _naming(name):
        Schedule(definition["schedule"], definition["timezone"])
        check_payload(definition["payload"], sys.maxsize)  # the size limit is a setting: sync checks it
        definitions.check_policies(
            overlap=definition["overlap"], misfire=definition["misfire"],
            grace_seconds=definition["grace_seconds"], timeout=None, lease=definition["lease"],
            backoff_base=None, backoff_cap=None, alert_after_failures=definition["alert_after_failures"])
        check_url("alert_webhook_url", definition["alert_webhook_url"] or "")
        check_emails("alert_email_to", definition["alert_email_to"] or "")
    return definition


@contextmanager
def _naming(name):
    """Add the declaring @job to an InvalidInput's message: the field alone does not say where."""
    try:
        yield
    except InvalidInput as exc:
        raise InvalidInput(exc.field, f"{exc.message} (in @job({name!r}))") from None


@dataclass
class Change:
    """What sync did to one definition."""

    name: str
    action: str  # created | updated | unchanged | disabled | declared again
    note: str = ""

    def __str__(self):
        return f"{self.name}: {self.action}{self.note}"


def declared():
    """The job types that declare a definition in code, by name."""
    return [job_type for job_type in map(registry.get, registry.names()) if job_type.definition is not None]


def sync():
    """Write the definitions declared in code, in db.session (the caller commits); the Changes.

    Every declaration is checked before anything is written, so one bad declaration (or one
    that names an admin-made definition) writes nothing.
    """
    execute(SYNC_LOCK)
    existing = {d.name: d for d in db.session.scalars(select(JobDefinition).with_for_update())}
    planned = []
    for job_type in declared():
        current = existing.get(job_type.name)
        with _naming(job_type.name):
            if current is not None and current.source == "admin":
                raise InvalidInput("name", f"{job_type.name!r} is a definition made in the admin screen or "
                                           "with `flask jobs define`, which sync never changes: rename the "
                                           "job type, or delete that definition")
            planned.append((current, definitions.checked(job_type.name, job_type.name, **job_type.definition)))

    changes = []
    for current, values in planned:
        name = values["name"]
        if current is None:
            change = Change(name, "created")
        elif current.source == "code-removed":
            change = Change(name, "declared again", "" if current.enabled else
                            "; still disabled since its declaration disappeared: resume it in the admin "
                            "or with `flask jobs resume`")
        elif all(getattr(current, key) == value for key, value in values.items() if key != "next_run_at"):
            changes.append(Change(name, "unchanged", "" if current.enabled else " (paused)"))
            continue
        else:
            change = Change(name, "updated", "" if current.enabled else " (paused)")
        definitions.upsert(values, source="code")
        changes.append(change)

    names = {job_type.name for job_type in declared()}
    for definition in existing.values():
        if definition.source == "code" and definition.name not in names:
            definition.source = "code-removed"
            definition.enabled = False
            definition.updated_at = func.now()
            changes.append(Change(definition.name, "disabled", ": no longer declared in code; kept with its runs"))
    db.session.flush()
    return changes
