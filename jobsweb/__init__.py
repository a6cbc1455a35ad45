"""jobsweb: scheduled and background jobs run from PostgreSQL, with an admin screen.

The public API. The layers below it, each importing only those before it:
core (settings, errors, database, tables) -> engine (enqueue, registry, the run state
machine's SQL, the worker) -> scheduling -> ops (alerts, retention, metrics) -> web (the
admin screen) -> the extension, the standalone app and the commands. docs/ARCHITECTURE.md
draws them.

Each name is imported where it lives on first use (PEP 562): `flask run-jobs`, a cron tick,
imports jobsweb through `create_app` alone and pays for none of the rest.
"""

import importlib

# name -> (module of this package, attribute; None for the module itself)
_EXPORTS = {
    "create_app": (".app", "create_app"),
    "JobsWeb": (".extension", "JobsWeb"),
    "enqueue": (".engine.enqueue.enqueuing", "enqueue"),
    "enqueue_many": (".engine.enqueue.enqueuing", "enqueue_many"),
    "job": (".scheduling.code_definitions", "job"),
    "JobContext": (".engine.jobs.registry", "JobContext"),
    "PermanentError": (".engine.jobs.registry", "PermanentError"),
    "Cancelled": (".engine.jobs.registry", "Cancelled"),
    "Retry": (".engine.jobs.registry", "Retry"),
    "InvalidInput": (".core.errors", "InvalidInput"),
    "RunNotFound": (".core.errors", "RunNotFound"),
    "RunStateError": (".core.errors", "RunStateError"),
    # The README's jobsweb.definitions.define(...) and jobsweb.schedule.next_fire_times(...).
    "definitions": (".scheduling.definitions", None),
    "schedule": (".scheduling.schedule", None),
    "alembic_include_name": (".core.schema", "alembic_include_name"),
    "get_run": (".engine.runs.run_status", "get_run"),
    "Run": (".engine.runs.run_status", "Run"),
    "batch": (".engine.enqueue.workflows", "batch"),
    "chain": (".engine.enqueue.workflows", "chain"),
    "get_batch": (".engine.runs.batch_status", "get_batch"),
    "cancel": (".engine.runs.run_control", "cancel"),
    "retry": (".engine.runs.run_control", "retry"),
    # What cancel() and retry() raise once a conflict outlasted their patience: for callers to catch.
    "Conflict": (".core.conflicts", "Conflict"),
    "signals": (".engine.jobs.signals", None),
}

__all__ = list(_EXPORTS)


def __getattr__(name):
    try:
        module_name, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'jobsweb' has no attribute {name!r}") from None
    module = importlib.import_module(module_name, __name__)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value  # once: later look-ups find it without this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
