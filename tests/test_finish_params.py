"""FINISH_RUNS's outcomes as the worker sends them (outcome_writes.finish_params): a success leaves out
the keys it has no value for, and what it has, and what a failure says, still reach the tables."""

import json

from jobsweb import enqueue
from jobsweb.engine import statements
from jobsweb.engine.worker.execution import Outcome
from jobsweb.engine.worker.outcome_writes import finish_params
from tests.conftest import committed


def _running(app, sql, count):
    with committed(app):
        ids = [enqueue("jobsweb.noop") for _ in range(count)]
    sql("UPDATE job_runs SET status = 'running', attempts = 1, locked_by = 'w', started_at = now() "
        "- interval '2 seconds'")
    return ids


def test_a_plain_success_is_sent_as_five_keys():
    sent = json.loads(finish_params([Outcome(7, "jobsweb.noop", 1, "w", "succeeded", waited=0.25)])["outcomes"])
    assert sent == [{"id": 7, "attempt": 1, "worker": "w", "outcome": "succeeded", "waited": 0.25}]


def test_a_failure_is_sent_with_every_key():
    sent = json.loads(finish_params([Outcome(7, "jobsweb.noop", 1, "w", "failed", error="boom", delay=30.0)])["outcomes"])
    assert sorted(sent[0]) == ["attempt", "delay", "error", "error_type", "give_up", "id", "outcome", "output",
                               "result", "stack", "waited", "worker"]


def test_a_success_writes_its_result_its_output_and_its_wait_and_one_without_writes_nulls(app, sql):
    with_values, plain = _running(app, sql, 2)
    rows = sql(statements.FINISH_RUNS, finish_params([
        Outcome(with_values, "jobsweb.noop", 1, "w", "succeeded", result={"rows": 12}, output="copied 12 rows\n",
                waited=1.5),
        Outcome(plain, "jobsweb.noop", 1, "w", "succeeded")]))
    assert sorted((run_id, status) for run_id, status, _, _ in rows) == [(with_values, "succeeded"), (plain, "succeeded")]
    assert sql("SELECT id, result, last_error, error_type, last_stack, finished_at IS NOT NULL, "
               "started_at IS NOT NULL FROM job_runs ORDER BY id") == [
        (with_values, {"rows": 12}, None, None, None, True, True), (plain, None, None, None, None, True, True)]
    assert sql("SELECT run_id, attempt, worker, outcome, error, output, started_at IS NOT NULL FROM job_attempts "
               "ORDER BY run_id") == [(with_values, 1, "w", "succeeded", None, "copied 12 rows\n", True),
                                      (plain, 1, "w", "succeeded", None, None, True)]
    # The held run's wait moved its start on by 1.5 s; the other's start stayed.
    assert sql("SELECT round(extract(epoch FROM a.started_at - b.started_at)::numeric, 1) FROM job_runs a, job_runs b "
               "WHERE a.id = %s AND b.id = %s", [with_values, plain]) == [(1.5,)]


def test_a_failure_still_gives_up_and_waits_its_delay(app, sql):
    retried, given_up = _running(app, sql, 2)
    sql(statements.FINISH_RUNS, finish_params([
        Outcome(retried, "jobsweb.noop", 1, "w", "failed", error_type="ValueError", error="boom", delay=90.0),
        Outcome(given_up, "jobsweb.noop", 1, "w", "failed", error_type="ValueError", error="bad input",
                give_up=True)]))
    assert sql("SELECT id, status, last_error, round(extract(epoch FROM run_at - now()) / 10)::int FROM job_runs "
               "WHERE id = %s", [retried]) == [(retried, "failed", "boom", 9)]
    assert sql("SELECT status, last_error FROM job_runs WHERE id = %s", [given_up]) == [("dead", "bad input")]
