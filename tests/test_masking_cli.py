"""What the CLI prints is masked as the run page is, and bidi controls cannot reorder it (issue
53, item 5: `flask jobs runs show` printed errors and results raw, U+202E included)."""

import json

from tests.test_exec import backup, jobs_exec  # noqa: F401 - fixtures


def test_runs_show_prints_the_run_masked_with_its_controls_removed_or_escaped(runner, sql):
    [(run_id,)] = sql(
        "INSERT INTO job_runs (job_type, status, attempts, last_error, last_stack, result, progress_note, progress_data) "
        "VALUES ('jobsweb.noop', 'dead', 1, %s, %s, %s, %s, %s) RETURNING id",
        ["could not connect: password=Zq9xK7wP\u202e host=db", 'File "x.py"\n  connect("postgres://app:St4ckPw@db")',
         json.dumps({"token": "t0k3nZq", "rows": 3}), "step 2 of 3, api-key=N0t3Key \u202egnirts",
         json.dumps({"\u202eevil": 1, "Session": "s3ss10n"})])
    result = runner.invoke(args=["jobs", "runs", "show", str(run_id)])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown["last_error"] == "could not connect: password=•••••• host=db"
    assert shown["result"] == {"token": "••••••", "rows": 3}
    assert shown["progress_note"] == "step 2 of 3, api-key=•••••• gnirts"
    assert shown["progress_data"] == {"\u202eevil": 1, "Session": "••••••"}  # the key escaped in the text
    assert "postgres://app:••••••@db" in shown["traceback"]
    assert [s for s in ("Zq9xK7wP", "St4ckPw", "t0k3nZq", "N0t3Key", "s3ss10n", "\u202e") if s in result.output] == []
    assert '"\\u202eevil"' in result.output


def test_exec_says_why_a_command_could_not_start_masked_and_without_controls(backup, jobs_exec):  # noqa: F811
    code, _, err = jobs_exec(backup, "--", "/nonexistent/password=Zq9xK7wP\u202e.sh")
    assert code == 127 and "cannot start '/nonexistent/password=••••••" in err, err
    assert "Zq9xK7wP" not in err and "\u202e" not in err
