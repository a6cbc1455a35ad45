"""Queues, priorities, limits, pauses and unique keys, with real `flask run-jobs` processes."""

import signal
import subprocess
import sys

import pytest

from tests.conftest import ROOT, wait_for
from tests.processes import add_many, finish


def all_succeeded(sql, count):
    return lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")[0][0] == count


def stop(workers):
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    assert [finish(proc)[0] for proc in workers] == [0] * len(workers)


def most_at_once(sql, queue):
    """The most handlers of `queue` that were executing at one instant, by the database's clock
    (test.span's rows: its start and its end).

    A handler executes within the span in which the claim counts its run as running, so this is
    never more than the queue's limit. (The attempts' own stamps are not that span to the
    millisecond: started_at is taken as the claim function begins, before it waits for the
    queue's row, and finished_at as the finishing transaction begins: at load 20 a claim that
    waited seemed to start before the run it followed had finished.)"""
    events = sql("SELECT min(e.at), 1 FROM test_executions e JOIN job_runs r ON r.id = e.run_id "
                 "WHERE r.queue = %(q)s GROUP BY e.run_id UNION ALL "
                 "SELECT max(e.at), -1 FROM test_executions e JOIN job_runs r ON r.id = e.run_id "
                 "WHERE r.queue = %(q)s GROUP BY e.run_id", {"q": queue})
    running = peak = 0
    for _, change in sorted(events, key=lambda e: (e[0], e[1])):  # an end before a start at one instant
        running += change
        peak = max(peak, running)
    return peak


def test_a_worker_runs_smaller_priorities_first_then_oldest_first(app, sql, spawn_worker):
    low = add_many(app, "test.record", 3, priority=10)
    normal = add_many(app, "test.record", 3)
    urgent = add_many(app, "test.record", 3, priority=-10)
    worker = spawn_worker("--concurrency", "1")
    assert finish(worker)[0] == 0

    # The order the handler ran in (one slot): runs claimed together, ahead of the free slot,
    # share a started_at.
    order = [run_id for (run_id,) in sql("SELECT run_id FROM test_executions ORDER BY at")]
    assert order == urgent + normal + low


def test_a_concurrency_limit_of_two_holds_across_three_workers_with_four_slots_each(app, sql, spawn_worker, runner):
    assert runner.invoke(args=["jobs", "queue", "narrow", "--limit", "2"]).exit_code == 0
    add_many(app, "test.span", 16, {"seconds": 0.2}, queue="narrow")
    add_many(app, "test.span", 16, {"seconds": 0.2})  # the default queue is not limited
    workers = [spawn_worker("--forever", "--poll-interval", "0.02", "--concurrency", "4") for _ in range(3)]
    wait_for(all_succeeded(sql, 32), timeout=60, message="every run succeeded")
    stop(workers)

    assert most_at_once(sql, "narrow") == 2
    assert most_at_once(sql, "default") > 2
    assert sql("SELECT count(*) FROM job_attempts") == [(32,)]


def test_a_rate_limit_spreads_thirty_starts_at_five_a_second_over_five_seconds(app, sql, spawn_worker, runner):
    assert runner.invoke(args=["jobs", "queue", "mail", "--rate", "5/1"]).exit_code == 0
    add_many(app, "test.record", 30, queue="mail")
    workers = [spawn_worker("--forever", "--poll-interval", "0.05", "--concurrency", "8") for _ in range(2)]
    wait_for(all_succeeded(sql, 30), timeout=60, message="every run succeeded")
    stop(workers)

    starts = [t for (t,) in sql("SELECT started_at FROM job_attempts ORDER BY started_at")]
    assert (starts[-1] - starts[0]).total_seconds() >= 5
    for first, sixth in zip(starts, starts[5:]):  # never six starts within one second
        assert (sixth - first).total_seconds() >= 1


def test_cron_ticks_wait_for_a_rate_window_and_finish_every_due_run_before_they_exit(app, sql, spawn_worker, runner):
    assert runner.invoke(args=["jobs", "queue", "api", "--rate", "5/1"]).exit_code == 0
    add_many(app, "test.record", 30, queue="api")
    ticks = [spawn_worker("--concurrency", "8", "--max-runtime", "60") for _ in range(2)]
    outputs = [finish(tick) for tick in ticks]

    assert [code for code, _ in outputs] == [0, 0]
    assert sql("SELECT status, count(*) FROM job_runs GROUP BY status") == [("succeeded", 30)]
    assert any("due runs wait for a limit of queue api; waiting for it (at most until --max-runtime 60s)"
               in output for _, output in outputs)
    starts = [t for (t,) in sql("SELECT started_at FROM job_attempts ORDER BY started_at")]
    for first, sixth in zip(starts, starts[5:]):  # the rate still holds
        assert (sixth - first).total_seconds() >= 1


