"""`flask jobs exec NAME -- COMMAND`: run a crontab line's command as a reported run of NAME.

The run is recorded running (scheduling/reports.py: its slot, the overlap check) before the
command starts; a heartbeat thread extends its lease while the command runs (EXTEND_LEASES, as
a worker does), so a killed `exec` leaves a run that lease recovery ends dead. The command runs
without a shell, in a process group of its own: a timeout, or a signal `exec` receives, reaches
every process it started. Its stdout and stderr go through to ours as they come, and their
combined tail (JOBSWEB_OUTPUT_MAX_CHARS) is stored with the attempt.

The database never delays nor prevents the command: a crontab's backup must run whether or not
the database behind the admin screen is up. exec waits JOBSWEB_EXEC_START_WAIT (0.5 s) for the start to be recorded;
a database down, silent or slow gets a warning on stderr and the command starts anyway (with no
check for an overlapping run), while the start is still tried behind it. Once the command has
ended, its report is tried once, for at most REPORT_WAIT; then exec exits all the same, saying
on stderr that the run was not recorded (its slot then shows as missed). Every wait is bounded
on jobsweb's own engine (core/deadlines.py): a silent database costs seconds, not a hung
crontab line.

Exit code: the command's own, or 128 + the signal that killed it, as a shell reports it; 127
when it cannot be found and 126 when it cannot be started, as a shell does too; 128 + the
signal exec received before the command started, which then never starts (its run ends dead,
"SIGTERM came before the command started").
"""

import errno
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import psycopg
from sqlalchemy.exc import OperationalError, TimeoutError as PoolTimeout

from ..core import conflicts, deadlines
from ..core.database import db, execute, outage
from ..core.errors import InvalidInput
from ..core.masking import shown
from ..engine.upkeep import EXTEND_LEASES
from ..engine.worker.loop import worker_id
from ..scheduling import reports
from .command_process import Command, Forwarder, signal_name

READ_BYTES = 65536
# Seconds exec waits to record the command's end once it exited, before it exits all the same:
# the start's try (a connection, CONNECT_TIMEOUT) and the end's, with room.
REPORT_WAIT = 10.0
# Seconds one round trip of exec's may take: its statements take milliseconds.
ROUND_TRIP_LIMIT = 5.0
UNAVAILABLE = (OperationalError, PoolTimeout, psycopg.OperationalError)

@dataclass(frozen=True)
class Ended:
    """How the command ended: the exit code `exec` passes on and what the run records."""

    exit_code: int
    status: str  # 'succeeded' or 'dead'
    error_type: str | None = None
    error: str | None = None


class Tail:
    """The last `limit` characters of the bytes given to `add`, from both pipes, in order. Lines
    are kept whole: a line comes in when its newline does, so that a line the command wrote to
    stderr in two pieces is not cut in two by one from stdout."""

    def __init__(self, limit):
        self.limit = limit
        self.data = bytearray()
        self.partial = {}  # pipe -> its line so far (no newline yet)
        self.cut = False
        self.lock = threading.Lock()

    def add(self, chunk, pipe=None):
        with self.lock:
            whole, newline, rest = (self.partial.pop(pipe, b"") + chunk).rpartition(b"\n")
            self.data += whole + newline
            if len(rest) > 4 * self.limit:  # no newline for that long: not line-shaped output
                self.data += rest
            else:
                self.partial[pipe] = rest
            # 4 bytes per character at most in UTF-8: keep enough bytes for `limit` characters.
            if len(self.data) > 8 * self.limit:
                del self.data[:len(self.data) - 4 * self.limit]
                self.cut = True

    def text(self):
        """The tail as text (bad UTF-8 replaced, NUL made visible), or None if nothing came."""
        with self.lock:
            data = self.data + b"".join(self.partial.values())  # unfinished last lines at the end
        text = data.decode("utf-8", "replace").replace("\x00", "\\x00")
        if not text:
            return None
        if len(text) > self.limit:
            text, self.cut = text[-self.limit:], True
        return f"[earlier output cut]\n{text}" if self.cut else text


def _pump(source, sink, tail):
    """Copy one pipe of the command to our own stream as it comes, and into the tail."""
    fd = source.fileno()
    binary = getattr(sink, "buffer", None)
    while chunk := os.read(fd, READ_BYTES):
        tail.add(chunk, fd)
        try:
            if binary is not None:
                binary.write(chunk)
                binary.flush()
            else:  # a text stream (a test runner's): decoded per chunk, close enough
                sink.write(chunk.decode("utf-8", "replace"))
                sink.flush()
        except (OSError, ValueError):
            pass  # our own stdout went away (a closed pipe): the command still runs and is recorded


