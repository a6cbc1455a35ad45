"""External definitions: jobsweb watches them and never runs them. Their slots are expected to
be reported (by `flask jobs exec` or a ping); a slot not reported within its grace becomes a
missed run and an overdue incident, like a jobsweb-run definition whose ticks stopped."""

import re

import pytest

from jobsweb import definitions
from jobsweb.commands import build_worker
from jobsweb.core.errors import InvalidInput
from jobsweb.engine.jobs import registry
from jobsweb.engine.runs import run_actions
from jobsweb.engine.jobs.registry import EXTERNAL_JOB_TYPE
from jobsweb.engine.runs.reported_runs import PING_HOLDER
from jobsweb.ops import alerts, notify
from jobsweb.scheduling import reports
from tests.conftest import committed, wait_for


# Once a year: the slot after one a test puts minutes ago is never near the test's clock.
YEARLY = "0 3 1 1 *"


def define_external(app, name="backup", schedule=YEARLY, **kwargs):
    with committed(app):
        return definitions.define(name, None, schedule, external=True, **kwargs).id


def slot_ago(sql, minutes, name="backup"):
    """Pretend the pending slot fell due `minutes` ago (a whole minute, so tests never straddle one)."""
    sql("UPDATE job_definitions SET next_run_at = date_trunc('minute', now()) - make_interval(mins => %s) "
        "WHERE name = %s", [minutes, name])


def report(app, status="succeeded", name="backup"):
    """A run of `name` reported from outside and finished at once (what a ping without /start does)."""
    with committed(app):
        started = reports.start_exec(name, PING_HOLDER, 60)
        reports.finish(started.run_id, PING_HOLDER, status)
    return started


def test_an_external_definition_needs_no_job_type_and_gets_a_ping_token(app, sql):
    define_external(app)
    [(job_type, external, token, max_attempts)] = sql(
        "SELECT job_type, external, ping_token, max_attempts FROM job_definitions")
    assert (job_type, external, max_attempts) == (EXTERNAL_JOB_TYPE, True, 1)
    assert len(token) >= 32


def test_editing_an_external_definition_keeps_its_ping_token_and_making_it_normal_drops_it(app, sql):
    define_external(app)
    [(token,)] = sql("SELECT ping_token FROM job_definitions")
    define_external(app, schedule="@every 2h")
    assert sql("SELECT ping_token FROM job_definitions") == [(token,)]
    with committed(app):
        definitions.define("backup", "jobsweb.noop", "@every 2h")
    assert sql("SELECT ping_token, external, job_type FROM job_definitions") == [(None, False, "jobsweb.noop")]


def test_an_external_definition_refuses_a_job_type_and_run_now(app):
    with app.app_context(), pytest.raises(InvalidInput) as refused:
        definitions.define("backup", "jobsweb.noop", "@every 1h", external=True)
    assert refused.value.field == "job_type"
    define_external(app)
    with app.app_context(), pytest.raises(InvalidInput, match="external"):
        definitions.run_now("backup")


def test_no_handler_may_take_the_external_job_type(registry_snapshot):
    with pytest.raises(InvalidInput, match="reserved"):
        registry.job(EXTERNAL_JOB_TYPE)(lambda ctx: None)


def test_materialising_never_queues_a_run_of_an_external_definition_within_its_grace(app, sql, materialise):
    define_external(app, grace_seconds=300)
    slot_ago(sql, 2)  # due two minutes ago: a report may still come
    assert materialise() == 0
    assert sql("SELECT count(*) FROM job_runs") == [(0,)]


def test_an_unreported_slot_becomes_a_missed_run_and_an_overdue_incident_that_a_report_clears(
        app, sql, materialise, receiver):
    app.config["JOBSWEB_ALERT_WEBHOOK_URL"] = receiver.url
    define_external(app, grace_seconds=60)
    slot_ago(sql, 5)
    assert materialise() == 1
    [(status, reason, on_slot)] = sql(
        "SELECT status, reason, scheduled_for = date_trunc('minute', now()) - interval '5 min' FROM job_runs")
    assert (status, on_slot) == ("missed", True)
    assert reason.startswith("not reported within its grace (60 s) of ") and reason.count(" UTC") == 1
    assert sql("SELECT missed_count, next_run_at > now() FROM job_definitions") == [(1, True)]
    assert materialise() == 0  # nothing is due twice

    with app.app_context():
        opened, _ = alerts.evaluate()
        assert alerts.evaluate() == ([], [])
        notify.deliver_due()
    assert len(opened) == 1
    [text] = receiver.texts()
    assert "backup is overdue" in text and "was not reported within its grace of 60 s" in text

    report(app)  # the crontab line comes back
    with app.app_context():
        _, resolved = alerts.evaluate()
    assert resolved == opened
    assert sql("SELECT status FROM job_runs ORDER BY id") == [("missed",), ("succeeded",)]


