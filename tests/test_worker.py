"""The worker loop, run in this process: outcomes, retries, timeouts, guards, leases."""

import signal
import threading

from jobsweb import enqueue
from jobsweb.engine import statements, upkeep
from jobsweb.commands import build_worker
from jobsweb.engine.worker.execution import Outcome
from jobsweb.engine.worker.outcome_writes import finish_params
from jobsweb.engine.worker.lease_recovery import RECOVER_BATCH
from jobsweb.engine.worker.outages import RECONNECT_FIRST_DELAY
from jobsweb.engine.link import DatabaseUnavailable
from tests.conftest import wait_for
from tests.processes import insert_many


def make_worker(app, **options):
    settings = {"concurrency": 4, "poll_interval": 0.05, "shutdown_timeout": 1.0, **options}
    return build_worker(app, **settings)


def add(app, job_type, payload=None, **kwargs):
    with app.app_context():
        return enqueue(job_type, payload, **kwargs)


def make_due(sql):
    """Stand-in for time passing: every waiting retry becomes due now."""
    sql("UPDATE job_runs SET run_at = now() WHERE status = 'failed'")


def attempts_of(sql, run_id):
    return sql("SELECT attempt, outcome, error_type FROM job_attempts WHERE run_id = %s ORDER BY attempt",
               [run_id])


def test_a_successful_run_is_recorded_with_its_result_and_attempt(app, sql):
    run_id = add(app, "jobsweb.sleep", {"seconds": 0})
    make_worker(app).run()
    [(status, result, locked_by, finished)] = sql(
        "SELECT status, result, locked_by, finished_at IS NOT NULL FROM job_runs WHERE id = %s", [run_id])
    assert (status, result, locked_by, finished) == ("succeeded", {"slept": 0}, None, True)
    assert attempts_of(sql, run_id) == [(1, "succeeded", None)]


def test_a_failing_run_retries_with_backoff_then_dies_keeping_every_attempt(app, sql):
    app.config.update(JOBSWEB_BACKOFF_BASE=60, JOBSWEB_BACKOFF_CAP=60)  # each retry waits for make_due
    run_id = add(app, "jobsweb.fail", max_attempts=3)
    for expected in ("failed", "failed", "dead"):
        make_worker(app).run()
        assert sql("SELECT status FROM job_runs WHERE id = %s", [run_id]) == [(expected,)]
        if expected == "failed":
            [(in_future,)] = sql("SELECT run_at > now() FROM job_runs WHERE id = %s", [run_id])
            assert in_future, "a failed run waits for its backoff"
            make_due(sql)
    assert attempts_of(sql, run_id) == [(n, "failed", "RuntimeError") for n in (1, 2, 3)]
    [(error, stack, finished)] = sql(
        "SELECT last_error, last_stack, finished_at IS NOT NULL FROM job_runs WHERE id = %s", [run_id])
    assert error == "jobsweb.fail failing on purpose (attempt 3)"
    assert "Traceback" in stack and "builtin_jobs.py" in stack
    assert finished


def test_a_run_that_fails_transiently_succeeds_on_a_later_attempt(app, sql):
    app.config.update(JOBSWEB_BACKOFF_BASE=60, JOBSWEB_BACKOFF_CAP=60)
    run_id = add(app, "jobsweb.fail", {"times": 1})
    make_worker(app).run()
    make_due(sql)
    make_worker(app).run()
    assert sql("SELECT status, attempts, result FROM job_runs WHERE id = %s", [run_id]) == [
        ("succeeded", 2, {"succeeded_on_attempt": 2})]


def test_a_permanent_error_goes_straight_to_dead(app, sql):
    run_id = add(app, "test.permanent", max_attempts=10)
    make_worker(app).run()
    assert sql("SELECT status, attempts, error_type FROM job_runs WHERE id = %s", [run_id]) == [
        ("dead", 1, "PermanentError")]


def test_an_exception_type_the_handler_marks_permanent_goes_straight_to_dead(app, sql):
    run_id = add(app, "test.not_found", max_attempts=10)
    make_worker(app).run()
    assert sql("SELECT status, last_error FROM job_runs WHERE id = %s", [run_id]) == [
        ("dead", "customer 42 does not exist")]


