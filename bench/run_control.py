"""Control in real time: how soon Run.wait() returns after its run ended (issue 40), how soon an
operator's cancel ends a running run, a retry the worker wrote starts and a run another process
enqueued for a second later starts (issue 52), and what
FINISH_RUNS's notification of ended runs (statements.ENDED_CHANNEL) adds to the worker's
finishing statement."""

import statistics
import time

import psycopg

from .measures import migrated, spawn_worker

# FINISH_RUNS as it was before the notification: its CTE, no longer read, is not run.
WITH_NOTICE = "FROM finished LEFT JOIN ended_notice ON true"
WITHOUT_NOTICE = "FROM finished"


def run_control(bench):
    """{"wait": ms from finished_at to wait()'s return, "finish": µs of FINISH_RUNS with and without}."""
    url, app = migrated(bench, "bench_run_control")
    return {"wait": _wait_latency(bench, url, app), "cancel": _cancel_reach(bench, url, app),
            "terminate": _terminate_reach(bench, url, app),
            "retry_due": _retry_due_to_start(bench, url, app), "delay_due": _delay_due_to_start(bench, url, app),
            "finish": _finish_cost(bench, url)}


def _percentiles(samples):
    ordered = sorted(samples)
    return {"samples": len(ordered), "p50_ms": statistics.median(ordered),
            "p95_ms": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]}


def _cancel_reach(bench, url, app):
    """Milliseconds from an operator's cancel (its cancel_requested_at) to the run's end as
    cancelled (finished_at), both the database's clock, at the default 60 s lease (a heartbeat
    every 20 s): the cancel's NOTIFY reaches the listening worker holding the run, which tells
    the handler (jobsweb.sleep's ctx.sleep) at once; p50 and p95."""
    from jobsweb import cancel, enqueue

    def one(conn):
        run_id = enqueue("jobsweb.sleep", {"seconds": 60})
        _until(conn, "SELECT 1 FROM job_runs WHERE id = %s AND status = 'running'", run_id)
        time.sleep(0.2)  # the handler is inside ctx.sleep
        cancel(run_id)
        return _until(conn, "SELECT extract(epoch FROM finished_at - cancel_requested_at) * 1000 "
                            "FROM job_runs WHERE id = %s AND status = 'cancelled'", run_id)

    out = _sampled(bench, url, app, one, "--poll-interval", "0.05")
    bench.log(f"cancel -> run ended cancelled, lease 60 s: p50 {out['p50_ms']:.0f} ms, p95 {out['p95_ms']:.0f} ms "
              f"of {out['samples']}")
    return out


def _terminate_reach(bench, url, app):
    """Milliseconds from an operator's cancel to the run's end as cancelled, both the database's
    clock, for a `cancel="terminate"` handler that never looks (bench/spin_jobs.py) and has begun:
    the worker ends its child process (SIGTERM) and writes the attempt once the process is gone,
    so this is cancel -> child ended, and the write after; p50 and p95."""
    from jobsweb import cancel, enqueue

    from . import spin_jobs  # noqa: F401 - registers bench.deaf_sleep here, for enqueue

    def one(conn):
        run_id = enqueue("bench.deaf_sleep")
        _until(conn, "SELECT 1 FROM job_runs WHERE id = %s AND progress_note = 'began'", run_id)
        cancel(run_id)
        return _until(conn, "SELECT extract(epoch FROM finished_at - cancel_requested_at) * 1000 "
                            "FROM job_runs WHERE id = %s AND status = 'cancelled'", run_id)

    # The child builds the app from the environment (no `flask --app` here: jobsweb's create_app).
    env = {"JOBSWEB_HANDLERS": "bench.spin_jobs", "DATABASE_URL": url,
           "SECRET_KEY": "0123456789abcdef-test-secret-key-0123456789-bench"}
    out = _sampled(bench, url, app, one, "--poll-interval", "0.05", env=env)
    bench.log(f"cancel -> child process ended, run cancelled: p50 {out['p50_ms']:.0f} ms, p95 {out['p95_ms']:.0f} ms "
              f"of {out['samples']}")
    return out


