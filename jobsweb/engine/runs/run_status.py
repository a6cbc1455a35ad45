"""jobsweb.get_run(run_id): a run as application code reads it (RQ's Job.fetch(id), Celery's
AsyncResult(id)), for "Exporting… 66%" in a host's own template with one call."""

from dataclasses import dataclass, fields
from datetime import datetime

from flask import current_app
from sqlalchemy import select

from ...core.database import db, libpq_url, require_postgresql
from ...core.errors import BIGINT_MAX, InvalidInput
from ...core.models import JobRun
from .. import statements
from . import run_waiting


@dataclass(frozen=True)
class Run:
    """One run, read-only, as it was when get_run() read it."""

    id: int
    job_type: str
    status: str  # waiting (for other runs) | queued | running | succeeded | failed (a retry is due) | dead | cancelled | skipped | missed
    attempts: int  # attempts started so far
    max_attempts: int
    progress: float | None  # 0.0 to 1.0, the latest ctx.progress() of its handler
    progress_note: str | None
    progress_at: datetime | None
    progress_data: dict | None  # the latest ctx.progress(data=...), a small JSON object
    result: object  # what the handler returned (JSON), once succeeded
    last_error: str | None
    error_type: str | None
    # The stack of its last failed attempt, raw like last_error (the run page shows it masked:
    # print it through web/shown_text.shown() or not at all where others can read it).
    traceback: str | None
    created_at: datetime
    run_at: datetime  # when it is (or was) due; for a failed run, its retry
    started_at: datetime | None  # of its latest attempt
    finished_at: datetime | None

    @property
    def done(self):
        """True once the run will not execute again (succeeded, dead, cancelled, skipped, missed)."""
        return self.status in statements.ENDED_STATUSES

    def wait(self, timeout, *, allow_inside_job=False):
        """This run once it has ended (a new Run; this one if it had ended already), woken by
        LISTEN/NOTIFY as it ends: TimeoutError after `timeout` seconds (None: no limit),
        RunNotFound if it is deleted meanwhile. Behind a pooler in transaction mode without
        JOBSWEB_DIRECT_DATABASE_URL, a poll every run_waiting.POLL_EVERY seconds
        (engine/runs/run_waiting.py). Inside a handler, RuntimeError unless `allow_inside_job`:
        whatever the run's status, so a test sees what could deadlock in production."""
        run_waiting.refuse_inside_handler(allow_inside_job)
        timeout = run_waiting.check_timeout(timeout)
        if self.done or current_app.config.get("JOBSWEB_INLINE"):  # inline runs end before enqueue() returns
            return self
        config = current_app.config
        where = run_waiting.Waiting(libpq_url(config["JOBSWEB_DIRECT_DATABASE_URL"] or db.engine.url),
                                    listen=config["JOBSWEB_LISTEN"])
        return Run(**run_waiting.until_ended(self.id, timeout, FIELDS, where))


INLINE_RUNS = "jobsweb_inline_runs"  # app.extensions key: inline mode's runs (engine/enqueue/inline.py), by id
RENAMED = {"traceback": "last_stack"}  # Run's field: its job_runs column, where the names differ
COLUMNS = [getattr(JobRun, RENAMED.get(field.name, field.name)).label(field.name) for field in fields(Run)]
FIELDS = [f"{RENAMED[name]} AS {name}" if name in RENAMED else name for name in (f.name for f in fields(Run))]


def get_run(run_id):
    """The run `run_id` (what enqueue() returned) as a Run, or None if there is none; read in
    db.session, so a run enqueued with session=db.session is seen before the commit. In inline
    mode (JOBSWEB_INLINE), the run kept in memory."""
    if isinstance(run_id, bool) or not isinstance(run_id, int) or not 1 <= run_id <= BIGINT_MAX:
        raise InvalidInput("run_id", f"must be a run id (a whole number above 0), got {run_id!r}")
    if current_app.config.get("JOBSWEB_INLINE"):
        record = current_app.extensions.get(INLINE_RUNS, {}).get(run_id)
        return None if record is None else Run(**record)
    require_postgresql(from_code=True)  # on SQLite: this, not "no such table: job_runs"
    row = db.session.execute(select(*COLUMNS).where(JobRun.id == run_id)).mappings().first()
    return None if row is None else Run(**row)
