"""An operator's cancel of a running run reaches the worker through its heartbeat."""

from tests.conftest import csrf_token, wait_for


def test_cancelling_a_running_run_stops_its_handler_and_ends_it_cancelled(sign_in, sql, spawn_worker):
    [(run,)] = sql("INSERT INTO job_runs (job_type, payload) VALUES ('jobsweb.sleep', '{\"seconds\": 60}') RETURNING id")
    worker = spawn_worker("--poll-interval", "0.1", JOBSWEB_LEASE_SECONDS="0.9")
    wait_for(lambda: sql("SELECT status FROM job_runs WHERE id = %s", [run]) == [("running",)],
             message="the worker to claim the run")
    client = sign_in("operator")
    client.post(f"/runs/{run}/cancel", data={"csrf_token": csrf_token(client, "/")})
    wait_for(lambda: sql("SELECT status FROM job_runs WHERE id = %s", [run]) == [("cancelled",)],
             timeout=15, message="the run to end cancelled")
    assert worker.wait(timeout=15) == 0
    [(finished, locked_by)] = sql("SELECT finished_at IS NOT NULL, locked_by FROM job_runs WHERE id = %s", [run])
    assert finished and locked_by is None
    assert sql("SELECT attempt, outcome, error_type FROM job_attempts WHERE run_id = %s", [run]) == [
        (1, "cancelled", "cancelled")]


def test_a_run_whose_cancel_was_requested_is_not_retried_when_it_fails(sql, spawn_worker):
    [(run,)] = sql("INSERT INTO job_runs (job_type, payload) VALUES ('jobsweb.fail', '{}') RETURNING id")
    sql("UPDATE job_runs SET cancel_requested_at = now() WHERE id = %s", [run])
    # A request made before the claim is still honoured when the attempt ends.
    worker = spawn_worker("--poll-interval", "0.1")
    assert worker.wait(timeout=30) == 0
    assert sql("SELECT status FROM job_runs WHERE id = %s", [run]) == [("cancelled",)]
    assert sql("SELECT outcome FROM job_attempts WHERE run_id = %s", [run]) == [("failed",)]