def test_a_cron_tick_waits_for_a_concurrency_slot_of_a_limited_queue(app, sql, spawn_worker, runner):
    assert runner.invoke(args=["jobs", "queue", "narrow", "--limit", "1"]).exit_code == 0
    add_many(app, "test.span", 3, {"seconds": 0.3}, queue="narrow")
    tick = spawn_worker("--concurrency", "4", "--poll-interval", "0.05", "--max-runtime", "60")

    assert finish(tick)[0] == 0
    assert sql("SELECT status, count(*) FROM job_runs GROUP BY status") == [("succeeded", 3)]
    assert most_at_once(sql, "narrow") == 1


def test_a_cron_tick_stops_at_max_runtime_while_a_rate_window_still_holds_runs_back(app, sql, spawn_worker, runner):
    assert runner.invoke(args=["jobs", "queue", "api", "--rate", "1/30"]).exit_code == 0
    add_many(app, "test.record", 3, queue="api")
    tick = spawn_worker("--concurrency", "4", "--max-runtime", "2")

    code, output = finish(tick)
    assert code == 0 and "waiting for it (at most until --max-runtime 2s)" in output
    assert sql("SELECT status, count(*) FROM job_runs GROUP BY status ORDER BY status") == [
        ("queued", 2), ("succeeded", 1)]


def test_a_cron_tick_exits_at_once_when_only_a_paused_queue_has_due_runs(app, sql, spawn_worker, runner):
    assert runner.invoke(args=["jobs", "queue", "held", "--pause", "--limit", "2"]).exit_code == 0
    add_many(app, "test.record", 3, queue="held")
    tick = spawn_worker("--concurrency", "4", "--max-runtime", "60")

    code, output = finish(tick)
    assert code == 0 and "waiting for it" not in output
    assert sql("SELECT status, count(*) FROM job_runs GROUP BY status") == [("queued", 3)]


def test_a_paused_queue_keeps_its_runs_queued_while_other_queues_go_on_until_resumed(app, sql, spawn_worker, runner):
    assert runner.invoke(args=["jobs", "queue", "invoices", "--pause"]).output == "invoices: limit none, rate none, paused\n"
    held = add_many(app, "test.record", 3, queue="invoices")
    other = add_many(app, "test.record", 3, queue="reports")
    worker = spawn_worker("--forever", "--poll-interval", "0.05")
    wait_for(all_succeeded(sql, 3), message="the other queue's runs")
    assert sql("SELECT id FROM job_runs WHERE status = 'queued' ORDER BY id") == [(i,) for i in held]
    assert sql("SELECT id FROM job_runs WHERE status = 'succeeded' ORDER BY id") == [(i,) for i in other]

    assert runner.invoke(args=["jobs", "queue", "invoices", "--resume"]).exit_code == 0
    wait_for(all_succeeded(sql, 6), message="the resumed queue's runs")
    stop([worker])


def test_a_paused_job_type_stays_queued_until_resumed_while_other_types_run(app, sql, spawn_worker, runner):
    assert runner.invoke(args=["jobs", "pause-type", "test.record"]).output == "test.record: paused\n"
    [paused] = add_many(app, "test.record", 1)
    [other] = add_many(app, "jobsweb.noop", 1)
    worker = spawn_worker("--forever", "--poll-interval", "0.05")
    wait_for(all_succeeded(sql, 1), message="the other type's run")
    assert sql("SELECT id, status FROM job_runs ORDER BY id") == [(paused, "queued"), (other, "succeeded")]

    assert runner.invoke(args=["jobs", "resume-type", "test.record"]).exit_code == 0
    wait_for(all_succeeded(sql, 2), message="the resumed type's run")
    stop([worker])


def test_a_worker_with_queues_takes_only_those_and_records_them(app, sql, spawn_worker):
    mine = add_many(app, "test.record", 2, queue="a") + add_many(app, "test.record", 2, queue="b")
    [other] = add_many(app, "test.record", 1, queue="c")
    worker = spawn_worker("--queues", "a,b")
    assert finish(worker)[0] == 0

    assert sql("SELECT id FROM job_runs WHERE status = 'succeeded' ORDER BY id") == [(i,) for i in mine]
    assert sql("SELECT status FROM job_runs WHERE id = %s", [other]) == [("queued",)]
    assert sql("SELECT queues FROM job_workers") == [(["a", "b"],)]


