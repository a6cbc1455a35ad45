import io
import json
import logging
import re
from datetime import datetime, timezone

from jobsweb import enqueue
from jobsweb.core.logs import EventBatchingHandler, JsonFormatter, TextFormatter, run_event
from tests.conftest import committed


def record_of(message, *args, **fields):
    """The LogRecord run_event would emit, captured."""
    captured = []
    logger = logging.getLogger("tests.logs.capture")
    logger.propagate = False
    handler = logging.Handler()
    handler.emit = captured.append
    logger.handlers = [handler]
    logger.setLevel(logging.INFO)
    run_event(logger, logging.INFO, "succeeded", message, *args, **fields)
    return captured[0]


def test_a_json_line_carries_the_run_event_fields():
    record = record_of("run %d %s succeeded (attempt %d)", 7, "send_invoice", 2, run_id=7,
                       job_type="send_invoice", attempt=2, duration=1.23456, worker="h:1:abc")
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "run 7 send_invoice succeeded (attempt 2)"
    assert {k: line[k] for k in ("event", "run_id", "job_type", "attempt", "duration", "worker")} == {
        "event": "succeeded", "run_id": 7, "job_type": "send_invoice", "attempt": 2, "duration": 1.235,
        "worker": "h:1:abc"}
    assert line["level"] == "INFO" and line["time"].endswith("+00:00")


def test_a_text_line_ends_with_the_duration_and_worker():
    record = record_of("run %d done", 7, run_id=7, job_type="t", attempt=1, duration=0.5, worker="h:1:abc")
    assert TextFormatter().format(record).endswith("run 7 done [duration=0.5s worker=h:1:abc]")


def test_run_events_cost_nothing_when_their_level_is_off():
    class Explodes:
        def __str__(self):
            raise AssertionError("formatted although the level is off")

    captured = []
    logger = logging.getLogger("tests.logs.quiet")
    logger.propagate = False
    handler = logging.Handler()
    handler.emit = captured.append
    logger.handlers = [handler]
    logger.setLevel(logging.WARNING)
    run_event(logger, logging.INFO, "started", "run %s", Explodes(), run_id=1, job_type="t", attempt=1)
    assert captured == []
    # The same event at a level that is on is written, fields and all.
    run_event(logger, logging.WARNING, "failed", "run %s failed", 2, run_id=2, job_type="t", attempt=1)
    [record] = captured
    assert (record.getMessage(), record.event, record.run_id) == ("run 2 failed", "failed", 2)


def test_run_events_are_written_in_one_batch_and_other_lines_keep_their_order():
    stream = io.StringIO()
    handler = EventBatchingHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger("tests.logs.batching")
    logger.propagate = False
    logger.handlers = [handler]
    logger.setLevel(logging.INFO)
    for run_id in (1, 2):
        run_event(logger, logging.INFO, "started", "run %d started", run_id, run_id=run_id, job_type="t", attempt=1)
    assert stream.getvalue() == ""  # held until the worker loop's pass ends
    logger.info("a handler's own line")
    assert stream.getvalue() == "run 1 started\nrun 2 started\na handler's own line\n"
    run_event(logger, logging.INFO, "succeeded", "run %d succeeded", 1, run_id=1, job_type="t", attempt=1)
    handler.flush()
    assert stream.getvalue().endswith("a handler's own line\nrun 1 succeeded\n")


def test_a_worker_logs_one_json_line_per_finished_run_at_the_default_level(app, spawn_worker):
    with committed(app):
        ok = enqueue("jobsweb.noop")
        dead = enqueue("jobsweb.fail", {"permanent": True})
    worker = spawn_worker(JOBSWEB_LOG_FORMAT="json")
    out, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, out
    lines = [json.loads(line) for line in out.splitlines()]
    events = {(line["run_id"], line["event"]): line for line in lines if "event" in line}
    assert set(events) == {(ok, "succeeded"), (dead, "dead")}
    succeeded = events[(ok, "succeeded")]
    assert succeeded["job_type"] == "jobsweb.noop" and succeeded["attempt"] == 1
    assert 0 <= succeeded["duration"] < 10 and succeeded["worker"].count(":") == 2
    assert events[(dead, "dead")]["level"] == "ERROR"
    assert any(line["message"].endswith("stopped") for line in lines)


def test_a_worker_at_debug_level_also_logs_each_run_starting(app, spawn_worker):
    with committed(app):
        ok = enqueue("jobsweb.noop")
    worker = spawn_worker(JOBSWEB_LOG_FORMAT="json", JOBSWEB_LOG_LEVEL="debug")
    out, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, out
    events = [json.loads(line) for line in out.splitlines() if '"event"' in line]
    assert [(e["run_id"], e["event"], e["level"]) for e in events] == [
        (ok, "started", "DEBUG"), (ok, "succeeded", "INFO")]
    assert events[0]["attempt"] == 1 and events[0]["worker"] == events[1]["worker"]


def test_text_and_json_times_read_as_logging_formats_them_within_and_across_seconds():
    text, json_lines, plain = TextFormatter(), JsonFormatter(), logging.Formatter("%(asctime)s")
    for created in (1_700_000_000.125, 1_700_000_000.75, 1_700_000_001.5, 1_700_000_000.25):
        record = logging.LogRecord("t", logging.INFO, "", 0, "m", (), None)
        record.created, record.msecs = created, int((created - int(created)) * 1000) + 0.0
        assert text.format(record).startswith(plain.format(record) + " INFO t: m")
        expected = datetime.fromtimestamp(created, timezone.utc).isoformat(timespec="milliseconds")
        assert json.loads(json_lines.format(record))["time"] == expected


FORGING = "down\n[2026-01-01 00:00:00,000] INFO in notify: all good\r\x1b[2J\x1b]52;c;ZXZpbA==\x07\x9b31m\u202etxt\u2028x"


def test_text_and_json_lines_escape_every_control_character_and_stay_one_line():
    record = logging.LogRecord("jobsweb.notify", logging.WARNING, __file__, 1, "reply: %s", (FORGING,), None)
    text, line = TextFormatter().format(record), JsonFormatter().format(record)
    assert text.endswith("reply: down\\n[2026-01-01 00:00:00,000] INFO in notify: all good\\r\\x1b[2J"
                         "\\x1b]52;c;ZXZpbA==\\x07\\x9b31m\\u202etxt\\u2028x")
    for written in (text, line):
        assert not re.search("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]", written)
    assert json.loads(line)["message"] == f"reply: {FORGING}"
