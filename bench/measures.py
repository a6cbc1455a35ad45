"""The measures of the benchmark suite, each against a fresh database on the benchmark server.

Every function takes the Bench (server, sizes, repeats) and returns plain data for the report.
Throughput is read from the database (first claim to last finish), so process start-up is
never counted for jobsweb; the peers' figures are their drain's own wall time.
"""

import json
import math
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path

import psycopg

from jobsweb.engine import link, statements

from .server import pgbench

ROOT = Path(__file__).resolve().parent.parent
BUILTIN_TYPES = ["jobsweb.async_sleep", "jobsweb.fail", "jobsweb.noop", "jobsweb.sleep"]


def median(values):
    return statistics.median(values) if values else None


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def wait_for(conn, sql, params, timeout=1800):
    """The first row of `sql` once it has one whose first value is not NULL."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute(sql, params).fetchone()
        if row and row[0] is not None:
            return row
        time.sleep(0.02)
    raise RuntimeError(f"nothing from {sql!r} within {timeout}s")


def _app(url):
    from jobsweb import create_app
    from jobsweb.core.database import database_url

    # JOBSWEB_WEB_ALERTS off: the app's own alert thread would evaluate alerts against the
    # database being measured, inside the measuring process.
    return create_app({"SQLALCHEMY_DATABASE_URI": database_url(url), "JOBSWEB_WEB_ALERTS": False,
                       "SECRET_KEY": "0123456789abcdef-test-secret-key-0123456789-bench"})


def migrated(bench, name):
    """A fresh database `name` at jobsweb's head; (libpq URL, app). A copy of one migrated at the
    server's first call: CREATE DATABASE ... TEMPLATE copies files, where each of the suite's
    two dozen databases ran every migration anew (a second or more of CPU each)."""
    from flask_migrate import upgrade

    from jobsweb.core.database import db

    server = bench.server
    if server.migrated_template is None:
        template = "bench_migrated"
        app = _app(server.fresh_database(template))
        with app.app_context():
            upgrade()
            db.engine.dispose()  # a template database takes no copy while a session is on it
        server.migrated_template = template
    url = server.copy_database(server.migrated_template, name)
    return url, _app(url)


def fill_queue(conn, n, job_type="jobsweb.noop"):
    conn.execute("TRUNCATE job_attempts, job_runs, job_workers, job_queues RESTART IDENTITY CASCADE")
    if n:
        conn.execute("INSERT INTO job_runs (job_type) SELECT %s FROM generate_series(1, %s)", [job_type, n])
    conn.execute("VACUUM ANALYZE job_runs")
    conn.execute("CHECKPOINT")


def spawn_worker(url, concurrency, *args, env=None):
    return subprocess.Popen([sys.executable, "-m", "bench.worker_proc", url, str(concurrency), *args],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=dict(os.environ, **(env or {})))


def finish(procs, stop=False):
    """Wait for worker processes (SIGTERM them first with stop); their peak RSS in MB."""
    rss = []
    for proc in procs:
        if stop:
            proc.terminate()
        out, _ = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(f"worker exited {proc.returncode}")
        rss.append(json.loads(out.strip().splitlines()[-1])["maxrss_kb"] / 1024)
    return rss


def wait_until(conn, sql, params, check, timeout=1800):
    deadline = time.monotonic() + timeout
    while True:
        value = conn.execute(sql, params).fetchone()[0]
        if check(value):
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting: {sql} = {value}")
        time.sleep(0.05)


def rate_from_database(conn, n):
    done, span = conn.execute(
        "SELECT count(*), extract(epoch FROM max(finished_at) - min(started_at)) FROM job_runs "
        "WHERE status = 'succeeded'").fetchone()
    if done != n:
        raise RuntimeError(f"{done} of {n} runs succeeded")
    return n / float(span)


# Whether any run is still to finish, through the partial indexes of waiting and running runs: a
# count of the succeeded runs every 50 ms read the whole table and took CPU from the workers.
UNFINISHED = ("SELECT EXISTS (SELECT 1 FROM job_runs WHERE status IN ('queued', 'failed')) "
              "OR EXISTS (SELECT 1 FROM job_runs WHERE status = 'running')")


def drain(bench, url, processes, concurrency, n, quiet=False, before_insert=None, queues=1):
    """Drain n no-op runs with `processes` workers; (runs/s, peak RSS MB).

    The workers start first and idle (polling every 50 ms); the n runs then appear in one
    INSERT, so that process start-up (importing Flask) is not counted. With `queues` > 1 the
    runs are dealt round-robin into queues q0, q1, ...
    """
    with psycopg.connect(url, autocommit=True) as conn:
        fill_queue(conn, 0)
        procs = [spawn_worker(url, concurrency, "--forever", "--poll-interval", "0.05",
                              *(["--quiet"] if quiet else [])) for _ in range(processes)]
        wait_until(conn, "SELECT count(*) FROM job_workers", None, lambda v: v == processes, 120)
        if before_insert:
            before_insert(conn)
        if queues == 1:
            conn.execute("INSERT INTO job_runs (job_type) SELECT 'jobsweb.noop' FROM generate_series(1, %s)", [n])
        else:
            conn.execute("INSERT INTO job_runs (job_type, queue) SELECT 'jobsweb.noop', 'q' || g %% %s "
                         "FROM generate_series(1, %s) g", [queues, n])
        wait_until(conn, UNFINISHED, None, lambda v: not v)
        rss = finish(procs, stop=True)
        return rate_from_database(conn, n), max(rss)


# -- 1 throughput, 3 ceiling, 9 memory --------------------------------------------------------

def drain_size(sizes, concurrency):
    """Runs drained at this concurrency: fewer below 16, which would otherwise take minutes."""
    return max(sizes["drain"] * min(concurrency, 16) // 16, sizes["drain"] // 10)


def throughput(bench):
    url, _ = migrated(bench, "bench_throughput")
    s = bench.sizes
    drain(bench, url, 1, 4, s["warmup"])  # warm-up: caches, first-run costs
    table = {}
    rss = []
    for processes in s["processes"]:
        for concurrency in s["concurrency"]:
            rates = []
            for _ in range(bench.repeats):
                rate, peak = drain(bench, url, processes, concurrency, drain_size(s, concurrency))
                rates.append(rate)
                rss.append(peak)
            table[(processes, concurrency)] = median(rates)
            bench.log(f"throughput {processes} proc x {concurrency}: {table[(processes, concurrency)]:.0f}/s")
    best_c = max(s["concurrency"], key=lambda c: table[(1, c)])
    quiet = median([drain(bench, url, 1, best_c, drain_size(s, best_c), quiet=True)[0]
                    for _ in range(bench.repeats)])
    best = max(table, key=table.get)
    steady = steady_state(bench, url, *best)
    return {"table": table, "best": best, "best_one_process": (1, best_c), "quiet_one_process": quiet,
            "steady": steady, "rss_mb": max(rss), "url": url}


def steady_state(bench, url, processes, concurrency):
    """A producer keeps ~backlog runs due while workers run for `seconds`; finished runs per second."""
    seconds, backlog = bench.sizes["steady_seconds"], bench.sizes["steady_backlog"]
    with psycopg.connect(url, autocommit=True) as conn:
        fill_queue(conn, backlog)
        stop = threading.Event()

        def produce():
            with psycopg.connect(url, autocommit=True) as p:
                while not stop.is_set():
                    queued = p.execute("SELECT count(*) FROM job_runs WHERE status = 'queued'").fetchone()[0]
                    if queued < backlog:
                        p.execute("INSERT INTO job_runs (job_type) SELECT 'jobsweb.noop' "
                                  "FROM generate_series(1, %s)", [backlog - queued])
                    stop.wait(0.05)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        procs = [spawn_worker(url, concurrency, "--forever", "--poll-interval", "0.1",
                              "--max-runtime", str(seconds)) for _ in range(processes)]
        t0 = conn.execute("SELECT now()").fetchone()[0]
        rss = finish(procs)
        stop.set()
        producer.join()
        done, span = conn.execute(
            "SELECT count(*), extract(epoch FROM max(finished_at) - min(started_at)) FROM job_runs "
            "WHERE status = 'succeeded' AND started_at >= %s", [t0]).fetchone()
    return {"processes": processes, "concurrency": concurrency, "rate": done / float(span),
            "seconds": seconds, "rss_mb": max(rss)}


def replay_script(batch):
    """CLAIM_RUNS then FINISH_RUNS, as the worker sends them, with pgbench variables for params.

    Run with -M prepared, as psycopg prepares the worker's repeated statements: the claimed
    ids travel from one statement to the next as array literals ('{1,2,3}') via \\gset.
    """
    claim = statements.CLAIM_RUNS
    for name, value in {"worker": "'pgbench-' || :client_id::text", "lease": "60",
                        "job_types": "ARRAY" + repr(BUILTIN_TYPES), "limit": str(batch), "free": str(batch),
                        "queues": "NULL"}.items():
        claim = claim.replace(f"%({name})s", value)
    # The outcomes, one JSON object a claimed run (execution.finish_params), built from the ids and
    # attempts the claim handed over.
    outcomes = ("(SELECT coalesce(json_agg(json_build_object('id', u.id, 'attempt', u.attempt, "
                "'worker', 'pgbench-' || :client_id::text, 'outcome', 'succeeded', 'delay', 0, 'give_up', false, "
                "'waited', 0)), '[]') FROM unnest(:ids::bigint[], :attempts::int[]) AS u(id, attempt))")
    finish_sql = strip_comments(statements.FINISH_RUNS).replace("%(outcomes)s", outcomes)
    return (f"WITH claimed AS ({claim.strip()})\n"
            "SELECT coalesce(array_agg(id)::text, '{}') AS ids,\n"
            "       coalesce(array_agg(attempts)::text, '{}') AS attempts,\n"
            "       count(*) AS n FROM claimed\n\\gset\n"
            f"{finish_sql.strip()};\n")


def strip_comments(sql):
    """Without -- comments (pgbench would see the variables and quotes in them)."""
    lines = (re.sub(r"--.*$", "", line).rstrip() for line in sql.splitlines())
    return "\n".join(line for line in lines if line.strip())


def ceiling(bench, url, processes, concurrency):
    """Our own SQL replayed by pgbench with `processes` connections: runs/s, and what the worker sent."""
    n = bench.sizes["drain"]
    with psycopg.connect(url, autocommit=True) as conn:
        wal = {}

        def before_insert(c):
            c.execute("SELECT pg_stat_statements_reset()")
            wal["start"] = c.execute("SELECT pg_current_wal_lsn()").fetchone()[0]

        drain(bench, url, processes, concurrency, n, before_insert=before_insert)
        # WAL written per run drained (the INSERT of the runs included: a real producer writes it too).
        [(wal_bytes,)] = conn.execute("SELECT pg_current_wal_lsn() - %s::pg_lsn", [wal["start"]]).fetchall()
        statements = conn.execute(
            "SELECT calls, rows, mean_exec_time, left(regexp_replace(query, '\\s+', ' ', 'g'), 90) "
            "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND calls > 0 AND query !~ '(^SELECT count|generate_series|pg_stat_statements)' "
            "ORDER BY total_exec_time DESC LIMIT 8").fetchall()
        rates = []
        for _ in range(bench.repeats):
            fill_queue(conn, n)
            transactions = n // (processes * concurrency)
            script = replay_script(concurrency)
            tps = pgbench(bench.server, url, script, clients=processes, transactions=transactions)
            done = conn.execute("SELECT count(*), extract(epoch FROM max(finished_at) - min(started_at)) "
                                "FROM job_runs WHERE status = 'succeeded'").fetchone()
            rates.append(done[0] / float(done[1]))
            bench.log(f"pgbench replay {processes} conn x batch {concurrency}: {rates[-1]:.0f} runs/s ({tps:.0f} tps)")
    return {"rate": median(rates), "statements": statements, "processes": processes,
            "wal_bytes_per_run": float(wal_bytes) / n,
            "batch": concurrency, "script": replay_script(concurrency)}


# -- 10 queues ---------------------------------------------------------------------------------

# Two queues with a concurrency limit and one with a rate limit, among ten. The concurrency
# limit (a quarter of one process's slots) binds at times; the rate is above the queue's tenth
# of the drain, so that it is checked on every claim without being what the drain waits for.
QUEUE_LIMITS = """
INSERT INTO job_queues (name, concurrency_limit, rate_limit, rate_seconds) VALUES
    ('q0', %(limit)s, NULL, NULL), ('q1', %(limit)s, NULL, NULL), ('q2', NULL, %(rate)s, 1)
