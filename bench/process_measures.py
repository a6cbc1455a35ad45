"""Measures of whole processes, timed from the outside: async handlers at high concurrency,
one `flask run-jobs` invocation draining a backlog, start-up included, next to one PgQueuer
process draining the same, its start-up included and its shutdown's wait told apart (issue 18,
targets 4 and 5; issue 41, item 1), and alerts sent by the web app alone
with no worker running (issue 14)."""

import json
import os
import queue
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread

import psycopg

from .measures import ROOT, fill_queue, median, migrated, rate_from_database, spawn_worker

SECRET = "0123456789abcdef-test-secret-key-0123456789-bench"


def async_handlers(bench):
    """One process at --concurrency C runs N runs that each `await asyncio.sleep(0.5)`: wall
    time from the process's start to its exit, and its peak RSS."""
    n, concurrency = bench.sizes["async_runs"], bench.sizes["async_concurrency"]
    url, _ = migrated(bench, "bench_async")
    walls, rss, spans = [], [], []
    for _ in range(bench.repeats):
        with psycopg.connect(url, autocommit=True) as conn:
            fill_queue(conn, 0)
            conn.execute("INSERT INTO job_runs (job_type, payload) SELECT 'jobsweb.async_sleep', "
                         "'{\"seconds\": 0.5}' FROM generate_series(1, %s)", [n])
            started = time.monotonic()
            proc = spawn_worker(url, concurrency, "--quiet")
            out, _ = proc.communicate(timeout=600)
            walls.append(time.monotonic() - started)
            rss.append(json.loads(out.strip().splitlines()[-1])["maxrss_kb"] / 1024)
            spans.append(n / rate_from_database(conn, n))
    result = {"runs": n, "concurrency": concurrency, "wall": median(walls), "rss_mb": max(rss),
              "span": median(spans)}
    bench.log(f"async: {n} runs at concurrency {concurrency}: {result['wall']:.2f} s wall, "
              f"{result['rss_mb']:.0f} MB")
    return result


