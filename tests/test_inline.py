"""Inline mode (JOBSWEB_INLINE), for a host's tests on SQLite: enqueue checks its input, runs the
handler at once and keeps the run in memory for get_run; nothing touches the database."""

import pytest
from flask import Flask

from jobsweb import InvalidInput, JobsWeb, cancel, enqueue, enqueue_many, get_run, retry
from jobsweb.core.errors import RunNotFound, RunStateError
from jobsweb.engine.runs.run_status import INLINE_RUNS


@pytest.fixture
def sqlite_app(tmp_path, registry_snapshot, monkeypatch):
    monkeypatch.setenv("JOBSWEB_HANDLERS", "tests.job_types")
    host = Flask("host")
    # A file that does not exist and is never made: no query reaches any database.
    host.config.update(SQLALCHEMY_DATABASE_URI=f"sqlite:///{tmp_path / 'never.db'}", SECRET_KEY="host-secret",
                       TESTING=True, JOBSWEB_INLINE=True)
    JobsWeb(host, url_prefix="/admin/jobs")
    with host.app_context():
        yield host
    assert not (tmp_path / "never.db").exists()


def test_enqueue_runs_the_handler_at_once_and_get_run_reads_its_outcome(sqlite_app):
    run = get_run(enqueue("jobsweb.sleep", {"seconds": 0}))
    assert (run.status, run.attempts, run.result, run.done) == ("succeeded", 1, {"slept": 0}, True)
    assert run.started_at <= run.finished_at


def test_a_failing_handler_is_dead_at_once_without_retries(sqlite_app):
    run = get_run(enqueue("jobsweb.fail", max_attempts=5))
    assert (run.status, run.attempts, run.error_type) == ("dead", 1, "RuntimeError")
    assert "failing on purpose" in run.last_error


def test_an_async_handler_runs_and_its_progress_is_kept(sqlite_app):
    run = get_run(enqueue("test.async_progress"))
    assert (run.status, run.result, run.progress, run.progress_note) == ("succeeded", "done", 1.0, "three quarters")


def test_enqueue_many_runs_each_payload_in_order(sqlite_app):
    ids = enqueue_many("jobsweb.sleep", [{"seconds": 0}, {"seconds": 0.01}])
    assert [get_run(run_id).result for run_id in ids] == [{"slept": 0}, {"slept": 0.01}]


@pytest.mark.parametrize("call, field", [
    (lambda: enqueue("no.such.type"), "job_type"),
    (lambda: enqueue("jobsweb.noop", {"x": float("nan")}), "payload"),
    (lambda: enqueue("jobsweb.noop", max_attempts=0), "max_attempts"),
    (lambda: enqueue_many("jobsweb.noop", [{}, ["not an object"]]), "payloads"),
])
def test_bad_input_is_refused_as_on_postgresql_and_runs_nothing(sqlite_app, call, field):
    with pytest.raises(InvalidInput) as raised:
        call()
    assert raised.value.field == field
    assert sqlite_app.extensions.get(INLINE_RUNS, {}) == {}  # nothing ran


def test_cancel_and_retry_of_an_inline_run_say_it_ended_before_enqueue_returned(sqlite_app):
    # They told a host already on JOBSWEB_INLINE=True to set JOBSWEB_INLINE=True (issue 52).
    dead = enqueue("jobsweb.fail", max_attempts=1)
    done = enqueue("jobsweb.noop")
    with pytest.raises(RunStateError) as cancelling:
        cancel(done)
    assert cancelling.value.message == (f"run {done} is succeeded: inline mode (JOBSWEB_INLINE) ran it before enqueue() "
                                     "returned, and has no queue to cancel it in")
    with pytest.raises(RunStateError) as retrying:
        retry(dead)
    assert (retrying.value.status, retrying.value.message) == ("dead", (
        f"run {dead} is dead: inline mode (JOBSWEB_INLINE) ran it before enqueue() returned, and has no queue to "
        "retry it in"))
    with pytest.raises(RunNotFound):
        cancel(dead + 100)
    assert get_run(done).wait(timeout=1).status == "succeeded"  # ended already: no wait, no database