def test_a_result_that_is_not_json_fails_the_run_with_a_clear_error(app, sql):
    run_id = add(app, "test.unserialisable", max_attempts=1)
    make_worker(app).run()
    [(status, error_type, error)] = sql("SELECT status, error_type, last_error FROM job_runs WHERE id = %s",
                                        [run_id])
    assert (status, error_type) == ("dead", "TypeError")
    assert "not JSON serializable" in error


def test_a_run_over_its_timeout_is_failed_and_its_late_result_ignored(app, sql):
    run_id = add(app, "test.timeout", {"seconds": 1.5}, max_attempts=1)
    worker = make_worker(app)
    worker.run()
    assert sql("SELECT status, error_type, last_error FROM job_runs WHERE id = %s", [run_id]) == [
        ("dead", "timeout", "timed out after 0.5 seconds")]
    assert worker.held.taken() == 1, "the handler thread is still sleeping"
    # The handler thread returns "late" after the worker gave up on it: collecting it must not
    # change the recorded outcome.
    worker._collect(5)
    worker._flush()
    assert worker.held.taken() == 0
    assert sql("SELECT status, result FROM job_runs WHERE id = %s", [run_id]) == [("dead", None)]
    assert attempts_of(sql, run_id) == [(1, "failed", "timeout")]


def test_the_completion_of_a_worker_that_lost_its_lease_is_rejected(app, sql):
    run_id = add(app, "jobsweb.noop")
    sql("UPDATE job_runs SET status = 'running', attempts = 2, locked_by = 'new-owner', "
        "locked_until = now() + interval '1 minute' WHERE id = %s", [run_id])
    stale = Outcome(run_id, "jobsweb.noop", 1, "old-owner", "succeeded", result={"late": True})
    same_attempt_other_worker = Outcome(run_id, "jobsweb.noop", 2, "old-owner", "succeeded")
    rows = sql(statements.FINISH_RUNS, finish_params([stale, same_attempt_other_worker]))
    assert rows == []
    assert sql("SELECT status, locked_by, result FROM job_runs WHERE id = %s", [run_id]) == [
        ("running", "new-owner", None)]
    assert attempts_of(sql, run_id) == []


def test_heartbeats_only_extend_leases_the_worker_still_holds(app, sql):
    mine, taken = add(app, "jobsweb.noop"), add(app, "jobsweb.noop")
    sql("UPDATE job_runs SET status = 'running', attempts = 1, locked_by = 'me', "
        "locked_until = now() WHERE id = %s", [mine])
    sql("UPDATE job_runs SET status = 'running', attempts = 2, locked_by = 'other', "
        "locked_until = now() WHERE id = %s", [taken])
    rows = sql(upkeep.EXTEND_LEASES, {"worker": "me", "ids": [mine, taken], "attempts": [1, 1],
                                       "leases": [60, 60]})
    assert rows == [(mine, False)]  # (id, cancellation requested)
    assert sql("SELECT id FROM job_runs WHERE locked_until > now() + interval '50 seconds'") == [(mine,)]


def test_a_killed_workers_expired_leases_are_recovered_batch_after_batch_at_once(app, sql):
    app.config.update(JOBSWEB_BACKOFF_BASE=60, JOBSWEB_BACKOFF_CAP=60)  # no retry runs meanwhile
    insert_many(sql, "jobsweb.noop", 3 * RECOVER_BATCH + 1)
    sql("UPDATE job_runs SET status = 'running', attempts = 1, locked_by = 'dead-worker', "
        "started_at = now() - interval '2 minutes', locked_until = now() - interval '1 second'")
    make_worker(app).run()  # one cron tick
    assert sql("SELECT status, error_type, count(*) FROM job_runs GROUP BY 1, 2") == [
        ("failed", "lease_expired", 3 * RECOVER_BATCH + 1)]


def test_an_expired_lease_is_recovered_as_a_failed_attempt_that_retries(app, sql):
    app.config.update(JOBSWEB_BACKOFF_BASE=60, JOBSWEB_BACKOFF_CAP=60)  # the retry waits for make_due
    run_id = add(app, "jobsweb.noop")
    sql("UPDATE job_runs SET status = 'running', attempts = 1, locked_by = 'dead-worker', "
        "started_at = now() - interval '2 minutes', locked_until = now() - interval '1 second' "
        "WHERE id = %s", [run_id])
    make_worker(app).run()
    [(status, error_type)] = sql("SELECT status, error_type FROM job_runs WHERE id = %s", [run_id])
    assert (status, error_type) == ("failed", "lease_expired")
    assert sql("SELECT worker, outcome, error_type FROM job_attempts WHERE run_id = %s", [run_id]) == [
        ("dead-worker", "failed", "lease_expired")]
    make_due(sql)
    make_worker(app).run()
    assert sql("SELECT status, attempts FROM job_runs WHERE id = %s", [run_id]) == [("succeeded", 2)]


