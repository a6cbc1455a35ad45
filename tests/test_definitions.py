import pytest

from jobsweb import InvalidInput, definitions
from jobsweb.engine import statements
from jobsweb.commands import build_worker
from tests.conftest import committed
from tests.conftest import define as define_committed


def define(app, name="nightly-report", **kwargs):
    return define_committed(app, name, **kwargs)


def run_worker(app):
    """One cron tick in this process: run until nothing is due."""
    build_worker(app, concurrency=2, poll_interval=0.05, shutdown_timeout=1).run()


def test_define_creates_a_definition_due_at_the_next_local_slot(app, sql):
    define(app, timezone="Europe/Madrid", payload={"to": "ops"}, max_attempts=3)
    [(job_type, payload, tz, attempts, enabled, next_local, later)] = sql(
        "SELECT job_type, payload, timezone, max_attempts, enabled, "
        "to_char(next_run_at AT TIME ZONE 'Europe/Madrid', 'HH24:MI'), next_run_at > now() "
        "FROM job_definitions WHERE name = 'nightly-report'")
    assert (job_type, payload, tz, attempts, enabled, next_local, later) == (
        "jobsweb.noop", {"to": "ops"}, "Europe/Madrid", 3, True, "06:00", True)


def test_defining_again_updates_by_name_and_keeps_the_pending_slot_when_the_schedule_is_unchanged(app, sql):
    first = define(app)
    sql("UPDATE job_definitions SET next_run_at = now() + interval '1 second'")
    [(pending,)] = sql("SELECT next_run_at FROM job_definitions")
    second = define(app, payload={"v": 2}, overlap="allow")
    assert first == second
    assert sql("SELECT payload, overlap_policy, next_run_at FROM job_definitions") == [({"v": 2}, "allow", pending)]


def test_defining_a_new_schedule_moves_the_next_slot(app, sql):
    define(app)
    define(app, schedule="@every 10m")
    [(minute, within)] = sql("SELECT extract(minute FROM next_run_at)::int % 10, "
                             "next_run_at <= now() + interval '10 minutes' FROM job_definitions")
    assert (minute, within) == (0, True)


def test_pause_stops_a_definition_and_resume_restarts_it_from_the_next_future_slot(app, sql):
    define(app, schedule="@every 1h")
    with committed(app):
        definitions.pause("nightly-report")
    sql("UPDATE job_definitions SET next_run_at = now() - interval '1 hour'")
    run_worker(app)
    assert sql("SELECT count(*) FROM job_runs") == [(0,)]
    with committed(app):
        definitions.resume("nightly-report")
    assert sql("SELECT enabled, next_run_at > now() FROM job_definitions") == [(True, True)]


def test_run_now_creates_a_run_due_now_without_moving_the_schedule(app, sql):
    define(app, max_attempts=7)
    [(before,)] = sql("SELECT next_run_at FROM job_definitions")
    with committed(app):
        run_id = definitions.run_now("nightly-report")
    assert sql("SELECT status, max_attempts, scheduled_for, run_at <= now() FROM job_runs WHERE id = %s",
               [run_id]) == [("queued", 7, None, True)]
    assert sql("SELECT next_run_at FROM job_definitions") == [(before,)]


def test_a_finished_run_updates_the_definition_state(app, sql):
    define(app, job_type="jobsweb.sleep", payload={"seconds": 0.3})
    sql("UPDATE job_definitions SET failure_count = 3")
    with committed(app):
        definitions.run_now("nightly-report")
    run_worker(app)
    [(status, failures, last_run_at, duration)] = sql(
        "SELECT last_status, failure_count, last_run_at, last_duration_ms FROM job_definitions")
    assert (status, failures) == ("succeeded", 0)
    # The run's own start, and at least the 0.3 s its handler slept.
    assert sql("SELECT started_at FROM job_runs") == [(last_run_at,)]
    assert duration >= 300


def test_consecutive_dead_runs_make_a_definition_failing(app, sql):
    define(app, "always-fails", job_type="jobsweb.fail", payload={"permanent": True})
    define(app, "fine")
    for expected in (1, 2):
        with committed(app):
            definitions.run_now("always-fails")
        run_worker(app)
        assert sql("SELECT last_status, failure_count FROM job_definitions WHERE name = 'always-fails'") == [
            ("dead", expected)]
    with committed(app):
        assert [d.name for d in definitions.failing()] == ["always-fails"]


def _finish_in_one_batch(sql, outcomes):
    """Write (run_id, outcome, give_up) attempts of running runs with one FINISH_RUNS call."""
    from jobsweb.engine.worker.execution import Outcome
    from jobsweb.engine.worker.outcome_writes import finish_params

    sql("UPDATE job_runs SET status = 'running', attempts = 1, locked_by = 'w', started_at = now()")
    sql(statements.FINISH_RUNS, finish_params([
        Outcome(run_id, "jobsweb.noop", 1, "w", outcome, error="boom" if give_up else None, give_up=give_up)
        for run_id, outcome, give_up in outcomes]))


