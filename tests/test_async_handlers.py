"""`async def` handlers, awaited on the worker's event loop: outcomes, retries, timeouts,
cancellation, ctx.sleep, the SIGTERM drain, and mixing with sync handlers (issue 18, part 4)."""

import asyncio
import signal

from jobsweb import enqueue, job
from jobsweb.commands import build_worker
from jobsweb.testing import drain
from tests.conftest import wait_for
from tests.processes import add_many, finish, insert_many, status_of


def make_worker(app, **options):
    return build_worker(app, **{"concurrency": 4, "poll_interval": 0.05, "shutdown_timeout": 1.0, **options})


def attempts_of(sql, run_id):
    return sql("SELECT attempt, outcome, error_type FROM job_attempts WHERE run_id = %s ORDER BY attempt",
               [run_id])


def test_an_async_handler_succeeds_and_its_result_is_recorded(app, sql):
    [run_id] = add_many(app, "jobsweb.async_sleep", 1, {"seconds": 0.01})
    make_worker(app).run()
    assert sql("SELECT status, result, locked_by FROM job_runs WHERE id = %s", [run_id]) == [
        ("succeeded", {"slept": 0.01}, None)]
    assert attempts_of(sql, run_id) == [(1, "succeeded", None)]


def test_a_failing_async_handler_is_retried_then_dead_with_its_error(app, sql):
    app.config.update(JOBSWEB_BACKOFF_BASE=60, JOBSWEB_BACKOFF_CAP=60)
    [run_id] = add_many(app, "test.async_fail", 1)
    make_worker(app).run()
    assert sql("SELECT status, attempts FROM job_runs WHERE id = %s", [run_id]) == [("failed", 1)]
    sql("UPDATE job_runs SET run_at = now() WHERE status = 'failed'")
    make_worker(app).run()
    assert sql("SELECT status, last_error FROM job_runs WHERE id = %s", [run_id]) == [
        ("dead", "upstream refused attempt 2")]
    assert attempts_of(sql, run_id) == [(1, "failed", "ConnectionError"), (2, "failed", "ConnectionError")]


def test_an_async_handler_over_its_timeout_is_failed_and_its_task_cancelled(app, sql, tmp_path):
    marker = tmp_path / "marker"
    [run_id] = add_many(app, "test.async_timeout", 1, {"seconds": 30, "marker": str(marker)}, max_attempts=1)
    worker = make_worker(app)
    worker.run()
    assert sql("SELECT status, error_type, last_error FROM job_runs WHERE id = %s", [run_id]) == [
        ("dead", "timeout", "timed out after 0.5 seconds")]
    # Unlike a thread, the coroutine does not keep running after the worker gave it up.
    wait_for(lambda: marker.exists() and marker.read_text() == "cancelled\n", message="the task to be cancelled")
    worker._collect(5)
    assert worker.busy == 0
    assert attempts_of(sql, run_id) == [(1, "failed", "timeout")]


def test_an_operator_cancel_cancels_a_running_async_handler(app, sql, spawn_worker):
    [run_id] = add_many(app, "test.async_record", 1, {"seconds": 60})
    worker = spawn_worker("--poll-interval", "0.1", JOBSWEB_LEASE_SECONDS="0.9")
    wait_for(lambda: status_of(sql, run_id) == "running", message="the worker to claim the run")
    sql("UPDATE job_runs SET cancel_requested_at = now() WHERE id = %s", [run_id])
    wait_for(lambda: status_of(sql, run_id) == "cancelled", timeout=15, message="the run to end cancelled")
    code, output = finish(worker)
    assert code == 0, output
    assert attempts_of(sql, run_id) == [(1, "cancelled", "cancelled")]
    assert sql("SELECT count(*) FROM test_executions") == [(0,)]