def test_a_lease_that_has_not_expired_is_left_alone(app, sql):
    run_id = add(app, "jobsweb.noop")
    sql("UPDATE job_runs SET status = 'running', attempts = 1, locked_by = 'busy-worker', "
        "locked_until = now() + interval '1 minute' WHERE id = %s", [run_id])
    make_worker(app).run()
    assert sql("SELECT status, locked_by FROM job_runs WHERE id = %s", [run_id]) == [("running", "busy-worker")]


def test_a_handler_can_extend_its_own_lease(app, sql):
    run_id = add(app, "test.extend_lease")
    make_worker(app).run()
    assert sql("SELECT result FROM job_runs WHERE id = %s", [run_id]) == [({"extended": True},)]


def test_the_worker_never_runs_more_than_its_concurrency(app, sql):
    from tests import job_types

    job_types.pairs.update(running=0, most=0)
    ids = [add(app, "test.pair_up") for _ in range(6)]
    make_worker(app, concurrency=2).run()
    # Each handler waits for a second one alongside: with 2 slots, 2 at a time and never more,
    # counted by the handlers themselves (a run claimed ahead counts from its claim in the database).
    assert job_types.pairs["most"] == 2
    assert sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'") == [(len(ids),)]


def test_job_types_this_worker_does_not_know_are_left_queued(app, sql):
    sql("INSERT INTO job_runs (job_type, payload, run_at, status, attempts, max_attempts) "
        "VALUES ('deployed.later', '{}', now(), 'queued', 0, 5)")
    make_worker(app).run()
    assert sql("SELECT status, attempts FROM job_runs") == [("queued", 0)]


def test_max_runtime_stops_claiming_and_finishes_what_it_holds(app, sql):
    for _ in range(3):
        add(app, "jobsweb.sleep", {"seconds": 0.3})
    make_worker(app, concurrency=1, max_runtime=0.1).run()
    assert sorted(sql("SELECT status FROM job_runs")) == [("queued",), ("queued",), ("succeeded",)]


def test_the_worker_registers_itself_and_counts_its_runs(app, sql):
    for _ in range(3):
        add(app, "jobsweb.noop")
    worker = make_worker(app)
    worker.run()
    [(host, pid, runs_done, stopped)] = sql(
        "SELECT host, pid, runs_done, stopped_at IS NOT NULL FROM job_workers WHERE id = %s", [worker.id])
    assert (runs_done, stopped) == (3, True)
    assert worker.id.startswith(f"{host}:{pid}:")


def test_run_jobs_exits_zero_even_when_jobs_fail(runner, app, sql):
    add(app, "jobsweb.fail", {"permanent": True})
    result = runner.invoke(args=["run-jobs", "--concurrency", "2"])
    assert result.exit_code == 0, result.output
    assert sql("SELECT status FROM job_runs") == [("dead",)]


def test_a_result_or_error_holding_a_nul_character_is_recorded_and_the_worker_carries_on(app, sql):
    # U+0000 cannot be stored in PostgreSQL text or jsonb: FINISH_RUNS failed with a DataError
    # and the worker crashed, on every retry of the run (found following up the bad-input drill).
    returned = add(app, "test.nul_result", max_attempts=1)
    raised = add(app, "test.nul_result", {"fail": True}, max_attempts=1)
    other = add(app, "jobsweb.noop")
    assert make_worker(app).run() == 0
    rows = sql("SELECT id, status, error_type, last_error FROM job_runs ORDER BY id")
    assert [(r[0], r[1], r[2]) for r in rows] == [(returned, "dead", "ValueError"), (raised, "dead", "ValueError"),
                                                  (other, "succeeded", None)]
    assert "NUL character" in rows[0][3]
    assert rows[1][3] == "bad byte \\x00 in the upstream reply"


