"""Running handlers: a bounded pool of threads, and what one attempt of a run came to."""

import json
import threading
import time
import traceback
from dataclasses import dataclass

from .enqueuing import has_nul
from .handlers import Cancelled


@dataclass
class Outcome:
    """How one attempt ended, ready to be written by FINISH_RUNS."""

    run_id: int
    job_type: str
    attempt: int
    worker: str
    outcome: str  # succeeded | failed | interrupted | cancelled
    result: object = None
    error_type: str | None = None
    error: str | None = None
    stack: str | None = None
    delay: float = 0.0  # seconds before the retry, when it fails
    give_up: bool = False  # True: dead now, whatever attempts remain


@dataclass
class Finished:
    """What a pool thread reports back: the held run and how its handler ended."""

    held: object
    result: object = None
    exc: BaseException | None = None
    seconds: float = 0.0


def clip(text, limit):
    """Keep error text bounded: the start says what, the end says where."""
    if text is None or len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - limit} characters cut] ...\n{text[-half:]}"


def run_handler(app, held):
    """Call the handler of one held run inside an app context; never raises."""
    started = time.monotonic()
    try:
        with app.app_context():
            result = held.job.func(held.ctx)
        json.dumps(result)  # a result that cannot be stored is the handler's error, not the batch's
        if has_nul(result):
            # jsonb cannot hold U+0000: written as is, the batch's FINISH_RUNS failed and the
            # worker crashed, again on every retry (found following up the bad-input drill).
            raise ValueError("the result contains the NUL character (\\u0000), which PostgreSQL cannot store")
        return Finished(held, result=result, seconds=time.monotonic() - started)
    except Exception as exc:  # noqa: BLE001 - any handler error is recorded, never fatal
        return Finished(held, exc=exc, seconds=time.monotonic() - started)


class Pool:
    """`size` daemon threads running handlers.

    Daemon threads, because a handler that ignores its cancellation flag must not keep the
    process alive past the shutdown deadline: its run is released and the process exits.
    """

    def __init__(self, app, size, report):
        self.app = app
        self.report = report  # called from the pool thread with a Finished
        self.waiting = []
        self.cond = threading.Condition()
        self.threads = [threading.Thread(target=self._serve, name=f"jobsweb-pool-{i}", daemon=True)
                        for i in range(size)]
        for thread in self.threads:
            thread.start()

    def submit(self, held):
        with self.cond:
            self.waiting.append(held)
            self.cond.notify()

    def _serve(self):
        while True:
            with self.cond:
                while not self.waiting:
                    self.cond.wait()
                held = self.waiting.pop(0)
            self.report(run_handler(self.app, held))


def describe_error(exc):
    """(error_type, message, stack) of a handler's exception."""
    stack = "".join(traceback.format_exception(exc))
    # PostgreSQL text cannot hold U+0000; an error quoting a bad byte must still be recorded.
    message = (str(exc) or type(exc).__name__).replace("\x00", "\\x00")
    return type(exc).__name__, message, stack.replace("\x00", "\\x00")


def was_cancelled(exc):
    return isinstance(exc, Cancelled)
