"""`@job(..., cancel="terminate")`: the handler runs in a child process that the worker ends, as
Celery's `revoke(terminate=True)` and RQ's `send_stop_job_command` end a task's process, for
handlers that never look at ctx.cancelled (a C extension's long call, a loop of someone else's).

The worker ends the child (SIGTERM, then SIGKILL after GRACE_SECONDS) whenever it stops holding
the run by force: an operator's cancel (the attempt ends cancelled: a terminated handler cannot
return), its timeout (a hard one: a failed attempt, retried or dead as any timeout), a lost
lease, the shutdown deadline. A shutdown's first request only sets ctx.cancelled in the child.

The child is a fork of multiprocessing's forkserver, a single-threaded process that has imported
jobsweb (PRELOAD): a fork of the worker itself, whose threads may hold locks and whose database
connections would be shared, is unsafe (Python's multiprocessing docs), and a new interpreter
costs a second of CPU a run. The child builds the app as the worker's `flask` command did
(app_source: its --app, FLASK_APP, or wsgi.py) and runs the handler in its app context: its own
database connections, its own Flask-SQLAlchemy session. Lifecycle signals are sent here, in the
worker, around the child's run (engine/worker/child_main.py is the child's side).
"""

import atexit
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import time

import click
from flask.cli import ScriptInfo

from ..jobs import signals
from ..jobs.registry import Cancelled, PermanentError, Retry
from . import child_main
from .execution import Finished, run_handler

GRACE_SECONDS = 5.0  # between SIGTERM and SIGKILL: a handler's own SIGTERM handler may clean up
# What the forkserver imports once, so that each child only builds the app and imports the handlers.
PRELOAD = ["jobsweb.app", "jobsweb.engine.worker.child_main"]
_CONTEXT = multiprocessing.get_context("forkserver")
_alive = set()  # the children started and not yet reaped, for _kill_left
_exit_hook = []  # _kill_left, once registered


def _kill_left():
    """At the worker's exit: SIGKILL to the children still running. Each was given up (the
    shutdown deadline, a timeout) and sent SIGTERM; one that ignores it would otherwise hold the
    exit for the rest of its grace, since multiprocessing's own exit hook (registered first, so
    run after this one) joins every child, past the stop's promised deadline."""
    for process in list(_alive):
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)


def app_source(app):
    """How a child builds `app`: (import path, factory) of the `flask` command running now (its
    --app or FLASK_APP; wsgi.py or app.py when both are None), else FLASK_APP or the app's own
    module (Flask finds its `app` or `create_app` there). Read in the thread the command runs in."""
    command = click.get_current_context(silent=True)
    info = command.find_object(ScriptInfo) if command is not None else None
    if info is not None:
        return info.app_import_path, info.create_app
    return os.environ.get("FLASK_APP") or app.import_name, None


class Children:
    """Runs a held run's handler: in a child process for a `cancel="terminate"` job type, in the
    calling (pool) thread for the others. Made in the worker's main thread (app_source)."""

    def __init__(self, app):
        self.app = app
        self.source = app_source(app)
        _CONTEXT.set_forkserver_preload(PRELOAD)  # read when the forkserver starts, at the first child
        if not _exit_hook:
            _exit_hook.append(atexit.register(_kill_left))

    def run(self, held):
        """execution.run_handler's Finished, whichever way the handler runs."""
        if held.job.cancel != "terminate":
            return run_handler(self.app, held)
        if held.ctx.cancelled:  # given up while it waited for a slot (claimed ahead)
            return Finished(held, exc=Cancelled(f"run {held.ctx.run_id} was asked to stop before it started"),
                            begun=False)
        held.began = started = time.monotonic()
        with self.app.app_context():
            signals.send(signals.attempt_started, ctx=held.ctx)
            try:
                finished = Child(self.source, held).run()
            except Exception as exc:  # noqa: BLE001 - no pipe or process to be had: this attempt's failure
                finished = Finished(held, exc=exc)
            finished.seconds = time.monotonic() - started
            signals.attempt_ended(held, result=finished.result, exc=finished.exc)
        return finished


class ChildError(Exception):
    """An exception a handler raised in its child process, as the child described it (execution.
    describe_error returns `jobsweb_described`); its class is named after the child's."""


class ChildPermanent(ChildError, PermanentError):
    pass


class ChildRetry(ChildError, Retry):
    pass


class ChildCancelled(ChildError, Cancelled):
    pass


KINDS = {"permanent": ChildPermanent, "retry": ChildRetry, "cancelled": ChildCancelled, None: ChildError}


def child_error(error_type, message, stack, kind, retry_in):
    """The worker's stand-in for the child's exception: permanent, a Retry or a Cancelled as it was."""
    named = type(error_type, (KINDS[kind],), {"__module__": "jobsweb.child"})
    exc = named.__new__(named)
    Exception.__init__(exc, message)
    exc.jobsweb_described = (error_type, message, stack)
    exc.in_, exc.reason = retry_in, None
    return exc


class Terminated(Cancelled):
    """The worker ended the child before it answered: what an operator's cancel records."""

    def __init__(self, pid, how):
        super().__init__(f"its process (pid {pid}) was ended with {how}")
        self.jobsweb_cancel_error = f"cancelled by an operator: {self}"


class ChildProcessDied(Exception):
    """The child ended without an answer, and not by the worker: a crash (a segfault, os._exit)."""


