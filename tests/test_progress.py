"""A handler's ctx.progress(), shown on the run page and the runs list, and jobsweb.get_run()
reading a run's status, progress and result from application code."""

import time

import pytest

import jobsweb
from jobsweb import InvalidInput, enqueue, get_run
from jobsweb.engine.jobs.registry import JobContext
from jobsweb.testing import drain
from tests.conftest import wait_for


def read(app, run_id):
    with app.app_context():
        return get_run(run_id)


def test_a_worker_process_records_progress_shown_live_and_read_through_get_run(app, spawn_worker, sign_in, tmp_path):
    gate = tmp_path / "gate"
    with app.app_context():
        run_id = jobsweb.enqueue("test.export", {"pages": 3, "gate": str(gate)})
    assert read(app, run_id).progress is None and read(app, run_id).status == "queued"
    spawn_worker("--forever", "--poll-interval", "0.2")
    wait_for(lambda: read(app, run_id).progress_note == "Exporting page 1 of 3", message="page 1's progress")
    (tmp_path / "gate.0").touch()
    run = wait_for(lambda: (r := read(app, run_id)).progress_note == "Exporting page 2 of 3" and r,
                   message="page 2's progress")
    assert (run.status, run.attempts, run.progress, run.done) == ("running", 1, pytest.approx(1 / 3), False)
    client = sign_in("viewer")
    page = client.get(f"/runs/{run_id}").get_data(as_text=True)
    assert '<progress max="1" value="0.333' in page and "33% · Exporting page 2 of 3" in page
    assert "33% · Exporting page 2 of 3" in client.get("/runs").get_data(as_text=True)
    (tmp_path / "gate.1").touch()
    (tmp_path / "gate.2").touch()
    run = wait_for(lambda: (r := read(app, run_id)).done and r, message="the run to finish")
    # The last value said is written although it came within the interval of the one before.
    assert (run.status, run.progress, run.progress_note, run.result) == ("succeeded", 1.0, "Exported", {"pages": 3})
    assert run.finished_at >= run.progress_at >= run.started_at
    # The list shows progress of running runs only: a finished run shows its status alone.
    assert "Exported" not in client.get("/runs").get_data(as_text=True)


def test_an_async_handler_reports_progress_as_a_sync_one_does(app):
    with app.app_context():
        run_id = enqueue("test.async_progress")
        assert [r.status for r in drain()] == ["succeeded"]
    run = read(app, run_id)
    # Its last ctx.progress said 0.75: a succeeded run's progress reads as finished.
    assert (run.progress, run.progress_note, run.result) == (1.0, "three quarters", "done")


def test_progress_is_written_at_most_every_half_second_and_its_last_value_at_the_end():
    # docs/REFERENCE.md: "written ... at most every 0.5 s per run"; "a value said within 0.5 s of
    # the last write waits for the next call or the handler's return".
    written = []  # (time.monotonic() when written, progress, note)
    ctx = JobContext(1, "t", {}, 1, 1, _report_progress=lambda ctx, progress, note, data: written.append(
        (time.monotonic(), progress, note)))
    said = []  # time.monotonic() as each call began; call n says step n

    def three_writes():
        """Say a new value (as a busy handler does, every 10 ms); True once three were written."""
        said.append(time.monotonic())
        ctx.progress((len(said) - 1) / 1000, f"step {len(said) - 1}")
        time.sleep(0.01)
        return len(written) >= 3

    wait_for(three_writes, interval=0, message="three writes (one at once, then one each 0.5 s)")
    assert written[0][1:] == (0.0, "step 0")
    gaps = [later[0] - earlier[0] for earlier, later in zip(written, written[1:])]
    assert all(gap >= 0.49 for gap in gaps), gaps  # never sooner than 0.5 s (less the clock's jitter)
    # ...and at the first call 0.5 s after the last write: the call before the one that wrote began
    # sooner than that (how much later the writing call came is the machine's load, not the rule).
    for earlier, later in zip(written, written[1:]):
        call = int(later[2].split()[1])
        assert said[call - 1] < earlier[0] + 0.5, (said, written)
    ctx.progress(0.999, "almost")  # within 0.5 s of the last write: held back
    assert len(written) == 3
    ctx.flush_progress()  # the handler returned: the last value said is written
    assert written[-1][1:] == (0.999, "almost") and len(written) == 4
    ctx.flush_progress()  # nothing held back: nothing written
    assert len(written) == 4


@pytest.mark.parametrize("fraction, note, field", [
    (1.5, None, "progress"), (-0.1, None, "progress"), (float("nan"), None, "progress"), ("50%", None, "progress"),
    (True, None, "progress"), (0.5, 3, "note"), (0.5, "a\x1b[2J", "note"), (0.5, "x" * 201, "note"),
])
def test_a_bad_progress_is_refused_naming_the_field(fraction, note, field):
    ctx = JobContext(1, "t", {}, 1, 1, _report_progress=lambda *args: pytest.fail("written"))
    with pytest.raises(InvalidInput) as raised:
        ctx.progress(fraction, note)
    assert raised.value.field == field


def test_get_run_sees_a_run_enqueued_in_the_session_and_none_for_no_run(app):
    from jobsweb.core.database import db

    with app.app_context():
        run_id = enqueue("jobsweb.noop", session=db.session)
        run = get_run(run_id)
        assert (run.id, run.job_type, run.status, run.attempts, run.done) == (run_id, "jobsweb.noop", "queued", 0, False)
        db.session.rollback()
        assert get_run(run_id) is None
        for bad in ("1", 0, 2**63, True, None):
            with pytest.raises(InvalidInput, match="run_id"):
                get_run(bad)


# What `done` says for each status, as docs/REFERENCE.md words it: "it will not execute again".
@pytest.mark.parametrize("status, done", [
    ("queued", False), ("running", False), ("failed", False),  # failed: a retry is due
    ("succeeded", True), ("dead", True), ("cancelled", True), ("skipped", True), ("missed", True),
    # Waits for other runs (after=) or its batch, then runs (it said done until issue 35).
    ("waiting", False),
])
def test_get_run_says_a_run_is_done_only_once_it_will_not_execute_again(app, sql, status, done):
    [(run_id,)] = sql("INSERT INTO job_runs (job_type, status) VALUES ('jobsweb.noop', %s) RETURNING id", [status])
    run = read(app, run_id)
    assert (run.status, run.done) == (status, done)
