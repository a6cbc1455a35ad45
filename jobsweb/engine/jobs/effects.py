"""Exactly-once effects: a business key recorded in job_effects in the effect's own transaction.

A run may be attempted more than once (a crash after the effect but before the completion was
written, a lease that expired under a slow handler), so a handler that must not charge an
invoice twice guards the charge with its business key:

    with ctx.once(f"invoice_charge:{invoice_id}") as first:
        if first:
            db.session.add(Charge(invoice_id=invoice_id, amount=amount))

On entry the key is inserted (ON CONFLICT DO NOTHING) in the transaction the effect writes
in; on a clean exit that transaction commits, key and effect together; on an exception it
rolls back, key and effect together. `first` is False when the key was already committed.
A concurrent attempt holding the same key waits on the primary key until the first commits
or rolls back, so two attempts running at once still give one effect.
"""

from contextlib import contextmanager

import psycopg

from ...core.database import db
from ...core.errors import InvalidInput

# Uses job_effects' primary key: the conflict is the "already done" answer.
RECORD_EFFECT = """
INSERT INTO job_effects (key, run_id, attempt) VALUES (%(key)s, %(run_id)s, %(attempt)s)
ON CONFLICT (key) DO NOTHING
RETURNING key
"""


def effect_key(key):
    """A key as stored: a non-empty string, or a tuple of parts joined with ':'."""
    if isinstance(key, (tuple, list)):
        key = ":".join(str(part) for part in key)
    if not isinstance(key, str) or not key.strip():
        raise InvalidInput("key", f"an effect key must be a non-empty string or tuple, not {key!r}")
    return key


@contextmanager
def once(key, conn=None, *, run_id=None, attempt=None):
    """Yield True the first time `key` is recorded, False if it already was (see module doc).

    `conn` is a psycopg connection, a SQLAlchemy session, or None for Flask-SQLAlchemy's
    db.session.
    """
    key = effect_key(key)
    params = {"key": key, "run_id": run_id, "attempt": attempt}
    if isinstance(conn, psycopg.Connection):
        # transaction() commits on exit (or releases a savepoint when the caller already has
        # a transaction open, whose commit then carries key and effect together).
        with conn.transaction():
            yield conn.execute(RECORD_EFFECT, params).fetchone() is not None
        return
    if conn is None:
        conn = db.session
    try:
        # The session's own psycopg connection, inside the transaction the session began:
        # one statement text for both kinds of caller.
        raw = conn.connection().connection.driver_connection
        yield raw.execute(RECORD_EFFECT, params).fetchone() is not None
    except BaseException:
        conn.rollback()
        raise
    conn.commit()

