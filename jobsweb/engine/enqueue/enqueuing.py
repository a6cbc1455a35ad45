"""Enqueue runs from Python, with every input checked before anything is written."""

import functools
import json
import math
import re
from datetime import datetime, timedelta, timezone

from flask import current_app

from ...core.database import db, require_postgresql
from ...core.errors import InvalidInput, clean_text, has_nul
from .. import statements, upkeep
from ..jobs import registry, signals
from ..jobs.flow import check_priority, check_queue, check_unique_key
from ..jobs.worker_job_types import Unregistered, worker_job_types
from . import dependencies, inline

IDEMPOTENCY_KEY_MAX_CHARS = 200
PAYLOAD_MAX_DEPTH = 64  # nested objects and lists; deeper ones overflowed json's recursion (a 500)
INT_MAX = 2**31 - 1  # an integer column
# run_at must fit in a timestamp psycopg can read back: 0001-01-01 at +14:00 was stored and
# then broke the runs list for everyone.
RUN_AT_MIN = datetime(1970, 1, 1, tzinfo=timezone.utc)
RUN_AT_MAX = datetime(9999, 1, 1, tzinfo=timezone.utc)
# delay= beyond this is a unit slip (a timestamp, milliseconds), not a plan: give run_at instead.
DELAY_MAX = 3650 * 86400  # seconds: ten years
# A delayed run's run_at, by the database's clock: the now() of the enqueue's own transaction,
# the one ENQUEUE gives a run without run_at (and created_at), plus the delay.
DELAYED_RUN_AT = "SELECT now() + make_interval(secs => %(delay)s)"
DELAY_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}  # the shell's --delay 90, 90s, 5m, 2h, 1d
ENQUEUE_MANY_CHUNK = 10_000  # runs per INSERT statement of enqueue_many
KEY_CONFLICT_TRIES = 5  # inserts tried while the run holding a unique key keeps finishing


def check_payload(payload, max_bytes):
    """Return the payload as a dict, or raise InvalidInput saying why it cannot be one."""
    return _checked_payload(payload, max_bytes)[0]


def _checked_payload(payload, max_bytes):
    """(payload as a dict, its JSON text), or InvalidInput saying why it cannot be stored."""
    if payload is None:
        return {}, "{}"
    if not isinstance(payload, dict):
        raise InvalidInput("payload", f"must be a JSON object ({{...}}), got {type(payload).__name__}")
    _check_values(payload, 1)
    try:
        # allow_nan=False: NaN and Infinity are not JSON, and jsonb refuses them.
        text = json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInput("payload", f"cannot be stored as JSON: {exc}") from None
    if has_nul(payload):
        # PostgreSQL's jsonb cannot hold U+0000: without this check the INSERT fails with a
        # DataError (a 500 on the forms; found by the bad-input drill).
        raise InvalidInput("payload", "contains the NUL character (\\u0000), which PostgreSQL cannot store")
    size = len(text)  # json.dumps escapes to ASCII: characters are bytes
    if size > max_bytes:
        raise InvalidInput("payload", f"is {size} bytes, over the limit of {max_bytes} bytes "
                                      "(JOBSWEB_MAX_PAYLOAD_BYTES); store large data elsewhere "
                                      "and pass a reference")
    return payload, text


