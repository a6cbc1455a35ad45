"""A cron tick's start-up (issue 41, item 2): `flask --app wsgi run-jobs` timed as a whole process,
from its start (the interpreter, importing Flask and jobsweb, building the app) to its exit, as
crontab runs it every minute. Three kinds of tick, alternated so that the machine's load falls on
all alike: an empty one (nothing due), one with a single due jobsweb.noop run, and an empty one
with two busy loops beside it (issue 55, item 4: the machine busy, not only quiet).

    python -m bench.tick_start [--runs 10] [--servers embedded,stock] [--root DIR]

prints the figures as JSON; --root times the `wsgi` and `jobsweb` of another checkout (an older
commit, for a before and after) with this venv. `make bench` runs it on both servers (§20).
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
SECRET = "0123456789abcdef-test-secret-key-0123456789-bench"
TARGETS = {"empty": 1.0, "one_run": 1.2, "empty_busy": 1.0}  # seconds, whole process (issues 41 and 55)
KINDS = {"empty": "an empty tick (nothing due)", "one_run": "a tick with one due jobsweb.noop run",
         "empty_busy": "an empty tick, two busy loops beside it"}
BUSY = "while True: pass"  # one busy loop: a Python process spinning on a core
EMPTY = "TRUNCATE job_attempts, job_runs, job_workers RESTART IDENTITY CASCADE"


def tick_start(bench, root=ROOT):
    """{kind: {min, median, max, cpu_median, runs}} in seconds, for both kinds of tick."""
    from .measures import migrated

    url, _ = migrated(bench, "bench_tick_start")
    runs = 2 if bench.quick else 10
    out = time_ticks(url, runs, root)
    for kind, figures in out.items():
        bench.log(f"tick start-up, {kind}: min {figures['min']:.2f} s, median {figures['median']:.2f} s, "
                  f"max {figures['max']:.2f} s (CPU median {figures['cpu_median']:.2f} s) of {figures['runs']}")
    return out


def time_ticks(url, runs, root=ROOT):
    """Each kind of tick `runs` times, alternated, after one untimed tick (Python's bytecode
    cache written, the server's caches warm: a crontab's ticks after the first)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASK_", "JOBSWEB_"))}
    env.update(DATABASE_URL=url, SECRET_KEY=SECRET)
    walls = {kind: [] for kind in KINDS}
    cpus = {kind: [] for kind in KINDS}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(EMPTY)
        _tick(root, env)
        for _ in range(runs):
            for kind in KINDS:
                conn.execute(EMPTY)
                if kind == "one_run":
                    conn.execute("INSERT INTO job_runs (job_type) VALUES ('jobsweb.noop')")
                busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2 if kind == "empty_busy" else 0)]
                try:
                    if busy:
                        time.sleep(0.2)  # both spinning before the tick starts
                    wall, cpu = _tick(root, env)
                finally:
                    for proc in busy:  # reaped after _tick's CPU reading: their time is not the tick's
                        proc.kill()
                        proc.wait()
                walls[kind].append(wall)
                cpus[kind].append(cpu)
                if kind == "one_run":
                    status = conn.execute("SELECT status FROM job_runs").fetchone()[0]
                    if status != "succeeded":
                        raise RuntimeError(f"the tick left its due run {status}")
    return {kind: {"min": min(walls[kind]), "median": statistics.median(walls[kind]), "max": max(walls[kind]),
                   "cpu_median": statistics.median(cpus[kind]), "runs": runs, "target": TARGETS[kind]}
            for kind in KINDS}


def _tick(root, env):
    """(wall seconds, CPU seconds: user + system) of one `flask run-jobs` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "flask", "--app", "wsgi", "run-jobs"], cwd=root, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"flask run-jobs exited {proc.returncode}:\n{proc.stderr}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def tick_start_section(r):
    """§20: how long a cron tick takes to start, as a whole process."""
    t = r["tick_start"]
    lines = [
        "## 20. A cron tick's start-up: `flask run-jobs` as a whole process",
        "",
        f"`flask --app wsgi run-jobs` from the process's start to its exit, {t['empty']['runs']} runs of each "
        "kind, alternated, after one untimed tick; the machine's other load counts (CPU is the process's "
        "user + system time):",
        "",
        "| tick | min s | median s | max s | CPU median s | target |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for kind, label in KINDS.items():
        f = t[kind]
        lines.append(f"| {label} | {f['min']:.2f} | **{f['median']:.2f}** | {f['max']:.2f} | "
                     f"{f['cpu_median']:.2f} | ≤ {f['target']:.1f} s ({'met' if f['median'] <= f['target'] else 'NOT met'}) |")
    return lines + [""]


def main(argv=None):
    from .harness import Bench
    from .server import Server

    parser = argparse.ArgumentParser(prog="python -m bench.tick_start")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--servers", default="embedded,stock")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose wsgi.py and jobsweb run")
    args = parser.parse_args(argv)
    results = {}
    for kind in args.servers.split(","):
        server = Server.start(kind)
        try:
            from .measures import migrated

            url, _ = migrated(Bench(server, {}, 1, False), "bench_tick_start")
            results[kind] = time_ticks(url, args.runs, args.root)
        finally:
            server.stop()
        print(json.dumps({kind: results[kind]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
