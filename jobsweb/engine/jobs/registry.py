"""The job-type registry: `@job` registers a handler; the worker looks handlers up by type."""

import asyncio
import contextlib
import contextvars
import functools
import importlib
import inspect
import json
import math
import re
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

from ...core.errors import (
    ConfigError,
    InvalidInput,
    check_job_type_name,
    clean_text,
    has_nul,
)
from . import effects
from .flow import check_priority, check_queue

# The job type of an external definition and its runs. The contract keeps job_type NOT NULL,
# and a reserved name in jobsweb's own namespace that no handler may register (add refuses it)
# means CLAIM_RUNS, which takes only job types the worker has a handler for, can never claim one
# of these runs, whatever state an operator puts it in (engine/runs/reported_runs.py records them).
EXTERNAL_JOB_TYPE = "jobsweb.external"

# ctx.progress() writes at most this often per run (seconds); the value it holds back is written
# by the next call past the interval, or when the handler returns.
PROGRESS_INTERVAL = 0.5
PROGRESS_NOTE_MAX_CHARS = 200
# ctx.progress(data=...)'s object, as compact UTF-8 JSON: what a progress bar's page needs
# (current/total, a file name, partial counts) fits many times over; a result belongs in the
# handler's return, which is written once, where this is written every PROGRESS_INTERVAL.
PROGRESS_DATA_MAX_BYTES = 4096
PROGRESS_DATA_MAX_DEPTH = 64  # nested objects and lists, as a payload's: deeper overflowed json's recursion
# What a new job type may be called. A name shows on every page, in /metrics labels, log lines
# and shell commands copied from the admin screen: HTML, quotes or spaces there only ever meant
# trouble. Checked as a handler registers, so names already in the database (runs, schedules,
# pauses of types registered before) are read and acted on as they are.
JOB_TYPE_NAME = re.compile(r"[A-Za-z0-9._:-]+")


