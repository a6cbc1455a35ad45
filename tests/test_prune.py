import pytest

from jobsweb.engine import statements
from jobsweb.engine.jobs.registry import JobContext
from jobsweb.ops import retention
from tests.conftest import committed


def add_run(sql, status, days_ago, job_type="jobsweb.noop", attempts=1, **columns):
    """A run that finished `days_ago` days ago (None: not finished), with `attempts` attempt rows."""
    extra = "".join(f", {name}" for name in columns)
    values = "".join(", %s" for _ in columns)
    [(run_id,)] = sql(
        f"INSERT INTO job_runs (job_type, status, finished_at{extra}) VALUES "
        f"(%s, %s, CASE WHEN %s::int IS NULL THEN NULL ELSE now() - make_interval(days => %s::int) END{values}) "
        "RETURNING id", [job_type, status, days_ago, days_ago, *columns.values()])
    for n in range(1, attempts + 1):
        sql("INSERT INTO job_attempts (run_id, attempt, outcome) VALUES (%s, %s, 'failed')", [run_id, n])
    return run_id


def remaining(sql):
    return {row[0] for row in sql("SELECT id FROM job_runs")}


def test_pruning_deletes_finished_runs_and_attempts_past_their_statuses_retention(app, sql):
    old_ok = add_run(sql, "succeeded", 15, attempts=2)
    young_ok = add_run(sql, "succeeded", 13)
    old_dead = add_run(sql, "dead", 91, attempts=3)
    young_dead = add_run(sql, "dead", 60)
    old_cancelled = add_run(sql, "cancelled", 31)
    old_skipped = add_run(sql, "skipped", 15, attempts=0)
    young_missed = add_run(sql, "missed", 20, attempts=0)
    # Still to run: never pruned, however old.
    failed = add_run(sql, "failed", None)
    sql("UPDATE job_runs SET created_at = now() - interval '1 year' WHERE id = %s", [failed])
    queued = add_run(sql, "queued", None, attempts=0)

    with committed(app):
        pruned, _ = retention.prune()

    assert remaining(sql) == {young_ok, young_dead, young_missed, failed, queued}
    assert {p.status: p.runs for p in pruned} == {"succeeded": 1, "dead": 1, "cancelled": 1, "skipped": 1, "missed": 0}
    assert sum(p.attempts for p in pruned) == 6
    assert sql("SELECT count(*) FROM job_attempts WHERE run_id IN (%s, %s, %s)", [old_ok, old_dead, old_cancelled]) == [(0,)]
    del old_skipped


def test_pruning_commits_each_small_batch_on_its_own(app, sql):
    for setting in ("JOBSWEB_RETAIN_DEAD", "JOBSWEB_RETAIN_CANCELLED", "JOBSWEB_RETAIN_SKIPPED",
                    "JOBSWEB_RETAIN_MISSED"):
        app.config[setting] = 0  # only succeeded runs are pruned here
    doomed = [add_run(sql, "succeeded", 20) for _ in range(5)]
    left_before_each_batch = []

    def stop():
        left_before_each_batch.append(sql("SELECT count(*) FROM job_runs")[0][0])  # another connection

    with committed(app):
        retention.prune(stop=stop, batch=2)

    assert left_before_each_batch == [5, 3, 1]
    assert remaining(sql) == set()
    del doomed


def test_a_stop_between_batches_keeps_what_was_already_deleted(app, sql):
    for _ in range(4):
        add_run(sql, "succeeded", 20)
    calls = []

    def stop():
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("cancelled")

    with app.app_context(), pytest.raises(RuntimeError):
        retention.prune(stop=stop, batch=3)
    assert len(remaining(sql)) == 1


