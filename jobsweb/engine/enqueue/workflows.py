"""Batches with callbacks, and chains: runs enqueued together that wait for one another.

A batch's members and the batch itself are written in one transaction (the caller's, with
`session=`): nothing of it is visible before it commits. Its callbacks are runs that wait for
the batch to finish; the trigger job_runs_workflow (migration 0020_workflows) releases them,
exactly once, in the transaction that ends the last member.
"""

import json
from contextlib import ExitStack

from flask import current_app

from ...core.database import db, require_postgresql
from ...core.errors import InvalidInput, clean_name
from ..jobs.flow import check_priority, check_queue
from .enqueuing import (
    check_job_type,
    check_max_attempts,
    check_payload,
    insert,
    insert_many,
    many_params,
    run_params,
    trace_context,
)

# The payload travels as JSON text cast here, as ENQUEUE's: a host's session may be on psycopg2.
CREATE_BATCH = "INSERT INTO job_batches (payload, on_finish, on_success, label) VALUES (%(payload)s::jsonb, " \
               "%(on_finish)s, %(on_success)s, %(label)s) RETURNING id"
LABEL_MAX_CHARS = 200

# A batch closes (the end of `with batch(...)`, in the transaction that inserted its members):
# its counts are set from its members, and its callback runs are created, waiting for the
# batch to finish (the trigger job_runs_workflow, migration 0020_workflows, releases them), or
# released here already if no member is left to end. A callback's payload is the batch's.
CLOSE_BATCH = """
WITH counted AS (
    SELECT count(*) AS members,
           count(*) FILTER (WHERE status NOT IN ('succeeded', 'dead', 'cancelled')) AS pending,
           count(*) FILTER (WHERE status IN ('dead', 'cancelled')) AS failures
    FROM job_runs WHERE batch_id = %(batch_id)s AND batch_callback IS NULL
),
batch AS (
    UPDATE job_batches b
    SET members = c.members, pending = c.pending, failures = c.failures,
        finished_at = CASE WHEN c.pending = 0 THEN now() END, finishes = (c.pending = 0)::int
    FROM counted c WHERE b.id = %(batch_id)s
    RETURNING b.id, b.payload, b.pending, b.failures
),
callbacks AS (
    INSERT INTO job_runs (job_type, payload, status, finished_at, reason, max_attempts, queue, priority,
                          batch_id, batch_callback, trace_context)
    SELECT cb.job_type, b.payload, s.status, CASE WHEN s.status = 'cancelled' THEN now() END,
           CASE WHEN b.pending = 0 THEN 'batch ' || b.id || ' finished'
                || CASE WHEN b.failures > 0 THEN ' with ' || b.failures || CASE WHEN b.failures = 1 THEN ' member'
                        ELSE ' members' END || ' dead or cancelled' ELSE '' END
           END,
           cb.max_attempts, cb.queue, cb.priority, b.id, cb.role, %(trace_context)s
    FROM batch b
    CROSS JOIN unnest(%(roles)s::text[], %(job_types)s::text[], %(max_attempts)s::int[], %(queues)s::text[],
                      %(priorities)s::int[]) AS cb(role, job_type, max_attempts, queue, priority)
    CROSS JOIN LATERAL (SELECT CASE WHEN b.pending > 0 THEN 'waiting'
                                    WHEN cb.role = 'on_success' AND b.failures > 0 THEN 'cancelled'
                                    ELSE 'queued' END AS status) s
    RETURNING id, status
)
SELECT c.id, c.status FROM callbacks c
LEFT JOIN LATERAL (SELECT pg_notify('jobsweb_runs', '') WHERE c.status = 'queued') wake ON true
"""

def _callback(role, job_type, config):
    try:
        registered = check_job_type(job_type)
        return (role, job_type, check_max_attempts(None, registered, config), check_queue(registered.queue),
                check_priority(registered.priority))
    except InvalidInput as exc:
        raise InvalidInput(role, exc.message) from None