class InBackground:
    """call(*args) on a daemon thread, for a wait of the caller's choosing: `done` is set once
    it returned (`value`) or raised (`error`)."""

    def __init__(self, call, *args):
        self.done = threading.Event()
        self.value = self.error = None
        threading.Thread(target=self._run, args=(call, args), name="jobsweb-exec-db", daemon=True).start()

    def _run(self, call, args):
        try:
            self.value = call(*args)
        except Exception as exc:  # noqa: BLE001 - handed to the waiting thread
            self.error = exc
        finally:
            self.done.set()

    def started(self):
        """The Started this start recorded (running or skipped), or None (not yet, or failed)."""
        return self.value if self.done.is_set() and self.error is None else None


def _heartbeat(app, start, holder, lease, stop, on_cancel):
    """Extend the run's lease every third of it, once its start is recorded (`start`), until
    `stop` is set; a failed beat is retried at the next one (the lease outlives two), and never
    stops the command. An operator's cancel (REQUEST_CANCEL, seen here as on a worker's
    heartbeat) calls `on_cancel`."""
    while not stop.wait(lease / 3):
        started = start.started()
        if started is None or started.status != "running":
            continue
        run_id = started.run_id
        try:
            with deadlines.bounded(ROUND_TRIP_LIMIT), app.app_context():
                rows = conflicts.retried(lambda: _extend(run_id, lease, holder), undo=db.session.rollback)
        except Exception as exc:  # the database may be away for a while; the command goes on
            _say(app, f"heartbeat of run {run_id} failed: {(str(exc).strip().splitlines() or [''])[0]}")
            continue
        if not rows:
            if not stop.is_set():  # (once stopped, the end may have been recorded meanwhile)
                _say(app, f"run {run_id} is no longer held by this exec (its lease ran out)")
        elif rows[0].cancel_requested:
            on_cancel()


def ended(returncode, timeout=None, stopped_with=None, why=None):
    """What a return code (negative: killed by that signal) comes to; `why` is 'timeout' or
    'cancelled' when jobsweb stopped the command, with the last signal it sent."""
    if returncode < 0:
        number = -returncode
        code, words = 128 + number, f"killed by signal {number} ({signal_name(number)})"
    else:
        code, words = returncode, f"exit code {returncode}"
    if why == "timeout":
        return Ended(code, "dead", "timeout", f"timed out after {timeout:g} s: stopped with "
                                              f"{signal_name(stopped_with)}; {words}")
    if why == "cancelled":
        return Ended(code, "dead", "cancelled", f"cancelled by an operator: stopped with "
                                                f"{signal_name(stopped_with)}; {words}")
    if returncode == 0:
        return Ended(0, "succeeded")
    return Ended(code, "dead", "signal" if returncode < 0 else "exit_code", words)


def _extend(run_id, lease, holder):
    rows = execute(EXTEND_LEASES, {"ids": [run_id], "attempts": [1], "leases": [lease], "worker": holder}).fetchall()
    db.session.commit()
    return rows


# Each transaction below is run again whole on a conflict (core/conflicts.py): it is all of
# jobsweb's own SQL, and the command (the effect) is started and waited on outside it.

def _record_start(app, name, holder, lease):
    with deadlines.bounded(ROUND_TRIP_LIMIT), app.app_context():
        def start():
            started = reports.start_exec(name, holder, lease)
            db.session.commit()
            return started

        return conflicts.retried(start, undo=db.session.rollback)


def _record_end(app, name, holder, lease, start, outcome, output, deadline):
    """Record how the command ended, once its start was recorded or failed (by `deadline`,
    time.monotonic()); whether the run was still held by this exec (False: lease recovery had
    ended it). One try: a database that is down says so at once, and cron should not wait."""
    start.done.wait(max(0.0, deadline - time.monotonic()))
    with deadlines.bounded(ROUND_TRIP_LIMIT), app.app_context():
        def end():
            started = start.started()
            if started is None or started.status != "running":
                # Its start was never recorded (or came back 'skipped' after the command had
                # started anyway): record the run that did happen, overlapping or not.
                d = reports.lock(name=name)
                if d is None:
                    raise InvalidInput("name", f"no job definition is called {name!r}")
                started = reports.start(d, holder, lease, skip_if_running=False)
            recorded = reports.finish(started.run_id, holder, outcome.status, outcome.error_type, outcome.error,
                                      output)
            db.session.commit()
            return recorded

        return conflicts.retried(end, undo=db.session.rollback)