def _retry_due_to_start(bench, url, app):
    """Milliseconds from a retry's due time (run_at, set by the failed attempt's FINISH_RUNS) to
    its attempt's start (started_at), both the database's clock, with a 5 s poll interval: the
    worker wakes when a retry it wrote falls due; p50 and p95."""
    from jobsweb import enqueue

    def one(conn):
        return _until(conn, "SELECT extract(epoch FROM a.started_at - r.run_at) * 1000 FROM job_runs r "
                            "JOIN job_attempts a ON a.run_id = r.id AND a.attempt = 2 "
                            "WHERE r.id = %s AND r.status = 'dead'", enqueue("jobsweb.fail", max_attempts=2))

    out = _sampled(bench, url, app, one, "--poll-interval", "5",
                   env={"JOBSWEB_BACKOFF_BASE": "0.5", "JOBSWEB_BACKOFF_CAP": "0.5"})
    bench.log(f"retry due -> its attempt started, poll 5 s: p50 {out['p50_ms']:.0f} ms, p95 {out['p95_ms']:.0f} ms "
              f"of {out['samples']}")
    return out


def _delay_due_to_start(bench, url, app):
    """Milliseconds from the due time of a run this process enqueued with delay=1 (run_at, the
    database's clock) to its attempt's start, with a 5 s poll interval: the enqueue told the
    listening worker when (statements.NOTIFY_AT); p50 and p95."""
    from jobsweb import enqueue

    def one(conn):
        return _until(conn, "SELECT extract(epoch FROM a.started_at - r.run_at) * 1000 FROM job_runs r "
                            "JOIN job_attempts a ON a.run_id = r.id "
                            "WHERE r.id = %s AND r.status = 'succeeded'", enqueue("jobsweb.noop", delay=1))

    out = _sampled(bench, url, app, one, "--poll-interval", "5")
    bench.log(f"enqueue(delay=1) due -> its attempt started, poll 5 s: p50 {out['p50_ms']:.0f} ms, "
              f"p95 {out['p95_ms']:.0f} ms of {out['samples']}")
    return out


def _sampled(bench, url, app, one, *worker_args, env=None):
    """one(conn) -> a sample, control_waits times, with a --forever worker running (once it
    listens); p50 and p95."""
    proc = spawn_worker(url, 4, "--forever", *worker_args, env=env)
    try:
        with app.app_context(), psycopg.connect(url, autocommit=True) as conn:
            _until(conn, "SELECT 1 FROM pg_stat_activity WHERE query = 'LISTEN jobsweb_runs' AND %s::int IS NULL", None)
            samples = [one(conn) for _ in range(bench.sizes["control_waits"])]
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    return _percentiles(samples)


def _until(conn, sql, run_id):
    """The first column of `sql`'s row for `run_id` once it has one, looked at every 10 ms."""
    while (row := conn.execute(sql, [run_id]).fetchone()) is None:
        time.sleep(0.01)
    return float(row[0])


def _wait_latency(bench, url, app):
    """Milliseconds from a run's finished_at (the database's clock: the same machine's) to the
    return of get_run(id).wait() in this process, a worker running each run; median of the samples."""
    from jobsweb import enqueue, get_run

    proc = spawn_worker(url, 4, "--forever", "--poll-interval", "0.05")
    samples = []
    try:
        with app.app_context():
            get_run(enqueue("jobsweb.noop")).wait(timeout=60)  # the worker is up; the LISTEN probe is made
            for _ in range(bench.sizes["control_waits"]):
                ended = get_run(enqueue("jobsweb.sleep", {"seconds": 0.2})).wait(timeout=60)
                samples.append((time.time() - ended.finished_at.timestamp()) * 1000)
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    out = {"samples": len(samples), "p50_ms": statistics.median(samples), "max_ms": max(samples)}
    bench.log(f"wait() after the run's end: median {out['p50_ms']:.1f} ms, max {out['max_ms']:.1f} ms "
              f"of {len(samples)}")
    return out