def test_only_dead_runs_after_the_newest_success_in_a_batch_count_as_consecutive_failures(app, sql):
    define(app)
    sql("UPDATE job_definitions SET failure_count = 3")
    with committed(app):
        succeeded, died = definitions.run_now("nightly-report"), definitions.run_now("nightly-report")
    _finish_in_one_batch(sql, [(succeeded, "succeeded", False), (died, "failed", True)])
    assert sql("SELECT last_status, failure_count FROM job_definitions") == [("dead", 1)]


def test_dead_runs_in_a_batch_without_a_success_add_to_the_failure_count(app, sql):
    define(app)
    sql("UPDATE job_definitions SET failure_count = 3")
    with committed(app):
        first, second = definitions.run_now("nightly-report"), definitions.run_now("nightly-report")
    _finish_in_one_batch(sql, [(first, "failed", True), (second, "failed", True)])
    assert sql("SELECT last_status, failure_count FROM job_definitions") == [("dead", 5)]


def test_a_definition_is_overdue_when_its_slot_is_past_grace_and_nothing_is_queued(app, sql):
    define(app, "late")
    define(app, "within-grace")
    define(app, "running-late")
    define(app, "paused")
    sql("UPDATE job_definitions SET next_run_at = now() - interval '10 minutes' WHERE name <> 'within-grace'")
    sql("UPDATE job_definitions SET next_run_at = now() - interval '1 minute' WHERE name = 'within-grace'")
    with committed(app):
        definitions.run_now("running-late")
        definitions.pause("paused")
        assert [d.name for d in definitions.overdue()] == ["late"]


def test_per_definition_settings_reach_the_runs_it_creates(app, sql):
    define(app, timeout=30, lease=90, backoff_base=2, backoff_cap=20, max_attempts=4)
    with committed(app):
        definitions.run_now("nightly-report")
    assert sql("SELECT max_attempts, timeout_seconds, lease_seconds, backoff_base, backoff_cap FROM job_runs") == [
        (4, 30, 90, 2, 20)]


@pytest.mark.parametrize("kwargs, field", [
    ({"schedule": "0 25 * * *"}, "schedule"),
    ({"schedule": "@every 5 minutes"}, "schedule"),
    ({"timezone": "Mars/Olympus_Mons"}, "timezone"),
    ({"job_type": "no.such.type"}, "job_type"),
    ({"payload": ["not", "an", "object"]}, "payload"),
    ({"overlap": "sometimes"}, "overlap"),
    ({"misfire": "never"}, "misfire"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"grace_seconds": -1}, "grace_seconds"),
    ({"timeout": 0}, "timeout"),
    ({"backoff_base": 10, "backoff_cap": 1}, "backoff_cap"),
    ({"name": " "}, "name"),
])
def test_define_refuses_invalid_input_naming_the_field_and_writes_nothing(app, sql, kwargs, field):
    with pytest.raises(InvalidInput) as caught:
        define(app, **kwargs)
    assert caught.value.field == field
    assert sql("SELECT count(*) FROM job_definitions") == [(0,)]


@pytest.mark.parametrize("action", [definitions.pause, definitions.resume, definitions.run_now])
def test_actions_on_an_unknown_name_say_so(app, action):
    with committed(app), pytest.raises(InvalidInput) as caught:
        action("nope")
    assert caught.value.field == "name"


def test_a_definitions_timeout_ends_its_runs_even_when_the_job_type_has_none(app, sql):
    define(app, job_type="test.stubborn", payload={"seconds": 1}, timeout=0.2, max_attempts=1)
    with committed(app):
        definitions.run_now("nightly-report")
    run_worker(app)
    assert sql("SELECT status, error_type FROM job_runs") == [("dead", "timeout")]


def test_a_definitions_lease_is_what_the_claim_holds_its_runs_for(app, sql):
    define(app, lease=600)
    with committed(app):
        definitions.run_now("nightly-report")
    sql(statements.CLAIM_RUNS, {"worker": "test", "lease": 60, "job_types": ["jobsweb.noop"], "limit": 1, "free": 1, "queues": None})
    assert sql("SELECT extract(epoch FROM locked_until - started_at)::int FROM job_runs") == [(600,)]


def test_a_job_type_only_a_worker_imports_can_be_defined_and_an_unknown_one_cannot(app, sql):
    # A standalone web process without JOBSWEB_HANDLERS: its worker registered reports.weekly.
    with app.app_context(), pytest.raises(InvalidInput) as refused:
        definitions.define("weekly", "reports.weekly", "0 6 * * 1")
    assert "'reports.weekly' is not a registered job type" in str(refused.value)
    sql("INSERT INTO job_workers (id, host, pid, job_types, last_seen_at) VALUES "
        "('gone:1:a', 'h', 1, '{reports.weekly}', now() - interval '8 days')")
    with app.app_context(), pytest.raises(InvalidInput):
        definitions.define("weekly", "reports.weekly", "0 6 * * 1")  # a worker not seen for a week
    sql("INSERT INTO job_workers (id, host, pid, job_types) VALUES ('w:2:b', 'h', 2, '{reports.weekly}')")
    with committed(app):
        definitions.define("weekly", "reports.weekly", "0 6 * * 1", queue="reports")
    assert sql("SELECT job_type, queue, priority, max_attempts FROM job_definitions") == [
        ("reports.weekly", "reports", 0, 5)]  # the default max_attempts: the handler's own is not known here
