"""docs/DEPLOY.md: every block, in document order (tests/docs/snippets.py), and its metrics table
against what /metrics exports, so that neither can change without the other.

Its `flask jobs ...` commands are the standalone app's, on the scratch database; its backup
commands use the pg_dump and pg_restore of the test server's own version (its BINDIR).
"""

import json
import logging
import re
from pathlib import Path

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobsweb.core.logs import JsonFormatter, RunEventRecord
from tests.docs.snippets import ROOT, Document, fence_test

DOC = Document("docs/DEPLOY.md")
test_fences = fence_test(DOC)
METRICS_TOKEN = "docs-metrics-token-0123456789abcdef"


@pytest.fixture(scope="module")
def deploy(docs, postgres_server):
    """The Runner, with the server's own client programs first on PATH."""
    admin, _ = postgres_server
    with psycopg.connect(admin) as conn:
        [bindir] = conn.execute("SELECT setting FROM pg_config WHERE name = 'BINDIR'").fetchone()
    docs.env["PATH"] = f"{bindir}:{docs.env['PATH']}"
    return docs


@pytest.mark.parametrize("block", DOC.blocks, ids=DOC.ids)
def test_block(block, deploy):
    deploy.run(block)
    if block.id == "json-log":  # what the JSON formatter writes for that run event, key for key
        shown = deploy.parsed["json-log"]
        record = RunEventRecord("jobsweb.worker", logging.INFO, "run %d %s succeeded (attempt %d)",
                                (812, "send_invoice", 1), {"event": "succeeded", "run_id": 812,
                                "job_type": "send_invoice", "attempt": 1, "duration": 0.42,
                                "worker": "web-1:7:3fa2c1"})
        written = json.loads(JsonFormatter().format(record))
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", shown["time"])
        assert list(shown) == list(written)
        assert {**shown, "time": None} == {**written, "time": None}
    if block.id == "backup":
        assert sorted(p.name for p in Path(deploy.cwd(deploy.env)).glob("jobsweb-*.dump"))[-1] == "jobsweb-tables.dump"
    if block.id == "restore":  # the tables came back from the dump, the trigger from the migrate
        with psycopg.connect(deploy.url) as conn:
            assert conn.execute("SELECT count(*) FROM jobsweb_alembic_version").fetchone() == (1,)
        assert "recreated trigger job_runs_workflow ON job_runs" in deploy.outputs["restore"]


def documented_metrics():
    """{name: (type, labels)} of the metrics table: a row names one or more metrics, `a` /
    `_b` (a's name with its last word replaced), each with its {labels}."""
    text = (ROOT / "docs/DEPLOY.md").read_text()
    table = text[text.index("| metric | type | meaning |"):].split("\n\n", 1)[0].splitlines()[2:]
    metrics = {}
    for row in table:
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        last = None
        for part in cells[0].split(" / "):
            name, _, labels = part.strip("`").partition("{")
            if name.startswith("_"):
                name = last.rsplit("_", 1)[0] + name
            metrics[name] = (cells[1], frozenset(label.strip() for label in labels.rstrip("}").split(",") if label.strip()))
            last = name
    return metrics


def test_the_metrics_table_lists_every_metric_metrics_exports_with_its_type_and_labels(deploy):
    """Every family of a scrape, with a sample in each labelled one: a worker, a run no worker
    handles, an attempt."""
    from jobsweb import enqueue
    from jobsweb.testing import drain
    from tests.docs.scratch_host import create_app

    app = create_app({"SQLALCHEMY_DATABASE_URI": deploy.app.config["SQLALCHEMY_DATABASE_URI"],
                      "JOBSWEB_METRICS_TOKEN": METRICS_TOKEN, "TESTING": True})
    with psycopg.connect(deploy.url, autocommit=True) as conn:
        conn.execute("INSERT INTO job_workers (id, host, pid, job_types) VALUES ('docs:1:a', 'docs', 1, '{}')")
        conn.execute("INSERT INTO job_runs (job_type, payload, run_at, status, attempts, max_attempts) "
                     "VALUES ('nobody.handles.this', '{}', now(), 'queued', 0, 1)")
    with app.app_context():
        enqueue("jobsweb.noop")
        drain()
    response = app.test_client().get("/admin/jobs/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert response.status_code == 200
    exported = {}
    for family in text_string_to_metric_families(response.get_data(as_text=True)):
        labels = {label for sample in family.samples for label in sample.labels if label != "le"}
        exported[family.name] = (family.type, frozenset(labels))
    assert documented_metrics() == exported


def test_the_changelog_names_the_newest_migration():
    """DEPLOY.md's upgrade steps send readers to CHANGELOG.md for the migrations a version brings:
    a new migration needs its line there."""
    from jobsweb.core.schema import revisions

    [head], _ = revisions()
    newest = re.findall(r"`0001_foundation` to `(\w+)`", (ROOT / "CHANGELOG.md").read_text())
    assert newest == [head], f"CHANGELOG.md's migrations end at {newest}, the code's at {head}"


def test_every_setting_deploy_names_is_a_setting_of_this_version():
    """A reader copies these names into a platform's environment, where a typo now stops
    start-up: each one written out (not `JOBSWEB_RETAIN_*`) is a setting jobsweb reads."""
    from jobsweb.core.settings import SETTINGS

    named = set(re.findall(r"\bJOBSWEB_[A-Z0-9_]*[A-Z0-9]\b", (ROOT / "docs/DEPLOY.md").read_text()))
    assert len(named) > 40 and sorted(named - set(SETTINGS)) == []


def test_where_make_lock_takes_uv_from_is_what_deploy_says():
    """DEPLOY said a virtualenv of its own, `.cache/venv-lock`, where the Makefile uses .venv's uv."""
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^BIN := \$\(VENV\)/bin$", makefile, re.M) and re.search(r"^VENV := \.venv$", makefile, re.M)
    assert re.search(r"^lock: \| \$\(BIN\)/uv$", makefile, re.M)
    assert re.search(r"^\$\(BIN\)/uv:\n\t\$\(PYTHON\) -m venv \$\(VENV\)\n\t\$\(BIN\)/pip install ", makefile, re.M)
    text = " ".join((ROOT / "docs/DEPLOY.md").read_text().split())
    assert ("`make lock` runs as `.venv/bin/uv` (pip-installing it into the checkout's `.venv` first when it is not "
            "there)") in text