def _why(error):
    """Why the database could not record, in a few words."""
    if isinstance(error, UNAVAILABLE):
        return outage(error)
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def run(app, name, argv, timeout=None, kill_after=10.0):
    """Record a run of definition `name`, run `argv` and record its outcome; the exit code to
    pass on. InvalidInput (unknown definition) before anything starts, when the database
    answers within JOBSWEB_EXEC_START_WAIT: a healthy database records the start and checks
    for an overlapping run in milliseconds; a down one fails at once; only a silent or slow one
    (or one far away) costs this much, once."""
    holder = f"exec:{worker_id()}"
    lease = app.config["JOBSWEB_LEASE_SECONDS"]
    start_wait = app.config["JOBSWEB_EXEC_START_WAIT"]
    with Forwarder() as forwarder:
        start = InBackground(_record_start, app, name, holder, lease)
        if start.done.wait(start_wait) and not isinstance(start.error, UNAVAILABLE):
            if start.error is not None:
                raise start.error  # an unknown definition, a database never migrated
            if start.value.status == "skipped":
                _say(app, f"{name}: run {start.value.run_id} skipped, the command was not started: "
                     f"{start.value.reason}")
                return 0
        else:
            why = _why(start.error) if start.done.is_set() else f"database did not answer within {start_wait:g} s"
            _say(app, f"{name}: its start is not recorded ({why}); the command runs now, without the check "
                 f"for an overlapping run, and its run is recorded if the database answers by its end")
        tail = Tail(app.config["JOBSWEB_OUTPUT_MAX_CHARS"])
        outcome = _started(app, start, holder, lease, argv, timeout, kill_after, forwarder, tail)
        report = InBackground(_record_end, app, name, holder, lease, start, outcome, tail.text(),
                              time.monotonic() + REPORT_WAIT)
        words = outcome.error or outcome.status
        if report.done.wait(REPORT_WAIT):
            error = report.error
        else:  # the report thread is left behind; the process exits without it
            error = TimeoutError(f"database did not answer within {REPORT_WAIT:g} s")
        if error is not None:
            _say(app, f"{name}: the run was NOT recorded ({words}): {_why(error)}; its slot shows as missed")
        elif not report.value:
            started = start.started()
            _say(app, f"run {started.run_id if started else '?'} had already ended (its lease ran out); "
                 f"this outcome was not recorded: {words}")
        return outcome.exit_code


def _started(app, start, holder, lease, argv, timeout, kill_after, forwarder, tail):
    """Start the command, unless a signal came first, and follow it to its end: its Ended."""
    if forwarder.early:
        number = forwarder.early[0]
        return _not_started(app, tail, 128 + number, f"{signal_name(number)} came before the command started: "
                                                "it was not started")
    try:
        # Its own session (process group), so that a timeout's signal reaches what it started.
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as exc:
        return _not_started(app, tail, 127 if exc.errno == errno.ENOENT else 126,
                            f"cannot start {argv[0]!r}: {exc.strerror or exc}")
    command = Command(proc, kill_after)
    forwarder.follow(command)
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(app, start, holder, lease, stop, command.cancel),
                            name="jobsweb-exec-heartbeat", daemon=True)
    beat.start()
    try:
        return _follow(command, tail, timeout)
    finally:
        stop.set()
        beat.join(1.0)  # a beat under way finishes before the end is recorded, unless the database hangs


def _say(app, line):
    """One line of exec's own on stderr, masked and without controls (core/masking.py): what it
    quotes (a database's error, the command's name) can hold a secret or a bidi override."""
    print(f"jobsweb: {shown(line, app.config['JOBSWEB_MASK_KEYS'])}", file=sys.stderr)


def _not_started(app, tail, exit_code, message):
    _say(app, message)
    tail.add(message.encode() + b"\n")
    return Ended(exit_code, "dead", "not_started", message)


def _follow(command, tail, timeout):
    """Pass the command's output on while it runs; its Ended."""
    proc = command.proc
    pumps = [threading.Thread(target=_pump, args=(pipe, sink, tail), daemon=True)
             for pipe, sink in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr))]
    for pump in pumps:
        pump.start()
    started = time.monotonic()
    timed_out = command.wait(timeout)
    for pump in pumps:
        # A background process of the command may hold the pipes open: its output is not waited for.
        pump.join(max(1.0, min(5.0, time.monotonic() - started)))
    why = "timeout" if timed_out else "cancelled" if command.cancelled.is_set() else None
    return ended(proc.returncode, timeout, command.stopped_with, why)