def test_sigterm_wakes_ctx_sleep_and_lets_a_short_async_handler_finish(app, sql, spawn_worker, tmp_path):
    started = tmp_path / "started"
    [sleeper] = add_many(app, "test.async_ctx_sleep", 1, {"seconds": 60})
    [short] = add_many(app, "test.async_record", 1, {"seconds": 1.5, "started": str(started)})
    proc = spawn_worker("--forever", "--concurrency", "4", "--shutdown-timeout", "10")
    # Claimed is not started: a run still waiting for its task when SIGTERM comes is released.
    wait_for(lambda: started.exists(), message="the short handler to start")
    wait_for(lambda: status_of(sql, sleeper) == "running", message="the sleeper to be claimed")
    proc.send_signal(signal.SIGTERM)
    code, output = finish(proc)

    assert code == 0, output
    assert "Traceback" not in output
    # The drain waited for the handler that was nearly done, and stopped the one in ctx.sleep.
    assert status_of(sql, short) == "succeeded"
    assert sql("SELECT status, locked_by, run_at <= now() FROM job_runs WHERE id = %s", [sleeper]) == [
        ("queued", None, True)]
    [(outcome, error)] = sql("SELECT outcome, error FROM job_attempts WHERE run_id = %s", [sleeper])
    assert outcome == "interrupted" and "stopped by worker shutdown" in error


def test_sync_and_async_handlers_share_one_worker_and_each_run_executes_once(app, sql, spawn_worker, tmp_path):
    insert_many(sql, "test.async_record", 150, '{"seconds": 0.05}')
    insert_many(sql, "test.record", 50, '{"seconds": 0.01}')
    sql("UPDATE job_runs SET run_at = now() + interval '1 hour'")
    workers = [spawn_worker("--forever", "--poll-interval", "0.02", "--concurrency", "16",
                            output=open(tmp_path / f"worker-{n}.log", "w+")) for n in range(2)]
    wait_for(lambda: sql("SELECT count(*) FROM job_workers")[0][0] == 2, message="two workers registered")
    sql("UPDATE job_runs SET run_at = now()")
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")[0][0] == 200,
             timeout=60, message="every run succeeded")
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    assert [finish(proc)[0] for proc in workers] == [0, 0]

    assert sql("SELECT count(*), count(DISTINCT run_id) FROM test_executions") == [(200, 200)]
    assert sql("SELECT count(*) FROM job_attempts") == [(200,)]
    # Each async attempt ran in its own context: another handler's ContextVar.set never showed.
    assert sql("SELECT count(*) FROM job_runs WHERE job_type = 'test.async_record' "
               "AND (result->>'owner')::bigint = id") == [(150,)]


def test_many_async_runs_wait_at_once_without_a_thread_each(app, sql):
    insert_many(sql, "jobsweb.async_sleep", 200, '{"seconds": 0.5}')
    worker = make_worker(app, concurrency=200)
    worker.run()
    assert sql("SELECT status, count(*) FROM job_runs GROUP BY status") == [("succeeded", 200)]
    # All 200 slept at the same time: one claim took them, and they ended within a second.
    [(spread,)] = sql("SELECT extract(epoch FROM max(finished_at) - min(started_at)) FROM job_attempts")
    assert spread < 5
    assert worker.pool.threads == [], "no handler thread was started for async handlers"


def test_job_decorates_an_async_def_and_drain_awaits_it(app, sql, registry_snapshot):
    @job("test.async_greet")
    async def greet(ctx):
        await ctx.sleep(0)
        return {"hello": ctx.payload["name"]}

    with app.app_context():
        run_id = greet.enqueue({"name": "Ada"})
        other = enqueue("test.async_fail")
        ran = drain()
    assert [(r.run_id, r.status, r.result) for r in ran if r.run_id == run_id] == [
        (run_id, "succeeded", {"hello": "Ada"})]
    assert [r.status for r in ran if r.run_id == other] == ["failed", "dead"]


def test_drain_awaits_an_async_handler_from_inside_a_running_event_loop(app, sql, registry_snapshot):
    # pytest-asyncio tests and Playwright's sync API leave a loop running in the test's thread,
    # where asyncio.run() refuses to start a second one.
    @job("test.async_inside_loop")
    async def inside(ctx):
        await asyncio.sleep(0)
        return {"ran": ctx.payload["n"]}

    async def a_test_with_its_own_loop():
        with app.app_context():
            run_id = inside.enqueue({"n": 7})
            return run_id, drain()

    run_id, ran = asyncio.run(a_test_with_its_own_loop())
    assert [(r.run_id, r.status, r.result) for r in ran] == [(run_id, "succeeded", {"ran": 7})]