def test_a_batch_looks_up_its_own_runs_attempts_and_never_reads_job_attempts_whole(app, sql):
    """A busy retention deletes a batch after another: each batch read every attempt row when the
    planner hashed job_attempts against the batch (a soak's p95 wait with deletes 1.65x without)."""
    sql("WITH runs AS (INSERT INTO job_runs (job_type, status, finished_at) SELECT 'jobsweb.noop', 'succeeded', "
        "now() - interval '30 days' FROM generate_series(1, 100000) RETURNING id) "
        "INSERT INTO job_attempts (run_id, attempt, outcome) SELECT id, 1, 'succeeded' FROM runs")
    sql("ANALYZE job_runs")
    sql("ANALYZE job_attempts")
    plan = "\n".join(row[0] for row in sql("EXPLAIN " + statements.PRUNE_RUNS,
                                          {"status": "succeeded", "days": 14, "batch": 500}))
    assert "Index Scan using job_attempts_run_attempt on job_attempts" in plan and "Seq Scan" not in plan, plan
    assert sql(statements.PRUNE_RUNS, {"status": "succeeded", "days": 14, "batch": 500}) == [(500, 500)]
    assert sql("SELECT count(*) FROM job_attempts a LEFT JOIN job_runs r ON r.id = a.run_id "
               "WHERE r.id IS NULL") == [(0,)]


def test_the_prune_job_waits_after_each_full_batch_as_long_as_it_took_and_the_command_does_not(app, runner, sql):
    for _ in range(5):
        add_run(sql, "succeeded", 15)
    app.config["JOBSWEB_PRUNE_BATCH"] = 2
    ctx = JobContext(1, "jobsweb.prune", {}, 1, 3, None)
    waited = []
    ctx.sleep = waited.append
    with committed(app):
        assert retention.prune_job(ctx)["deleted"]["succeeded"] == 5
    # Batches of 2, 2 and 1: a wait after each full one, none after the last.
    assert len(waited) == 2 and all(0 < seconds < 5 for seconds in waited), waited

    for _ in range(5):
        add_run(sql, "succeeded", 15)
    with committed(app):
        assert retention.prune(batch=2)[0][0].runs == 5  # as `flask jobs prune` calls it: no pause


def test_a_retention_of_zero_days_keeps_runs_forever(app, sql):
    app.config["JOBSWEB_RETAIN_SUCCEEDED"] = 0
    kept = add_run(sql, "succeeded", 400)
    add_run(sql, "dead", 400)
    with committed(app):
        pruned, _ = retention.prune()
    assert remaining(sql) == {kept}
    assert "succeeded" not in {p.status for p in pruned}


def test_a_run_queued_behind_a_pruned_run_stays_and_loses_the_link(app, sql):
    old = add_run(sql, "succeeded", 30)
    behind = add_run(sql, "queued", None, attempts=0, after_run_id=old)
    with committed(app):
        retention.prune()
    assert sql("SELECT id, after_run_id FROM job_runs") == [(behind, None)]


def test_workers_unseen_for_a_month_are_forgotten(app, sql):
    sql("INSERT INTO job_workers (id, host, pid, last_seen_at) VALUES ('old', 'h', 1, now() - interval '31 days'), "
        "('recent', 'h', 2, now() - interval '29 days')")
    with committed(app):
        retention.prune()
    assert sql("SELECT id FROM job_workers") == [("recent",)]


