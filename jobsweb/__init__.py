"""jobsweb: scheduled and background jobs run from PostgreSQL, with an admin screen.

The public API. The layers below it, each importing only those before it:
core (settings, errors, database, tables) -> engine (enqueue, registry, the run state
machine's SQL, the worker) -> scheduling -> ops (alerts, retention, metrics) -> web (the
admin screen) -> the extension, the standalone app and the commands. docs/ARCHITECTURE.md
draws them.
"""

from .app import create_app
from .core.errors import InvalidInput, RunNotFound, RunStateError
from .core.schema import alembic_include_name
from .engine.enqueuing import enqueue, enqueue_many
from .engine.registry import Cancelled, JobContext, PermanentError
from .engine.run_control import cancel, retry
from .engine.run_status import Run, get_run
from .engine.workflows import batch, chain, get_batch
from .extension import JobsWeb
# The README's jobsweb.definitions.define(...) and jobsweb.schedule.next_fire_times(...).
from .scheduling import definitions, schedule
from .scheduling.code_definitions import job

__all__ = ["create_app", "JobsWeb", "enqueue", "enqueue_many", "job", "JobContext", "PermanentError", "Cancelled",
           "InvalidInput", "definitions", "schedule", "alembic_include_name", "get_run", "Run", "batch", "chain",
           "get_batch", "cancel", "retry", "RunNotFound", "RunStateError"]