def test_a_report_counts_for_its_slot_and_moves_the_definition_to_the_next_one(app, sql, materialise):
    # A grace of an hour: the slot stays due however long the test takes (a minute boundary
    # passing in between changes nothing).
    define_external(app, grace_seconds=3600)
    slot_ago(sql, 0)
    [(slot,)] = sql("SELECT next_run_at FROM job_definitions")
    started = report(app)
    [(scheduled, next_in_future)] = sql("SELECT r.scheduled_for, d.next_run_at > now() "
                                        "FROM job_runs r JOIN job_definitions d ON d.id = r.definition_id")
    assert started.slot == scheduled == slot and next_in_future
    assert materialise() == 0
    assert sql("SELECT status FROM job_runs") == [("succeeded",)]
    assert sql("SELECT last_status, failure_count FROM job_definitions") == [("succeeded", 0)]


def test_a_report_after_several_unreported_slots_counts_for_the_newest_and_misses_the_others(app, sql):
    define_external(app, schedule="* * * * *", grace_seconds=3600)
    slot_ago(sql, 3)  # slots 3, 2, 1 and 0 minutes ago are pending, all within the grace
    started = report(app)
    rows = sql("SELECT status, scheduled_for, created_at FROM job_runs ORDER BY scheduled_for")
    # The newest slot due at the report (the one after this minute's, if the report came in the
    # last EARLY_SECONDS of the minute) is the succeeded run's; every one before it is missed.
    *missed, (status, slot, reported_at) = rows
    assert status == "succeeded" and slot == started.slot
    assert 0 <= (reported_at - slot).total_seconds() < 60 or 0 < (slot - reported_at).total_seconds() <= 10
    assert [row[0] for row in missed] == ["missed"] * len(missed) and len(missed) >= 3
    assert all((b[1] - a[1]).total_seconds() == 60 for a, b in zip(rows, rows[1:]))
    assert sql("SELECT missed_count FROM job_definitions") == [(len(missed),)]


def test_a_report_outside_any_pending_slot_is_a_run_without_a_slot(app, sql):
    define_external(app)
    report(app, status="dead")
    assert sql("SELECT status, scheduled_for FROM job_runs") == [("dead", None)]
    assert sql("SELECT last_status, failure_count FROM job_definitions") == [("dead", 1)]


def test_the_worker_never_claims_a_run_of_an_external_definition(app, sql):
    definition_id = define_external(app)
    # Even queued by plain SQL (as any program may enqueue), or retried by an operator.
    sql("INSERT INTO job_runs (definition_id, job_type, status) VALUES (%s, %s, 'queued')",
        [definition_id, EXTERNAL_JOB_TYPE])
    started = report(app, status="dead")
    with committed(app):
        assert run_actions.retry([started.run_id]) == []
    build_worker(app, concurrency=2, poll_interval=0.05, shutdown_timeout=1).run()
    assert sql("SELECT status, attempts FROM job_runs ORDER BY id") == [("queued", 0), ("dead", 1)]


def test_a_report_of_a_definition_jobsweb_runs_leaves_its_slots_to_the_worker(app, sql):
    with committed(app):
        definitions.define("nightly", "jobsweb.noop", "@every 1h")
    sql("UPDATE job_definitions SET next_run_at = now() - interval '1 minute'")
    report(app, name="nightly")
    assert sql("SELECT scheduled_for FROM job_runs") == [(None,)]
    assert sql("SELECT next_run_at < now() FROM job_definitions") == [(True,)]  # still the worker's slot