"""


def flow_control(bench):
    """Drain the same runs from one queue, then dealt into 10 queues (2 limited, 1 rate-limited)."""
    url, _ = migrated(bench, "bench_queues")
    s = bench.sizes
    processes, concurrency = s["queues_workers"]
    n = s["drain"]
    limits = {"limit": max(concurrency // 4, 1), "rate": s["queues_rate"]}
    drain(bench, url, 1, 4, s["warmup"])
    plain, mixed = [], []
    for _ in range(bench.repeats):  # alternated, so that drift on a shared machine hits both
        plain.append(drain(bench, url, processes, concurrency, n)[0])
        mixed.append(drain(bench, url, processes, concurrency, n, queues=10,
                           before_insert=lambda c: c.execute(QUEUE_LIMITS, limits))[0])
        bench.log(f"queues: one queue {plain[-1]:.0f}/s, ten queues {mixed[-1]:.0f}/s")
    with psycopg.connect(url, autocommit=True) as conn:
        most = conn.execute("SELECT max(n) FROM (SELECT count(*) AS n FROM job_attempts a "
                            "JOIN job_runs r ON r.id = a.run_id WHERE r.queue = 'q2' "
                            "GROUP BY date_trunc('second', a.started_at)) per_second").fetchone()[0]
    return {"processes": processes, "concurrency": concurrency, "n": n, "plain": median(plain),
            "queues": median(mixed), "limit": limits["limit"], "rate": limits["rate"],
            "rate_queue_most_per_second": most}


# -- 2 peers ----------------------------------------------------------------------------------

# The queues jobsweb is measured against (the bench extra installs them). The suite refuses to
# start without them (bench/__main__.py): a report saying "not measured" would pass for a run.
PEERS = ("pgqueuer", "procrastinate")


def missing_peers():
    """The peers that cannot be imported."""
    missing = []
    for peer in PEERS:
        try:
            __import__(peer)
        except ImportError:
            missing.append(peer)
    return missing


def peers(bench):
    results = {}
    for peer, settings in (("pgqueuer", bench.sizes["pgqueuer_batch"]),
                           ("procrastinate", bench.sizes["procrastinate_concurrency"])):
        n = bench.sizes[f"{peer}_drain"]
        best = {}
        for setting in settings:
            rates, rss = [], []
            for _ in range(bench.repeats):
                url = bench.server.fresh_database("bench_peer")
                out = subprocess.run([sys.executable, "-m", "bench.peer_proc", peer, url, str(n), str(setting)],
                                     cwd=ROOT, check=True, capture_output=True, text=True).stdout
                data = json.loads(out.strip().splitlines()[-1])
                rates.append(n / data["seconds"])
                rss.append(data["maxrss_kb"] / 1024)
            best[setting] = (median(rates), max(rss))
            bench.log(f"{peer} setting {setting}: {best[setting][0]:.0f}/s")
        top = max(best, key=lambda k: best[k][0])
        results[peer] = {"rate": best[top][0], "setting": top, "all": best, "rss_mb": best[top][1]}
    return results


# -- 4 claim latency vs history ---------------------------------------------------------------

HISTORY_SQL = """
WITH runs AS (
    INSERT INTO job_runs (job_type, status, attempts, run_at, started_at, finished_at, created_at,
                          last_error, error_type, payload)
    SELECT 'jobsweb.noop',
           CASE WHEN g %% 100 = 0 THEN 'dead' ELSE 'succeeded' END,
           1, t, t, t + interval '5 ms', t,
           CASE WHEN g %% 100 = 0 THEN 'boom: connection refused by upstream ' || g END,
           CASE WHEN g %% 100 = 0 THEN 'RuntimeError' END,
           -- One invoice per run, a thousand customers: what the payload filter searches.
           jsonb_build_object('invoice_id', %(start)s + g, 'customer_id', (%(start)s + g) %% 1000)
    FROM generate_series(1, %(n)s) g, LATERAL (SELECT now() - (%(n)s - g) * interval '1 s' AS t) ts
    RETURNING id, status, started_at, finished_at, last_error
)
INSERT INTO job_attempts (run_id, attempt, worker, started_at, finished_at, outcome, error)
SELECT id, 1, 'bench', started_at, finished_at,
       CASE WHEN status = 'dead' THEN 'failed' ELSE 'succeeded' END, last_error
