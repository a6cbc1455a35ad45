"""The worker's one database connection, reopened when the database goes away."""

import threading

import psycopg

CONNECT_TIMEOUT = 10  # seconds
# psycopg prepares a statement on the server after it ran 5 times on a connection. Behind a
# pooler in transaction mode (PgBouncer before 1.21, most PaaS poolers) the next transaction
# may be on another server connection, where that statement does not exist: never prepare.
NO_PREPARE = {"prepare_threshold": None}
# Every statement the worker sends reads or writes a few index pages. PostgreSQL JIT-compiles a
# statement whose estimated cost passes jit_above_cost, and compiling takes milliseconds (on
# Debian's PostgreSQL 15, a claim whose estimate a planner setting had inflated compiled for
# ~1 s at every call): never worth it here, and a server's JIT thresholds are not ours to rely
# on. LOCAL: for the transaction only, so it holds behind a pooler in transaction mode too.
NO_JIT = "SET LOCAL jit = off"


class DatabaseUnavailable(Exception):
    """The database cannot be reached (down, restarting, wrong DATABASE_URL)."""


def describe(exc):
    """The first line of a driver error: enough for a log line or a CLI message."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


class Link:
    """An autocommit psycopg connection shared by the worker loop and handler threads.

    Autocommit because every hot-path statement is a transaction on its own, begun with NO_JIT
    in the same round trip; the lock because handler threads call extend_lease while the loop
    claims and finishes.
    """

    def __init__(self, conninfo):
        self.conninfo = conninfo
        self.conn = None
        self.lock = threading.RLock()

    def _connection(self):
        if self.conn is None or self.conn.closed:
            try:
                self.conn = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT,
                                            **NO_PREPARE)
            except psycopg.OperationalError as exc:
                raise DatabaseUnavailable(describe(exc)) from exc
        return self.conn

    def _lost(self, exc):
        if self.conn is not None:
            self.conn.close()
        self.conn = None
        return DatabaseUnavailable(describe(exc))

    def fetch(self, sql, params=None):
        """Run one statement and return its rows."""
        with self.lock:
            conn = self._connection()
            try:
                with conn.pipeline(), conn.transaction():
                    conn.execute(NO_JIT)
                    cur = conn.execute(sql, params)
                return cur.fetchall() if cur.description else []
            except psycopg.OperationalError as exc:
                raise self._lost(exc) from exc

    def fetch_together(self, statements):
        """Run (sql, params) statements in one transaction, sent as one pipeline; their rows.

        One round trip and one commit (one WAL flush) for all of them, instead of one each.
        """
        with self.lock:
            conn = self._connection()
            try:
                with conn.pipeline(), conn.transaction():
                    conn.execute(NO_JIT)
                    cursors = [conn.execute(sql, params) for sql, params in statements]
                return [cur.fetchall() if cur.description else [] for cur in cursors]
            except psycopg.OperationalError as exc:
                raise self._lost(exc) from exc

    def in_transaction(self, work):
        """Call work(conn) inside one transaction and return what it returns."""
        with self.lock:
            conn = self._connection()
            try:
                with conn.transaction():
                    conn.execute(NO_JIT)
                    return work(conn)
            except psycopg.OperationalError as exc:
                raise self._lost(exc) from exc

    def close(self):
        with self.lock:
            if self.conn is not None:
                self.conn.close()
            self.conn = None
