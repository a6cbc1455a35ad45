"""Deploy marks (issue 39, item 3): `flask jobs mark-deploy LABEL` records a release, and the
dashboard's and the metrics page's charts draw it where it falls among their bars."""

import getpass
import re
import subprocess

import pytest

from jobsweb.core.database import libpq_url
from tests.conftest import ROOT, SECRET_KEY


def mark(app, *args):
    return app.test_cli_runner().invoke(args=["jobs", "mark-deploy", *args])


def deploy_lines(html):
    """(title, x, shown label) of each deploy line of the page's chart."""
    return re.findall(r'<g class="deploy"><title>([^<]*)</title>\s*<line x1="([\d.]+)"[^>]*/>\s*<text[^>]*>([^<]*)</text>',
                      html)


def test_a_deploy_marked_from_the_command_line_is_recorded_audited_and_drawn_on_the_dashboard(app, sign_in, sql):
    result = mark(app, "v1.2")
    assert result.exit_code == 0, result.output
    assert re.fullmatch(r"deploy v1\.2 marked at \d{4}-\d\d-\d\d \d\d:\d\d UTC\n", result.output)
    who = f"cli:{getpass.getuser()}"
    assert sql("SELECT label, marked_by FROM jobsweb_deploy_marks") == [("v1.2", who)]
    assert sql("SELECT action, user_email, target_type, detail->>'label' FROM jobsweb_audit_log") == [
        ("mark_deploy", who, "deploy", "v1.2")]
    # One in this hour, one a day and a half ago (outside the dashboard's 24 hours).
    sql("INSERT INTO jobsweb_deploy_marks (label, marked_by, marked_at) VALUES "
        "('<b>v1.1</b>', 'x', now() - interval '36 hours')")
    html = sign_in("viewer").get("/").get_data(as_text=True)
    [(title, x, shown)] = deploy_lines(html)
    assert title.startswith("deploy v1.2 at ") and title.endswith(" UTC") and shown == "v1.2"
    # This hour is the chart's last bar: from 56 + 23/24 of the bars' 464 units wide on; its
    # label left of the line, not cut off by the chart's right edge.
    assert 56 + 464 * 23 / 24 <= float(x) <= 520
    assert re.search(r'<text x="[\d.]+" text-anchor="end"[^>]*>v1\.2</text>', html)
    assert "v1.1" not in html


def test_the_metrics_pages_week_draws_an_older_deploy_escaped_and_its_long_label_cut(app, sign_in, sql):
    sql("INSERT INTO jobsweb_deploy_marks (label, marked_by, marked_at) VALUES "
        "('<b>v1.1</b>', 'x', now() - interval '36 hours'), "
        "('release-2026-11-27-with-a-long-name', 'x', now() - interval '3 days')")
    client = sign_in("viewer")
    html = client.get("/job-metrics?window=7d").get_data(as_text=True)
    lines = deploy_lines(html[html.index('<svg class="chart wide"'):])[:2]  # the laptop's drawing (a phone's next)
    assert [(title.split(" at ")[0], shown) for title, _, shown in lines] == [
        ("deploy release-2026-11-27-with-a-long-name", "release-2026-11…"), ("deploy &lt;b&gt;v1.1&lt;/b&gt;", "&lt;b&gt;v1.1&lt;/b&gt;")]
    assert float(lines[0][1]) < float(lines[1][1])  # the older one further left
    assert "<b>v1.1" not in html
    assert deploy_lines(client.get("/job-metrics?window=1h").get_data(as_text=True)) == []


@pytest.mark.parametrize("label, message", [
    ("v" * 101, "label: must be at most 100 characters"),
    ("v1\n2", "must not contain the control character"),
])
def test_a_bad_label_is_refused_naming_it_and_nothing_is_written(app, sql, label, message):
    result = mark(app, label)
    assert result.exit_code == 2 and message in result.output, result.output
    assert "Traceback" not in result.output
    assert sql("SELECT count(*) FROM jobsweb_deploy_marks") == [(0,)]
    assert sql("SELECT count(*) FROM jobsweb_audit_log") == [(0,)]


# -- in a release phase ---------------------------------------------------------------------

