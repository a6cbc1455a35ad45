"""Drill 6, deploy: a busy `--forever` worker gets SIGTERM; nothing is left `running`, and the
next version of the worker finishes everything."""


from tests.conftest import wait_for
from tests.processes import finish, insert_many, stopped
from tests.reliability.conftest import size

SHUTDOWN_TIMEOUT = 1.0  # seconds


def test_sigterm_to_a_busy_worker_leaves_nothing_running_and_the_next_one_finishes_all(app, sql, spawn_worker,
                                                                                      worker_log, figures):
    quick = size("DEPLOY_QUICK_JOBS", 200)
    # Each records its handler's start in test_executions, then sleeps.
    insert_many(sql, "test.polite", 4, payload='{"seconds": 60}')  # jobsweb.sleep: stop when asked
    insert_many(sql, "test.started", 4, payload='{"seconds": 60}')  # ignore the request
    insert_many(sql, "test.effect", quick, payload='{"max_sleep": 0.05}', max_attempts=10)
    old = spawn_worker("--forever", "--concurrency", "8", "--poll-interval", "0.05",
                       "--shutdown-timeout", str(SHUTDOWN_TIMEOUT), output=worker_log())
    # Their handlers began, not only their claims: a run claimed ahead of a busy slot and not yet
    # begun at SIGTERM is released unstarted, with no attempt (under load the worker held some so).
    wait_for(lambda: sql("SELECT count(*) FROM test_executions e JOIN job_runs r ON r.id = e.run_id "
                         "WHERE r.job_type IN ('test.polite', 'test.started')")[0][0] == 8,
             message="the long runs' handlers to begin")
    code, output, stopped_in = stopped(old)

    assert code == 0 and "Traceback" not in output, output
    [(left_running,)] = sql("SELECT count(*) FROM job_runs WHERE status = 'running'")
    assert left_running == 0
    released = sql("SELECT r.job_type, count(*) FROM job_attempts a JOIN job_runs r ON r.id = a.run_id "
                   "WHERE a.outcome = 'interrupted' GROUP BY r.job_type ORDER BY r.job_type")
    assert released == [("test.polite", 4), ("test.started", 4)]

    sql("UPDATE job_runs SET payload = '{\"seconds\": 0}' WHERE job_type IN ('test.polite', 'test.started')")
    new = spawn_worker("--concurrency", "8", output=worker_log())
    assert finish(new, timeout=120)[0] == 0
    assert sql("SELECT status, count(*) FROM job_runs GROUP BY status") == [("succeeded", quick + 8)]
    # No effect happened twice; each long run began twice (interrupted, then finished).
    assert sql("SELECT r.job_type = 'test.effect', count(*) - count(DISTINCT run_id) FROM test_executions e "
               "JOIN job_runs r ON r.id = e.run_id GROUP BY 1 ORDER BY 1") == [(False, 8), (True, 0)]
    figures(runs=sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")[0][0],
            released_at_deadline=sum(count for _, count in released), left_running=left_running,
            sigterm_to_exit_seconds=round(stopped_in, 2), shutdown_timeout_seconds=SHUTDOWN_TIMEOUT)