def test_sigterm_is_handled_from_the_moment_the_worker_is_registered(app, monkeypatch):
    # Registered first, a SIGTERM that came before the handlers were installed killed the
    # worker and left its job_workers row looking alive (found by the chaos drill).
    worker = make_worker(app)
    fetch, seen = worker.link.fetch, []

    def spy(statement, params=None):
        if statement is upkeep.REGISTER_WORKER:
            seen.append(signal.getsignal(signal.SIGTERM))
        return fetch(statement, params)

    monkeypatch.setattr(worker.link, "fetch", spy)
    assert worker.run() == 0
    assert seen == [worker.stop.request]


def test_a_forever_worker_started_while_the_database_is_down_waits_for_it(app, sql):
    # It exited with "cannot reach the database" and its supervisor would crash-loop it
    # (found by the database-restart drill). One cron tick still fails fast (test_cli).
    from tests.conftest import wait_for

    worker = make_worker(app, forever=True)
    reachable, worker.link.conninfo = worker.link.conninfo, "postgresql://nobody@127.0.0.1:1/none"

    def database_comes_back():
        wait_for(lambda: worker.outages.delay > RECONNECT_FIRST_DELAY, message="a failed connection")
        worker.link.conninfo = reachable
        wait_for(lambda: sql("SELECT count(*) FROM job_workers")[0][0] == 1, message="the worker to register")
        worker.stop.request()

    thread = threading.Thread(target=database_comes_back)
    thread.start()
    assert worker.run() == 0
    thread.join()
    assert sql("SELECT stopped_at IS NOT NULL FROM job_workers") == [(True,)]


def test_a_claim_whose_rows_were_lost_with_the_connection_is_released_and_run_at_once(app, sql, monkeypatch):
    # The claim committed, then the connection broke before its rows arrived: the run stayed
    # locked by a worker that did not know it held it until the lease ran out (found by the
    # database-restart drill: 79 s instead of 10 s to finish after a restart).
    run_id = add(app, "jobsweb.noop")
    worker = make_worker(app)
    real, broken = worker.link.fetch_together, []

    def breaks_after_the_commit(statements):
        rows = real(statements)
        if not broken:
            broken.append(True)
            raise DatabaseUnavailable("server closed the connection unexpectedly")
        return rows

    monkeypatch.setattr(worker.link, "fetch_together", breaks_after_the_commit)
    assert worker.run() == 0
    # Released unstarted, not an interrupted attempt: its history holds the one attempt that ran.
    assert sql("SELECT status, attempts FROM job_runs WHERE id = %s", [run_id]) == [("succeeded", 1)]
    assert sql("SELECT attempt, outcome FROM job_attempts WHERE run_id = %s", [run_id]) == [(1, "succeeded")]


def test_a_lost_claim_is_released_and_logged_alone_while_an_ended_runs_outcome_waits_to_be_written(
        app, sql, monkeypatch, tmp_path, caplog):
    # The connection broke with a claim committed unseen while another run's handler ended: that
    # run's outcome waits in `pending`, its row still running and locked by this worker, and
    # LOST_CLAIMS must pass it by, as it passes the runs still held.
    import logging

    caplog.set_level(logging.WARNING, logger="jobsweb.worker")
    gate = tmp_path / "gate"
    first = add(app, "test.until_file", {"file": str(gate)})
    worker = make_worker(app)
    # A duty's pass writes the pending outcomes first (engine/worker/duties.py), and build_worker's
    # materialising is due every 0.25 s: without duties, the pass after the outage is one where
    # none is due, and LOST_CLAIMS meets the ended run's outcome still unwritten.
    worker.duties = []
    real, broken = worker.link.fetch_together, []

    def loses_the_second_claim(batch):
        rows = real(batch)
        claimed = [row[0] for row in rows[-1]] if batch[-1][0] == statements.CLAIM_RUNS else []
        if claimed and first not in claimed and not broken:
            broken.append((claimed, [name for name, _ in batch if name == statements.FINISH_RUNS]))
            gate.touch()  # the first run's handler ends while this claim's rows are lost
            wait_for(lambda: first not in worker.held, message="the first run's outcome to wait to be written")
            raise DatabaseUnavailable("server closed the connection unexpectedly")
        return rows

    monkeypatch.setattr(worker.link, "fetch_together", loses_the_second_claim)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_for(lambda: first in worker.held, message="the worker to start the first run")
        second = add(app, "jobsweb.noop")
        thread.join(timeout=60)
    finally:
        gate.touch()  # the lost claim touched it, unless the test failed before
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert broken == [([second], [])]  # the lost claim wrote no outcome: the first run's came after
    assert [r.getMessage() for r in caplog.records if "never started" in r.getMessage()] == [
        f"run {second} jobsweb.noop: claimed by attempt 1 while the connection broke, never started; "
        "released back to the queue"]
    for run_id in (first, second):
        assert sql("SELECT status, attempts FROM job_runs WHERE id = %s", [run_id]) == [("succeeded", 1)]
        assert attempts_of(sql, run_id) == [(1, "succeeded", None)]