FROM runs
"""


def claim_latency(bench):
    url, app = migrated(bench, "bench_history")
    sizes = bench.sizes["history"]
    points = []
    explain = None
    # Claims go the worker's way (claims()); the plan is read over a connection that, like the
    # worker's, never prepares on the server (pooler-safe).
    with psycopg.connect(url, autocommit=True) as conn, \
            psycopg.connect(url, autocommit=True, **link.NO_PREPARE) as claimer:
        conn.execute("INSERT INTO job_runs (job_type) SELECT 'jobsweb.noop' FROM generate_series(1, 1000)")
        have = 0
        for size in sizes:
            if size > have:
                for start in range(have, size, 200_000):
                    conn.execute(HISTORY_SQL, {"n": min(200_000, size - start), "start": start})
                have = size
                conn.execute("VACUUM ANALYZE job_runs")
                conn.execute("VACUUM ANALYZE job_attempts")
            times = claims(url, bench.sizes["claims"], seconds=bench.sizes["claim_seconds"])
            points.append({"history": size, "p50": percentile(times, 50), "p95": percentile(times, 95),
                           "p99": percentile(times, 99), "claims": len(times)})
            bench.log(f"claim at {size} finished: p50 {points[-1]['p50']:.3f} ms p95 {points[-1]['p95']:.3f} ms")
        growth = history_costs(conn)
        floor = commit_floor(conn, bench.sizes["claims"])
        explain = claim_plan(claimer)
    return {"points": points, "explain": explain, "url": url, "app": app, "commit_floor": floor,
            "growth": growth}


def claim_plan(conn):
    """The plan jobsweb_claim_runs_in_order ran its UPDATE of job_runs with, with actual times.

    EXPLAIN of CLAIM_RUNS would show only the function call: auto_explain logs the function's
    own statement, and client_min_messages = log brings that log line to this connection."""
    plans = []
    conn.add_notice_handler(lambda notice: plans.append(notice.message_primary))
    conn.execute("LOAD 'auto_explain'")
    for name, value in {"log_min_duration": "0", "log_nested_statements": "on", "log_analyze": "on",
                        "log_buffers": "on", "log_timing": "on"}.items():
        conn.execute(f"SET auto_explain.{name} = '{value}'")
    conn.execute("SET client_min_messages = log")
    with conn.transaction():
        conn.execute(statements.CLAIM_RUNS, {"worker": "bench", "lease": 60, "job_types": BUILTIN_TYPES,
                                             "limit": 1, "free": 1, "queues": None}).fetchall()
        raise_rollback()
    conn.execute("RESET client_min_messages")
    conn.execute("RESET auto_explain.log_min_duration")
    nested = next(p for p in plans if "Update on job_runs" in p)
    return nested[nested.index("Update on job_runs"):].rstrip()


SIZES_SQL = """
SELECT relname, pg_table_size(c.oid), pg_indexes_size(c.oid), c.reltuples::bigint
FROM pg_class c WHERE relname IN ('job_runs', 'job_attempts') ORDER BY relname
"""


def history_costs(conn, batches=5, batch=500):
    """At the largest history: table and index sizes, and what pruning costs (PRUNE_RUNS of the
    oldest succeeded runs, JOBSWEB_PRUNE_BATCH at its default; rolled back, so the admin pages
    measured next still see the whole history)."""
    sizes = {name: {"table_mb": t / 2**20, "indexes_mb": i / 2**20, "rows": rows}
             for name, t, i, rows in conn.execute(SIZES_SQL)}
    [(oldest_days,)] = conn.execute("SELECT extract(epoch FROM now() - min(finished_at)) / 86400 FROM job_runs "
                                    "WHERE status = 'succeeded'").fetchall()
    params = {"status": "succeeded", "days": max(int(oldest_days) - 1, 0), "batch": batch}
    times = []
    for _ in range(batches):
        with conn.transaction():
            t = time.perf_counter()
            conn.execute(statements.PRUNE_RUNS, params)
            times.append(time.perf_counter() - t)
            raise_rollback()
    return {"sizes": sizes, "prune_ms_per_1000": median(times) * 1000 * 1000 / batch, "prune_batch": batch}


def commit_floor(conn, count):
    """p50/p95 of the cheapest durable write: a one-row UPDATE committing on its own (one WAL flush)."""
    conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (n bigint)")
    conn.execute("INSERT INTO bench_floor VALUES (0)")
    times = []
    for _ in range(count):
        t = time.perf_counter()
        conn.execute("UPDATE bench_floor SET n = n + 1")
        times.append((time.perf_counter() - t) * 1000)
    return {"p50": percentile(times, 50), "p95": percentile(times, 95)}


def raise_rollback():
    from psycopg import Rollback

    raise Rollback()


def claims(url, count, size=1, seconds=None, worker_path=True):
    """Time `count` claims of `size` runs over a new connection, putting each claim's runs back
    after it; with `seconds`, stop once they are spent (after 5 claims at least): a claim that a
    server's setting makes slow (seconds each, JIT compiling it) must not hold the suite for an
    hour, and its verdict needs no thousand samples.

    worker_path: CLAIM_RUNS as the worker sends it (Link.fetch: one pipelined transaction begun
    with SET LOCAL jit = off, no server-side prepare); otherwise the bare statement, as any
    other client would call jobsweb_claim_runs_in_order (still never prepared)."""
    params = {"worker": "bench", "lease": 60, "job_types": BUILTIN_TYPES, "limit": size, "free": size,
              "queues": None}
    with psycopg.connect(url, autocommit=True) as conn:
        # The put-backs are ours, not the claim's: with JIT forced on the server each would compile
        # (~30 ms), taking most of the time budget from the claims.
        conn.execute("SET jit = off")
        if worker_path:
            claimer = link.Link(url)
            fetch = claimer.fetch
        else:
            claimer = psycopg.connect(url, autocommit=True, **link.NO_PREPARE)

            def fetch(sql, params):
                return claimer.execute(sql, params).fetchall()
        try:
            warm_until = time.monotonic() + (seconds or math.inf) / 4
            for _ in range(20):  # warm-up: caches, the connection's first statements
                fetch(statements.CLAIM_RUNS, params)
                if time.monotonic() > warm_until:
                    break
            conn.execute("UPDATE job_runs SET status = 'queued', attempts = 0, locked_by = NULL "
                         "WHERE status = 'running'")
            deadline = time.monotonic() + (seconds or math.inf)
            times = []
            for _ in range(count):
                t = time.perf_counter()
                ids = [row[0] for row in fetch(statements.CLAIM_RUNS, params)]
                times.append((time.perf_counter() - t) * 1000)
                conn.execute("UPDATE job_runs SET status = 'queued', attempts = 0, locked_by = NULL, "
                             "locked_until = NULL WHERE id = ANY(%s)", [ids])
                if len(times) >= 5 and time.monotonic() > deadline:
                    break
        finally:
            claimer.close()
    return times


# -- 5 enqueue --------------------------------------------------------------------------------

def enqueue(bench):
    url, app = migrated(bench, "bench_enqueue")
    from jobsweb import enqueue as enqueue_one
    from jobsweb import enqueue_many

    with app.app_context():
        for _ in range(50):
            enqueue_one("jobsweb.noop", {"n": 1})
        times = []
        deadline = time.monotonic() + bench.sizes["enqueue_seconds"]
        started = time.perf_counter()
        while time.monotonic() < deadline:
            t = time.perf_counter()
            enqueue_one("jobsweb.noop", {"n": 1})
            times.append((time.perf_counter() - t) * 1000)
        single_rate = len(times) / (time.perf_counter() - started)
        n = bench.sizes["bulk"]
        rates = []
        for _ in range(bench.repeats):
            payloads = [{"n": i} for i in range(n)]
            t = time.perf_counter()
            enqueue_many("jobsweb.noop", payloads)
            rates.append(n / (time.perf_counter() - t))
    bench.log(f"enqueue p50 {percentile(times, 50):.3f} ms, bulk {median(rates):.0f}/s")
    return {"single_p50": percentile(times, 50), "single_p95": percentile(times, 95),
            "single_rate": single_rate, "bulk_rate": median(rates), "bulk_n": n}


# -- 6 enqueue -> start -----------------------------------------------------------------------

def wake_latency(bench):
    url, app = migrated(bench, "bench_wake")
    from jobsweb import enqueue as enqueue_one

    poll = bench.sizes["poll_interval"]
    out = {"poll_interval": poll}
    for mode, listen in (("notify", "on"), ("polling", "off")):
        proc = spawn_worker(url, 4, "--forever", "--poll-interval", str(poll), env={"JOBSWEB_LISTEN": listen})
        samples = []
        with psycopg.connect(url, autocommit=True) as conn, app.app_context():
            first = enqueue_one("jobsweb.noop")
            wait_started(conn, first, 30)
            time.sleep(0.5)  # the worker's listener connects
            for _ in range(bench.sizes["wake_samples"]):
                time.sleep(random.uniform(0, poll))  # arrive at a random point of the poll cycle
                run_id = enqueue_one("jobsweb.noop")
                samples.append(wait_started(conn, run_id, poll + 10))
        proc.terminate()
        proc.communicate(timeout=30)
        out[mode] = {"p50": percentile(samples, 50), "p95": percentile(samples, 95)}
        bench.log(f"enqueue->start {mode}: p50 {out[mode]['p50']:.1f} ms")
    return out


def wait_started(conn, run_id, timeout):
    """Milliseconds from the run's creation to its claim, both by the database's clock."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute("SELECT extract(epoch FROM started_at - created_at) * 1000 FROM job_runs "
                           "WHERE id = %s AND started_at IS NOT NULL", [run_id]).fetchone()
        if row:
            return float(row[0])
        time.sleep(0.0005)
    raise RuntimeError(f"run {run_id} did not start within {timeout}s")


