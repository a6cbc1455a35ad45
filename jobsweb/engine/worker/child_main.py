"""The child process of a `cancel="terminate"` job type's run: it builds the app the worker was
started with, runs the handler in its app context and sends back what it came to.

What travels (engine/worker/child_process.py is the worker's side): the worker sends "cancel"
(its ctx.cancelled turned true: a shutdown's request, or just before it ends this process) and
the answers to the handler's calls; this process sends ctx.progress() writes, ctx.extend_lease()
and ctx.batch calls, which the worker makes on its own connections, and at the end one answer:
the return value (JSON, checked here) or the exception described (type, message, stack, and
whether it is permanent, a Retry or a Cancelled), with the attempt's captured output.

If the worker is gone (its end of the pipe closes: killed, crashed), this process exits at once:
no one is left to record the attempt, and the run's lease expires and lease recovery takes it.
"""

import contextlib
import importlib
import os
import queue
import signal
import threading

import click
from flask.cli import ScriptInfo

from ...core import logs
from ..jobs.registry import Cancelled, JobContext, Retry, get, handler_running
from . import output
from .execution import check_result, describe_error

EXIT_ORPHANED = 70  # the worker went away while the handler ran: EX_SOFTWARE, never recorded


class Relay:
    """This process's two pipes: `inbox` (from the worker) read by a thread of its own, which sets
    the cancellation flag at once, whatever the handler is doing; `outbox` (to the worker), shared
    by the handler's threads under a lock."""

    def __init__(self, inbox, outbox):
        self.inbox = inbox
        self.outbox = outbox
        self.lock = threading.Lock()
        self.replies = queue.SimpleQueue()
        self.ctx = None

    def listen(self, ctx):
        self.ctx = ctx
        threading.Thread(target=self._read, name="jobsweb-child-inbox", daemon=True).start()

    def _read(self):
        while True:
            try:
                message = self.inbox.recv()
            except (EOFError, OSError):
                os._exit(EXIT_ORPHANED)  # the worker is gone: nothing here can be recorded
            if message[0] == "cancel":
                self.ctx.cancel()
            else:
                self.replies.put(message[1:])

    def send(self, *message):
        with self.lock:
            self.outbox.send(message)

    def call(self, name, *args):
        """What the worker's ctx answers to `name` (extend_lease, batch), from the handler's thread."""
        with self.lock:  # one call at a time: its reply is the next one
            self.outbox.send(("call", name, args))
            ok, value = self.replies.get()
        if not ok:
            raise RuntimeError(f"ctx.{name} failed in the worker: {value}")
        return value


def load_app(source):
    """The app, built as the worker's `flask` command built it (`--app`, FLASK_APP, or a wsgi.py or
    app.py here). Inside a click context, as the worker's was: the app then knows it is not serving
    (jobsweb's web alert thread starts only in a process that serves)."""
    import_path, create_app = source
    with click.Context(click.Command("jobsweb-child")):
        return ScriptInfo(app_import_path=import_path, create_app=create_app).load_app()


def find_job(job_type, module):
    """The handler of `job_type`: registered by the app's JOBSWEB_HANDLERS, else by importing the
    module the worker's handler was defined in."""
    if get(job_type) is None and module != "__main__":
        importlib.import_module(module)
    job = get(job_type)
    if job is None:
        raise LookupError(f"job type {job_type!r} is not registered in the child process: the app it built "
                          f"did not import its module ({module}); name it in JOBSWEB_HANDLERS")
    return job


def main(source, run, inbox, outbox):
    """The child's entry point (multiprocessing's target). `run`: the run's fields as the worker
    holds them (run_id, job_type, module, payload, attempt, max_attempts, definition_id)."""
    # Ctrl-C in a terminal reaches the whole process group: the worker's stop decides, not it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    relay = Relay(inbox, outbox)
    ctx = JobContext(run["run_id"], run["job_type"], run["payload"], run["attempt"], run["max_attempts"],
                     run["definition_id"], _extend_lease=lambda ctx, seconds: relay.call("extend_lease", seconds),
                     _report_progress=lambda ctx, *said: relay.send("progress", *said),
                     _read_batch=lambda run_id: relay.call("batch"))
    relay.listen(ctx)
    logged = job = None
    try:
        app = load_app(source)
        logs.setup(app.config["JOBSWEB_LOG_FORMAT"], app.config["JOBSWEB_LOG_LEVEL"])
        job = find_job(run["job_type"], run["module"])
        with output.capture(app.config["JOBSWEB_OUTPUT_MAX_CHARS"]) as logged, handler_running(ctx):
            with app.app_context():
                result = check_result(job.func(ctx))
        ctx.flush_progress()
        answer = ("returned", result)
    except BaseException as exc:  # noqa: BLE001 - SystemExit and all: the worker records it
        with contextlib.suppress(Exception):
            ctx.flush_progress()
        answer = ("raised", *describe_error(exc), kind(job, exc),
                  getattr(exc, "in_", None) if isinstance(exc, Retry) else None)
    logs.flush_events()
    relay.send(*answer, logged.text() if logged is not None else None)


def kind(job, exc):
    """What the worker must know of the exception besides its text: retry, cancelled, permanent or None."""
    if isinstance(exc, Retry):
        return "retry"
    if isinstance(exc, Cancelled):
        return "cancelled"
    return "permanent" if job is not None and job.is_permanent(exc) else None
