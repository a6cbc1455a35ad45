"""The worker's database connections, reopened when the database goes away, and cut when it
goes silent."""

import concurrent.futures
import logging
import select
import threading
import time

import psycopg

from ..core import conflicts
from ..core.deadlines import BoundedConnection, bounded

CONNECT_TIMEOUT = 10  # seconds
MIN_CONNECT_TIMEOUT = 2  # libpq's connect_timeout: whole seconds, at least 2
CONNECT_STEP = 0.1  # seconds: how often a wait for a connect looks at a cut set meanwhile
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
ROUND_TRIP_TIMEOUT = 15.0  # seconds (core/deadlines.py cuts it)


def _ended_by_server(conn):
    """Whether the server has ended this idle connection: idle_session_timeout (which hosted
    plans set), a pooler's idle limit, an administrator's pg_terminate_backend. The server then
    sends its error and closes, which a client reads only at its next statement, as a failure
    that looked like an outage (a "database unavailable" line and a backoff at every poll).
    Between statements nothing else arrives on a worker connection (it never LISTENs), so a
    readable socket here means the session is over."""
    poller = select.poll()  # not select.select: it fails on a descriptor past 1023
    poller.register(conn.fileno(), select.POLLIN)
    return bool(poller.poll(0))


def _one_trip(conn, statements):
    """Run (sql, params) statements in one transaction sent as one pipeline with one Sync: one
    round trip. The rows of each.

    BEGIN and COMMIT are statements of the pipeline: psycopg's conn.transaction() in a pipeline
    syncs on entering, at each result read and on leaving, and one statement took four round
    trips (4 s on a link with 500 ms each way, where a stopping worker has 1 s left to write).
    A statement that fails skips the rest, COMMIT included, and leaves the transaction aborted:
    rolled back here before the error goes on (a conflict then runs the whole again)."""
    try:
        with conn.pipeline():
            conn.execute("BEGIN")
            conn.execute(NO_JIT)
            cursors = [conn.execute(sql, params) for sql, params in statements]
            conn.execute("COMMIT")
    except psycopg.Error:
        if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            try:
                conn.execute("ROLLBACK")
            except psycopg.Error:
                pass  # the connection broke meanwhile: the first error says why, and it is reopened
        raise
    return [cur.fetchall() if cur.description else [] for cur in cursors]


class _PipelineExitNoise(logging.Filter):
    """Drops psycopg's "error ignored terminating <Pipeline>" about a Link's connection. psycopg
    logs it when a statement in the pipeline failed and leaving the pipeline failed too (always,
    then): the error raised says the same, and the worker logs that once, as an outage or a
    conflict. A lost connection was three lines; it is one."""

    def filter(self, record):
        if record.msg != "error ignored terminating %r: %s" or not record.args:
            return True
        return not isinstance(getattr(record.args[0], "_conn", None), BoundedConnection)


_pipeline_exit_noise = _PipelineExitNoise()


class DatabaseUnavailable(Exception):
    """The database cannot be reached (down, restarting, wrong DATABASE_URL)."""


class Conflicted(DatabaseUnavailable):
    """A transaction still met a conflict (core/conflicts.py) after conflicts.TRIES runs. The
    database answered: the worker takes it back as it takes back a failed trip (outcomes kept,
    written again) but neither logs an outage nor backs off (engine/worker/outages.py)."""


class SchemaIncomplete(DatabaseUnavailable):
    """A statement named a function or table the database lacks (one dropped, a restore under
    way or of the tables alone): an outage of jobsweb's schema until `flask jobs migrate`,
    backed off as one. Raised through, it stopped a running worker with a traceback."""


SCHEMA_ERRORS = (psycopg.errors.UndefinedFunction, psycopg.errors.UndefinedTable)


# libpq's words for the state a broken connection left the driver in, not for what broke it: a
# fast stop logged "database unavailable (cannot exit pipeline mode while busy)".
DRIVER_STATES = ("pipeline mode", "another command is already in progress")


def _what_broke(exc, conn):
    """What `exc` says broke the connection; when it names only the driver's state, what the
    server or libpq said last on `conn` (its FATAL, "server closed the connection"), else that
    the connection was lost."""
    text = describe(exc)
    if not any(state in text for state in DRIVER_STATES):
        return text
    said = conn.pgconn.error_message.decode(errors="replace").strip() if conn is not None else ""
    said = said.splitlines()[0].removeprefix("FATAL:").strip() if said else ""
    if said and not any(state in said for state in DRIVER_STATES):
        return said
    return "the connection was lost"


def _close_if_opened(opening):
    if opening.exception() is None:
        opening.result().close()