# -- 7 admin pages ----------------------------------------------------------------------------

METRICS_TOKEN = "bench-metrics-token-0123456789"


def admin_pages(bench, history):
    """Each page `requests` times through the real HTTP server on loopback, over the history database."""
    return measure_pages(bench, history["url"], seed_pages(history["url"], history["app"]))


def seed_pages(url, app):
    """What the pages show besides the history, added once: an admin, a batch, 200 definitions (one
    holding a tenth of the runs, unless big_history.build made them so), two overdue, a year of
    audit; {"batch_id", "definition_id", "max_id", "dead_id"}."""
    from jobsweb.web.accounts import create_user

    with app.app_context():
        from jobsweb import batch
        from jobsweb.core.database import db

        create_user("bench@example.org", "bench password 1", "admin")
        db.session.commit()
        # A batch of a thousand members, for its page.
        with batch(on_finish="jobsweb.noop") as members:
            members.enqueue_many("jobsweb.noop", [{"page": page} for page in range(1000)])
        batch_id = members.id
    with psycopg.connect(url, autocommit=True) as conn:
        definition_id = conn.execute("SELECT min(id) FROM job_definitions WHERE name = 'def-1'").fetchone()[0]
        if definition_id is None:
            conn.execute("INSERT INTO job_definitions (name, job_type, schedule, next_run_at) "
                         "SELECT 'def-' || g, 'jobsweb.noop', '@every 1h', now() + interval '1 h' "
                         "FROM generate_series(1, 200) g")
            # One definition's page over a tenth of the history (a run every ten seconds, as a
            # definition on a busy schedule has after a few weeks).
            definition_id = conn.execute("SELECT min(id) FROM job_definitions WHERE name = 'def-1'").fetchone()[0]
            conn.execute("UPDATE job_runs SET definition_id = %s WHERE id %% 10 = 0", [definition_id])
        # Two overdue definitions, so /incidents has open incidents to show.
        conn.execute("UPDATE job_definitions SET next_run_at = now() - interval '1 h' WHERE name IN ('def-2', 'def-3')")
        conn.execute("ANALYZE job_runs")
        # A year of operators' actions for /audit: 20 a day from 5 people.
        conn.execute("INSERT INTO jobsweb_audit_log (user_email, action, target_type, target_id) "
                     "SELECT 'op' || g % 5 || '@example.org', (ARRAY['retry', 'cancel', 'pause', 'edit'])[g % 4 + 1], "
                     "'run', g FROM generate_series(1, 7300) g")
        conn.execute("ANALYZE jobsweb_audit_log")
        max_id, dead_id = conn.execute("SELECT max(id), max(id) FILTER (WHERE status = 'dead') FROM job_runs").fetchone()
    with app.app_context():
        from jobsweb.ops import alerts

        alerts.evaluate()
    return {"batch_id": batch_id, "definition_id": definition_id, "max_id": max_id, "dead_id": dead_id}


