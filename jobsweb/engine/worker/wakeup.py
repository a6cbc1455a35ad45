"""Wake a --forever worker the moment a run is enqueued for now, or when one enqueued for later
falls due: LISTEN on its own connection.

Enqueuing a run due now sends NOTIFY (statements.NOTIFY); a listener thread turns each
notification into a wake-up of the worker loop, which then claims at once instead of
sleeping out its poll interval. A run due later sends its due time (statements.NOTIFY_AT, the
database's clock); the listener turns it into this process's clock with the offset it measures
on its connection, and the loop claims then (Claimer.due_at). Polling stays the fallback: a run
written by plain SQL, or a notification lost while this connection was down, is found at the
next poll.

LISTEN needs a connection that stays one server session. Behind a pooler in transaction mode
it does not: the LISTEN lands on a server connection that then serves other clients, and
notifications never arrive. So after LISTEN the listener sends itself a probe from a second
connection; if the probe does not come back, it says so once and the worker only polls.
JOBSWEB_DIRECT_DATABASE_URL gives it a direct connection beside the pooled one.
"""

import logging
import secrets
import threading
import time

import psycopg

from typing import NamedTuple

from .. import statements
from ..link import CONNECT_TIMEOUT, NO_PREPARE, describe
from ..runs.action_statements import CANCEL_CHANNEL
from .stop import WAKE

# Listening again after the connection broke: the worker loop's own backoff steps.
from .outages import RECONNECT_FIRST_DELAY, RECONNECT_MAX_DELAY

log = logging.getLogger("jobsweb.wakeup")

CHECK_STOP_EVERY = 0.2  # seconds the listener waits for a notification before checking stop;
# short, because a stopping worker waits for the listener: a whole second was most of the
# time from the shutdown deadline to exit in the deploy drill (a wait costs no query)
PROBE_TIMEOUT = 2.0  # seconds a LISTEN waits for its own probe; a direct connection takes ms
# A server with idle_session_timeout (some hosted plans set one) ends a session idle that long,
# and a LISTEN connection is idle between notifications: it sends a statement at this fraction
# of the timeout, so its session is never ended and no notification is missed.
KEEPALIVE_FRACTION = 0.4
IDLE_SESSION_TIMEOUT = "SELECT setting::int FROM pg_settings WHERE name = 'idle_session_timeout'"  # ms; 0: none
# The database's clock, read to map a due time it sent onto time.monotonic(): again this often,
# as the machines' clocks are slewed apart (NTP) by up to half a millisecond a second.
DATABASE_CLOCK = "SELECT extract(epoch FROM clock_timestamp())::float8"
CLOCK_READ_EVERY = 60.0

CANCEL = object()  # reported: an operator cancelled a run this worker holds


class DueAt(NamedTuple):
    """Reported: a run enqueued for later falls due at time.monotonic() `when`."""
    when: float


def server_of(conn):
    """Which server `conn` reached: host (or socket folder) and port, and the address a host name
    resolved to, which is what a provider's failover behind one name changes."""
    info = conn.info
    address = info.hostaddr if not info.host.startswith("/") else ""
    return f"{info.host}:{info.port}" + (f" ({address})" if address and address != info.host else "")


