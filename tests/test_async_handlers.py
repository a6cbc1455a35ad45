"""`async def` handlers, awaited on the worker's event loop: outcomes, retries, timeouts,
cancellation, ctx.sleep, the SIGTERM drain, and mixing with sync handlers (issue 18, part 4)."""

import asyncio
import queue
import signal
import threading

from jobsweb import enqueue, job
from jobsweb.commands import build_worker
from jobsweb.engine.worker.async_execution import AsyncPool
from jobsweb.engine.worker.execution import Held
from jobsweb.engine.jobs.registry import JobContext, JobType
from jobsweb.testing import drain
from tests.conftest import wait_for
from tests.processes import add_many, finish, insert_many, status_of
from tests.test_claim_ahead import enqueue_at, held_at_once


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
    assert worker.held.taken() == 0
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
    [sleeper] = add_many(app, "test.async_ctx_sleep", 1, {"seconds": 60, "started": str(started)})
    [short] = add_many(app, "test.async_record", 1, {"seconds": 1.5, "started": str(started)})
    proc = spawn_worker("--forever", "--concurrency", "4", "--shutdown-timeout", "10")
    # Claimed is not started: a run still waiting for its task when SIGTERM comes is released.
    wait_for(lambda: started.exists() and len(started.read_text().split()) == 2, message="both handlers to start")
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
    assert worker.held.pool.threads == [], "no handler thread was started for async handlers"


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


def held_run(run_id, priority, func):
    return Held(JobContext(run_id, "test.async_order", {}, 1, 5), JobType("test.async_order", func), 30, None,
                order=(priority, 0, run_id))


def gated_pool(app):
    """An async pool of one slot whose run 1 holds the slot until `gate` is set; (pool, gate, began,
    finished)."""
    gate, began, finished = threading.Event(), [], queue.SimpleQueue()

    async def handler(ctx):
        began.append(ctx.run_id)
        if ctx.run_id == 1:
            await asyncio.to_thread(gate.wait, 30)

    pool = AsyncPool(app, 1, finished.put)
    first = held_run(1, 0, handler)
    pool.submit(first)
    wait_for(lambda: began == [1], message="the first run to hold the slot")
    return pool, gate, began, finished, handler


def test_async_runs_wait_for_the_slot_in_priority_order_whichever_claim_brought_them(app):
    pool, gate, began, finished, handler = gated_pool(app)
    try:
        for run_id, priority in [(2, 5), (3, 5), (4, 0), (5, 0)]:  # a claim of priority 5, then one of 0
            pool.submit(held_run(run_id, priority, handler))
        gate.set()
        assert sorted(finished.get(timeout=10).held.ctx.run_id for _ in range(5)) == [1, 2, 3, 4, 5]
        assert began == [1, 4, 5, 2, 3]
    finally:
        gate.set()
        pool.stop()


def test_an_async_run_asked_to_stop_while_it_waits_for_the_slot_never_begins(app):
    pool, gate, began, finished, handler = gated_pool(app)
    try:
        waiting = held_run(2, 0, handler)
        pool.submit(waiting)
        wait_for(lambda: len(pool.slots.waiting) == 1, message="run 2 to wait for the slot")
        waiting.stop()  # as a SIGTERM asks each held run (engine/worker/held_runs.py)
        # Back at once, while run 1 still holds the slot: not begun, so the worker releases it.
        stopped = finished.get(timeout=10)
        assert (stopped.held, stopped.begun, waiting.began) == (waiting, False, None)
        gate.set()
        first = finished.get(timeout=10)
        assert first.begun and first.held.began is not None
        assert began == [1]
    finally:
        gate.set()
        pool.stop()


def test_async_runs_held_behind_a_busy_slot_start_their_clock_when_their_handler_begins(app, sql, spawn_worker,
                                                                                        tmp_path):
    # 400 no-ops first: the worker finishes runs fast, so the claim that reaches the five 0.5 s
    # async runs takes them all at once, ahead of its one slot.
    enqueue_at(sql, "jobsweb.noop", 400, priority=0)
    enqueue_at(sql, "test.async_record", 5, priority=1, payload='{"seconds": 0.5, "record_first": true}')
    worker = spawn_worker("--concurrency", "1", output=open(tmp_path / "worker.log", "w+"))
    wait_for(lambda: held_at_once(sql, 1) >= 3, timeout=60, interval=0.005,
             message="three or more of the 0.5 s async runs held at once by a worker with one slot")
    code, output = finish(worker, timeout=60)
    assert code == 0, output
    runs = sql("SELECT extract(epoch FROM r.finished_at - r.started_at)::float8, e.at, r.started_at "
               "FROM job_runs r JOIN test_executions e ON e.run_id = r.id WHERE r.priority = 1 ORDER BY e.at")
    assert len(runs) == 5
    previous_began = None
    for duration, began, run_started in runs:
        # Each awaited 0.5 s (no upper bound: finished_at is when the outcome was written, 0.52 s
        # after a 0.3 s await on a machine at load 15).
        assert duration >= 0.5, runs
        # Its start is when its handler began (`began`, recorded by the handler), not its claim's
        # time: in the one slot each began after the one before it had awaited its 0.5 s, and a
        # start counted from the claim would come before the previous handler began; read from
        # the claim's clock plus the seconds it waited in the worker, it is never after `began`.
        assert previous_began is None or previous_began < run_started, runs
        assert run_started <= began, runs
        previous_began = began


def test_sigterm_gives_back_the_async_runs_held_behind_a_busy_slot_with_no_attempt_recorded(app, sql, spawn_worker,
                                                                                           tmp_path):
    started = tmp_path / "started"
    enqueue_at(sql, "jobsweb.noop", 400, priority=0)  # fast runs first: the worker then claims ahead
    # Holds the one async slot (until the shutdown deadline cancels it).
    enqueue_at(sql, "test.async_record", 1, priority=1, payload=f'{{"seconds": 60, "started": "{started}"}}')
    enqueue_at(sql, "test.async_record", 20, priority=2, attempts=2)
    worker = spawn_worker("--forever", "--concurrency", "1", "--poll-interval", "0.05", "--shutdown-timeout", "1",
                          output=open(tmp_path / "worker.log", "w+"))
    # Once the slot is taken by the run that awaits 60 s (its handler has begun), no run of
    # priority 2 can begin: those the worker holds wait for the slot until the signal.
    wait_for(lambda: started.exists() and held_at_once(sql, 2) >= 2, timeout=60, interval=0.005,
             message="the 60 s run begun, two or more async runs held behind it")
    worker.send_signal(signal.SIGTERM)
    code, output = finish(worker)
    assert code == 0, output

    assert sql("SELECT count(*) FROM test_executions") == [(0,)]
    assert sql("SELECT status, attempts, max_attempts, locked_by, count(*) FROM job_runs WHERE priority = 2 "
               "GROUP BY 1, 2, 3, 4") == [("queued", 2, 5, None, 20)]
    assert sql("SELECT count(*) FROM job_attempts a JOIN job_runs r ON r.id = a.run_id WHERE r.priority = 2") == [(0,)]
    assert sql("SELECT a.outcome FROM job_attempts a JOIN job_runs r ON r.id = a.run_id WHERE r.priority = 1") == [
        ("interrupted",)]
