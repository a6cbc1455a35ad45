"""Due runs that no worker will claim: judged by the job types the workers registered."""

import re

from jobsweb.ops import stats


def due(sql, job_type):
    sql("INSERT INTO job_runs (job_type, status, run_at) VALUES (%s, 'queued', now() - interval '1 minute')",
        [job_type])


def worker(sql, name, job_types, seen="now()", stopped="NULL"):
    sql(f"INSERT INTO job_workers (id, host, pid, last_seen_at, stopped_at, job_types) "
        f"VALUES (%s, 'h', 1, {seen}, {stopped}, %s)", [name, job_types])


def test_a_due_type_that_no_recent_worker_handles_is_named(app, sql):
    due(sql, "reports.weekly")
    due(sql, "reports.weekly")
    due(sql, "jobsweb.noop")
    worker(sql, "h:1:a", ["jobsweb.noop"])
    worker(sql, "h:2:b", ["reports.weekly"], seen="now() - interval '2 hours'")  # gone long ago
    with app.app_context():
        assert stats.unknown_due_types() == {("reports.weekly", "default"): 2}


def test_a_worker_that_exited_after_its_cron_tick_still_counts(app, sql):
    due(sql, "reports.weekly")
    worker(sql, "h:1:a", ["reports.weekly"], seen="now() - interval '50 seconds'", stopped="now() - interval '50 seconds'")
    with app.app_context():
        assert stats.unknown_due_types() == {}


def test_a_worker_from_before_job_types_were_recorded_may_handle_anything(app, sql):
    due(sql, "reports.weekly")
    worker(sql, "h:1:a", None)
    with app.app_context():
        assert stats.unknown_due_types() == {}


def test_with_no_recent_worker_every_due_type_is_named(app, sql):
    due(sql, "jobsweb.noop")
    with app.app_context():
        assert stats.unknown_due_types() == {("jobsweb.noop", "default"): 1}


def test_a_worker_registers_the_job_types_it_handles(app, sql, spawn_worker):
    proc = spawn_worker()
    assert proc.wait(timeout=60) == 0
    [(job_types,)] = sql("SELECT job_types FROM job_workers")
    assert {"jobsweb.noop", "test.record"} <= set(job_types)


def test_due_runs_in_a_queue_no_recent_worker_takes_are_named(app, sql):
    due(sql, "jobsweb.noop")
    sql("INSERT INTO job_runs (job_type, queue) VALUES ('jobsweb.noop', 'mail')")
    worker(sql, "h:1:a", ["jobsweb.noop"])
    sql("UPDATE job_workers SET queues = '{default}'")
    with app.app_context():
        assert stats.unknown_due_types() == {("jobsweb.noop", "mail"): 1}


def test_due_runs_held_by_a_paused_queue_or_job_type_are_not_blamed_on_the_workers(app, sql):
    due(sql, "reports.weekly")
    sql("INSERT INTO job_runs (job_type, queue) VALUES ('reports.weekly', 'exports'), ('billing.charge', 'default')")
    sql("INSERT INTO job_queues (name, paused) VALUES ('exports', true)")
    sql("INSERT INTO job_paused_types (job_type) VALUES ('billing.charge')")
    with app.app_context():
        assert stats.unknown_due_types() == {("reports.weekly", "default"): 1}


def test_the_status_chips_read_an_index_not_the_table_after_updates_cleared_the_visibility_map(app, sql):
    sql("INSERT INTO job_runs (job_type, status) SELECT 'jobsweb.noop', CASE WHEN n % 100 = 0 THEN 'dead' "
        "ELSE 'succeeded' END FROM generate_series(1, 100000) n")
    sql("VACUUM ANALYZE job_runs")
    # A tenth of the runs changed since (progress, a definition's runs), spread over every page:
    # no page is all-visible any more, so an index-only scan costs the planner heap reads too.
    sql("UPDATE job_runs SET progress_note = 'x' WHERE id % 10 = 0")
    sql("ANALYZE job_runs")
    plan = "\n".join(row[0] for row in sql("EXPLAIN " + stats.capped_counts(["queued", "dead", "succeeded"])))
    assert "Seq Scan" not in plan, plan
    # An absent or rare status is read through an index on status (job_runs_status_id, or the
    # claim's partial index for queued), never by walking the primary key, which reads the whole
    # table before it gives up. The common one may walk it: its 10,001 come within the first pages.
    queued, dead, succeeded = plan.split("InitPlan")[1:]
    for part in (queued, dead):
        assert "job_runs_pkey" not in part and re.search(r"(on|using) job_runs_(status_id|queue_claimable)\b", part), plan
    with app.app_context():
        counts = stats.chip_counts(["queued", "dead", "succeeded"])
    assert counts["queued"] == (0, True) and counts["dead"] == (1000, True)
    assert counts["succeeded"][1] is False and counts["succeeded"][0] >= stats.CHIP_COUNT_CAP
