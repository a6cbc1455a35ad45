"""Drill 5, slow handler / lost lease: a run that outlives its lease is taken over by another
worker, and the first worker's late completion is rejected by the guard and logged."""

import signal

from tests.conftest import wait_for
from tests.processes import add_many, finish, status_of


def test_a_late_completion_after_a_takeover_is_rejected_by_the_guard_and_logged(app, sql, spawn_worker,
                                                                                 worker_log, figures):
    [run_id] = add_many(app, "test.overstay_lease", 1)
    # A lease so long that the first worker's next heartbeat is minutes away: between the
    # takeover and its late completion it cannot learn that it lost the run. One slot, so
    # that the takeover is the rescuer's, not this worker's own second claim.
    slow = spawn_worker("--forever", "--poll-interval", "0.05", "--concurrency", "1", output=worker_log(),
                        JOBSWEB_LEASE_SECONDS=600)
    wait_for(lambda: status_of(sql, run_id) == "running", message="the run to start")
    # Stand-in for the lease running out while heartbeats were stuck.
    sql("UPDATE job_runs SET locked_until = now() - interval '1 second' WHERE id = %s", [run_id])
    rescuer = spawn_worker("--forever", "--poll-interval", "0.05", output=worker_log(), JOBSWEB_LEASE_SECONDS=2)
    wait_for(lambda: status_of(sql, run_id) == "succeeded", message="the rescuer to finish the run")
    wait_for(lambda: "rejected" in open(slow.output.name).read(), message="the late completion to be refused")
    for proc in (slow, rescuer):
        proc.send_signal(signal.SIGTERM)
    (slow_code, slow_output), (rescuer_code, _) = finish(slow), finish(rescuer)

    assert (slow_code, rescuer_code) == (0, 0)
    assert f"run {run_id} test.overstay_lease: outcome of attempt 1 rejected: the run is no longer held by" \
        in slow_output, slow_output
    assert sql("SELECT status, attempts, result FROM job_runs") == [("succeeded", 2, {"attempt": 2})]
    assert sql("SELECT attempt, outcome, error_type FROM job_attempts ORDER BY attempt") == [
        (1, "failed", "lease_expired"), (2, "succeeded", None)]
    rejected = slow_output.count(f"run {run_id} test.overstay_lease: outcome of attempt 1 rejected")
    figures(late_completions=rejected + slow_output.count(f"run {run_id} test.overstay_lease succeeded (attempt 1)"),
            rejected_by_guard=rejected,
            overwritten=sql("SELECT count(*) FROM job_runs WHERE result IS DISTINCT FROM '{\"attempt\": 2}' "
                            "OR attempts <> 2")[0][0]
            + sql("SELECT count(*) FROM job_attempts WHERE attempt = 1 AND outcome <> 'failed'")[0][0])