def describe(exc):
    """The first line of a driver error: enough for a log line or a CLI message."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


class Link:
    """An autocommit psycopg connection shared by the worker loop and handler threads.

    Autocommit because every hot-path statement is a transaction on its own, begun with NO_JIT
    in the same round trip; the lock because handler threads call extend_lease while the loop
    claims and finishes. A round trip is cut (its socket shut down, so the waiting call fails at
    once: core/deadlines.py) after ROUND_TRIP_TIMEOUT, or at `cut_at` (time.monotonic()) when
    the worker set one.
    """

    def __init__(self, conninfo):
        self.conninfo = conninfo
        self.conn = None
        self.lock = threading.RLock()
        self.cut_at = None  # no round trip lasts past this (a stopping worker's deadline)
        self.answered_at = None  # time.monotonic() when the database last answered a round trip
        logging.getLogger("psycopg").addFilter(_pipeline_exit_noise)  # once: addFilter skips a filter it has

    def _connection(self, seconds):
        if self.conn is not None and not self.conn.closed and _ended_by_server(self.conn):
            self.conn.close()  # reopened below, quietly: the database is there, this session is not
        if self.conn is None or self.conn.closed:
            # A stopping worker connects while any time is left before its cut, however little: a
            # connect to a stopped server fails at once, one to a server just back takes
            # milliseconds, and one that hangs is given up at the cut (_connect). Refused with
            # less than libpq's 2 s connect_timeout left, a server back 1.5 s before the cut
            # never got the outcomes (issue 51). Whole seconds rounded down.
            timeout = max(MIN_CONNECT_TIMEOUT, min(CONNECT_TIMEOUT, int(seconds)))
            try:
                self.conn = self._connect(timeout)
            except psycopg.OperationalError as exc:
                raise DatabaseUnavailable(describe(exc)) from exc
            if self.cut_at is not None:
                # A cut set while this connect was under way: cut_by saw no connection to cut.
                self.conn.end_by(self.cut_at)
        return self.conn

    def _connect(self, timeout):
        """A new connection, waited for no later than the cut. No cut reaches into libpq's
        connect, so it runs in a thread of its own: a connect begun just before SIGTERM held a
        stopping worker its whole connect_timeout (10 s) past a 2 s deadline. One given up on is
        closed when it ends."""
        opening = concurrent.futures.Future()

        def connect():
            try:
                opening.set_result(BoundedConnection.connect(self.conninfo, autocommit=True,
                                                             connect_timeout=timeout, **NO_PREPARE))
            except BaseException as exc:  # noqa: BLE001 - raised in the waiting thread
                opening.set_exception(exc)

        threading.Thread(target=connect, name="jobsweb-connect", daemon=True).start()
        while True:
            try:
                return opening.result(timeout=CONNECT_STEP)
            except concurrent.futures.TimeoutError:
                if self.cut_at is not None and self.cut_at <= time.monotonic():
                    opening.add_done_callback(_close_if_opened)
                    raise DatabaseUnavailable("no answer by the stop deadline") from None

    def _lost(self, exc):
        text = _what_broke(exc, self.conn)
        if self.conn is not None:
            self.conn.close()
        self.conn = None
        return DatabaseUnavailable(text)

    def _round_trip(self, work):
        """work(conn) under the lock, cut past its time; a broken connection is DatabaseUnavailable."""
        with self.lock:
            seconds = ROUND_TRIP_TIMEOUT if self.cut_at is None else min(ROUND_TRIP_TIMEOUT,
                                                                          self.cut_at - time.monotonic())
            if seconds <= 0:
                raise DatabaseUnavailable("no time left to reach the database")
            with bounded(seconds):
                conn = self._connection(seconds)
                try:
                    # `work` is one whole transaction of jobsweb's own statements (fetch,
                    # fetch_together, in_transaction): a conflict rolled it back whole, so it
                    # runs again at once on the same connection, which is sound.
                    result = conflicts.retried(lambda: work(conn))
                except SCHEMA_ERRORS as exc:  # rolled back; the connection is sound
                    raise SchemaIncomplete(f"jobsweb's schema lacks what a statement needs ({describe(exc)}): "
                                           "run `flask jobs migrate`") from exc
                except psycopg.OperationalError as exc:
                    if conflicts.kind(exc):
                        self.answered_at = time.monotonic()
                        raise Conflicted(describe(exc)) from exc
                    raise self._lost(exc) from exc
                self.answered_at = time.monotonic()
                return result

    def cut_by(self, deadline):
        """No round trip of this link lasts past `deadline` (time.monotonic()), not even the one
        under way: a stopping worker's deadline."""
        self.cut_at = deadline if self.cut_at is None else min(self.cut_at, deadline)
        if (conn := self.conn) is not None:
            conn.end_by(self.cut_at)

    def fetch(self, sql, params=None):
        """Run one statement and return its rows."""
        return self._round_trip(lambda conn: _one_trip(conn, [(sql, params)])[0])

    def fetch_together(self, statements):
        """Run (sql, params) statements in one transaction, sent as one pipeline; their rows.

        One round trip and one commit (one WAL flush) for all of them, instead of one each.
        """
        return self._round_trip(lambda conn: _one_trip(conn, statements))

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