# What each platform's release phase has of the release (DEPLOY.md names them), besides the app's
# own variables: never SOURCE_VERSION, which Heroku sets at build time only.
SHA = "3f2c9e1d0b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e"
PHASES = {
    "heroku with dyno metadata": ({"DYNO": "release.4711", "HEROKU_APP_NAME": "example-app",
                                   "HEROKU_RELEASE_VERSION": "v42", "HEROKU_SLUG_COMMIT": SHA},
                                  "v42", " (label from HEROKU_RELEASE_VERSION)"),
    "render": ({"RENDER": "true", "RENDER_GIT_BRANCH": "main", "RENDER_GIT_COMMIT": SHA}, SHA,
               " (label from RENDER_GIT_COMMIT)"),
    "railway": ({"RAILWAY_DEPLOYMENT_ID": "7e1b6c1a-0f0e-4c1e-9d1b-2a7c1f0e9d8c", "RAILWAY_GIT_COMMIT_SHA": SHA}, SHA,
                " (label from RAILWAY_GIT_COMMIT_SHA)"),
    "fly": ({"FLY_APP_NAME": "my-app-name", "FLY_IMAGE_REF": "registry.fly.io/my-app-name:deployment-01H9RK9EYO9PGNBYAKGXSHV0PH"},
            "deployment-01H9RK9EYO9PGNBYAKGXSHV0PH", " (label from FLY_IMAGE_REF)"),
    "heroku without dyno metadata": ({"DYNO": "release.4711"}, None,
                                     " (labelled with its time: no LABEL given, and none of SOURCE_VERSION, "
                                     "HEROKU_RELEASE_VERSION, HEROKU_SLUG_COMMIT, RENDER_GIT_COMMIT, "
                                     "RAILWAY_GIT_COMMIT_SHA, FLY_IMAGE_REF is set)"),
}


def documented_release_line():
    """The release line DEPLOY.md and REFERENCE.md suggest for marking deploys: the same in both."""
    lines = {re.search(r"`release: (flask jobs migrate && flask jobs mark-deploy[^`]*)`",
                       " ".join((ROOT / doc).read_text().split()))[1]  # as read, whatever the line breaks
             for doc in ("docs/DEPLOY.md", "docs/REFERENCE.md")}
    assert len(lines) == 1, lines
    return lines.pop()


@pytest.mark.parametrize("phase", PHASES)
def test_the_documented_release_line_marks_the_deploy_with_the_variables_each_release_phase_has(
        app, sql, database_url_for_tests, phase):
    variables, label, said = PHASES[phase]
    # Only what the phase has: the app's variables and the platform's, as the platform's shell runs it.
    env = {"PATH": f"{ROOT / '.venv' / 'bin'}:/usr/bin:/bin", "SECRET_KEY": SECRET_KEY,
           "DATABASE_URL": "postgres://" + libpq_url(database_url_for_tests).split("://", 1)[1], **variables}
    release = subprocess.run(["sh", "-c", documented_release_line()], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=120)
    assert release.returncode == 0, release.stdout + release.stderr
    marked = release.stdout.splitlines()[-1]
    [(recorded,)] = sql("SELECT label FROM jobsweb_deploy_marks")
    if label is None:  # labelled with the minute it was marked, in UTC
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", recorded), recorded
        label = recorded
    assert recorded == label
    assert re.fullmatch(rf"deploy {re.escape(label)} marked at \d{{4}}-\d\d-\d\d \d\d:\d\d UTC{re.escape(said)}",
                        marked), marked


def test_an_empty_label_as_the_old_release_line_gave_it_takes_the_platforms_variable(app, sql, monkeypatch):
    """`mark-deploy "$SOURCE_VERSION"` in a release phase without it: exit 2 before, the release failed."""
    monkeypatch.delenv("SOURCE_VERSION", raising=False)
    monkeypatch.setenv("HEROKU_RELEASE_VERSION", "v43")
    for label in ("", "   "):
        result = mark(app, label)
        assert result.exit_code == 0, result.output
        assert result.output.endswith(" (label from HEROKU_RELEASE_VERSION)\n")
    assert sql("SELECT label FROM jobsweb_deploy_marks") == [("v43",), ("v43",)]