def test_a_claim_lost_as_the_worker_is_told_to_stop_is_released_by_its_last_writes(app, sql, monkeypatch, caplog):
    # SIGTERM while the connection broke, a claim committed unseen: a stopping worker claims no
    # more, and only a claiming pass gave lost claims back, so the run stayed running until its
    # lease ran out and lease recovery charged it an attempt that never ran (test_stop_deadline's
    # fast stop, in a fresh-clone make test: one 'lease_expired' attempt on the restarted server).
    import logging

    caplog.set_level(logging.WARNING, logger="jobsweb.worker")
    run_id = add(app, "jobsweb.noop")
    worker = make_worker(app)
    real = worker.link.fetch_together

    def loses_the_claim_as_the_stop_comes(batch):
        rows = real(batch)
        if batch[-1][0] == statements.CLAIM_RUNS and rows[-1]:
            monkeypatch.setattr(worker.link, "fetch_together", real)
            worker.stop.request()
            raise DatabaseUnavailable("server closed the connection unexpectedly")
        return rows

    monkeypatch.setattr(worker.link, "fetch_together", loses_the_claim_as_the_stop_comes)
    assert worker.run() == 0
    assert sql("SELECT status, attempts, locked_by FROM job_runs WHERE id = %s", [run_id]) == [("queued", 0, None)]
    assert attempts_of(sql, run_id) == []
    assert [r.getMessage() for r in caplog.records if "never started" in r.getMessage()] == [
        f"run {run_id} jobsweb.noop: claimed by attempt 1 while the connection broke, never started; "
        "released back to the queue"]


