"""`flask jobs runs show/cancel/retry`: the admin screen's run actions from a shell, for the runs
named or every run a filter matches, audited as cli:<OS user>."""

import getpass
import json

import pytest

from tests.conftest import wait_for

USER = f"cli:{getpass.getuser()}"


def insert_run(sql, job_type="jobsweb.noop", status="queued", queue="default"):
    [(run,)] = sql("INSERT INTO job_runs (job_type, payload, status, queue, finished_at) VALUES "
                   "(%s, '{\"to\": \"a@example.com\"}', %s, %s, CASE WHEN %s IN ('dead', 'cancelled', 'succeeded') "
                   "THEN now() END) RETURNING id", [job_type, status, queue, status])
    return run


def statuses(sql):
    return dict(sql("SELECT id, status FROM job_runs"))


def test_show_prints_the_run_as_json(runner, sql):
    run = insert_run(sql, status="dead")
    sql("UPDATE job_runs SET last_error = 'boom', attempts = 3 WHERE id = %s", [run])
    result = runner.invoke(args=["jobs", "runs", "show", str(run)])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert {key: shown[key] for key in ("id", "job_type", "status", "attempts", "last_error", "done")} == {
        "id": run, "job_type": "jobsweb.noop", "status": "dead", "attempts": 3, "last_error": "boom", "done": True}
    assert shown["created_at"].endswith("+00:00")


def test_cancel_and_retry_each_run_named_audited_as_the_os_user(runner, sql):
    queued, dead = insert_run(sql), insert_run(sql, status="dead")
    result = runner.invoke(args=["jobs", "runs", "cancel", str(queued), "--reason", "duplicate"])
    assert result.exit_code == 0, result.output
    assert result.output == f"run {queued}: cancelled\n"
    result = runner.invoke(args=["jobs", "runs", "retry", str(dead)])
    assert result.exit_code == 0, result.output
    assert result.output == f"run {dead}: queued again\n"
    assert statuses(sql) == {queued: "cancelled", dead: "queued"}
    assert sql("SELECT user_email, action, target_id, detail FROM jobsweb_audit_log ORDER BY id") == [
        (USER, "cancel", queued, {"previous_status": "queued", "reason": "duplicate"}),
        (USER, "retry", dead, {"previous_status": "dead"})]


def test_cancel_of_a_running_run_asks_its_worker_to_stop_it(runner, sql, spawn_worker):
    [(run,)] = sql("INSERT INTO job_runs (job_type, payload) VALUES ('jobsweb.sleep', '{\"seconds\": 60}') RETURNING id")
    spawn_worker("--poll-interval", "0.1", JOBSWEB_LEASE_SECONDS="0.9")
    wait_for(lambda: statuses(sql) == {run: "running"}, message="the worker to claim the run")
    result = runner.invoke(args=["jobs", "runs", "cancel", str(run)])
    assert result.exit_code == 0, result.output
    assert result.output == f"run {run}: running: its worker was asked to stop it\n"
    wait_for(lambda: statuses(sql) == {run: "cancelled"}, message="the run to end cancelled")


def test_a_run_whose_status_does_not_allow_the_action_is_named_and_the_others_are_done(runner, sql):
    succeeded, queued = insert_run(sql, status="succeeded"), insert_run(sql)
    result = runner.invoke(args=["jobs", "runs", "cancel", str(succeeded), str(queued)])
    assert result.exit_code == 1
    assert f"run {succeeded}: not changed: run {succeeded} is succeeded: there is nothing to cancel" in result.output
    assert statuses(sql) == {succeeded: "succeeded", queued: "cancelled"}


@pytest.mark.parametrize("args, message", [
    (["cancel", "999"], "RUN_ID: there is no run 999; nothing was changed"),
    (["retry", "abc"], "'abc' is not a valid integer range"),
    (["cancel"], "RUN_ID: give the runs to cancel, or --job-type, --status or --queue"),
    (["cancel", "1", "--job-type", "jobsweb.noop"], "RUN_ID: give run ids, or --job-type/--status/--queue, not both"),
    (["retry", "--status", "queued"], "--status: retry takes runs that are failed, dead, cancelled, not queued"),
    (["retry", "--status", "nope"], "'nope' is not one of"),
    (["cancel", "1", "--dry-run"], "--dry-run: only with --job-type, --status or --queue"),
    (["cancel", "--job-type", "bad\x07type"], "job_type: must not contain the control character"),
    (["show", "0"], "0 is not in the range"),
    (["show", "999"], "RUN_ID: there is no run 999"),
])
def test_bad_input_is_a_usage_error_naming_what_to_fix_and_changes_nothing(runner, sql, args, message):
    run = insert_run(sql)
    result = runner.invoke(args=["jobs", "runs", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert statuses(sql) == {run: "queued"}
    assert sql("SELECT count(*) FROM jobsweb_audit_log") == [(0,)]


def test_dry_run_prints_how_many_runs_the_filter_would_change_and_changes_none(runner, sql):
    runs = [insert_run(sql, job_type="jobsweb.sleep", status=status) for status in ("dead", "dead", "queued")]
    insert_run(sql, job_type="jobsweb.noop", status="dead")
    result = runner.invoke(args=["jobs", "runs", "retry", "--job-type", "jobsweb.sleep", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.output == "2 runs to retry (dry run: nothing was changed)\n"
    assert statuses(sql)[runs[0]] == "dead"
    assert sql("SELECT count(*) FROM jobsweb_audit_log") == [(0,)]


def test_bulk_cancel_changes_every_matching_run_in_batches_with_one_audit_entry(runner, app, sql):
    app.config["JOBSWEB_BULK_BATCH"] = 2
    mine = [insert_run(sql, queue="mail") for _ in range(5)]
    other_queue, dead = insert_run(sql, queue="reports"), insert_run(sql, queue="mail", status="dead")
    result = runner.invoke(args=["jobs", "runs", "cancel", "--queue", "mail", "--reason", "mail outage"])
    assert result.exit_code == 0, result.output
    assert result.output == "Cancelled 5 of 5 runs that match.\n"
    assert statuses(sql) == {**{run: "cancelled" for run in mine}, other_queue: "queued", dead: "dead"}
    [(who, action, detail)] = sql("SELECT user_email, action, detail FROM jobsweb_audit_log")
    assert (who, action) == (USER, "bulk_cancel")
    assert detail == {"scope": "matching", "filter": {"queue": "mail"}, "changed": 5, "cancel_requested": 0,
                      "left": 0, "waiting_for_failed": 0, "ids": sorted(mine, reverse=True), "reason": "mail outage"}


def test_bulk_retry_by_status_and_job_type_retries_what_the_screen_would(runner, sql):
    dead = [insert_run(sql, job_type="jobsweb.fail", status="dead") for _ in range(3)]
    cancelled = insert_run(sql, job_type="jobsweb.fail", status="cancelled")
    result = runner.invoke(args=["jobs", "runs", "retry", "--job-type", "jobsweb.fail", "--status", "dead"])
    assert result.exit_code == 0, result.output
    assert result.output == "Retried 3 of 3 runs that match.\n"
    assert statuses(sql) == {**{run: "queued" for run in dead}, cancelled: "cancelled"}
