"""Queues, priorities and unique keys through the Python API and the CLI; bad input refused."""

import pytest

from jobsweb import InvalidInput, definitions, enqueue, enqueue_many
from jobsweb.core.database import db
from jobsweb.engine.jobs import flow
from jobsweb.engine import statements
from tests.conftest import committed, define


def claim(sql, limit=10, queues=None, free=None):
    """Run ids a claim of up to `limit` takes, `free` of them for free slots (all, by default)."""
    return [row[0] for row in sql(statements.CLAIM_RUNS, {
        "worker": "test", "lease": 60, "job_types": ["jobsweb.noop", "test.urgent_mail"], "limit": limit,
        "free": limit if free is None else free, "queues": queues})]


def test_a_plain_sql_insert_without_the_new_columns_lands_in_the_default_queue_and_is_claimed(app, sql):
    [(run_id, queue, priority, key)] = sql("INSERT INTO job_runs (job_type) VALUES ('jobsweb.noop') "
                                          "RETURNING id, queue, priority, unique_key")
    assert (queue, priority, key) == ("default", 0, None)
    assert claim(sql) == [run_id]


def test_runs_take_the_job_types_queue_and_priority_unless_enqueue_says_otherwise(app, sql):
    with app.app_context():
        default = enqueue("test.urgent_mail")
        chosen = enqueue("test.urgent_mail", queue="bulk", priority=7)
        many = enqueue_many("jobsweb.noop", [{}, {}], queue="reports", priority=3)
    assert sql("SELECT id, queue, priority FROM job_runs ORDER BY id") == [
        (default, "mail", -5), (chosen, "bulk", 7), (many[0], "reports", 3), (many[1], "reports", 3)]
    # Queues are created on first use, unlimited and unpaused.
    assert sql("SELECT name, concurrency_limit, rate_limit, paused FROM job_queues ORDER BY name") == [
        ("bulk", None, None, False), ("mail", None, None, False), ("reports", None, None, False)]


def test_a_unique_key_returns_the_unfinished_run_and_is_free_again_once_it_ends(app, sql):
    with app.app_context():
        first = enqueue("jobsweb.noop", {"n": 1}, unique_key="reindex:42")
        assert enqueue("jobsweb.noop", {"n": 2}, unique_key="reindex:42") == first
        sql("UPDATE job_runs SET status = 'failed' WHERE id = %s", [first])  # failed: a retry is due
        assert enqueue("jobsweb.noop", unique_key="reindex:42") == first
        sql("UPDATE job_runs SET status = 'succeeded', finished_at = now() WHERE id = %s", [first])
        second = enqueue("jobsweb.noop", {"n": 3}, unique_key="reindex:42")
    assert second != first
    assert sql("SELECT id, payload FROM job_runs ORDER BY id") == [(first, {"n": 1}), (second, {"n": 3})]


def test_retrying_a_dead_run_whose_unique_key_is_taken_again_leaves_it_dead(app, sql):
    from jobsweb.engine.runs import run_actions

    with app.app_context():
        dead = enqueue("jobsweb.noop", unique_key="k")
        sql("UPDATE job_runs SET status = 'dead', finished_at = now() WHERE id = %s", [dead])
        enqueue("jobsweb.noop", unique_key="k")
        assert run_actions.retry([dead]) == []
    assert sql("SELECT status FROM job_runs WHERE id = %s", [dead]) == [("dead",)]


def test_retrying_at_once_two_ended_runs_of_one_unique_key_retries_the_older_and_leaves_the_other(app, sql):
    from jobsweb.engine.runs import run_actions

    with app.app_context():
        older = enqueue("jobsweb.noop", unique_key="k")
        sql("UPDATE job_runs SET status = 'dead', finished_at = now() WHERE id = %s", [older])
        newer = enqueue("jobsweb.noop", unique_key="k")
        sql("UPDATE job_runs SET status = 'cancelled', finished_at = now() WHERE id = %s", [newer])
        # Both at once, as the runs list's bulk retry sends them: the key's index took one only,
        # and the whole action failed with a UniqueViolation (found by the lifecycle model).
        assert run_actions.retry([newer, older]) == [older]
        db.session.commit()
    assert sql("SELECT id, status FROM job_runs ORDER BY id") == [(older, "queued"), (newer, "cancelled")]


def test_the_claim_takes_smaller_priorities_first_and_skips_paused_queues_and_job_types(app, sql):
    with app.app_context():
        later = enqueue("jobsweb.noop", priority=5)
        first = enqueue("jobsweb.noop", priority=-5)
        paused = enqueue("jobsweb.noop", queue="held")
        mail = enqueue("test.urgent_mail")
        flow.configure_queue("held", paused=True)
        flow.pause_type("test.urgent_mail")
        db.session.commit()
    assert claim(sql, limit=1) == [first]
    assert claim(sql) == [later]
    with app.app_context():
        flow.configure_queue("held", paused=False)
        flow.pause_type("test.urgent_mail", paused=False)
        db.session.commit()
    assert claim(sql, limit=1) == [mail]  # priority -5, from its job type
    assert claim(sql) == [paused]


def test_one_claim_gives_its_runs_in_the_order_they_are_to_start(app, sql):
    with app.app_context():
        low = [enqueue("jobsweb.noop", priority=10) for _ in range(3)]
        normal = [enqueue("jobsweb.noop", queue="other") for _ in range(3)]
        urgent = [enqueue("jobsweb.noop", priority=-10) for _ in range(3)]
    assert claim(sql) == urgent + normal + low  # the worker starts them in this order


