"""Deploy marks (issue 39, item 3): `flask jobs mark-deploy LABEL` records a release, and the
dashboard's and the metrics page's charts draw it where it falls among their bars."""

import getpass
import re

import pytest


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
    ("", "label: must not be empty"),
    ("   ", "label: must not be empty"),
    ("v" * 101, "label: must be at most 100 characters"),
    ("v1\n2", "must not contain the control character"),
])
def test_a_bad_label_is_refused_naming_it_and_nothing_is_written(app, sql, label, message):
    result = mark(app, label)
    assert result.exit_code == 2 and message in result.output, result.output
    assert "Traceback" not in result.output
    assert sql("SELECT count(*) FROM jobsweb_deploy_marks") == [(0,)]
    assert sql("SELECT count(*) FROM jobsweb_audit_log") == [(0,)]
