"""Log lines: text for people, or one JSON object per line for a log pipeline (JOBSWEB_LOG_FORMAT).

Run events (started, succeeded, failed, dead, cancelled, released, rejected) carry their fields
as attributes of the log record (`extra`), so the JSON formatter emits them as keys and a
pipeline can count and graph them without parsing the sentence.
"""

import json
import logging
import os
import re
import sys
import threading
import time
from datetime import datetime, timezone

from flask import current_app, has_app_context

from . import masking, settings
from .errors import ConfigError

# The fields of a run event, in the order the JSON line lists them.
RUN_FIELDS = ("event", "run_id", "job_type", "attempt", "duration", "worker")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# What forges or hides a line in a terminal or a log viewer, in a job's error text or a
# webhook's reply: C0 controls but tab (line breaks, ESC), DEL, C1 controls, Unicode's line and
# paragraph separators and the bidirectional overrides and isolates. Text lines escape them all;
# JSON escapes C0 itself, the rest here.
_UNSAFE_IN_TEXT = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r"}


def _escape(match):
    char = match[0]
    return _SHORT_ESCAPES.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def escaped(text):
    """`text` on one line, with every character that could forge or hide a line written as an
    escape (\\n, \\x1b, \\u202e)."""
    # isprintable() is false for every character escaped here (and for tab, then the sub leaves
    # it): most lines hold none, and the test alone is a third of the cost of the sub.
    return text if text.isprintable() else _UNSAFE_IN_TEXT.sub(_escape, text)


def json_escaped(text):
    """JSON text with the characters that hide or reorder what a terminal shows (C1 controls,
    line and paragraph separators, bidi overrides: U+202E) written as \\uXXXX escapes, which
    JSON reads back as the same characters (json.dumps escapes C0 itself)."""
    return text if text.isprintable() else _UNSAFE_IN_JSON.sub(lambda match: f"\\u{ord(match[0]):04x}", text)


def run_event(logger, level, event, message, *args, run_id, job_type, attempt, duration=None,
              worker=None):
    """Log one run event with its fields; nothing is built when `level` is disabled. A failure's
    error is masked (core/masking.py) as the run page masks it: log readers are not all admins."""
    if logger.isEnabledFor(level):
        if event in ("failed", "dead"):
            words = current_app.config["JOBSWEB_MASK_KEYS"] if has_app_context() else masking.MASK_WORDS
            args = tuple(masking.shown(arg, words) if isinstance(arg, str) else arg for arg in args)
        logger.handle(RunEventRecord(logger.name, level, message, args, {
            "event": event, "run_id": run_id, "job_type": job_type, "attempt": attempt,
            "duration": None if duration is None else round(float(duration), 3), "worker": worker}))


class RunEventRecord(logging.LogRecord):
    """The LogRecord of a run event, made in a third of LogRecord.__init__'s time.

    A worker logs one per run: LogRecord.__init__ works out a file and module name for every
    record (from the caller, which for a run event is always run_event, so no line shows it)
    and Logger.log looks the caller up. Here those attributes are copied from one record made
    at import; the time, level and thread are the record's own, as LogRecord.__init__ sets them.
    """

    def __init__(self, name, level, msg, args, fields):  # noqa: PLW0231 - set as LogRecord's are
        vars(self).update(_RECORD_TEMPLATE)
        now = time.time()
        self.name, self.msg, self.args = name, msg, args
        self.levelno, self.levelname = level, logging.getLevelName(level)
        self.created, self.msecs = now, int((now - int(now)) * 1000) + 0.0
        self.relativeCreated = (now - logging._startTime) * 1000
        if logging.logThreads:
            self.thread, self.threadName = threading.get_ident(), threading.current_thread().name
        if logging.logProcesses:
            self.process = os.getpid()
        vars(self).update(fields)


_RECORD_TEMPLATE = {**vars(logging.LogRecord("", logging.INFO, "(unknown file)", 0, "", (), None,
                                             "(unknown function)")),
                    "thread": None, "threadName": None, "process": None}