# Each process enqueues 50 times, so that their enqueues overlap in time whatever the start-up.
ENQUEUER = """
from jobsweb import create_app, enqueue
app = create_app()
with app.app_context():
    print(" ".join(str(enqueue("test.record", unique_key="reindex:user:42")) for _ in range(50)))
"""


def test_unique_keys_give_one_unfinished_run_to_concurrent_enqueuers_in_several_processes(app, sql, spawn_worker):
    env = spawn_worker.env()
    procs = [subprocess.Popen([sys.executable, "-c", ENQUEUER], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(6)]
    outputs = [proc.communicate(timeout=60)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 6, outputs
    [(run_id,)] = sql("SELECT id FROM job_runs")
    assert {int(run) for out in outputs for run in out.split()} == {run_id}

    worker = spawn_worker()
    assert finish(worker)[0] == 0
    # Finished, the key is free again: the next enqueue creates a new run.
    with app.app_context():
        from jobsweb import enqueue

        assert enqueue("test.record", unique_key="reindex:user:42") != run_id


def running(sql):
    return sql("SELECT count(*) FROM job_runs WHERE status = 'running'")[0][0]


# README, "Queues, ...": "Runs already running when a queue or job type is paused finish".
@pytest.mark.parametrize("pause, resume", [(["jobs", "queue", "mail", "--pause"], ["jobs", "queue", "mail", "--resume"]),
                                           (["jobs", "pause-type", "test.until_file"],
                                            ["jobs", "resume-type", "test.until_file"])])
def test_runs_already_running_when_their_queue_or_job_type_is_paused_finish(app, sql, spawn_worker, runner,
                                                                             tmp_path, pause, resume):
    done = tmp_path / "done"
    [started] = add_many(app, "test.until_file", 1, {"file": str(done)}, queue="mail")
    worker = spawn_worker("--forever", "--poll-interval", "0.05")
    wait_for(lambda: running(sql) == 1, message="the run to start")
    assert runner.invoke(args=pause).exit_code == 0
    [waiting] = add_many(app, "test.until_file", 1, {"file": str(done)}, queue="mail")
    done.touch()
    wait_for(lambda: sql("SELECT status FROM job_runs WHERE id = %s", [started]) == [("succeeded",)],
             message="the running run to finish")
    assert sql("SELECT status, attempts FROM job_runs WHERE id = %s", [waiting]) == [("queued", 0)]
    assert sql("SELECT outcome FROM job_attempts") == [("succeeded",)]
    assert runner.invoke(args=resume).exit_code == 0
    wait_for(all_succeeded(sql, 2), message="the paused run after the resume")
    stop([worker])


# README: "a change of limits applies to the claims that start after it commits".
def test_a_limit_change_applies_to_the_claims_after_it_commits_and_leaves_running_runs_alone(
        app, sql, spawn_worker, runner, tmp_path):
    assert runner.invoke(args=["jobs", "queue", "narrow", "--limit", "1"]).exit_code == 0
    done = tmp_path / "done"
    add_many(app, "test.until_file", 5, {"file": str(done)}, queue="narrow")
    worker = spawn_worker("--forever", "--concurrency", "4", "--poll-interval", "0.05")
    wait_for(lambda: running(sql) == 1, message="one run under limit 1")
    assert runner.invoke(args=["jobs", "queue", "narrow", "--limit", "3"]).exit_code == 0
    wait_for(lambda: running(sql) == 3, message="three runs once the limit is 3")
    first = [run_id for (run_id,) in sql("SELECT id FROM job_runs WHERE status = 'running'")]
    # Lowered below what runs: those go on; the next claims wait until none of them is left.
    assert runner.invoke(args=["jobs", "queue", "narrow", "--limit", "1"]).exit_code == 0
    assert sql("SELECT count(*) FROM job_runs WHERE id = ANY(%s) AND status = 'running'", [first]) == [(3,)]
    done.touch()
    wait_for(all_succeeded(sql, 5), message="every run")
    stop([worker])
    [(first_done,)] = sql("SELECT max(finished_at) FROM job_attempts WHERE run_id = ANY(%s)", [first])
    later = sql("SELECT started_at, finished_at FROM job_attempts WHERE NOT run_id = ANY(%s) ORDER BY started_at",
                [first])
    assert len(later) == 2 and later[0][0] >= first_done and later[1][0] >= later[0][1]
    assert sql("SELECT count(*) FROM job_attempts") == [(5,)]
