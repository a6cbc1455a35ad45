"""The Queues page's counts (ops/queue_stats.py): read once from the claim's partial indexes, at a
cost the planner sees as small whatever it guesses about job_queues."""

from jobsweb.ops import queue_stats


def total_cost(sql, statement):
    [(plan,)] = sql("EXPLAIN (FORMAT JSON) " + statement)[0]
    return plan["Plan"]["Total Cost"]


def test_the_queues_statement_stays_under_the_jit_threshold_with_job_queues_never_analysed(app, sql):
    sql("INSERT INTO job_runs (job_type, queue) SELECT 'jobsweb.noop', 'q' || n % 3 FROM generate_series(1, 1000) n")
    sql("ANALYZE job_runs")
    # A few queues, as most installs have, are never analysed (autovacuum waits for 50 rows): the
    # planner then assumes 630 of them.
    sql("INSERT INTO job_queues (name, concurrency_limit) VALUES ('q0', 2)")
    [(guessed,)] = sql("EXPLAIN (FORMAT JSON) SELECT name FROM job_queues")[0]
    assert guessed["Plan"]["Plan Rows"] > 100
    [(threshold,)] = sql("SELECT current_setting('jit_above_cost')::float")
    assert total_cost(sql, queue_stats.QUEUES) < threshold / 10
    with app.app_context():
        states = {state.name: (state.due, state.running, state.limit) for state in queue_stats.queues()}
    assert states == {"q0": (333, 0, 2), "q1": (334, 0, None), "q2": (333, 0, None)}