def _check_values(value, depth):
    """Depth within PAYLOAD_MAX_DEPTH, finite numbers and text without lone surrogates (which
    UTF-8 cannot encode), before json.dumps or PostgreSQL meets them."""
    if depth > PAYLOAD_MAX_DEPTH:
        raise InvalidInput("payload", f"is nested more than {PAYLOAD_MAX_DEPTH} levels deep")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput("payload", f"holds {value!r}, which JSON cannot store")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput("payload", "holds a lone surrogate (\\ud800-\\udfff), which is not text") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_values(key, depth)
            _check_values(item, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_values(item, depth + 1)


def _refuse_constant(name):
    raise InvalidInput("payload", f"holds {name}, which is not a JSON number")


def parse_payload(text, max_bytes):
    """Parse payload JSON text (from a form or the CLI) into a checked dict."""
    try:
        # 1e400 parses as inf: parse_float keeps it visible to the finite check.
        payload = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise InvalidInput("payload", f"is nested more than {PAYLOAD_MAX_DEPTH} levels deep") from None
    except ValueError as exc:
        if isinstance(exc, InvalidInput):
            raise
        raise InvalidInput("payload", f"is not valid JSON: {exc}") from None
    return check_payload(payload, max_bytes)


def parse_run_at(text):
    """Parse an ISO 8601 timestamp that says its timezone (2026-11-21T06:00:00+01:00 or ...Z)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput("run_at", f"{text!r} is not an ISO 8601 timestamp "
                                     "such as 2026-11-21T06:00:00+00:00") from None
    return check_run_at(value)


def check_run_at(value):
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidInput("run_at", f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput("run_at", "must say its timezone (for example +00:00 or Z); "
                                     "a time without one is ambiguous")
    try:
        in_range = RUN_AT_MIN <= value < RUN_AT_MAX
    except OverflowError:  # 0001-01-01T00:00+14:00 is before the year 1 in UTC
        in_range = False
    if not in_range:
        raise InvalidInput("run_at", "must be between 1970-01-01 and 9998-12-31 UTC")
    return value


def check_delay(delay, run_at):
    """`delay` in seconds (a number or a timedelta, 0 to DELAY_MAX), None if not given, or
    InvalidInput naming `delay`; given with a `run_at` too, InvalidInput."""
    if delay is None:
        return None
    if run_at is not None:
        raise InvalidInput("delay", "cannot be combined with run_at: give one or the other")
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, (int, float)) and not isinstance(delay, bool):
        try:
            seconds = float(delay)
        except OverflowError:  # an int past a float's range
            seconds = math.inf
    else:
        raise InvalidInput("delay", f"must be a number of seconds or a timedelta, got {type(delay).__name__}")
    if not (math.isfinite(seconds) and 0 <= seconds <= DELAY_MAX):
        raise InvalidInput("delay", f"must be from 0 to {DELAY_MAX} seconds (3650 days; for a later time give "
                                    f"run_at), got {delay!r}")
    return seconds


def parse_delay(text):
    """The shell's --delay: seconds, or a number with a unit (90, 90s, 1.5m, 2h, 1d), checked."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhd]?)\s*", text or "")
    if match is None:
        raise InvalidInput("delay", f"{text!r} is not a delay such as 90 (seconds), 90s, 5m, 2h or 1d")
    return check_delay(float(match[1]) * DELAY_UNITS[match[2]], None)


def check_job_type(job_type, *, workers=False, in_session=False):
    """Return the registered JobType; with `workers`, for one only a worker registered (a web
    process without the handlers), its defaults (an Unregistered), read in db.session's
    transaction if `in_session` (worker_job_types); else raise InvalidInput listing the known
    ones."""
    registered = registry.get(job_type)
    if registered is not None:
        return registered
    theirs = worker_job_types(in_session) if workers else []
    if job_type in theirs:
        return Unregistered()
    known = ", ".join(sorted({*registry.names(), *theirs}))
    raise InvalidInput("job_type", f"{job_type!r} is not a registered job type (known: {known})")


def enqueue(job_type, payload=None, *, run_at=None, delay=None, idempotency_key=None, max_attempts=None,
            queue=None, priority=None, unique_key=None, after=None, after_failure="cancel", session=None):
    """Create a run of `job_type` and return its id.

    With an idempotency key that already exists, nothing is created and the existing run's id
    is returned; with a unique key, the same while a run with that key is unfinished (queued,
    running, or failed and due a retry). `queue` and `priority` default to the job type's.
    `run_at` (an aware datetime) or `delay` (seconds or a timedelta, from the database's now())
    makes it due later; without either it is due now.
    With `after` (run ids), the run waits until every one of them succeeded; one ending dead
    or cancelled cancels it, unless after_failure="run".
    Without `session` the run is committed at once; with `session` (for example db.session)
    it joins that transaction, so the run exists only if your own writes commit.
    """
    params, after = run_params(job_type, payload, run_at=run_at, delay=delay, idempotency_key=idempotency_key,
                               max_attempts=max_attempts, queue=queue, priority=priority,
                               unique_key=unique_key, after=after, after_failure=after_failure,
                               in_session=session is not None)
    if inline.active(current_app.config):
        return inline.run(job_type, json.loads(params["payload"]), params["max_attempts"])
    require_postgresql(from_code=True)  # on SQLite: this, not "near INSERT: syntax error"
    if session is not None:
        return insert(session.connection(), params, after)
    with db.engine.begin() as conn:
        return insert(conn, params, after)


def run_params(job_type, payload, *, run_at, idempotency_key, max_attempts, queue, priority, unique_key,
               after, after_failure, in_session=False, delay=None):
    """ENQUEUE's parameters for one run, every input checked, and its after= as run ids; with
    `in_session` (enqueue with session=), a worker's job type is looked up in that transaction."""
    config = current_app.config
    # Inline mode runs the handler here and now: only this process's job types will do.
    registered = check_job_type(job_type, workers=not inline.active(config), in_session=in_session)
    payload_text = _checked_payload(payload, config["JOBSWEB_MAX_PAYLOAD_BYTES"])[1]
    run_at = check_run_at(run_at)
    delay = check_delay(delay, run_at)
    max_attempts = check_max_attempts(max_attempts, registered, config)
    if idempotency_key is not None:
        if not isinstance(idempotency_key, str) or not idempotency_key.strip():
            raise InvalidInput("idempotency_key", "must be a non-empty string")
        clean_text("idempotency_key", idempotency_key)
        if len(idempotency_key) > IDEMPOTENCY_KEY_MAX_CHARS:
            raise InvalidInput("idempotency_key", f"must be at most {IDEMPOTENCY_KEY_MAX_CHARS} characters")

    params = {"job_type": job_type, "payload": payload_text, "run_at": run_at, "delay": delay,
              "max_attempts": max_attempts, "idempotency_key": idempotency_key,
              "queue": check_queue(registered.queue if queue is None else queue),
              "priority": check_priority(registered.priority if priority is None else priority),
              "unique_key": check_unique_key(unique_key), "after_failure": after_failure, "batch_id": None,
              "trace_context": trace_context()}
    after = dependencies.check_after(after, after_failure)
    if after and unique_key is not None:
        # A waiting run holds no key (job_runs_unique_key covers queued, running and failed runs):
        # released later, it could collide with a run that took the key meanwhile.
        raise InvalidInput("unique_key", "cannot be combined with after=")
    return params, after


def enqueue_many(job_type, payloads, *, run_at=None, delay=None, max_attempts=None, queue=None, priority=None,
                 after=None, after_failure="cancel", session=None):
    """Create one run of `job_type` per payload, in a few statements; return their ids in order.

    For bulk loads (tens of thousands of runs a second): every payload is checked first, so
    one bad payload writes nothing. No idempotency keys here: use enqueue() for those.
    With `after`, every run waits for those runs, and `run_at` or `delay`, as with enqueue().
    Without `session` the runs are committed at once; with it they join that transaction.
    """
    params, texts, after = many_params(job_type, payloads, run_at=run_at, delay=delay, max_attempts=max_attempts,
                                       queue=queue, priority=priority, after=after, after_failure=after_failure)
    if inline.active(current_app.config):
        return [inline.run(job_type, json.loads(text), params["max_attempts"]) for text in texts]
    require_postgresql(from_code=True)
    if session is not None:
        return insert_many(session.connection(), params, texts, after)
    with db.engine.begin() as conn:
        return insert_many(conn, params, texts, after)


def many_params(job_type, payloads, *, run_at, max_attempts, queue, priority, after, after_failure, delay=None):
    """ENQUEUE_MANY's parameters, the payloads as checked JSON texts, and after= as run ids."""
    config = current_app.config
    registered = check_job_type(job_type, workers=not inline.active(config))
    max_bytes = config["JOBSWEB_MAX_PAYLOAD_BYTES"]
    texts = []
    for index, payload in enumerate(payloads):
        try:
            texts.append(_checked_payload(payload, max_bytes)[1])
        except InvalidInput as exc:
            raise InvalidInput("payloads", f"item {index}: {exc.message}") from None
    run_at = check_run_at(run_at)
    params = {"job_type": job_type, "run_at": run_at, "delay": check_delay(delay, run_at),
              "max_attempts": check_max_attempts(max_attempts, registered, config),
              "queue": check_queue(registered.queue if queue is None else queue),
              "priority": check_priority(registered.priority if priority is None else priority),
              "after_failure": after_failure, "batch_id": None, "trace_context": trace_context()}
    return params, texts, dependencies.check_after(after, after_failure)


class Job:
    """What `@jobsweb.job` returns: the handler, still callable as before (a test may call it
    with a context of its own), that can also enqueue runs of its job type."""

    def __init__(self, job_type):
        functools.update_wrapper(self, job_type.func)
        self.name = job_type.name

    def __call__(self, *args, **kwargs):
        return self.__wrapped__(*args, **kwargs)

    def __repr__(self):
        return f"<jobsweb job {self.name!r}>"

    def enqueue(self, payload=None, **options):
        """Create a run of this job type and return its id: enqueue(name, ...) for this name."""
        return enqueue(self.name, payload, **options)

    def enqueue_many(self, payloads, **options):
        """Create one run of this job type per payload; their ids (enqueue_many for this name)."""
        return enqueue_many(self.name, payloads, **options)


def check_max_attempts(max_attempts, registered, config):
    """max_attempts as given, else the job type's, else JOBSWEB_MAX_ATTEMPTS; InvalidInput if unusable."""
    if max_attempts is None:
        max_attempts = registered.max_attempts or config["JOBSWEB_MAX_ATTEMPTS"]
    if not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or not 1 <= max_attempts <= INT_MAX:
        raise InvalidInput("max_attempts", f"must be a whole number from 1 to {INT_MAX}, got {max_attempts!r}")
    return max_attempts


def insert_many(conn, params, texts, after):
    """Insert the runs of many_params() on `conn`; their ids in order."""
    params = dict(delayed(conn, params), **dependencies.wait_state(conn, after, params["after_failure"]))
    ids = []
    for start in range(0, len(texts), ENQUEUE_MANY_CHUNK):
        rows = conn.exec_driver_sql(statements.ENQUEUE_MANY,
                                    dict(params, payloads=texts[start:start + ENQUEUE_MANY_CHUNK]))
        ids.extend(sorted(row[0] for row in rows))
    dependencies.record(conn, ids, after)
    if signals.run_enqueued.receivers:
        for run_id, text in zip(ids, texts):
            enqueued(run_id, params, text)
    if ids and params["status"] == "queued":
        if params["run_at"] is None:
            conn.exec_driver_sql(statements.NOTIFY)
        else:
            conn.exec_driver_sql(statements.NOTIFY_AT, {"run_at": params["run_at"]})
    return ids


def delayed(conn, params):
    """`params` with the run_at of their delay, if any, read from the database's clock in the
    transaction of `conn` (DELAYED_RUN_AT), where the insert will run."""
    if params["delay"] is None:
        return params
    return dict(params, run_at=conn.exec_driver_sql(DELAYED_RUN_AT, {"delay": params["delay"]}).scalar())


def insert(conn, params, after):
    """Insert the run of run_params() on `conn`; its id (or the id of the run holding its key)."""
    params = dict(delayed(conn, params), **dependencies.wait_state(conn, after, params["after_failure"]))
    for _ in range(KEY_CONFLICT_TRIES):
        row = conn.exec_driver_sql(statements.ENQUEUE, params).first()
        if row is not None and signals.run_enqueued.receivers:
            enqueued(row[0], params, params["payload"])
        if row is None:  # a key exists: a unique index chose the earlier run
            row = conn.exec_driver_sql(upkeep.RUN_BY_KEY, params).first()
        if row is not None:
            dependencies.record(conn, [row[0]], after)
            return row[0]
        # The unfinished run holding the unique key finished between the two statements,
        # freeing the key: insert again.
    raise RuntimeError(f"unique_key {params['unique_key']!r}: its run kept changing; try again")


def enqueued(run_id, params, payload_text):
    """signals.run_enqueued for a run just inserted (a key that found an existing run sends none)."""
    signals.send(signals.run_enqueued, run_id=run_id, job_type=params["job_type"], queue=params["queue"],
                 payload=json.loads(payload_text))


TRACE_CONTEXT = "jobsweb.trace_context"  # app.extensions key: () -> the caller's traceparent, or None


def trace_context():
    """The trace the caller is in, stored with the runs it enqueues (job_runs.trace_context), as
    the app's tracing integration says it (integrations/otel.py sets TRACE_CONTEXT); else None."""
    current = current_app.extensions.get(TRACE_CONTEXT)
    return None if current is None else current()