def test_the_define_command_creates_an_external_definition(runner, sql):
    result = runner.invoke(args=["jobs", "define", "backup", "--schedule", "0 3 * * *", "--external",
                                 "--grace", "900", "--timezone", "Europe/Paris"])
    assert result.exit_code == 0, result.output
    assert "external" in result.output and "/ping/" in result.output
    assert sql("SELECT external, grace_seconds, timezone, job_type FROM job_definitions") == [
        (True, 900, "Europe/Paris", EXTERNAL_JOB_TYPE)]
    missing = runner.invoke(args=["jobs", "define", "nightly", "--schedule", "0 3 * * *"])
    assert missing.exit_code == 2 and "type" in missing.output


def test_an_unreported_slot_materialised_by_a_real_worker_process_opens_the_incident(app, sql, spawn_worker):
    define_external(app, grace_seconds=0)
    slot_ago(sql, 1)
    worker = spawn_worker("--max-runtime", "2")
    wait_for(lambda: sql("SELECT count(*) FROM jobsweb_alert_incidents WHERE kind = 'overdue'")[0][0] == 1, message="the overdue incident")
    worker.wait(timeout=30)
    assert sql("SELECT status FROM job_runs") == [("missed",)]


# -- the admin screen ---------------------------------------------------------------------

def test_an_admin_creates_an_external_definition_in_the_form_without_a_job_type(sign_in, sql):
    from tests.conftest import csrf_token

    client = sign_in("admin")
    form = {"name": "backup", "external": "y", "schedule": "0 3 * * *", "timezone": "UTC", "payload": "{}",
            "overlap": "skip", "misfire": "latest", "grace_seconds": "600", "csrf_token": csrf_token(client, "/")}
    response = client.post("/definitions/new", data=form)
    assert response.status_code == 302, response.get_data(as_text=True)
    [(definition_id, external, job_type, grace, token)] = sql(
        "SELECT id, external, job_type, grace_seconds, ping_token FROM job_definitions")
    assert (external, job_type, grace) == (True, EXTERNAL_JOB_TYPE, 600) and token
    edit_page = client.get(f"/definitions/{definition_id}/edit").get_data(as_text=True)
    assert re.search(r'<input checked id="external" name="external" type="checkbox"', edit_page), edit_page[-3000:]
    # Saved again as it is shown: still external, same token.
    response = client.post(f"/definitions/{definition_id}/edit", data={**form, "grace_seconds": "900"})
    assert response.status_code == 302
    assert sql("SELECT external, grace_seconds, ping_token FROM job_definitions") == [(True, 900, token)]
    # Without the box and without a job type: refused on the job type's field, nothing changed.
    form.pop("external")
    response = client.post(f"/definitions/{definition_id}/edit", data={**form, "job_type": ""})
    assert response.status_code == 422 and "is not a registered job type" in response.get_data(as_text=True)
    assert sql("SELECT external FROM job_definitions") == [(True,)]


def test_the_definitions_page_marks_external_definitions_and_filters_by_kind(sign_in, app, sql):
    define_external(app)
    with committed(app):
        definitions.define("nightly", "jobsweb.noop", "0 3 * * *")
    client = sign_in("viewer")
    every = client.get("/definitions").get_data(as_text=True)
    assert "backup" in every and "nightly" in every and ">external</span>" in every
    external = client.get("/definitions?kind=external").get_data(as_text=True)
    assert "backup" in external and "nightly" not in external
    run = client.get("/definitions?kind=run").get_data(as_text=True)
    assert "nightly" in run and ">backup<" not in run
    assert client.get("/definitions?kind=other").status_code == 400


def test_the_dashboard_lists_external_definitions_with_their_last_report(sign_in, app, sql):
    define_external(app)
    report(app)
    html = sign_in("viewer").get("/").get_data(as_text=True)
    assert 'id="external-jobs"' in html and "backup" in html and "last report" in html


def test_the_dashboard_names_an_unreported_external_definition(sign_in, app, sql, materialise):
    define_external(app, grace_seconds=0)
    slot_ago(sql, 1)
    materialise()
    html = sign_in("viewer").get("/").get_data(as_text=True)
    assert "(external) was due" in html and "has not reported" in html


def test_run_now_of_an_external_definition_is_a_400_not_a_500(sign_in, app, sql):
    from tests.conftest import csrf_token

    definition_id = define_external(app)
    client = sign_in("operator")
    response = client.post(f"/definitions/{definition_id}/run-now", data={"csrf_token": csrf_token(client, "/")})
    assert response.status_code == 400 and "is external" in response.get_data(as_text=True)
    assert sql("SELECT count(*) FROM job_runs") == [(0,)]
