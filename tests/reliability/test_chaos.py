"""Drill 1, kill -9 chaos: workers die mid-run at random; no run is lost, no effect repeats."""

import time

from tests.conftest import wait_for
from tests.processes import insert_many, kill_at_random, stop_workers
from tests.reliability.conftest import size

WORKERS = 4
LEASE = 2  # seconds: a killed worker's runs are retried about this long after the kill


def terminal(sql):
    return sql("SELECT count(*) FROM job_runs WHERE status NOT IN ('succeeded', 'dead', 'cancelled')")[0][0] == 0


def test_workers_killed_at_random_lose_no_run_and_repeat_no_effect(app, sql, spawn_worker, worker_log, figures):
    jobs = size("CHAOS_JOBS", 500)
    kill_every = size("CHAOS_KILL_EVERY", 0.7)  # seconds, on average
    max_sleep = size("CHAOS_MAX_SLEEP", 0.05)  # seconds a handler sleeps, at most
    insert_many(sql, "test.effect", jobs, payload=f'{{"max_sleep": {max_sleep}}}', max_attempts=100)

    def start():
        return spawn_worker("--forever", "--poll-interval", "0.05", "--concurrency", "4",
                            output=worker_log(), JOBSWEB_LEASE_SECONDS=LEASE)

    alive = [start() for _ in range(WORKERS)]
    kills = []  # (database time of the kill, worker id)
    started = time.monotonic()
    # Workers that get nothing done between kills (each new one's first claims too slow, say)
    # would keep this loop going for ever: fail instead, with how far it got. A tenth of a second
    # a run is several times what a drill of any size takes on the embedded server.
    give_up = started + max(180, jobs / 10)
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'running'")[0][0] > 0,
             message="runs to start")

    def before_kill(victim):
        if time.monotonic() > give_up:
            [(done,)] = sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")
            raise AssertionError(f"only {done} of {jobs} runs succeeded in {time.monotonic() - started:.0f} s "
                                 f"of {len(kills)} kills: workers got next to nothing done between kills")
        kills.append(sql("SELECT clock_timestamp(), (SELECT id FROM job_workers WHERE pid = %s "
                         "AND stopped_at IS NULL)", [victim.pid])[0])

    kill_at_random(alive, start, kill_every, lambda: terminal(sql), before_kill)
    elapsed = time.monotonic() - started
    stop_workers(sql, alive)

    # Every run terminal and succeeded: none lost (max_attempts is far above the kill count).
    assert sql("SELECT status, count(*) FROM job_runs GROUP BY status") == [("succeeded", jobs)]
    # Every effect exactly once: one row per run in the effect's table and in job_effects.
    assert sql("SELECT count(*), count(DISTINCT run_id) FROM test_executions") == [(jobs, jobs)]
    assert sql("SELECT count(*) FROM job_effects") == [(jobs,)]
    # No two attempts of a run overlapped: each began after the previous one was finished, and
    # an attempt was taken from its worker only once its lease had expired.
    assert sql("SELECT count(*) FROM job_attempts a JOIN job_attempts b "
               "ON b.run_id = a.run_id AND b.attempt = a.attempt + 1 "
               "WHERE b.started_at < a.finished_at")[0][0] == 0
    assert sql("SELECT count(*) FROM job_attempts WHERE error_type = 'lease_expired' "
               "AND finished_at < started_at + make_interval(secs => %s)", [LEASE])[0][0] == 0
    assert sql("SELECT count(*) FROM job_runs r JOIN job_attempts a ON a.run_id = r.id "
               "AND a.attempt = r.attempts WHERE a.outcome <> 'succeeded'")[0][0] == 0
    assert kills

    # Per kill: seconds until the last run the victim held was released (its attempt recorded
    # as lease_expired), and until it had started again (which includes waiting its turn
    # behind the runs queued before its retry time).
    recoveries = sql(
        "SELECT extract(epoch FROM max(a.finished_at) - k.at)::float8, "
        "       extract(epoch FROM max(b.started_at) - k.at)::float8 "
        "FROM unnest(%s::timestamptz[], %s::text[]) AS k(at, worker) "
        "JOIN job_attempts a ON a.worker = k.worker AND a.error_type = 'lease_expired' "
        "JOIN job_attempts b ON b.run_id = a.run_id AND b.attempt = a.attempt + 1 "
        "GROUP BY k.at", [[at for at, _ in kills], [w for _, w in kills]])
    [(retried, skipped)] = sql("SELECT count(*) FILTER (WHERE attempts > 1), "
                               "count(*) FILTER (WHERE result = '{\"first\": false}') FROM job_runs")
    figures(jobs=jobs, workers=WORKERS, kills=len(kills), seconds=round(elapsed, 1),
            lost=jobs - sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")[0][0],
            duplicated_effects=sql("SELECT count(*) - count(DISTINCT run_id) FROM test_executions")[0][0],
            runs_retried=retried, retries_that_skipped_a_done_effect=skipped,
            lease_expired_attempts=sql("SELECT count(*) FROM job_attempts WHERE error_type = 'lease_expired'")[0][0],
            longest_release_after_a_kill_seconds=round(max((r for r, _ in recoveries), default=0), 2),
            longest_restart_after_a_kill_seconds=round(max((s for _, s in recoveries), default=0), 2))