class Listener:
    """A daemon thread that reports (calls `report` with) WAKE for every notification of a run due
    now on statements.NOTIFY_CHANNEL and a DueAt for one due later; and, given a `worker` id,
    CANCEL for each operator's cancel of a run that worker holds (action_statements.CANCEL_CHANNEL,
    whose payload names the holders)."""

    def __init__(self, conninfo, report, worker=None):
        self.conninfo = conninfo
        self.report = report
        self.worker = worker
        self.offset = None  # the database's epoch minus time.monotonic(), read on this connection
        self.stopping = threading.Event()
        self.listening = threading.Event()  # set while LISTEN is in force (tests wait on it)
        self.unusable = threading.Event()  # set when LISTEN got no notification: polling only
        self.server = None  # where the last LISTEN was in force (server_of)
        self.thread = threading.Thread(target=self._serve, name="jobsweb-listener", daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stopping.set()
        self.thread.join(timeout=CHECK_STOP_EVERY * 2)

    def _serve(self):
        delay = RECONNECT_FIRST_DELAY
        while not self.stopping.is_set():
            try:
                with self._connect() as conn:
                    keepalive = self._keepalive_seconds(conn)  # first: pg_stat_activity then shows LISTEN
                    self._read_clock(conn)  # before any due time is heard
                    if self.worker is not None:
                        conn.execute(f"LISTEN {CANCEL_CHANNEL}")
                    conn.execute(f"LISTEN {statements.NOTIFY_CHANNEL}")  # last: pg_stat_activity shows it
                    if not self._probe_comes_back(conn):
                        self.unusable.set()
                        log.warning("LISTEN receives no notifications over this connection (a pooler in "
                                    "transaction mode?): polling only. Set JOBSWEB_DIRECT_DATABASE_URL to a "
                                    "direct connection for immediate wake-ups.")
                        return
                    self.listening.set()
                    self._say_where(server_of(conn))
                    delay = RECONNECT_FIRST_DELAY
                    # A run may have been enqueued while we were not listening: look once.
                    self.report(WAKE)
                    self._listen(conn, keepalive)
            except psycopg.Error as exc:
                self.listening.clear()
                if self.stopping.is_set():
                    return
                # Debug only: when the database is away the worker loop says so, once per backoff
                # step; a second line each step from this thread would double the noise.
                log.debug("LISTEN connection lost (%s); polling only, listening again in %gs",
                          describe(exc), delay)
                self.stopping.wait(delay)
                delay = min(delay * 2, RECONNECT_MAX_DELAY)
        self.listening.clear()

    def _listen(self, conn, keepalive):
        """Report each notification until stopped; a statement every `keepalive` seconds (None:
        never) keeps the session from being ended as idle, and the clock's read is one."""
        quiet_since = time.monotonic()
        while not self.stopping.is_set():
            for notification in conn.notifies(timeout=CHECK_STOP_EVERY, stop_after=1):
                self._heard(notification)
            since = time.monotonic() - quiet_since
            if since >= CLOCK_READ_EVERY or (keepalive is not None and since >= keepalive):
                quiet_since = self._read_clock(conn)

    def _heard(self, notification):
        payload = notification.payload
        if notification.channel == CANCEL_CHANNEL:
            if self.worker in payload.split(","):
                self.report(CANCEL)
        elif payload.startswith("at:"):
            try:
                self.report(DueAt(float(payload[3:]) - self.offset))
            except ValueError:  # not ours (someone's pg_notify): a wake-up, as any other
                self.report(WAKE)
        else:
            self.report(WAKE)

    def _read_clock(self, conn):
        """Read the database's clock: the offset to time.monotonic() at the read's midpoint. The
        time.monotonic() after it."""
        before = time.monotonic()
        [now] = conn.execute(DATABASE_CLOCK).fetchone()
        after = time.monotonic()
        self.offset = now - (before + after) / 2
        return after

    def _say_where(self, server):
        """One line when LISTEN is back on another server than before: the database failed over
        (a multi-host DATABASE_URL reached the next host, or the provider moved its name to
        another address). The worker's own lines say only that the database was away, then back."""
        if self.server is not None and server != self.server:
            log.warning("database failed over: now at %s (was %s); listening there", server, self.server)
        self.server = server

    @staticmethod
    def _keepalive_seconds(conn):
        row = conn.execute(IDLE_SESSION_TIMEOUT).fetchone()  # no row before PostgreSQL 14
        return row[0] / 1000 * KEEPALIVE_FRACTION if row and row[0] else None

    def _connect(self):
        return psycopg.connect(self.conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT, **NO_PREPARE)

    def _probe_comes_back(self, conn):
        """Whether a notification sent from another connection reaches this LISTEN."""
        token = f"probe:{secrets.token_hex(8)}"
        with self._connect() as other:
            other.execute("SELECT pg_notify(%s, %s)", [statements.NOTIFY_CHANNEL, token])
        return any(n.payload == token for n in conn.notifies(timeout=PROBE_TIMEOUT))
