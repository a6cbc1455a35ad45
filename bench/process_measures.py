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


def cpu_per_run(bench, pgqueuer_setting=None):
    """CPU per run, PostgreSQL's and the worker processes': one `flask run-jobs --concurrency 8`,
    two of them at once, and one PgQueuer process (`pgqueuer_setting`, the suite passes its best
    of §2), each draining n runs enqueued beforehand, less the same processes with none (their
    start-up and shutdown).

    The bound under the drain targets: no drain of these runs goes faster than the machine's
    cores over server + client CPU per run, however well its threads overlap (issue 41)."""
    n = bench.sizes["whole_runs"]
    setting = pgqueuer_setting or bench.sizes["pgqueuer_whole"]
    url, _ = migrated(bench, "bench_cpu")
    postmaster = _postmaster(url)
    figures = {"jobsweb": [], "two_processes": [], "pgqueuer": []}
    for _ in range(bench.repeats):
        spent = {}
        for runs in (n, 0):
            spent[runs] = _ours_cpu(url, runs, postmaster, "bench_cpu")
            spent["two", runs] = _ours_cpu(url, runs, postmaster, "bench_cpu", processes=2)
            peer_url = bench.server.fresh_database("bench_peer_cpu")
            peer = [sys.executable, "-m", "bench.peer_proc", "pgqueuer", peer_url, str(runs), str(setting)]
            subprocess.run([*peer, "enqueue"], cwd=ROOT, check=True, capture_output=True)
            with psycopg.connect(peer_url, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")
                conn.execute("CHECKPOINT")
            spent["pgqueuer", runs] = _cpu_of([*peer, "drain"], os.environ, postmaster, "bench_peer_cpu")
        figures["jobsweb"].append(_per_run(spent[n], spent[0], n))
        figures["two_processes"].append(_per_run(spent["two", n], spent["two", 0], n))
        figures["pgqueuer"].append(_per_run(spent["pgqueuer", n], spent["pgqueuer", 0], n))
    together = {system: [f["server_us"] + f["client_us"] for f in per_run] for system, per_run in figures.items()}
    result = {"runs": n, "cores": os.cpu_count(), "pgqueuer_setting": setting, "concurrency": TWO_PROCESSES_CONCURRENCY,
              **{system: _medians(per_run) for system, per_run in figures.items()},
              # Each repeat's ratios, measured side by side (issue 55: ≤ 0.60 and ≤ 1.05).
              "to_pgqueuer": [ours / theirs for ours, theirs in zip(together["jobsweb"], together["pgqueuer"])],
              "two_to_one": [two / one for two, one in zip(together["two_processes"], together["jobsweb"])]}
    bench.log(f"CPU per run, {n} runs: jobsweb {result['jobsweb']}, two processes {result['two_processes']}, "
              f"pgqueuer {result['pgqueuer']} (setting {setting}); ours / theirs {result['to_pgqueuer']}, "
              f"two processes / one {result['two_to_one']}")
    return result


# The indexes every version of a run writes for the admin screen alone (its runs list by status
# and job type, the dashboard's chart by created_at) and the attempts' foreign key, gone: each
# index is replaced by one no row enters (WHERE false), so the worker's schema check still finds
# it. A measure of what they cost (issue 41), not a schema to run: the admin pages at 1,000,000
# runs read through those indexes, and an admin's delete takes the attempts by the key's cascade.
WITHOUT_ADMIN = [*(f"DROP INDEX {name}; CREATE INDEX {name} ON job_runs (id) WHERE false"
                   for name in ("job_runs_status_id", "job_runs_job_type_id", "job_runs_created_at")),
                 "ALTER TABLE job_attempts DROP CONSTRAINT job_attempts_run_id_fkey"]


def cpu_without_admin(bench):
    """cpu_per_run's figures for jobsweb on its schema and on one WITHOUT_ADMIN, alternated in
    each repeat: how much of a run's CPU the admin screen's indexes and the key take."""
    n = bench.sizes["whole_runs"]
    figures = {"schema": [], "without_admin": []}
    for _ in range(bench.repeats):
        for variant, per_run in figures.items():
            url, _ = migrated(bench, "bench_cpu_schema")
            with psycopg.connect(url, autocommit=True) as conn:
                for statement in WITHOUT_ADMIN if variant == "without_admin" else ():
                    conn.execute(statement)
            postmaster = _postmaster(url)
            per_run.append(_per_run(_ours_cpu(url, n, postmaster, "bench_cpu_schema"),
                                    _ours_cpu(url, 0, postmaster, "bench_cpu_schema"), n))
    result = {"runs": n, **{variant: _medians(per_run) for variant, per_run in figures.items()}}
    bench.log(f"CPU per run, {n} runs, schema vs without the admin indexes and the attempts' key: {result}")
    return result


def _ours_cpu(url, runs, postmaster, database, processes=1):
    """(server CPU s, workers' CPU s) of `processes` `flask run-jobs --concurrency 8` started
    together, draining `runs`."""
    with psycopg.connect(url, autocommit=True) as conn:
        fill_queue(conn, runs)
    env = dict(os.environ, DATABASE_URL=url, SECRET_KEY=SECRET)
    command = [sys.executable, "-m", "flask", "--app", "wsgi", "run-jobs", "--concurrency",
               str(TWO_PROCESSES_CONCURRENCY)]
    return _cpu_of(command, env, postmaster, database, processes)


def _per_run(spent, idle, n):
    """µs a run of PostgreSQL and of the process: a drain of n runs less one of none."""
    return {"server_us": (spent[0] - idle[0]) / n * 1e6, "client_us": (spent[1] - idle[1]) / n * 1e6}


def _medians(per_run):
    return {key: median([f[key] for f in per_run]) for key in ("server_us", "client_us")}


def _postmaster(url):
    with psycopg.connect(url) as conn:
        data = conn.execute("SHOW data_directory").fetchone()[0]
    with open(os.path.join(data, "postmaster.pid")) as pid_file:
        return int(pid_file.readline())


def _stat(pid):
    """/proc/PID/stat's fields from the third on (state, ppid, ...; utime is [11])."""
    with open(f"/proc/{pid}/stat") as stat:
        text = stat.read()
    return text[text.rindex(")") + 2:].split()


def _children(postmaster):
    """(pid, stat fields) of each process the postmaster started that is still there."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = _stat(pid)
        except (FileNotFoundError, ProcessLookupError):
            continue  # gone since the listing
        if int(fields[1]) == postmaster:
            yield pid, fields


def _server_cpu(postmaster):
    """CPU seconds of the postmaster, of its children it reaped (the backends of closed
    connections) and of those still running (checkpointer, WAL writer, autovacuum)."""
    ticks = sum(int(x) for x in _stat(postmaster)[11:15])  # utime, stime, cutime, cstime
    ticks += sum(int(fields[11]) + int(fields[12]) for _, fields in _children(postmaster))
    return ticks / os.sysconf("SC_CLK_TCK")


def _backends(postmaster, database):
    """How many backends are connected to `database` (their process titles name it)."""
    count = 0
    for pid, _ in _children(postmaster):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                count += f" {database} ".encode() in cmdline.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
    return count


def _cpu_of(command, env, postmaster, database, processes=1):
    """(server CPU s, the commands' own CPU s) over `processes` runs of `command`, started
    together, to their exit."""
    before = _server_cpu(postmaster)
    procs = [subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(processes)]
    own = 0.0
    for proc in procs:
        _, status, usage = os.wait4(proc.pid, 0)
        own += usage.ru_utime + usage.ru_stime
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise RuntimeError(f"{command[2:4]} exited {proc.returncode}")
    # Its backends exit once it has: the postmaster counts their CPU when it reaps them.
    deadline = time.monotonic() + 10
    while _backends(postmaster, database) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _server_cpu(postmaster) - before, own


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