def died(pid, exitcode):
    if exitcode is not None and exitcode < 0:
        try:
            name = f" ({signal.Signals(-exitcode).name})"
        except ValueError:  # a real-time signal has no name
            name = ""
        return ChildProcessDied(f"its process (pid {pid}) ended without an answer: killed by signal {-exitcode}{name}")
    return ChildProcessDied(f"its process (pid {pid}) ended without an answer: it exited with code {exitcode}")


class Child:
    """One run's child process, watched from the pool thread that runs it: the thread relays the
    child's calls and a cancel, and ends it when the worker stops holding the run by force."""

    def __init__(self, source, held):
        self.held = held
        ctx = held.ctx
        self.inbox, self.to_child = _CONTEXT.Pipe(duplex=False)
        self.from_child, self.outbox = _CONTEXT.Pipe(duplex=False)
        # Written to by the loop or stopper thread (ctx.cancel, Held.stop(force=True)): a socket, so a
        # write after close() is an error, never a write into a descriptor number used again.
        self.waker, self.wake = socket.socketpair()
        run = {"run_id": ctx.run_id, "job_type": ctx.job_type, "module": held.job.func.__module__,
               "payload": ctx.payload, "attempt": ctx.attempt, "max_attempts": ctx.max_attempts,
               "definition_id": ctx.definition_id}
        self.process = _CONTEXT.Process(target=child_main.main, args=(source, run, self.inbox, self.outbox),
                                        name=f"jobsweb-run-{ctx.run_id}")
        self.answer = None
        self.ended_with = None  # the last signal the worker sent it
        self.kill_at = None  # time.monotonic() of the SIGKILL, once a SIGTERM was sent
        self.pid = self.exitcode = None  # the process's, read before it is closed

    def run(self):
        """The Finished of the handler's return, its exception, its end by the worker or its crash."""
        held = self.held
        held.ctx._on_cancel = held.abort = self._wake
        try:
            try:
                self.process.start()
            except Exception as exc:  # noqa: BLE001 - a run's failure, not the worker's
                return Finished(held, exc=RuntimeError(f"could not start the handler's process: {exc}"))
            finally:
                self.inbox.close()  # the child's ends: its exit closes the pipe
                self.outbox.close()
            _alive.add(self.process)
            try:
                self._watch()
            finally:
                _alive.discard(self.process)
            self.pid, self.exitcode = self.process.pid, self.process.exitcode
            self.process.close()  # its status pipe now, not when the garbage collector comes by
        finally:
            held.ctx._on_cancel = held.abort = None
            for end in (self.to_child, self.from_child, self.waker, self.wake):
                end.close()
        return self._finished()

    def _wake(self):
        try:
            self.wake.send(b".")
        except OSError:  # closed: the child is gone already
            pass

    def _watch(self):
        held, process = self.held, self.process
        told = False
        listening = [self.from_child, self.waker, process.sentinel]
        while True:
            if held.ctx.cancelled and not told:
                told = True
                self._tell(("cancel",))
            if held.forced and self.ended_with is None:
                self._end(signal.SIGTERM)
            if self.kill_at is not None and time.monotonic() >= self.kill_at:
                self._end(signal.SIGKILL)
            wait = None if self.kill_at is None else max(self.kill_at - time.monotonic(), 0)
            ready = multiprocessing.connection.wait(listening, wait)
            if self.waker in ready:
                self.waker.recv(4096)
            if process.sentinel in ready:
                while self._receive():  # once it is gone, what it wrote is in the pipe: read it all
                    pass
                process.join()
                return
            if self.from_child in ready and not self._receive():
                listening.remove(self.from_child)  # closed: its exit comes next

    def _receive(self):
        """Handle one message from the child, if one is there; whether one was."""
        try:
            if not self.from_child.poll():
                return False
            message = self.from_child.recv()
        except (EOFError, OSError):
            return False
        held = self.held
        if message[0] == "progress":
            if held.ctx._report_progress is not None:
                held.ctx._report_progress(held.ctx, *message[1:])
        elif message[0] == "call":
            try:
                reply = (True, held.ctx.extend_lease(*message[2]) if message[1] == "extend_lease" else held.ctx.batch)
            except Exception as exc:  # noqa: BLE001 - told to the handler, which raises it
                reply = (False, f"{type(exc).__name__}: {exc}")
            self._tell(("reply", *reply))
        else:
            self.answer = message
        return True

    def _tell(self, message):
        try:
            self.to_child.send(message)
        except OSError:  # it has exited
            pass

    def _end(self, signum):
        self.ended_with = signum
        self.kill_at = time.monotonic() + GRACE_SECONDS if signum == signal.SIGTERM else None
        try:
            os.kill(self.process.pid, signum)
        except ProcessLookupError:
            pass

    def _finished(self):
        held, answer = self.held, self.answer
        output = answer[-1] if answer is not None else None
        if answer is not None and answer[0] == "returned":
            return Finished(held, result=answer[1], output=output)  # even after a cancel: the work was done
        if self.ended_with is not None:
            how = signal.Signals(self.ended_with).name
            if self.ended_with == signal.SIGKILL:
                how += f", {GRACE_SECONDS:g} s after a SIGTERM it outlived"
            return Finished(held, exc=Terminated(self.pid, how), output=output)
        if answer is not None:
            return Finished(held, exc=child_error(*answer[1:6]), output=output)
        return Finished(held, exc=died(self.pid, self.exitcode))