def progress_data(data):
    """ctx.progress's `data` as it will be stored and read back (JSON: a tuple comes back a list,
    keys as text), or InvalidInput naming the field and what is wrong."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise InvalidInput("data", f"must be a JSON object (a dict), got {type(data).__name__}")
    try:
        text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:  # a set, a datetime, NaN, a circular reference
        raise InvalidInput("data", f"must hold JSON values only: {exc}") from None
    except RecursionError:  # a thousand levels or so, before any depth could be counted
        raise InvalidInput("data", f"must be nested at most {PROGRESS_DATA_MAX_DEPTH} levels deep") from None
    try:
        size = len(text.encode())
    except UnicodeEncodeError:  # a lone surrogate, which no UTF-8 (nor PostgreSQL) holds
        raise InvalidInput("data", "must hold text only: a lone surrogate (\\ud800-\\udfff) is not text") from None
    if size > PROGRESS_DATA_MAX_BYTES:
        raise InvalidInput("data", f"must be at most {PROGRESS_DATA_MAX_BYTES} bytes as JSON, got {size}")
    # Counted without recursion, once the JSON is known to be small (each container a few bytes
    # of it): has_nul and json.loads below recurse, and a handler deep in its own calls has less
    # stack left than json.dumps had here.
    levels = [(data, 1)]
    while levels:
        value, level = levels.pop()
        if level > PROGRESS_DATA_MAX_DEPTH:
            raise InvalidInput("data", f"must be nested at most {PROGRESS_DATA_MAX_DEPTH} levels deep")
        if isinstance(value, dict):
            levels += [(item, level + 1) for item in value.values()]
        elif isinstance(value, (list, tuple)):
            levels += [(item, level + 1) for item in value]
    if has_nul(data):  # jsonb cannot hold it
        raise InvalidInput("data", "must not contain the NUL character (\\u0000)")
    return json.loads(text)


class PermanentError(Exception):
    """Raised by a handler to give up at once: the run goes to `dead` without further retries."""


class Cancelled(Exception):
    """Raised by a handler (or ctx.raise_if_cancelled) when its cancellation flag is set."""


class Retry(Exception):
    """Raised by a handler (Celery's `raise self.retry(countdown=30)`): this attempt failed, retry
    the run `in_` seconds (a number or a timedelta) from the end of the attempt, by the database's
    clock, instead of after the backoff (None: after the backoff, as any other exception).

    It counts as a failed attempt: on the last one the run is dead, as usual. `in_` is bounded as
    the backoff is (retry.bounded: below 0 is 0, above 7 days is 7 days, NaN is 10 s); `reason` is
    the attempt's error message. E.g. `raise Retry(int(reply.headers["Retry-After"]), "rate limited")`.
    """

    def __init__(self, in_=None, reason=None):
        if isinstance(in_, timedelta):
            in_ = in_.total_seconds()
        elif in_ is not None and (isinstance(in_, bool) or not isinstance(in_, (int, float))):
            raise TypeError(f"Retry(in_=...) takes seconds (a number) or a timedelta, got {in_!r}")
        if reason is not None and not isinstance(reason, str):
            reason = str(reason)
        try:
            self.in_ = None if in_ is None else float(in_)
        except OverflowError:  # an int past a float's range: bounded to the longest delay
            self.in_ = math.inf
        self.reason = reason
        when = "after the backoff" if in_ is None else f"in {self.in_:g} s"
        super().__init__(f"retry {when}" + (f": {reason}" if reason else " (asked by the handler)"))


@dataclass(frozen=True)
class JobType:
    name: str
    func: object
    max_attempts: int | None = None
    timeout: float | None = None  # seconds
    backoff_base: float | None = None  # seconds
    backoff_cap: float | None = None  # seconds
    permanent: tuple = ()  # exception types that go straight to dead
    queue: str | None = None  # None: 'default'
    priority: int | None = None  # None: 0; smaller runs first
    # The definition declared with it in code (@job(..., schedule=...)): define()'s options,
    # written by `flask jobs sync` (scheduling/code_definitions.py). None: not scheduled in code.
    definition: dict | None = None
    # How a cancel or a timeout stops its handler (CANCEL_MODES): "cooperative", ctx.cancelled
    # turns true; "terminate", the handler runs in a child process the worker ends
    # (engine/worker/child_process.py). Checked here, so every way of declaring a job type refuses a bad one.
    cancel: str = "cooperative"

    def __post_init__(self):
        check_cancel(self.name, self.cancel, self.func)

    @functools.cached_property  # asked once per run; inspect's answer takes ~2 us
    def is_async(self):
        """An `async def` handler: awaited on the worker's event loop instead of a thread."""
        return inspect.iscoroutinefunction(self.func)

    def is_permanent(self, exc):
        # A Retry asks for a retry, even where `permanent` lists Exception.
        return isinstance(exc, (PermanentError, *self.permanent)) and not isinstance(exc, Retry)


_registry: dict[str, JobType] = {}

CANCEL_MODES = ("cooperative", "terminate")


def check_cancel(name, cancel, func):
    """InvalidInput naming `cancel` unless it is one of CANCEL_MODES, and "terminate" is asked of a
    sync handler (an async one stops at its next await already, and a child process would need an
    event loop of its own)."""
    if not isinstance(cancel, str) or cancel not in CANCEL_MODES:
        raise InvalidInput("cancel", f"of @job({name!r}) must be 'cooperative' (ctx.cancelled turns true) or "
                                     f"'terminate' (the handler runs in a process the worker ends), got {cancel!r}")
    if cancel == "terminate" and inspect.iscoroutinefunction(func):
        raise InvalidInput("cancel", f"of @job({name!r}): 'terminate' runs a sync handler in a child process; an "
                                     "async def handler is cancelled at its next await, so use the default")


def job(name, *, max_attempts=None, timeout=None, backoff_base=None, backoff_cap=None, permanent=(),
        queue=None, priority=None, cancel="cooperative"):
    """Register the decorated function as the handler of job type `name`; the function is
    returned as it is. For jobsweb's own job types: the public `jobsweb.job` (in
    scheduling/code_definitions.py) also returns a Job with .enqueue() and takes a schedule.

    The handler is called with a JobContext. `permanent` lists exception types that mean
    "retrying cannot help" and send the run straight to dead, like PermanentError. `queue`
    and `priority` are the defaults of its runs (enqueue() may override them). `cancel`: one of
    CANCEL_MODES, checked here, before the decorated function is known.
    """
    check_cancel(name, cancel, None)
    if queue is not None:
        check_queue(queue)
    if priority is not None:
        check_priority(priority)

    for option, value in (("timeout", timeout), ("backoff_base", backoff_base), ("backoff_cap", backoff_cap)):
        # A week at most, like a definition's: the worker turns these into timestamps.
        if value is not None and not (isinstance(value, (int, float)) and 0 < value <= 7 * 86400):
            raise InvalidInput(option, f"of @job({name!r}) must be a number of seconds above 0 and at "
                                       f"most 604800 (7 days), got {value!r}")

    def register(func):
        add(JobType(name, func, max_attempts, timeout, backoff_base, backoff_cap, tuple(permanent),
                    queue=queue, priority=priority, cancel=cancel))
        return func

    return register


def add(job_type):
    """Register a JobType; one of the same name is replaced (a module imported again)."""
    if job_type.name == EXTERNAL_JOB_TYPE:
        raise InvalidInput("name", f"{job_type.name!r} is reserved for external definitions, which no worker runs")
    check_job_type_name("name", job_type.name)
    if not isinstance(job_type.name, str) or not JOB_TYPE_NAME.fullmatch(job_type.name):
        raise InvalidInput("name", f"{job_type.name!r} is not a job type name: use ASCII letters, digits and "
                                   "the characters . _ : - only")
    _registry[job_type.name] = job_type


def get(name):
    """The registered JobType for `name`, or None."""
    return _registry.get(name)


def names():
    """Every registered job type, sorted."""
    return sorted(_registry)


def load(modules):
    """Import the modules named in JOBSWEB_HANDLERS so that their @job decorators run."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(f"JOBSWEB_HANDLERS names {module!r}, which cannot be imported: {exc}") from exc


# The JobContext of the handler this thread or task is running, set around the handler's call by
# the worker (execution.run_handler, async_execution), drain() and inline mode: Run.wait() refuses
# to block inside a handler (engine/runs/run_waiting.py). A context variable, so each pool
# thread and each asyncio task has its own; threads a handler starts itself do not inherit it.
_running = contextvars.ContextVar("jobsweb_running_handler", default=None)


def running_handler():
    """The JobContext of the handler running in this thread or task, else None."""
    return _running.get()


@contextlib.contextmanager
def handler_running(ctx):
    """Mark this thread or task as running `ctx`'s handler while the block lasts."""
    token = _running.set(ctx)
    try:
        yield
    finally:
        _running.reset(token)


_WAKER_LOCK = threading.Lock()


@dataclass
class JobContext:
    """What a handler receives: its payload and run, a cancellation flag, a way to keep its lease."""

    run_id: int
    job_type: str
    payload: dict
    attempt: int
    max_attempts: int
    definition_id: int | None = None
    _cancelled: bool = False
    # What a sync handler's ctx.sleep waits on, made by its first call: an Event per run (a
    # lock and a condition) was a tenth of a short run's cost in the worker, and few sleep.
    _waker: threading.Event | None = None
    _extend_lease: object = None
    # Set by the event loop that awaits an async handler: wakes its `await ctx.sleep()` (called
    # from the worker's loop thread, so it must be thread-safe).
    _on_cancel: object = None
    _cancel_waker: asyncio.Event | None = None  # of that event loop, set by _on_cancel
    _report_progress: object = None  # the worker's (or drain()'s) write of ctx.progress
    _progress_unsent: tuple | None = None  # (progress, note, data) held back by the interval
    _progress_sent_at: float = -math.inf  # time.monotonic() of the last write
    _read_batch: object = None  # run id -> its batch's state (batch_status.batch_of_run), from the worker

    @functools.cached_property
    def batch(self):
        """The batch this run is a member or a callback of (.id, .payload, .counts), else None;
        read when first asked for."""
        return self._read_batch(self.run_id) if self._read_batch is not None else None

    @property
    def cancelled(self):
        """True once the worker wants this run to stop (shutdown, timeout, lost lease)."""
        return self._cancelled

    def raise_if_cancelled(self):
        """Stop here with Cancelled if the worker asked this run to stop."""
        if self._cancelled:
            raise Cancelled(f"run {self.run_id} was asked to stop")

    def cancel(self):
        """Ask the handler to stop: `cancelled` turns True and a waiting ctx.sleep wakes (the worker
        calls this; a handler never needs to)."""
        self._cancelled = True
        # Read after the flag is set, as sleep() reads the flag after making the waker: one of
        # the two sees the other's write, so a sleep never misses a cancel.
        if self._waker is not None:
            self._waker.set()
        if self._on_cancel is not None:
            self._on_cancel()

    def sleep(self, seconds):
        """Wait up to `seconds`, waking early (with Cancelled) when the run is asked to stop.

        In an `async def` handler, `await ctx.sleep(seconds)`: its context returns an awaitable
        instead of blocking the event loop that runs the other async handlers.
        """
        if self._cancel_waker is not None:  # set by the event loop awaiting an async handler
            return self._sleep_async(seconds)
        if self._waker is None:
            with _WAKER_LOCK:  # a handler's own threads may sleep on one context at once
                if self._waker is None:
                    self._waker = threading.Event()
        self.raise_if_cancelled()
        if self._waker.wait(seconds):
            self.raise_if_cancelled()
        return None

    async def _sleep_async(self, seconds):
        self.raise_if_cancelled()
        try:
            await asyncio.wait_for(self._cancel_waker.wait(), seconds)
        except TimeoutError:
            pass
        self.raise_if_cancelled()

    def retry(self, in_=None, reason=None):
        """Stop here and retry this run `in_` seconds (or a timedelta) from now: raises Retry
        (see there). `raise ctx.retry(30)` reads as Celery's `raise self.retry(countdown=30)`."""
        raise Retry(in_, reason)

    def extend_lease(self, seconds=None):
        """Hold this run for `seconds` more (default: the worker's lease); False if it was lost."""
        return self._extend_lease(self, seconds)

    def progress(self, fraction, note=None, data=None):
        """Say how far this run is, from 0.0 to 1.0, and optionally what it is doing ("page 3 of
        10") and a small JSON object (`data`, at most PROGRESS_DATA_MAX_BYTES as JSON, e.g.
        {"current": 3, "total": 10}); shown on the run page (the note on the runs list too), read
        by jobsweb.get_run() (.progress, .progress_note, .progress_data). Each call replaces all
        three.

        Cheap to call often: written at most every PROGRESS_INTERVAL seconds (the latest value
        always, by the handler's return at the latest). Sync in both kinds of handler.
        """
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
            raise InvalidInput("progress", f"must be a number from 0.0 to 1.0, got {fraction!r}")
        if note is not None:
            if not isinstance(note, str):
                raise InvalidInput("note", f"must be text, got {type(note).__name__}")
            clean_text("note", note)
            if len(note) > PROGRESS_NOTE_MAX_CHARS:
                raise InvalidInput("note", f"must be at most {PROGRESS_NOTE_MAX_CHARS} characters")
        self._progress_unsent = (float(fraction), note, progress_data(data))
        if time.monotonic() - self._progress_sent_at >= PROGRESS_INTERVAL:
            self.flush_progress()

    def flush_progress(self):
        """Write the progress held back by the interval, if any (the worker calls this when the
        handler returns)."""
        unsent, self._progress_unsent = self._progress_unsent, None
        if unsent is not None and self._report_progress is not None:
            self._progress_sent_at = time.monotonic()
            self._report_progress(self, *unsent)

    def once(self, key, conn=None):
        """`with ctx.once("invoice_charge:812") as first:` True only for the first attempt to
        record `key`, in the same transaction as the effect's writes (see engine/jobs/effects.py).

        `conn`: a psycopg connection or SQLAlchemy session; default Flask-SQLAlchemy's db.session.
        """
        return effects.once(key, conn, run_id=self.run_id, attempt=self.attempt)