def _finish_cost(bench, url):
    """Microseconds per FINISH_RUNS of one succeeded run, each its own transaction (a worker's
    commit), with the ended-runs notification and without it, one of each in turn so that the
    machine's load hits both alike; medians. Without waiting for the commit's WAL flush
    (synchronous_commit off, this session only): a flush takes milliseconds, the same with or
    without a notification, and its jitter on a shared disk hid the difference measured."""
    from jobsweb.engine import statements
    from jobsweb.engine.worker.execution import Outcome
    from jobsweb.engine.worker.outcome_writes import finish_params

    assert statements.FINISH_RUNS.count(WITH_NOTICE) == 1
    variants = {"with": statements.FINISH_RUNS, "without": statements.FINISH_RUNS.replace(WITH_NOTICE, WITHOUT_NOTICE)}
    n = bench.sizes["control_finishes"] * len(variants)
    timings = {name: [] for name in variants}
    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as conn:
        conn.execute("SET synchronous_commit = off")
        conn.execute("TRUNCATE job_attempts, job_runs RESTART IDENTITY CASCADE")
        conn.execute("INSERT INTO job_runs (job_type, status, attempts, locked_by, started_at) "
                     "SELECT 'jobsweb.noop', 'running', 1, 'bench', now() FROM generate_series(1, %s)", [n])
        conn.execute("VACUUM ANALYZE job_runs")
        run_id = 0
        for _ in range(bench.sizes["control_finishes"]):
            for name, statement in variants.items():
                run_id += 1
                params = finish_params([Outcome(run_id, "jobsweb.noop", 1, "bench", "succeeded", result={})])
                started = time.perf_counter()
                conn.execute(statement, params).fetchall()
                timings[name].append((time.perf_counter() - started) * 1e6)
        ended = conn.execute("SELECT count(*) FROM job_runs WHERE status = 'succeeded'").fetchone()[0]
    if ended != n:
        raise RuntimeError(f"FINISH_RUNS ended {ended} of {n} runs")
    out = {name: statistics.median(values) for name, values in timings.items()}
    out["runs"] = n
    bench.log(f"FINISH_RUNS of one run, own transaction, no flush: {out['with']:.0f} µs with the ended-runs "
              f"notification, {out['without']:.0f} µs without (median of {n // 2:,} each)")
    return out


def run_control_section(r):
    """§18: Run.wait()'s latency, a cancel's reach, due to start, and the notification's cost."""
    c = r["run_control"]
    w, f = c["wait"], c["finish"]
    cancel, retry, delay, terminate = c["cancel"], c["retry_due"], c["delay_due"], c["terminate"]
    return [
        "## 18. Control in real time",
        "",
        f"`get_run(id).wait(timeout=60)` in the measuring process, a worker (concurrency 4, `--forever`) "
        f"running each run (a 0.2 s sleep): from the run's `finished_at` to the wait's return, median "
        f"**{w['p50_ms']:.1f} ms** of {w['samples']} (max {w['max_ms']:.1f} ms; target: ≤ 50 ms). The wait "
        "is woken by the worker's notification of the runs its FINISH_RUNS ended. With it, FINISH_RUNS of "
        f"one run in its own transaction takes {f['with']:.0f} µs, without it {f['without']:.0f} µs (median "
        f"of {f['runs'] // 2:,} each, alternated; the commit's WAL flush, the same milliseconds for both, "
        "left out with synchronous_commit off).",
        "",
        "Each of the following is from the database's clock to the database's clock, a `--forever` worker "
        "(concurrency 4) running, the default 60 s lease:",
        "",
        "| | p50 | p95 | samples | target |",
        "| --- | --- | --- | --- | --- |",
        f"| cancel of a running run (`jobsweb.sleep`) → it ended cancelled | {cancel['p50_ms']:.0f} ms "
        f"| {cancel['p95_ms']:.0f} ms | {cancel['samples']} | ≤ 1,000 ms |",
        f"| cancel of a `cancel=\"terminate\"` run whose handler never looks → its process ended, the run "
        f"cancelled | {terminate['p50_ms']:.0f} ms | {terminate['p95_ms']:.0f} ms | {terminate['samples']} "
        "| ≤ 1,000 ms |",
        f"| a retry's due time (backoff 0.5 s) → its attempt started, poll 5 s | {retry['p50_ms']:.0f} ms "
        f"| {retry['p95_ms']:.0f} ms | {retry['samples']} | ≤ 100 ms |",
        f"| `enqueue(delay=1)` from another process: due → started, poll 5 s | {delay['p50_ms']:.0f} ms "
        f"| {delay['p95_ms']:.0f} ms | {delay['samples']} | ≤ 100 ms |",
        "",
    ]
