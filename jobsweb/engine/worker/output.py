"""Captured output: the tail of the log records a handler's loggers emit during one attempt,
stored in job_attempts.output and shown on the run's page.

One logging handler on the root logger serves every attempt of the process. It finds the
attempt a record belongs to through a ContextVar, which `capture()` sets around the handler:
a thread-local would not do, since `async def` handlers share the event loop's thread, and
each asyncio task runs in a context of its own. Records logged outside any attempt (the
worker's own lines) cost one ContextVar look-up; an attempt that logs nothing costs setting
and resetting it.

What is captured is what the logging configuration lets through (the worker logs INFO and
up), in the worker's text format. Threads a handler starts itself do not inherit the
context, so their records are not captured.
"""

import logging
from collections import deque
from contextvars import ContextVar

from ...core.logs import TEXT_FORMAT

_attempt = ContextVar("jobsweb_attempt_output", default=None)


class Tail:
    """The last `limit` characters of the lines given to `add`."""

    __slots__ = ("limit", "lines", "chars", "cut")

    def __init__(self, limit):
        self.limit = limit
        self.lines = deque()
        self.chars = 0
        self.cut = False

    def add(self, line):
        # PostgreSQL text cannot hold U+0000; a record quoting a bad byte is still kept.
        line = line.replace("\x00", "\\x00") + "\n"
        self.lines.append(line)
        self.chars += len(line)
        while self.chars > self.limit and len(self.lines) > 1:
            self.chars -= len(self.lines.popleft())
            self.cut = True

    def text(self):
        """The tail, or None when nothing was logged."""
        if not self.lines:
            return None
        text = "".join(self.lines)
        if len(text) > self.limit:  # one line longer than the whole limit: its end
            text, self.cut = text[-self.limit:], True
        return f"[earlier output cut]\n{text}" if self.cut else text


class CaptureHandler(logging.Handler):
    """Adds each record to the Tail of the attempt whose context logged it."""

    captures_only = True  # core/logs.setup still sets logging up when this is the only handler

    def __init__(self):
        super().__init__()
        self.setFormatter(logging.Formatter(TEXT_FORMAT))

    def handle(self, record):
        # No lock: a Tail belongs to one attempt, and deque.append is atomic.
        tail = _attempt.get()
        if tail is not None:
            try:
                tail.add(self.format(record))
            except Exception:  # noqa: BLE001 - logging's own convention: report, never raise
                self.handleError(record)
        return True


_handler = CaptureHandler()


class capture:  # noqa: N801 - used as a function: `with capture(limit) as tail:`
    """Capture the log records of the code inside, in this context (thread or asyncio task);
    `with` gives the Tail. The handler joins the root logger on first use (and again if a
    logging configuration replaced the root's handlers). A class, not @contextmanager: this
    runs around every attempt, and a generator's setup costs several times as much."""

    __slots__ = ("tail", "token")

    def __init__(self, limit):
        self.tail = Tail(limit)

    def __enter__(self):
        root = logging.root
        if _handler not in root.handlers:
            root.addHandler(_handler)
        self.token = _attempt.set(self.tail)
        return self.tail

    def __exit__(self, *exc_info):
        _attempt.reset(self.token)