def run_jobs_wall(url, n, concurrency, processes=1):
    """`processes` `flask run-jobs --concurrency C`, started together, drain n due no-op runs:
    (seconds from their start, importing Flask, to the last one's exit; the drain's span from
    the first start to the last finish in job_runs), with the ordinary per-run INFO log lines."""
    with psycopg.connect(url, autocommit=True) as conn:
        fill_queue(conn, n)
        env = dict(os.environ, DATABASE_URL=url, SECRET_KEY=SECRET)
        started = time.monotonic()
        procs = [subprocess.Popen([sys.executable, "-m", "flask", "--app", "wsgi", "run-jobs", "--concurrency",
                                   str(concurrency)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL) for _ in range(processes)]
        for proc in procs:
            if proc.wait(timeout=1800) != 0:
                raise RuntimeError(f"flask run-jobs exited {proc.returncode}")
        wall = time.monotonic() - started
        span = n / rate_from_database(conn, n)  # and every run succeeded
    return wall, span


def pgqueuer_wall(bench, n, setting):
    """One PgQueuer process drains n no-op jobs (enqueued beforehand): {"done": seconds from its
    start to its last job done, "shutdown": seconds from then to its exit, "span": its drain's
    own span}. Its run() returns ~4 s after the last job is done (its buffers time out), a wait
    no job needs: "done" leaves it out, and it is reported apart."""
    url = bench.server.fresh_database("bench_peer_whole")
    proc = [sys.executable, "-m", "bench.peer_proc", "pgqueuer", url, str(n), str(setting)]
    subprocess.run([*proc, "enqueue"], cwd=ROOT, check=True, capture_output=True)
    # The epoch, not time.monotonic(): the last job's time comes from the database's clock, on this host.
    started = time.time()
    out = subprocess.run([*proc, "drain"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    ended = time.time()
    figures = json.loads(out.strip().splitlines()[-1])
    return {"done": figures["last"] - started, "shutdown": ended - figures["last"], "span": figures["seconds"]}


# The two-process figure: two `flask run-jobs --concurrency 8`.
TWO_PROCESSES_CONCURRENCY = 8


def whole_process(bench, pgqueuer_setting=None):
    """Target 5: one invocation each, start-up and shutdown included, alternated per repeat; and
    two invocations at once at --concurrency 8, next to one PgQueuer process at
    `pgqueuer_setting` (the suite passes PgQueuer's best of §2; alone, sizes' pgqueuer_whole)."""
    n = bench.sizes["whole_runs"]
    url, _ = migrated(bench, "bench_whole")
    setting = pgqueuer_setting or bench.sizes["pgqueuer_whole"]
    ours = {c: [] for c in bench.sizes["whole_concurrency"]}
    one_spans = {c: [] for c in ours}
    two, two_spans, theirs = [], [], []
    for _ in range(bench.repeats):
        for c in ours:
            wall, span = run_jobs_wall(url, n, c)
            ours[c].append(wall)
            one_spans[c].append(span)
        wall, span = run_jobs_wall(url, n, TWO_PROCESSES_CONCURRENCY, processes=2)
        two.append(wall)
        two_spans.append(span)
        theirs.append(pgqueuer_wall(bench, n, setting))
    # Each figure's median over the repeats; the ratio of each repeat, measured side by side, too.
    pgq = {key: median([t[key] for t in theirs]) for key in ("done", "shutdown", "span")}
    result = {"runs": n, "jobsweb": {c: median(v) for c, v in ours.items()},
              "two_processes": {"concurrency": TWO_PROCESSES_CONCURRENCY, "wall": median(two),
                                "span": median(two_spans)},
              "pgqueuer": pgq, "pgqueuer_setting": setting,
              "one_spans": {c: median(v) for c, v in one_spans.items()},
              "whole_ratios": [t["done"] / w for t, w in zip(theirs, two)],
              "span_ratios": [t["span"] / s for t, s in zip(theirs, two_spans)],
              "one_span_ratios": {c: [t["span"] / s for t, s in zip(theirs, v)] for c, v in one_spans.items()}}
    bench.log(f"whole process, {n} runs: jobsweb {result['jobsweb']}, two processes {result['two_processes']}, "
              f"pgqueuer {pgq} (setting {setting}); two ours / theirs, whole {result['whole_ratios']}, "
              f"spans {result['span_ratios']}, one process's spans {result['one_span_ratios']}")
    return result


class _Arrivals(BaseHTTPRequestHandler):
    """A webhook receiver on loopback: the time each POST arrived goes on `arrived`."""

    arrived = queue.SimpleQueue()

    def do_POST(self):  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.arrived.put(time.monotonic())
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def alerts_without_workers(bench):
    """Issue 14: only `gunicorn wsgi:app` runs (2 processes, default settings), no worker at all:
    seconds from gunicorn's start until an overdue definition's webhook arrives."""
    url, _ = migrated(bench, "bench_alerts")
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), _Arrivals)
    Thread(target=receiver.serve_forever, daemon=True).start()
    hook = f"http://127.0.0.1:{receiver.server_address[1]}/hook"
    # The thread is on by default; said here so that a caller's environment (the test suite
    # turns it off for its own apps) cannot leave it off.
    env = dict(os.environ, DATABASE_URL=url, SECRET_KEY=SECRET, JOBSWEB_ALERT_ALLOW_PRIVATE_IPS="true",
               JOBSWEB_WEB_ALERTS="true")
    seconds = []
    try:
        for _ in range(bench.repeats):
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("DELETE FROM jobsweb_alert_incidents")
                conn.execute("DELETE FROM job_definitions")
                # Its slot went by 10 minutes ago, past its 5 minutes of grace, and nothing ran it.
                conn.execute("INSERT INTO job_definitions (name, job_type, schedule, next_run_at, alert_webhook_url) "
                             "VALUES ('nightly', 'jobsweb.noop', '@daily', now() - interval '10 minutes', %s)", [hook])
            started = time.monotonic()
            web = subprocess.Popen([sys.executable, "-m", "gunicorn", "-w", "2", "-b", "127.0.0.1:0", "wsgi:app"],
                                   cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                seconds.append(_Arrivals.arrived.get(timeout=120) - started)
            finally:
                web.terminate()
                web.wait(timeout=30)
    finally:
        receiver.shutdown()
    result = {"seconds": median(seconds), "worst": max(seconds)}
    bench.log(f"alerts with no worker: webhook {result['seconds']:.1f} s after the web app started "
              f"(worst {result['worst']:.1f} s)")
    return result
