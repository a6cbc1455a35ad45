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


def test_the_last_hour_counts_each_queues_attempts_from_the_rollup_and_the_newest_since(app, sql):
    from jobsweb.ops import job_type_metrics

    sql("INSERT INTO job_runs (job_type, queue) SELECT 't', 'q' || n % 2 FROM generate_series(1, 10) n")
    # A queue whose only run finished: nothing waits or runs in it, it has no job_queues row.
    sql("INSERT INTO job_runs (job_type, queue, status, finished_at) VALUES ('t', 'done', 'succeeded', now())")
    # Attempts that ran to an end 2 hours ago (out of the hour), 30 and 20 minutes ago, and 2
    # seconds ago (newer than the rollup ever seals); an interrupted one says nothing.
    sql("""INSERT INTO job_attempts (run_id, attempt, outcome, started_at, finished_at)
           SELECT id, a.n, a.outcome, now() - a.ago - interval '1 s', now() - a.ago FROM job_runs,
           (VALUES (1, 'succeeded', interval '2 hours'), (2, 'failed', interval '30 minutes'),
                   (3, 'succeeded', interval '20 minutes'), (4, 'interrupted', interval '10 minutes'),
                   (5, 'succeeded', interval '2 seconds')) AS a(n, outcome, ago)""")

    def last_hour():
        with app.app_context():
            return {state.name: state.last_hour for state in queue_stats.queues()}

    assert last_hour() == {"done": 3, "q0": 15, "q1": 15}  # nothing rolled up yet: every attempt joined
    with app.app_context():
        sealed_until = job_type_metrics.seal(1.0)
    # The attempts the rollup counted are read from it: with them gone from job_attempts, the
    # figure stays; the newest, not sealed yet, are still joined to their runs.
    sql("DELETE FROM job_attempts WHERE finished_at < %s", [sealed_until])
    assert sql("SELECT count(*) FROM job_attempts") == [(11,)]
    assert last_hour() == {"done": 3, "q0": 15, "q1": 15}
