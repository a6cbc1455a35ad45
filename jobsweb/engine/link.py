"""The worker's database connections, reopened when the database goes away, and cut when it
goes silent."""

import os
import socket
import threading
import time
import weakref

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
# A round trip still unanswered after this long means the path went silent: a failover or a
# dropped NAT entry, which TCP reports only after many minutes, if ever (and a proxy or pooler
# in between acknowledges every packet, so keepalives see nothing either). The worker's
# statements take milliseconds; one this late is cut, and the worker backs off as for an outage.
ROUND_TRIP_TIMEOUT = 15.0  # seconds
WATCH_EVERY = 0.5  # seconds between the watchdog's looks


class DatabaseUnavailable(Exception):
    """The database cannot be reached (down, restarting, wrong DATABASE_URL)."""


def describe(exc):
    """The first line of a driver error: enough for a log line or a CLI message."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


class Link:
    """An autocommit psycopg connection shared by the worker loop and handler threads.

    Autocommit because every hot-path statement is a transaction on its own, begun with NO_JIT
    in the same round trip; the lock because handler threads call extend_lease while the loop
    claims and finishes. A round trip is cut (its socket shut down, so the waiting call fails at
    once) after ROUND_TRIP_TIMEOUT, or at `cut_at` (time.monotonic()) when the worker set one.
    """

    def __init__(self, conninfo):
        self.conninfo = conninfo
        self.conn = None
        self.lock = threading.RLock()
        self.since = None  # when the round trip under way began (None: none is)
        self.cut_at = None  # no round trip lasts past this (a stopping worker's deadline)
        _watchdog.watch(self)

    def _connection(self):
        if self.cut_at is not None and time.monotonic() >= self.cut_at:
            raise DatabaseUnavailable("no time left to reach the database")
        if self.conn is None or self.conn.closed:
            timeout = CONNECT_TIMEOUT
            if self.cut_at is not None:  # libpq takes whole seconds, at least 2
                timeout = max(2, min(timeout, int(self.cut_at - time.monotonic()) + 1))
            try:
                self.conn = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=timeout, **NO_PREPARE)
            except psycopg.OperationalError as exc:
                raise DatabaseUnavailable(describe(exc)) from exc
        return self.conn

    def _lost(self, exc):
        if self.conn is not None:
            self.conn.close()
        self.conn = None
        return DatabaseUnavailable(describe(exc))

    def _round_trip(self, work):
        """work(conn) under the lock and the watchdog; a broken connection is DatabaseUnavailable."""
        with self.lock:
            conn = self._connection()
            self.since = time.monotonic()
            try:
                return work(conn)
            except psycopg.OperationalError as exc:
                raise self._lost(exc) from exc
            finally:
                self.since = None

    def overdue(self, now):
        """The start of the round trip under way if it has run out of time, else None."""
        since = self.since
        if since is not None and (now - since > ROUND_TRIP_TIMEOUT or (self.cut_at is not None and now >= self.cut_at)):
            return since
        return None

    def cut(self, since):
        """Shut the connection's socket down (from the watchdog's thread), unless the round trip
        that began at `since` ended meanwhile: the call waiting on it fails at once and the
        connection is reopened by the next one."""
        conn = self.conn
        if self.since is not since:
            return
        try:
            fd = conn.pgconn.socket if conn is not None and not conn.closed else -1
        except psycopg.Error:
            return
        if fd < 0:
            return
        with socket.socket(fileno=os.dup(fd)) as sock:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def fetch(self, sql, params=None):
        """Run one statement and return its rows."""
        def work(conn):
            with conn.pipeline(), conn.transaction():
                conn.execute(NO_JIT)
                cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []

        return self._round_trip(work)

    def fetch_together(self, statements):
        """Run (sql, params) statements in one transaction, sent as one pipeline; their rows.

        One round trip and one commit (one WAL flush) for all of them, instead of one each.
        """
        def work(conn):
            with conn.pipeline(), conn.transaction():
                conn.execute(NO_JIT)
                cursors = [conn.execute(sql, params) for sql, params in statements]
            return [cur.fetchall() if cur.description else [] for cur in cursors]

        return self._round_trip(work)

    def in_transaction(self, work):
        """Call work(conn) inside one transaction and return what it returns."""
        def transaction(conn):
            with conn.transaction():
                conn.execute(NO_JIT)
                return work(conn)

        return self._round_trip(transaction)

    def close(self):
        with self.lock:
            if self.conn is not None:
                self.conn.close()
            self.conn = None


class Watchdog:
    """One daemon thread per process that cuts the round trips that ran out of time."""

    def __init__(self):
        self.links = weakref.WeakSet()
        self.lock = threading.Lock()
        self.thread = None

    def watch(self, link):
        with self.lock:
            self.links.add(link)
            if self.thread is None:
                self.thread = threading.Thread(target=self._serve, name="jobsweb-watchdog", daemon=True)
                self.thread.start()

    def _serve(self):
        while True:
            time.sleep(WATCH_EVERY)
            now = time.monotonic()
            with self.lock:
                links = list(self.links)
            for link in links:
                if (since := link.overdue(now)) is not None:
                    link.cut(since)


_watchdog = Watchdog()