def test_a_run_on_its_last_attempt_is_claimed_for_a_free_slot_never_ahead(app, sql):
    with app.app_context():
        once = [enqueue("jobsweb.noop", max_attempts=1) for _ in range(3)]
        retried = [enqueue("jobsweb.noop", max_attempts=3) for _ in range(3)]

    # One free slot, five runs ahead: a worker killed before starting those would spend their
    # attempt, and a run with one attempt would end dead without having run. Nor are the runs
    # after it claimed ahead: they would start before it (issue 35).
    assert claim(sql, 6, free=1) == [once[0]]
    assert claim(sql, 6, free=2) == once[1:] + retried


def test_definitions_give_their_runs_their_queue_and_priority(app, sql):
    define(app, "nightly", queue="reports", priority=20)
    with committed(app):
        run_id = definitions.run_now("nightly")
    assert sql("SELECT queue, priority FROM job_runs WHERE id = %s", [run_id]) == [("reports", 20)]
    assert sql("SELECT queue, priority FROM job_definitions") == [("reports", 20)]


@pytest.mark.parametrize("kwargs, field", [
    ({"queue": ""}, "queue"),
    ({"queue": "has space"}, "queue"),
    ({"queue": "x" * 101}, "queue"),
    ({"priority": 1001}, "priority"),
    ({"priority": -1001}, "priority"),
    ({"priority": "high"}, "priority"),
    ({"unique_key": "k" * 201}, "unique_key"),
    ({"unique_key": "a\x00b"}, "unique_key"),
    ({"unique_key": ""}, "unique_key"),
])
def test_enqueue_refuses_bad_flow_input_naming_the_field_and_writes_nothing(app, sql, kwargs, field):
    with app.app_context(), pytest.raises(InvalidInput) as caught:
        enqueue("jobsweb.noop", **kwargs)
    assert caught.value.field == field
    assert sql("SELECT count(*) FROM job_runs") == [(0,)]
    assert sql("SELECT count(*) FROM job_queues") == [(0,)]


@pytest.mark.parametrize("args, message", [
    (["--limit", "0"], "limit: must be a whole number of at least 1, got '0'"),
    (["--limit", "many"], "limit: must be a whole number of at least 1"),
    (["--rate", "5"], "rate: must be N/SECONDS"),
    (["--rate", "0/1"], "rate: must be N/SECONDS"),
    (["--rate", "5/0"], "rate: must be N/SECONDS"),
    (["--rate", "-5/1"], "rate: must be N/SECONDS"),
    (["--rate", "1.5/1"], "rate: must be N/SECONDS"),
    (["--rate", "1000000/1"], "rate: may allow at most 10000 starts per window, got '1000000/1'"),
    (["--limit", "2", "--no-limit"], "limit: give a value or --no-..., not both"),
])
def test_the_queue_command_refuses_bad_limits_and_rates_and_writes_nothing(runner, sql, args, message):
    result = runner.invoke(args=["jobs", "queue", "mail", *args])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
    assert sql("SELECT count(*) FROM job_queues") == [(0,)]


def test_the_queue_command_sets_and_clears_limits_rates_and_pauses(runner, sql):
    assert runner.invoke(args=["jobs", "queue", "mail", "--limit", "3", "--rate", "10/60"]).output == (
        "mail: limit 3, rate 10/60s, running\n")
    assert runner.invoke(args=["jobs", "queue", "mail", "--pause"]).output == "mail: limit 3, rate 10/60s, paused\n"
    assert runner.invoke(args=["jobs", "queue", "mail", "--no-limit", "--no-rate", "--resume"]).output == (
        "mail: limit none, rate none, running\n")
    assert sql("SELECT concurrency_limit, rate_limit, rate_seconds, paused FROM job_queues") == [
        (None, None, None, False)]


@pytest.mark.parametrize("args, message", [
    (["--priority", "2000"], "priority: must be a whole number from -1000 to 1000, got 2000"),
    (["--queue", "a b"], "queue: must be 1 to 100 letters"),
    (["--unique-key", "k" * 201], "unique_key: must be at most 200 characters"),
])
def test_enqueue_command_refuses_bad_flow_options_naming_the_field(runner, sql, args, message):
    result = runner.invoke(args=["jobs", "enqueue", "jobsweb.noop", *args])
    assert result.exit_code == 2
    assert message in result.output
    assert sql("SELECT count(*) FROM job_runs") == [(0,)]


def test_enqueue_command_takes_queue_priority_and_unique_key(runner, sql):
    first = runner.invoke(args=["jobs", "enqueue", "jobsweb.noop", "--queue", "mail", "--priority", "-3",
                                "--unique-key", "u1"])
    again = runner.invoke(args=["jobs", "enqueue", "jobsweb.noop", "--unique-key", "u1"])
    assert first.exit_code == 0, first.output
    assert first.output == again.output
    assert sql("SELECT queue, priority, unique_key FROM job_runs") == [("mail", -3, "u1")]


def test_define_command_refuses_a_bad_priority_and_takes_a_queue(runner, sql):
    bad = runner.invoke(args=["jobs", "define", "n", "--type", "jobsweb.noop", "--schedule", "@daily",
                              "--priority", "x"])
    assert bad.exit_code == 2 and "priority: must be a whole number" in bad.output
    ok = runner.invoke(args=["jobs", "define", "n", "--type", "jobsweb.noop", "--schedule", "@daily",
                             "--queue", "reports", "--priority", "4"])
    assert ok.exit_code == 0, ok.output
    assert sql("SELECT queue, priority FROM job_definitions") == [("reports", 4)]


def test_run_jobs_refuses_a_bad_queue_name(runner):
    result = runner.invoke(args=["run-jobs", "--queues", "a,,b"])
    assert result.exit_code == 2
    assert "queue: must be 1 to 100 letters" in result.output