def measure_pages(bench, url, seed, only=None, notes=None):
    """Each page `page_requests` times (after 5 that warm caches) through `flask run` on loopback,
    signed in as seed_pages' admin: {page: {path, p50, p95, load}} (load: the 1-minute load
    average when the page's requests ended). `notes`, a dict, gets what the first scrape of /metrics
    did ("first_scrape") when it did not answer 200."""
    batch_id, definition_id, max_id, dead_id = (seed[k] for k in ("batch_id", "definition_id", "max_id", "dead_id"))
    # A free port rather than a fixed one: two benches on one machine (several worktrees) must
    # not measure each other's server.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, DATABASE_URL=url, SECRET_KEY="0123456789abcdef-test-secret-key-0123456789-bench",
               JOBSWEB_METRICS_TOKEN=METRICS_TOKEN)
    server = subprocess.Popen([sys.executable, "-m", "flask", "--app", "wsgi", "run", "--port", str(port),
                               "--no-reload", "--no-debugger"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    scraper = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    try:
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
        wait_http(opener, base + "/healthz")
        page = opener.open(base + "/sign-in").read().decode()
        token = re.search(r'name="csrf-token" content="([^"]+)"', page)
        opener.open(base + "/sign-in", urllib.parse.urlencode(
            {"csrf_token": token.group(1), "email": "bench@example.org", "password": "bench password 1"}).encode())
        pages = {"dashboard": "/", "runs list": "/runs", "runs: status dead": "/runs?status=dead",
                 "runs: deep keyset page": f"/runs?before={max_id // 2}", "runs: error text search": "/runs?q=upstream",
                 # Text no error says: every errored run is read (index job_runs_errored).
                 "runs: error text search, no match": "/runs?q=no+error+says+this",
                 # Every run matches: the counts of a filter pass their cap and are estimated.
                 "runs: job type filter": "/runs?job_type=jobsweb.noop",
                 "run detail": f"/runs/{dead_id}", "definitions list": "/definitions",
                 # One run of a million, by jsonb containment (index job_runs_payload).
                 "runs: payload filter": "/runs?" + urllib.parse.urlencode({"payload": json.dumps({"invoice_id": max_id // 3})}),
                 "runs: payload filter, dead": "/runs?" + urllib.parse.urlencode(
                     {"payload": json.dumps({"customer_id": 700}), "status": "dead"}),
                 "runs: payload filter, no match": "/runs?" + urllib.parse.urlencode({"payload": '{"invoice_id": -1}'}),
                 "audit log": "/audit", "audit: by action": "/audit?action=cancel",
                 # Per job type metrics, read from their rollup (the first of the warm-up
                 # requests adds the history's last week to it).
                 "metrics: last hour": "/job-metrics?window=1h", "metrics: last 24 hours": "/job-metrics",
                 "metrics: last 7 days": "/job-metrics?window=7d",
                 "metrics: last 7 days, by p95": "/job-metrics?window=7d&sort=p95&job_type=jobsweb.noop",
                 "definition detail": f"/definitions/{definition_id}", "incidents": "/incidents",
                 "queues": "/queues", "workers": "/workers", "batch": f"/batches/{batch_id}",
                 "users": "/users", "enqueue form": "/enqueue", "new definition form": "/definitions/new",
                 "delete run: confirm": f"/runs/{dead_id}/delete",
                 # Not a page: what a Prometheus scrape reads every 15 s or so, with its token.
                 "/metrics scrape": "/metrics"}
        # The metrics page's first views add the history's last week to its rollup, a budget of
        # a second each (a worker-less install's first minutes after the upgrade): measured
        # apart, then the page is measured as it answers from then on.
        t = time.perf_counter()
        views = 0
        while True:
            views += 1
            with opener.open(base + "/job-metrics") as response:
                if "Still counting" not in response.read().decode():
                    break
        bench.log(f"metrics rollup caught up with the history in {time.perf_counter() - t:.1f} s, {views} views")
        out = {}
        # The first scrapes add the history to the duration totals (ops/durations.py), a bounded
        # number of attempts each, once per install: done here before the scrapes measured below.
        t, seals = time.perf_counter(), 0
        with _app(url).app_context():
            from jobsweb.ops import durations

            while not durations._seal()[1]:
                seals += 1
        first = {"seals": seals + 1, "seal_seconds": time.perf_counter() - t}
        if notes is not None:
            notes["first_scrape"] = first
        bench.log(f"the duration totals caught up with the history in {first['seals']} scrapes' seals, "
                  f"{first['seal_seconds']:.1f} s")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_statements_reset()")
        for name, path in pages.items():
            if only and name not in only:
                continue
            times = []
            for i in range(bench.sizes["page_requests"] + 5):
                t = time.perf_counter()
                with opener.open(urllib.request.Request(base + path, headers=scraper if path == "/metrics" else {})) \
                        as response:
                    response.read()
                    if response.status != 200 or "/sign-in" in response.url:
                        raise RuntimeError(f"{path}: {response.status} {response.url}")
                if i >= 5:  # the first requests warm caches
                    times.append((time.perf_counter() - t) * 1000)
            out[name] = {"path": path, "p50": percentile(times, 50), "p95": percentile(times, 95),
                         "load": os.getloadavg()[0]}
            bench.log(f"page {name}: p50 {out[name]['p50']:.1f} ms p95 {out[name]['p95']:.1f} ms "
                      f"(load {out[name]['load']:.2f})")
        # A statement past jit_above_cost is compiled at every execution on a server with JIT
        # (tens to hundreds of ms): none of the pages' statements may be.
        with psycopg.connect(url, autocommit=True) as conn:
            compiled = conn.execute("SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 120) FROM pg_stat_statements "
                                    "WHERE jit_functions > 0").fetchall()
        bench.log(f"statements JIT-compiled while serving the pages: {[q for q, in compiled] or 'none'}")
        return out
    finally:
        server.terminate()
        server.wait(timeout=30)


def admin_pages_alone(bench):
    """The admin pages over a history database built for them alone (`python -m bench --only
    pages`): the history of claim_latency at its largest size, without the claims."""
    url, app = migrated(bench, "bench_history")
    size = bench.sizes["history"][-1]
    with psycopg.connect(url, autocommit=True) as conn:
        for start in range(0, size, 200_000):
            conn.execute(HISTORY_SQL, {"n": min(200_000, size - start), "start": start})
        conn.execute("VACUUM ANALYZE job_runs")
        conn.execute("VACUUM ANALYZE job_attempts")
    bench.log(f"history of {size:,} runs written")
    return admin_pages(bench, {"url": url, "app": app})


def wait_http(opener, url):
    deadline = time.monotonic() + 60
    while True:
        try:
            opener.open(url).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


# -- 8 scheduler tick -------------------------------------------------------------------------

def scheduler_tick(bench):
    url, app = migrated(bench, "bench_tick")
    from jobsweb.engine.link import Link
    from jobsweb.scheduling.materialise import materialise_due

    n = bench.sizes["definitions"]
    out = {"definitions": n}
    with psycopg.connect(url, autocommit=True) as conn:
        # Only the measure's own definitions: the built-in jobsweb.prune (0007) would be made due
        # too, and its extra run would read as a slot materialised twice.
        conn.execute("DELETE FROM job_definitions")
        conn.execute("INSERT INTO job_definitions (name, job_type, schedule, next_run_at, overlap_policy) "
                     "SELECT 'def-' || g, 'jobsweb.noop', '@every 1h', now() - interval '1 s', 'allow' "
                     "FROM generate_series(1, %s) g", [n])
        conn.execute("VACUUM ANALYZE job_definitions")
        for ticks in (1, 4):
            conn.execute("TRUNCATE job_runs CASCADE")
            conn.execute("UPDATE job_definitions SET next_run_at = now() - interval '1 s'")
            links = [Link(url) for _ in range(ticks)]
            for link in links:
                link.fetch("SELECT 1")  # connected before the clock starts

            def tick(link):
                while materialise_due(link) > 0:
                    pass

            threads = [threading.Thread(target=tick, args=(link,)) for link in links]
            t = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            seconds = time.perf_counter() - t
            for link in links:
                link.close()
            runs, slots, definitions = conn.execute(
                "SELECT count(*), count(DISTINCT (definition_id, scheduled_for)), count(DISTINCT definition_id) "
                "FROM job_runs").fetchone()
            out[ticks] = {"seconds": seconds, "exactly_once": runs == slots == definitions == n, "runs": runs}
            bench.log(f"tick x{ticks}: {n} definitions in {seconds:.2f}s, runs {runs}")
    return out
