"""Drill: workers killed -9 while they end batch members and release waiting runs: every
callback is enqueued and run exactly once, and no run starts before what it waits for succeeded."""

import time

from jobsweb.engine.enqueue.workflows import batch
from tests.conftest import wait_for
from tests.processes import kill_at_random, stop_workers
from tests.reliability.conftest import size

WORKERS = 3
LEASE = 2  # seconds: a killed worker's runs are retried about this long after the kill


def ended(sql):
    return sql("SELECT count(*) FROM job_runs WHERE status NOT IN ('succeeded', 'dead', 'cancelled')")[0][0] == 0


def enqueue_batches(app, batches, members, max_sleep):
    """`batches` batches of `members` members: the first of each, then the rest after it, every
    tenth also after the one before it; an on_finish and an on_success callback each."""
    payload = {"max_sleep": max_sleep}
    with app.app_context():
        for _ in range(batches):
            with batch(on_finish="test.effect", on_success="test.effect", payload=payload) as group:
                root = group.enqueue("test.effect", payload)
                previous = root
                for n in range(1, members):
                    after = [root, previous] if n % 10 == 0 else [root]
                    previous = group.enqueue("test.effect", payload, after=after)


def test_callbacks_run_once_and_no_run_starts_early_while_workers_are_killed(app, sql, spawn_worker, worker_log,
                                                                              figures):
    batches = size("WORKFLOW_BATCHES", 20)
    members = size("WORKFLOW_MEMBERS", 25)
    kill_every = size("WORKFLOW_KILL_EVERY", 0.7)  # seconds, on average
    enqueue_batches(app, batches, members, 0.01)

    logs = []

    def start():
        logs.append(worker_log())
        return spawn_worker("--forever", "--poll-interval", "0.05", "--concurrency", "4",
                            output=logs[-1], JOBSWEB_LEASE_SECONDS=LEASE)

    alive = [start() for _ in range(WORKERS)]
    kills = 0
    started = time.monotonic()
    give_up = started + max(360, batches * members / 5)  # 180 s ran out at load 20
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'running'")[0][0] > 0,
             message="runs to start")

    def before_kill(victim):
        nonlocal kills
        assert time.monotonic() < give_up, sql("SELECT status, count(*) FROM job_runs GROUP BY status")
        kills += 1

    kill_at_random(alive, start, kill_every, lambda: ended(sql), before_kill)
    elapsed = time.monotonic() - started
    stop_workers(sql, alive)

    runs = batches * (members + 2)
    assert sql("SELECT status, count(*) FROM job_runs GROUP BY status") == [("succeeded", runs)]
    # Each batch finished once and has one callback run of each kind, each run (effect) once.
    assert sql("SELECT count(*) FROM job_batches WHERE finishes = 1 AND pending = 0") == [(batches,)]
    assert sql("SELECT batch_callback, count(*), count(DISTINCT batch_id) FROM job_runs "
               "WHERE batch_callback IS NOT NULL GROUP BY 1 ORDER BY 1") == \
        [("on_finish", batches, batches), ("on_success", batches, batches)]
    assert sql("SELECT count(*), count(DISTINCT run_id) FROM test_executions") == [(runs, runs)]
    # No attempt of a run started before every run it waits for had succeeded ...
    early_dependents = sql(
        "SELECT count(*) FROM job_run_deps d JOIN job_runs a ON a.id = d.after_id "
        "JOIN job_attempts t ON t.run_id = d.run_id WHERE t.started_at < a.finished_at")[0][0]
    # ... and no callback's attempt before its batch's last member ended.
    early_callbacks = sql(
        "SELECT count(*) FROM job_runs c JOIN job_attempts t ON t.run_id = c.id "
        "WHERE c.batch_callback IS NOT NULL AND t.started_at < (SELECT max(m.finished_at) FROM job_runs m "
        "WHERE m.batch_id = c.batch_id AND m.batch_callback IS NULL)")[0][0]
    assert (early_dependents, early_callbacks) == (0, 0)
    assert kills
    # Workers ending members of the same batches take turns on their rows (FINISH_RUNS locks them
    # in id order): none had a transaction ended by a deadlock.
    deadlocks = 0
    for log in logs:
        log.seek(0)
        deadlocks += log.read().count("deadlock detected")
    assert deadlocks == 0
    figures(batches=batches, members=batches * members, workers=WORKERS, kills=kills, seconds=round(elapsed, 1),
            callbacks=2 * batches, early_dependents=early_dependents, early_callbacks=early_callbacks,
            lease_expired_attempts=sql("SELECT count(*) FROM job_attempts WHERE error_type = 'lease_expired'")[0][0])