def test_a_running_runs_lease_is_extended_every_third_of_the_lease(app, sql, tmp_path):
    # docs/REFERENCE.md: JOBSWEB_LEASE_SECONDS is the lease, "heartbeats every third of it": with
    # a lease of 1.5 s, locked_until moves every 0.5 s. Each heartbeat sets it to the database's
    # now() + the lease, so the steps between its values are the times between heartbeats.
    app.config["JOBSWEB_LEASE_SECONDS"] = 1.5
    gate = tmp_path / "gate"
    run_id = add(app, "test.until_file", {"file": str(gate)})
    worker = make_worker(app)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        seen = []  # locked_until, each value once

        def five_heartbeats():
            rows = sql("SELECT locked_until FROM job_runs WHERE id = %s AND status = 'running'", [run_id])
            if rows and rows[0][0] != (seen[-1] if seen else None):
                seen.append(rows[0][0])
            return len(seen) >= 6  # the first one seen may be the claim's

        wait_for(five_heartbeats, interval=0.02, message="five heartbeats")
    finally:
        gate.touch()
        thread.join()
    steps = sorted((b - a).total_seconds() for a, b in zip(seen[1:], seen[2:]))
    # The median step: 0.5 s, plus the loop's lag: at least 0.45 (a quarter of the lease would be
    # 0.375) and under half the lease (0.75 s, what heartbeats every half of it would give), so
    # that a loaded machine's lag (0.1 s and more at load 15) is not taken for either. Not the
    # shortest step: each heartbeat comes a pass's work after its due time, and one late by
    # 53 ms before one on time made a step of 0.447 s at load 14.
    assert 0.45 <= steps[len(steps) // 2] < 0.75, steps


def test_when_the_loop_sees_the_stop_before_the_stopper_thread_it_asks_the_handlers_and_says_so(app, sql, caplog):
    # Under load the stopper thread may run after the loop, which its path did not hold: the
    # loop asked the handler, it ended, and the stopper found nothing left to ask: no line said
    # the handlers were asked (test_stop_deadline's fast stop, in a make test at load 14).
    import logging

    caplog.set_level(logging.INFO, logger="jobsweb.worker")
    run_id = add(app, "jobsweb.sleep", {"seconds": 30})
    worker = make_worker(app, forever=True)
    worker.stop.stopper.request = lambda why: None  # the stopper thread not scheduled in time

    def stop_once_begun():
        wait_for(lambda: sql("SELECT status FROM job_runs WHERE id = %s", [run_id]) == [("running",)] and any(
            held.began is not None for held in worker.held.snapshot()), message="the handler to begin")
        worker.stop.request()

    thread = threading.Thread(target=stop_once_begun)
    thread.start()
    assert worker.run() == 0
    thread.join()
    assert [r.getMessage() for r in caplog.records if "running job(s) to stop" in r.getMessage()] == [
        "worker is shutting down: asked 1 running job(s) to stop"]
    assert sql("SELECT status, attempts FROM job_runs WHERE id = %s", [run_id]) == [("queued", 1)]


def test_a_finish_whose_answer_was_lost_is_logged_as_written_when_its_resend_is_refused(app, sql, monkeypatch, caplog):
    # The finish committed and its answer was lost (a reset, a blackhole that swallowed the
    # reply): sent again, the guard refuses it, since the run is no longer held. It was logged
    # "outcome of attempt 1 rejected: the run is no longer held by <this worker>", while
    # job_attempts showed the attempt succeeded by that same worker (issue 51).
    import logging

    caplog.set_level(logging.INFO, logger="jobsweb.worker")
    run_id = add(app, "jobsweb.noop")
    worker = make_worker(app)
    worker.duties = []
    real, lost = worker.link.fetch_together, []

    def loses_the_finishs_answer(batch):
        rows = real(batch)
        if not lost and any(sql_ is statements.FINISH_RUNS for sql_, _ in batch):
            lost.append(True)
            raise DatabaseUnavailable("server closed the connection unexpectedly")
        return rows

    monkeypatch.setattr(worker.link, "fetch_together", loses_the_finishs_answer)
    assert worker.run() == 0
    assert lost == [True]
    lines = [r.getMessage() for r in caplog.records if f"run {run_id} " in r.getMessage()]
    assert not [line for line in lines if "rejected" in line], lines
    assert f"run {run_id} jobsweb.noop: outcome of attempt 1 (succeeded) was written by its first send, " \
           "whose answer was lost" in lines, lines
    assert sql("SELECT attempt, outcome, worker FROM job_attempts WHERE run_id = %s", [run_id]) == [
        (1, "succeeded", worker.id)]
    assert sql("SELECT runs_done FROM job_workers WHERE id = %s", [worker.id]) == [(1,)]


def test_a_run_whose_written_outcome_was_lost_with_a_failover_is_said_so_when_found_running(app, sql, caplog):
    # A failover to an asynchronous standby loses the last acknowledged commits: the run's
    # finish among them, it is running again, locked by this worker, and LOST_CLAIMS releases it.
    # It was logged "claimed by attempt 1 while the connection broke, never started", but its
    # handler ran (found by the failover drill, issue 51).
    import logging

    caplog.set_level(logging.WARNING, logger="jobsweb.worker")
    run_id = add(app, "jobsweb.noop")
    other = add(app, "jobsweb.noop")
    worker = make_worker(app)
    assert worker.run() == 0
    # What the new primary has: the runs still running under this worker (the standby never got the finish).
    sql("UPDATE job_runs SET status = 'running', locked_by = %s, attempts = 1, finished_at = NULL "
        "WHERE id = ANY(%s)", [worker.id, [run_id, other]])
    lately = dict(worker.trips.lately_written())
    del lately[other]  # as if its outcome was written long ago, or by no one
    outcomes = worker.leases.lost_claims([], lately)
    worker.link.close()
    assert sorted((o.run_id, o.outcome) for o in outcomes) == [(run_id, "released"), (other, "released")]
    lines = [r.getMessage() for r in caplog.records]
    assert f"run {run_id} jobsweb.noop: the outcome of attempt 1 was written and then lost (a failover?): the run " \
           "is running again in the database; released back to the queue to run again" in lines, lines
    assert f"run {other} jobsweb.noop: claimed by attempt 1 while the connection broke, never started; released " \
           "back to the queue" in lines, lines
