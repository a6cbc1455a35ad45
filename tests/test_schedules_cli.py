import pytest


def define(runner, *args):
    return runner.invoke(args=["jobs", "define", "nightly-report", "--type", "jobsweb.noop",
                               "--schedule", "0 6 * * *", *args])


def test_define_creates_a_definition_and_says_when_it_runs(runner, sql):
    result = define(runner, "--timezone", "Europe/Madrid", "--payload", '{"to": "ops"}',
                    "--max-attempts", "3", "--overlap", "queue", "--misfire", "all")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("nightly-report: At 06:00 (Europe/Madrid); next run ")
    assert sql("SELECT timezone, payload, max_attempts, overlap_policy, misfire_policy FROM job_definitions") == [
        ("Europe/Madrid", {"to": "ops"}, 3, "queue", "all")]


def test_define_twice_updates_the_definition_by_name(runner, sql):
    define(runner)
    assert define(runner, "--payload", '{"v": 2}').exit_code == 0
    assert sql("SELECT name, payload FROM job_definitions") == [("nightly-report", {"v": 2})]


def test_pause_resume_and_run_now(runner, sql):
    define(runner)
    assert runner.invoke(args=["jobs", "pause", "nightly-report"]).output == "nightly-report: paused\n"
    assert "paused" in runner.invoke(args=["jobs", "schedules"]).output
    assert runner.invoke(args=["jobs", "resume", "nightly-report"]).output.startswith("nightly-report: resumed")
    run_id = int(runner.invoke(args=["jobs", "run-now", "nightly-report"]).output)
    assert sql("SELECT status FROM job_runs WHERE id = %s", [run_id]) == [("queued",)]


def test_schedules_lists_each_definition_in_words(runner, sql):
    define(runner)
    runner.invoke(args=["jobs", "define", "cleanup", "--type", "jobsweb.noop", "--schedule", "@every 10m"])
    sql("UPDATE job_definitions SET last_status = 'dead', failure_count = 2 WHERE name = 'cleanup'")
    lines = runner.invoke(args=["jobs", "schedules"]).output.splitlines()
    assert lines[0].split() == ["NAME", "SCHEDULE", "NEXT", "RUN", "LAST", "STATUS", "FAILURES"]
    assert lines[1].startswith("cleanup") and "Every 10 minutes (UTC)" in lines[1]
    assert lines[1].split()[-2:] == ["dead", "2"]
    assert lines[2].startswith("nightly-report") and lines[2].split()[-2:] == ["-", "0"]


def test_schedules_lists_a_definition_whose_stored_schedule_is_now_refused(runner, sql):
    define(runner)
    # Accepted before `W` with a day of week was refused: listed with the reason, not fatal.
    sql("UPDATE job_definitions SET schedule = '0 0 15W * MON'")
    result = runner.invoke(args=["jobs", "schedules"])
    assert result.exit_code == 0
    assert "(invalid: '0 0 15W * MON': `W` in day of month with a day of week is not supported" in result.output


@pytest.mark.parametrize("args, message", [
    (["--schedule", "0 6 * *"], "Error: schedule: '0 6 * *' has 4 fields"),
    (["--schedule", "@every 10 minutes"], "Error: schedule: @every needs a duration"),
    (["--schedule", "0 0 31 4 *"], "Error: schedule: '0 0 31 4 *' never fires: April never has a 31st"),
    (["--timezone", "Europe/Gotham"], "Error: timezone: 'Europe/Gotham' is not an IANA timezone"),
    (["--type", "no.such.type"], "Error: job_type: 'no.such.type' is not a registered job type"),
    (["--payload", "{not json"], "Error: payload: is not valid JSON"),
    (["--overlap", "sometimes"], "Error: overlap: must be one of skip, queue, allow"),
    (["--misfire", "never"], "Error: misfire: must be one of latest, all, skip"),
    (["--max-attempts", "0"], "Error: max_attempts: must be a whole number from 1 to"),
    (["--alert-email", "ops@example.com"], "Error: alert_email_to: needs JOBSWEB_SMTP_HOST set on the server"),
])
def test_define_refuses_invalid_input_in_one_line_and_writes_nothing(runner, sql, args, message):
    result = define(runner, *args)
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output
    assert sql("SELECT count(*) FROM job_definitions") == [(0,)]


@pytest.mark.parametrize("command", ["pause", "resume", "run-now"])
def test_commands_on_an_unknown_name_fail_with_one_line(runner, command):
    result = runner.invoke(args=["jobs", command, "nope"])
    assert result.exit_code != 0
    assert "Error: name: no job definition is called 'nope'" in result.output


def test_define_with_alert_email_is_accepted_once_an_smtp_host_is_set(app, runner, sql):
    app.config["JOBSWEB_SMTP_HOST"] = "smtp.example.com"
    result = define(runner, "--alert-email", "ops@example.com,oncall@example.com")
    assert result.exit_code == 0, result.output
    assert sql("SELECT alert_email_to FROM job_definitions") == [("ops@example.com, oncall@example.com",)]