class TextFormatter(logging.Formatter):
    """The sentence, then the run event's duration and worker (already in the sentence: the rest)."""

    def __init__(self):
        super().__init__(TEXT_FORMAT)
        self.stamp = (None, "")  # (second, its text): one tuple, so threads read a matching pair

    def formatTime(self, record, datefmt=None):
        # logging.Formatter calls localtime() and strftime() for every line, a quarter of a run
        # event's cost; lines come by the thousand per second, so each second is formatted once.
        second = int(record.created)
        cached, text = self.stamp
        if cached != second:
            text = time.strftime(self.default_time_format, self.converter(second))
            self.stamp = (second, text)
        return self.default_msec_format % (text, record.msecs)

    def formatMessage(self, record):
        # A job's error text or a webhook's reply could hold line breaks that forge log lines:
        # the line itself is kept on one line (a traceback after it stays as Python wrote it).
        return escaped(super().formatMessage(record))

    def format(self, record):
        if record.exc_info or record.exc_text or record.stack_info:
            line = super().format(record)
        else:
            # TEXT_FORMAT written out: Formatter.format's general steps (a style object, a dict
            # look-up per field) were half of a line's cost, and most lines have no traceback.
            record.message = record.getMessage()
            record.asctime = self.formatTime(record)
            line = escaped(f"{record.asctime} {record.levelname} {record.name}: {record.message}")
        if getattr(record, "event", None) is None:
            return line
        tail = [f"duration={record.duration:g}s"] if record.duration is not None else []
        tail += [f"worker={record.worker}"] if record.worker else []
        return f"{line} [{' '.join(tail)}]" if tail else line


class JsonFormatter(logging.Formatter):
    """{"time", "level", "logger", "message", run event fields, "exception"} on one line."""

    def __init__(self):
        super().__init__()
        self.stamp = (None, "")  # (second, "YYYY-MM-DDTHH:MM:SS"), as TextFormatter's

    def utc_time(self, record):
        """ISO 8601 in UTC with milliseconds; the second's text is made once per second."""
        second = int(record.created)
        cached, text = self.stamp
        if cached != second:
            text = datetime.fromtimestamp(second, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
            self.stamp = (second, text)
        return f"{text}.{int(record.msecs):03d}+00:00"

    def format(self, record):
        out = {
            "time": self.utc_time(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in RUN_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                out[name] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        line = json.dumps(out, ensure_ascii=False, default=str)
        return json_escaped(line)


def formatter(log_format):
    return JsonFormatter() if log_format == "json" else TextFormatter()


def gunicorn_logging(environ=None):
    """gunicorn's logconfig_dict: its error lines (stderr) and access lines (stdout), and the
    app's own (the root logger, stderr), all in JOBSWEB_LOG_FORMAT at JOBSWEB_LOG_LEVEL. Without
    it the web process wrote gunicorn's format and Flask's, neither escaping what a line holds."""
    try:
        config = settings.from_environment(environ)
    except ConfigError as exc:
        raise SystemExit(exc.message) from None  # one line, before gunicorn starts anything
    log_format, level = config["JOBSWEB_LOG_FORMAT"], config["JOBSWEB_LOG_LEVEL"]

    def stream(name):
        return {"class": "logging.StreamHandler", "formatter": "jobsweb", "stream": f"ext://sys.{name}"}

    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"jobsweb": {"()": formatter, "log_format": log_format}},
        "handlers": {"stderr": stream("stderr"), "stdout": stream("stdout")},
        "root": {"level": level.upper(), "handlers": ["stderr"]},
        "loggers": {"gunicorn.error": {"level": "INFO", "handlers": ["stderr"], "propagate": False},
                    "gunicorn.access": {"level": "INFO", "handlers": ["stdout"], "propagate": False}},
    }


class EventBatchingHandler(logging.StreamHandler):
    """Writes run events once per worker loop pass (flush_events), everything else at once.

    A busy worker logs two events per run; written one by one, each write was a system call
    that let the handler threads take the GIL, and the loop thread then waited to get it back:
    the event lines cost a third of a no-op drain's throughput. Any other line (a warning, a
    handler's own logging) writes the batch before it, so lines never change order.
    """

    def __init__(self, stream):
        super().__init__(stream)
        self.batch = []

    def emit(self, record):
        try:
            self.batch.append(self.format(record) + self.terminator)
        except Exception:  # noqa: BLE001 - logging's own convention: report, never raise
            self.handleError(record)
            return
        if getattr(record, "event", None) is None or record.levelno >= logging.WARNING:
            self.flush()

    def flush(self):
        with self.lock:
            if self.batch:
                self.stream.write("".join(self.batch))
                self.batch.clear()
            super().flush()


def flush_events():
    """Write the run events logged since the last call (the worker loop calls this each pass)."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, EventBatchingHandler):
            handler.flush()


def setup(log_format="text", level="info"):
    """Log `level` and up to stderr in `log_format`, unless the host (a test runner) set logging up."""
    root = logging.getLogger()
    if any(not getattr(handler, "captures_only", False) for handler in root.handlers):
        return
    handler = EventBatchingHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Looking up each call's file and line (which these formats never show) was half of each
    # line's cost, ~8 of ~17 us; the logging HOWTO's "Optimization" section names these switches.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
