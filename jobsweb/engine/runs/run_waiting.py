"""Run.wait(timeout): block until a run has ended (Celery's AsyncResult.get(timeout=), RQ's
job.latest_result(timeout=)), woken by PostgreSQL's LISTEN/NOTIFY rather than a sleep loop.

The waiter LISTENs on statements.ENDED_CHANNEL on a connection of its own (autocommit: each read
sees what has committed, whatever the caller's session is in), then reads the run, then waits
for a notification naming it (or an empty one: "look again") and reads it again. A worker's
FINISH_RUNS notifies the runs it ended, an operator's cancel or delete (run_actions) notifies
empty. LISTEN first, read second: a run that ends between the two is seen by the read.

What ends without a notification (a run cancelled by plain SQL, a run deleted by retention) is
still seen: the waiter reads the run again every RECHECK_EVERY seconds whatever it hears. A
deleted run ends the wait with RunNotFound, never a wait until the timeout.

Behind a pooler in transaction mode LISTEN hears nothing (the worker's wakeup.py says why). As the
worker does, the first wait of a process on a connection string sends itself a probe from a
second connection; if it does not come back, waits on that connection string poll every
POLL_EVERY seconds instead (a bounded poll: one primary-key read each), and say so once.
JOBSWEB_DIRECT_DATABASE_URL gives the waits a direct connection, as it gives the worker's
listener; JOBSWEB_LISTEN=false makes them poll.

Inside a handler a wait is refused (refuse_inside_handler), as Celery refuses result.get() inside a
task: a handler that waits holds its worker slot, so with every slot of the workers that could run
the awaited run taken by waiting handlers (one is enough at --concurrency 1), nothing ever ends.
"""

import logging
import math
import secrets
import threading
import time
from dataclasses import dataclass

import psycopg
from psycopg.rows import dict_row

from ...core.errors import InvalidInput, RunNotFound
from .. import statements
from ..jobs.registry import running_handler
from ..link import CONNECT_TIMEOUT, NO_PREPARE

log = logging.getLogger("jobsweb.wait")

RECHECK_EVERY = 5.0  # seconds between two reads of a run while LISTEN is quiet: ends not notified
POLL_EVERY = 0.5  # seconds between two reads where LISTEN cannot be used (a pooler)
APPLICATION_NAME = "jobsweb-wait"  # what pg_stat_activity shows for a waiter's connection
PROBE_TIMEOUT = 2.0  # seconds a probe may take to come back before LISTEN is held unusable

_listen_works = {}  # conninfo -> whether LISTEN hears notifications over it (probed once)
_probe_lock = threading.Lock()


@dataclass(frozen=True)
class Waiting:
    """Where and how to wait: a libpq conninfo, and whether to LISTEN at all."""

    conninfo: str
    listen: bool


def check_timeout(timeout):
    """`timeout` in seconds (None: no limit), or InvalidInput naming it."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) \
            or timeout < 0:
        raise InvalidInput("timeout", f"must be a number of seconds from 0, or None, got {timeout!r}")
    return float(timeout)


def refuse_inside_handler(allow_inside_job):
    """RuntimeError if this thread or task is running a handler, unless `allow_inside_job`."""
    ctx = running_handler()
    if ctx is None or allow_inside_job:
        return
    raise RuntimeError(
        f"Run.wait() inside a handler (run {ctx.run_id} {ctx.job_type}) is refused: it could deadlock, its "
        "worker slot held while the run it waits for needs a free one. Enqueue what comes next with "
        "after=[run_id], chain() or batch(on_finish=...) instead; pass allow_inside_job=True to wait anyway "
        "(only if another worker with free slots is sure to run that run)")


def until_ended(run_id, timeout, columns, waiting):
    """The row (`columns` of job_runs) of run `run_id` once it has ended; TimeoutError past
    `timeout` seconds, RunNotFound if there is no such run or it is deleted meanwhile."""
    read = f"SELECT {', '.join(columns)} FROM job_runs WHERE id = %(id)s"
    deadline = None if timeout is None else time.monotonic() + timeout
    with psycopg.connect(waiting.conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT, row_factory=dict_row,
                         application_name=APPLICATION_NAME, **NO_PREPARE) as conn:
        listening = waiting.listen and _listen_usable(conn, waiting.conninfo)
        if listening:
            conn.execute(f"LISTEN {statements.ENDED_CHANNEL}")
        mine = str(run_id)
        while True:
            row = conn.execute(read, {"id": run_id}).fetchone()
            if row is None:
                raise RunNotFound(run_id, f"there is no run {run_id} (never committed, or deleted)")
            if row["status"] in statements.ENDED_STATUSES:
                return row
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"run {run_id} had not ended after {timeout:g} s: it is {row['status']}")
            pause = RECHECK_EVERY if listening else POLL_EVERY
            pause = pause if left is None else min(pause, left)
            if listening:
                for note in conn.notifies(timeout=pause):
                    if not note.payload or mine in note.payload.split(","):
                        break
            else:
                time.sleep(pause)


def _listen_usable(conn, conninfo):
    """Whether LISTEN over `conninfo` hears notifications: probed once per process and
    connection string (a probe sent from a second connection must come back)."""
    with _probe_lock:
        known = _listen_works.get(conninfo)
    if known is not None:
        return known
    token = f"probe:{secrets.token_hex(8)}"
    channel = f"{statements.ENDED_CHANNEL}_probe"
    conn.execute(f"LISTEN {channel}")
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT, **NO_PREPARE) as other:
        other.execute("SELECT pg_notify(%s, %s)", [channel, token])
    works = any(n.payload == token for n in conn.notifies(timeout=PROBE_TIMEOUT, stop_after=1))
    conn.execute(f"UNLISTEN {channel}")
    if not works:
        log.warning("LISTEN receives no notifications over this connection (a pooler in transaction mode?): "
                    "Run.wait() polls every %g s. Set JOBSWEB_DIRECT_DATABASE_URL to a direct connection "
                    "for waits that return as the run ends.", POLL_EVERY)
    with _probe_lock:
        _listen_works[conninfo] = works
    return works
