"""How long jobsweb's own database connections may wait for an answer: a web request, the alert
thread and `flask jobs exec` get an error in seconds from a database that went silent, instead
of hanging until TCP gives up many minutes later.

A silent path (a failover, a dropped NAT entry, a proxy whose far side is gone) raises nothing by
itself, and a proxy or pooler in between acknowledges every packet, so keepalives and libpq's
tcp_user_timeout see nothing either; statement_timeout is the server's, which is not answering.
So the bound is on the client: the code that wants one says so for its own thread,

    with bounded(5):   # seconds any one round trip may take
        ...

and a connection of jobsweb's engine (BoundedConnection, which init_engine makes it open, with
CONNECT_TIMEOUT) notes when each round trip begins; a watchdog thread shuts down the socket of
one waiting past its bound, so the waiting call fails at once with psycopg's own
OperationalError, which SQLAlchemy takes for a lost connection (dropped, not pooled again).
The worker's connections (engine/link.py) are BoundedConnections too, their round trips always bounded.

Outside `bounded` nothing is cut: migrations and `flask jobs` commands may rightly wait minutes.
Inside a team's app jobsweb uses the team's engine, which it never changes: what bounds that
engine's waits is the team's to choose (README, "Add jobsweb to your Flask app").
"""

import contextvars
import os
import socket
import threading
import time
import weakref
from contextlib import contextmanager

import psycopg
from sqlalchemy import event

# Seconds to open a connection (libpq's connect_timeout, unless DATABASE_URL sets one): libpq
# takes whole seconds, at least 2; 3 leaves a busy server's TLS handshake and sign-in room.
CONNECT_TIMEOUT = 3
WATCH_EVERY = 0.1  # seconds between the watchdog's looks: a cut comes at most this late

_bound = contextvars.ContextVar("jobsweb_round_trip_bound", default=None)


class Bound:
    """The bound of one `bounded` block: its seconds, whether a round trip was cut in it, and
    the moment (time.monotonic()) past which none of its round trips lasts, set from another
    thread by end_by."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.cut = False
        self.ends_by = float("inf")

    def end_by(self, deadline):
        """The block's round trip under way, if any, and every later one end by `deadline`: a
        worker's alert pass when the worker is told to stop (ops/alerts.py). Only assignments,
        so a signal handler may call it."""
        self.ends_by = min(self.ends_by, deadline)


@contextmanager
def bounded(seconds):
    """Within the block, in this thread, a round trip of jobsweb's engine lasts at most `seconds`;
    once one was cut, the block opens no other connection (SQLAlchemy reconnects at once after
    a failed pool pre-ping, and would wait CONNECT_TIMEOUT more on the same silent path). Yields
    the block's Bound."""
    bound = Bound(seconds)
    token = _bound.set(bound)
    try:
        yield bound
    finally:
        _bound.reset(token)


class BoundedConnection(psycopg.Connection):
    """A psycopg connection whose round trips the watchdog cuts past the bound of the thread
    that waits on them (none outside `bounded`).

    Connection.wait is the one method every blocking call of a psycopg 3 connection goes
    through once connected (execute, commit, rollback, a pipeline's sync): the watch is there.
    """

    _deadline = None  # time.monotonic() past which the round trip under way is cut; None: none is
    _bound = None  # the Bound of the thread waiting on that round trip: its end_by may come sooner
    _ends_by = float("inf")  # no round trip lasts past this (end_by), however many it takes
    _was_cut = False  # the watchdog shut the socket down: say why in the error

    def wait(self, *args, **kwargs):
        bound = _bound.get()
        if bound is None:
            return super().wait(*args, **kwargs)
        self._bound = bound
        self._deadline = min(time.monotonic() + bound.seconds, self._ends_by, bound.ends_by)
        _watchdog.watch(self)
        try:
            return super().wait(*args, **kwargs)
        except psycopg.OperationalError as exc:
            if self._was_cut:
                bound.cut = True
                ended = min(self._ends_by, bound.ends_by) <= time.monotonic()
                why = "no answer by the stop deadline" if ended else silent(bound)
                raise psycopg.OperationalError(why) from exc
            raise
        finally:
            self._deadline = None

    def end_by(self, deadline):
        """The round trip under way, if any, and every later one are cut at `deadline`
        (time.monotonic()) at the latest: from another thread, when that thread's bound shrank (a
        worker told to stop). Later ones too: a pipelined transaction waits several times, and
        each wait would otherwise start a whole bound afresh (a stopping worker then waited 15 s
        on a blackhole instead of its 2)."""
        self._ends_by = min(self._ends_by, deadline)
        if (current := self._deadline) is not None:
            self._deadline = min(current, deadline)

    def cut(self, deadline):
        """Shut the socket down (from the watchdog's thread) unless the round trip that had
        `deadline` ended meanwhile; the connection is broken from then on."""
        if self._deadline != deadline or self.closed:
            return
        try:
            fd = self.pgconn.socket
        except psycopg.Error:
            return
        self._was_cut = True
        with socket.socket(fileno=os.dup(fd)) as sock:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def silent(bound):
    return f"the database did not answer within {bound.seconds:g} s"


class Watchdog:
    """One daemon thread per process that cuts the round trips past their deadline."""

    def __init__(self):
        self.connections = weakref.WeakSet()
        self.lock = threading.Lock()
        self.thread = None
        self.pid = os.getpid()

    def watch(self, conn):
        if self.pid != os.getpid():
            # A child forked after the thread started (gunicorn --preload): the thread did not
            # come along, and the parent's lock may have been held at the fork.
            self.lock, self.thread, self.pid = threading.Lock(), None, os.getpid()
        with self.lock:
            self.connections.add(conn)
            if self.thread is None:
                self.thread = threading.Thread(target=self._serve, name="jobsweb-db-watchdog", daemon=True)
                self.thread.start()

    def _serve(self):
        while True:
            time.sleep(WATCH_EVERY)
            now = time.monotonic()
            with self.lock:
                waiting = [(conn, conn._deadline, conn._bound) for conn in self.connections
                           if conn._deadline is not None]
            for conn, deadline, bound in waiting:
                if now > min(deadline, bound.ends_by):
                    conn.cut(deadline)


_watchdog = Watchdog()


def init_engine(engine):
    """Make `engine` (jobsweb's own, never a team's) open BoundedConnections, with CONNECT_TIMEOUT
    unless its URL sets connect_timeout."""

    @event.listens_for(engine, "do_connect")
    def connect(dialect, record, cargs, cparams):
        bound = _bound.get()
        if bound is not None and bound.ends_by <= time.monotonic():
            raise psycopg.OperationalError("no answer by the stop deadline")
        if bound is not None and bound.cut:
            raise psycopg.OperationalError(silent(bound))
        cparams.setdefault("connect_timeout", CONNECT_TIMEOUT)
        return BoundedConnection.connect(*cargs, **cparams)