def test_prune_dry_run_says_what_it_would_delete_and_deletes_nothing(runner, sql):
    add_run(sql, "succeeded", 15, attempts=2)
    add_run(sql, "succeeded", 16)
    add_run(sql, "dead", 1)
    result = runner.invoke(args=["jobs", "prune", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "succeeded: would delete 2 runs and 3 attempts older than 14 days, finished " in result.output
    assert "dead: would delete 0 runs and 0 attempts older than 90 days\n" in result.output
    assert len(remaining(sql)) == 3
    result = runner.invoke(args=["jobs", "prune"])
    assert "succeeded: deleted 2 runs and 3 attempts older than 14 days" in result.output
    assert len(remaining(sql)) == 1


def test_with_retention_counted_in_seconds_runs_go_seconds_after_they_finish(app, runner, sql):
    # JOBSWEB_RETAIN_UNIT=seconds: the benchmark's soak needs retention to delete while it runs.
    app.config.update(JOBSWEB_RETAIN_UNIT="seconds", JOBSWEB_RETAIN_SUCCEEDED=120)
    old, young = add_run(sql, "succeeded", 0), add_run(sql, "succeeded", 0)
    sql("UPDATE job_runs SET finished_at = now() - make_interval(secs => %s) WHERE id = %s", [130, old])
    sql("UPDATE job_runs SET finished_at = now() - make_interval(secs => %s) WHERE id = %s", [110, young])
    result = runner.invoke(args=["jobs", "prune", "--dry-run"])
    assert "succeeded: would delete 1 runs and 1 attempts older than 120 seconds, finished " in result.output
    result = runner.invoke(args=["jobs", "prune"])
    assert "succeeded: deleted 1 runs and 1 attempts older than 120 seconds\n" in result.output
    assert remaining(sql) == {young}


def test_the_prune_job_runs_on_a_worker_and_reports_what_it_deleted(app, sql, spawn_worker):
    from jobsweb import enqueue

    add_run(sql, "succeeded", 15)
    add_run(sql, "dead", 100, attempts=2)
    with committed(app):
        run_id = enqueue("jobsweb.prune")
    worker = spawn_worker()
    out, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, out
    [(status, result)] = sql("SELECT status, result FROM job_runs WHERE id = %s", [run_id])
    assert status == "succeeded", out
    assert result["deleted"]["succeeded"] == 1 and result["deleted"]["dead"] == 1 and result["attempts"] == 3


def test_the_migration_defines_a_daily_prune_that_is_an_ordinary_definition(scratch_database):
    import psycopg
    from jobsweb.core.database import libpq_url

    url = scratch_database("jobsweb_prune_definition")
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute("SELECT job_type, schedule, timezone, enabled, next_run_at > now(), "
                           "next_run_at <= now() + interval '1 day', "
                           "to_char(next_run_at AT TIME ZONE 'UTC', 'HH24:MI') "
                           "FROM job_definitions WHERE name = 'jobsweb.prune'").fetchone()
    assert row == ("jobsweb.prune", "17 3 * * *", "UTC", True, True, True, "03:17")


def long_ago(sql, *ids, days=100):
    """Their end is `days` ago (a change of finished_at only: the workflow trigger is not fired)."""
    sql("UPDATE job_runs SET finished_at = now() - make_interval(days => %s) WHERE id = ANY(%s)", [days, list(ids)])


def test_pruning_runs_that_ended_long_ago_leaves_what_waits_for_them_waiting_for_the_rest_only(app, sql):
    from jobsweb import enqueue
    from tests.test_worker import make_worker

    with app.app_context():
        done = enqueue("test.record")
        died = enqueue("jobsweb.fail", max_attempts=1)
        later = enqueue("test.record", run_at=None, queue="held")
        after_done = enqueue("test.record", after=[done, later])
        after_died = enqueue("test.record", after=[died, later], after_failure="run")
    make_worker(app, queues=["default"]).run()  # their ends are counted now, by the trigger
    long_ago(sql, done, died)
    with committed(app):
        retention.prune()
    assert remaining(sql) == {later, after_done, after_died}
    assert sql("SELECT status, waiting_for FROM job_runs WHERE id = ANY(%s) ORDER BY id", [[after_done, after_died]]) \
        == [("waiting", 1), ("waiting", 1)]
    make_worker(app).run()
    assert sql("SELECT status FROM job_runs WHERE id = ANY(%s) ORDER BY id", [[later, after_done, after_died]]) \
        == [("succeeded",), ("succeeded",), ("succeeded",)]


def test_pruning_a_batchs_ended_members_leaves_it_to_finish_with_its_last_member(app, sql):
    from jobsweb import batch
    from tests.test_worker import make_worker

    with app.app_context():
        with batch(on_finish="test.batch_callback") as export:
            first = export.enqueue_many("test.record", [{}, {}])
            last = export.enqueue("test.record", run_at=None, queue="held")
    make_worker(app, queues=["default"]).run()
    long_ago(sql, *first)
    with committed(app):
        retention.prune()
    assert remaining(sql) == {last, export.callbacks["on_finish"]}
    assert sql("SELECT pending FROM job_batches") == [(1,)]
    make_worker(app).run()
    assert sql("SELECT status FROM job_runs WHERE id = %s", [export.callbacks["on_finish"]]) == [("succeeded",)]
