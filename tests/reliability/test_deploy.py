"""Drill 6, deploy: a busy `--forever` worker gets SIGTERM; nothing is left `running`, and the
next version of the worker finishes everything."""

import signal
import time

from tests.conftest import wait_for
from tests.processes import finish, insert_many
from tests.reliability.conftest import size

SHUTDOWN_TIMEOUT = 1.0  # seconds


def test_sigterm_to_a_busy_worker_leaves_nothing_running_and_the_next_one_finishes_all(app, sql, spawn_worker,
                                                                                      worker_log, figures):
    quick = size("DEPLOY_QUICK_JOBS", 200)
    insert_many(sql, "jobsweb.sleep", 4, payload='{"seconds": 60}')  # stop when asked
    insert_many(sql, "test.stubborn", 4, payload='{"seconds": 60}')  # ignore the request
    insert_many(sql, "test.effect", quick, payload='{"max_sleep": 0.05}', max_attempts=10)
    old = spawn_worker("--forever", "--concurrency", "8", "--poll-interval", "0.05",
                       "--shutdown-timeout", str(SHUTDOWN_TIMEOUT), output=worker_log())
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'running' "
                         "AND job_type IN ('jobsweb.sleep', 'test.stubborn')")[0][0] == 8,
             timeout=60, message="the long runs to start")
    signalled = time.monotonic()
    old.send_signal(signal.SIGTERM)
    code, output = finish(old)
    stopped_in = time.monotonic() - signalled

    assert code == 0 and "Traceback" not in output, output
    [(left_running,)] = sql("SELECT count(*) FROM job_runs WHERE status = 'running'")
    assert left_running == 0
    released = sql("SELECT r.job_type, count(*) FROM job_attempts a JOIN job_runs r ON r.id = a.run_id "
                   "WHERE a.outcome = 'interrupted' GROUP BY r.job_type ORDER BY r.job_type")
    assert released == [("jobsweb.sleep", 4), ("test.stubborn", 4)]

    sql("UPDATE job_runs SET payload = '{\"seconds\": 0}' WHERE job_type IN ('jobsweb.sleep', 'test.stubborn')")
    new = spawn_worker("--concurrency", "8", output=worker_log())
    assert finish(new, timeout=120)[0] == 0
    assert sql("SELECT status, count(*) FROM job_runs GROUP BY status") == [("succeeded", quick + 8)]
    assert sql("SELECT count(*) - count(DISTINCT run_id) FROM test_executions") == [(0,)]
    figures(runs=sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")[0][0],
            released_at_deadline=sum(count for _, count in released), left_running=left_running,
            sigterm_to_exit_seconds=round(stopped_in, 2), shutdown_timeout_seconds=SHUTDOWN_TIMEOUT)