class Batch:
    """`with batch(...) as b:` enqueues b's members (b.enqueue, b.enqueue_many) and the batch in
    one transaction; its callbacks run once every member has ended (on_finish) or succeeded
    (on_success). b.id is the batch's id; b.callbacks, once the block ended, the callback runs'
    ids by name ({"on_finish": 812}), which other runs may wait for."""

    def __init__(self, on_finish=None, on_success=None, payload=None, session=None, label=None):
        config = current_app.config
        if label is not None and (not isinstance(label, str) or not label.strip() or len(label) > LABEL_MAX_CHARS):
            raise InvalidInput("label", f"must be text of 1 to {LABEL_MAX_CHARS} characters, got {label!r:.60}")
        self.label = label if label is None else clean_name("label", label.strip())
        for role, job_type in (("on_finish", on_finish), ("on_success", on_success)):
            if job_type is not None and not isinstance(job_type, str):
                raise InvalidInput(role, f"must be a job type's name, got {type(job_type).__name__}")
        self._callbacks = [_callback(role, job_type, config)
                           for role, job_type in (("on_finish", on_finish), ("on_success", on_success)) if job_type]
        self.payload = check_payload(payload, config["JOBSWEB_MAX_PAYLOAD_BYTES"])
        self.on_finish, self.on_success = on_finish, on_success
        self._session = session
        self._transaction = ExitStack()  # the batch's own transaction, without session=
        self._conn = None
        self.id = None
        self.callbacks = {}

    def __enter__(self):
        require_postgresql(from_code=True)
        if self._session is not None:
            self._conn = self._session.connection()
        else:
            self._conn = self._transaction.enter_context(db.engine.begin())
        self.id = self._conn.exec_driver_sql(CREATE_BATCH, {"payload": json.dumps(self.payload), "on_finish": self.on_finish,
                                                             "on_success": self.on_success, "label": self.label}).scalar()
        return self

    def __exit__(self, exc_type, exc, tb):
        conn, self._conn = self._conn, None
        if exc_type is not None:
            return self._transaction.__exit__(exc_type, exc, tb)  # rolled back; the error goes on
        with self._transaction:  # committed, or rolled back if closing fails
            roles, job_types, attempts, queues, priorities = zip(*self._callbacks) if self._callbacks \
                else ((), (), (), (), ())
            rows = conn.exec_driver_sql(CLOSE_BATCH, {
                "batch_id": self.id, "roles": list(roles), "job_types": list(job_types),
                "max_attempts": list(attempts), "queues": list(queues), "priorities": list(priorities),
                "trace_context": trace_context()}).all()
            self.callbacks = dict(zip(roles, (row[0] for row in rows)))

    def _open(self):
        if self._conn is None:
            raise RuntimeError("a batch takes members only inside its `with batch(...)` block")
        return self._conn

    def enqueue(self, job_type, payload=None, **options):
        """Enqueue a member: enqueue()'s arguments but session; returns its run id."""
        params, after = run_params(job_type, payload, **_run_options(options))
        return insert(self._open(), dict(params, batch_id=self.id), after)

    def enqueue_many(self, job_type, payloads, **options):
        """Enqueue members, one per payload: enqueue_many()'s arguments but session; their ids."""
        options = dict({"run_at": None, "max_attempts": None, "queue": None, "priority": None, "after": None,
                        "after_failure": "cancel"}, **options)
        params, texts, after = many_params(job_type, payloads, **options)
        return insert_many(self._open(), dict(params, batch_id=self.id), texts, after)


def _run_options(options):
    return dict({"run_at": None, "idempotency_key": None, "max_attempts": None, "queue": None, "priority": None,
                 "unique_key": None, "after": None, "after_failure": "cancel"}, **options)


def batch(on_finish=None, on_success=None, payload=None, session=None, label=None):
    """A Batch, to use as `with batch(on_finish="report", label="March invoices") as b: b.enqueue(...)`;
    `label` (up to 200 characters, one line) names it on the batch pages, which search by it."""
    return Batch(on_finish=on_finish, on_success=on_success, payload=payload, session=session, label=label)


class Chain(int):
    """What chain() returns: the first step's run id (cancelling it cancels every step after
    it), with `ids`, every step's run id in order, and `last`, the run to wait for."""

    ids: tuple

    @property
    def last(self):
        return self.ids[-1]


def chain(steps, *, after=None, after_failure="cancel", session=None):
    """Enqueue steps, each (job_type, payload) or (job_type, payload, {enqueue options}), each
    waiting for the one before (the first for `after`), in one transaction; returns a Chain."""
    require_postgresql(from_code=True)
    steps = list(steps)
    if not steps:
        raise InvalidInput("steps", "must hold at least one (job_type, payload) step")
    checked = []
    for index, step in enumerate(steps):
        if not isinstance(step, (list, tuple)) or not 1 <= len(step) <= 3 or \
                (len(step) == 3 and not isinstance(step[2], dict)):
            raise InvalidInput("steps", f"step {index} must be (job_type, payload) or (job_type, payload, options)")
        job_type, payload, options = tuple(step) + (None, {})[len(step) - 1:]
        if {"after", "after_failure", "session"} & set(options):
            raise InvalidInput("steps", f"step {index}: after, after_failure and session are the chain's")
        checked.append(run_params(job_type, payload, **_run_options(dict(
            options, after=after if index == 0 else None, after_failure=after_failure if index == 0 else "cancel"))))

    def enqueue_steps(conn):
        ids = []
        for index, (params, first_after) in enumerate(checked):
            ids.append(insert(conn, params, first_after if index == 0 else [ids[-1]]))
        return ids

    if session is not None:
        ids = enqueue_steps(session.connection())
    else:
        with db.engine.begin() as conn:
            ids = enqueue_steps(conn)
    result = Chain(ids[0])
    result.ids = tuple(ids)
    return result
