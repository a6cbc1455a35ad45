"""ctx.progress(..., data={...}): a small JSON object stored with the run, read by
jobsweb.get_run().progress_data and shown masked on the run page; Run.traceback; a succeeded run's
progress reads as finished (issue 40, item 3)."""

import html

import pytest

import jobsweb
from jobsweb import InvalidInput, enqueue, get_run
from jobsweb.engine.jobs.registry import PROGRESS_DATA_MAX_BYTES, JobContext
from jobsweb.testing import drain

SECRET = "Zq9xK7wP"


def export(ctx):
    ctx.progress(0.5, "half", {"current": 10, "total": 20})
    # Said within PROGRESS_INTERVAL of the first: written as the handler returns.
    ctx.progress(0.95, "writing the last file",
                 {"current": 19, "total": 20, "file": "export.csv", "token": SECRET, "parts": (1, 2)})
    if ctx.payload.get("fail"):
        raise ValueError(f"could not upload: password={SECRET}")
    return "done"


def test_progress_data_is_read_by_get_run_and_shown_masked_and_a_succeeded_run_reads_as_finished(
        app, registry_snapshot, sign_in):
    jobsweb.job("test.progress_data", max_attempts=1)(export)
    with app.app_context():
        ok, failed = enqueue("test.progress_data"), enqueue("test.progress_data", {"fail": True})
        assert sorted(r.status for r in drain()) == ["dead", "succeeded"]
        run, dead = get_run(ok), get_run(failed)
    # Raw, as get_run returns the rest; stored as JSON (the tuple came back a list).
    said = {"current": 19, "total": 20, "file": "export.csv", "token": SECRET, "parts": [1, 2]}
    assert (run.status, run.progress, run.progress_note, run.progress_data) == (
        "succeeded", 1.0, "writing the last file", said)
    assert run.traceback is None
    # A run that did not succeed keeps the progress it had.
    assert (dead.status, dead.progress, dead.progress_data) == ("dead", 0.95, said)
    assert dead.traceback.startswith("Traceback (most recent call last):\n")
    assert "in export\n" in dead.traceback
    assert dead.traceback.endswith(f"ValueError: could not upload: password={SECRET}\n")

    client = sign_in("viewer")
    page = html.unescape(client.get(f"/runs/{ok}").get_data(as_text=True))
    assert '<pre class="json" tabindex="0" role="region" aria-label="Progress data">' in page
    assert '"current": 19,' in page and '"file": "export.csv",' in page and '"token": "••••••"' in page
    dead_page = html.unescape(client.get(f"/runs/{failed}").get_data(as_text=True))
    assert '"file": "export.csv",' in dead_page and '"token": "••••••"' in dead_page
    assert "could not upload: password=••••••" in dead_page
    assert SECRET not in page and SECRET not in dead_page


def said(data):
    written = []
    ctx = JobContext(1, "t", {}, 1, 1, _report_progress=lambda ctx, *progress: written.append(progress))
    ctx.progress(0.5, None, data)
    return written


@pytest.mark.parametrize("data, message", [
    ([1, 2], "data: must be a JSON object (a dict), got list"),
    ("{}", "data: must be a JSON object (a dict), got str"),
    ({"seen": {1, 2}}, "data: must hold JSON values only: Object of type set is not JSON serializable"),
    ({"rate": float("nan")}, "data: must hold JSON values only: Out of range float values are not JSON compliant"),
    ({"name": "a\x00b"}, "data: must not contain the NUL character (\\u0000)"),
    ({"text": "x" * (PROGRESS_DATA_MAX_BYTES - 10)}, "data: must be at most 4096 bytes as JSON, got 4097"),
    ({"text": "é" * 2048}, "data: must be at most 4096 bytes as JSON, got 4107"),
])
def test_progress_data_that_is_not_a_small_json_object_is_refused_naming_the_limit(data, message):
    with pytest.raises(InvalidInput) as refused:
        said(data)
    assert str(refused.value) == message


def test_progress_data_of_4096_bytes_is_said_as_json_reads_it_back():
    assert said({"text": "x" * (PROGRESS_DATA_MAX_BYTES - 11)}) == [(0.5, None, {"text": "x" * 4085})]
    assert said({1: ("a", None)}) == [(0.5, None, {"1": ["a", None]})]
    assert said(None) == [(0.5, None, None)]
