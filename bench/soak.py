"""Sustained load (issue 41, item 4): a steady producer, two `flask run-jobs --forever` workers
and retention deleting, for minutes (§21).

The producer is a process of its own that calls enqueue_many on a fixed schedule by the clock (a
batch every BATCH_SECONDS, as many runs as the rate owes by then), so its rate holds whatever
the workers do. Its rate is a share (SHARE) of two processes' best drain in §1 of the same run,
or --rate. The workers are `flask --app wsgi run-jobs --forever` processes as deployed, at the
concurrency of that best drain, with retention counted in seconds (JOBSWEB_RETAIN_UNIT) and the
built-in jobsweb.prune definition made to fire every few seconds in every other window (enabled in
the even ones, disabled in the odd ones), so that windows with deletes and without sit side by
side under the same load of the machine. Each window of `window` seconds (by created_at, the database's clock) is read once its
runs have ended, before retention deletes them: the wait from due (run_at) to start (started_at),
whether each run started exactly once, and the sizes of job_runs and job_attempts.

    python -m bench.soak [--seconds 600] [--rate N] [--servers embedded,stock]

runs it alone on each server (--rate, or two processes' best drain measured first) and prints
the figures as JSON; `make bench` runs it after §1 (`python -m bench --only soak`: at --rate's
default, DEFAULT_RATE).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
SECRET = "0123456789abcdef-test-secret-key-0123456789-bench"
# The producer's rate as a share of two processes' best drain (§1): that drain has the workers
# alone on the machine, while the soak's producer (enqueue_many), the per-run log lines, retention's
# deletes and autovacuum share its 2 cores with them. At half of it (6,000 runs/s, embedded, the
# machine at load 4.5 from other tests) the queue only grew: p95 wait 0.3 s in the first 15 s,
# 16 s a minute later.
SHARE = 0.25
DEFAULT_RATE = 3000  # runs/s, without §1's figure (--only soak): what held at load 4.5 here
CONCURRENCY = 16  # per worker, without §1's figure
BATCH_SECONDS = 0.05  # the producer's schedule: one enqueue_many every 50 ms
TARGET_RATIO = 1.5  # p95 wait of the last window ÷ the first's
SIZES = """
SELECT sum(pg_total_relation_size(c.oid))::bigint, sum(pg_indexes_size(c.oid))::bigint
FROM pg_class c WHERE relname IN ('job_runs', 'job_attempts')
"""
# jobsweb.prune on (firing now, then every prune_every seconds) or off, for the next window.
PRUNE_ON = ("UPDATE job_definitions SET enabled = %(on)s, next_run_at = CASE WHEN %(on)s THEN now() "
            "ELSE next_run_at END WHERE name = 'jobsweb.prune'")
DELETED = "SELECT coalesce(sum(n_tup_del), 0)::bigint FROM pg_stat_user_tables WHERE relname = 'job_runs'"
# Whether a run of the window [lo, hi) is still to end (the status indexes; no count of the table).
UNENDED = ("SELECT EXISTS (SELECT 1 FROM job_runs WHERE status IN ('queued', 'running') "
           "AND job_type = 'jobsweb.noop' AND created_at < %(hi)s)")
# One window's runs: how many, how many succeeded on one attempt (counted on the run), how many had
# not ended yet when read, the job_attempts rows of its runs and how many runs they are of (a run
# started twice has two), and the wait from due to start. A run not started yet counts its wait so
# far, so that a backlog shows in the figures rather than hiding from them.
WINDOW = """
WITH w AS MATERIALIZED (
    SELECT id, status, attempts, extract(epoch FROM coalesce(started_at, clock_timestamp()) - run_at) AS wait
    FROM job_runs WHERE job_type = 'jobsweb.noop' AND created_at >= %(lo)s AND created_at < %(hi)s
)
SELECT (SELECT count(*) FROM w),
       (SELECT count(*) FROM w WHERE status = 'succeeded' AND attempts = 1),
       (SELECT count(*) FROM w WHERE status IN ('queued', 'running')),
       (SELECT count(*) FROM job_attempts a JOIN w ON a.run_id = w.id),
       (SELECT count(DISTINCT a.run_id) FROM job_attempts a JOIN w ON a.run_id = w.id),
       (SELECT percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY wait) FROM w),
       (SELECT max(wait)::float8 FROM w)
"""


def soak(bench, throughput=None, rate=None, measured_in="§1 of this run"):
    """The soak on bench's server; its figures. The rate: `rate`, else SHARE of two processes'
    best drain in `throughput` (§1's results, or as §1 measures them), else DEFAULT_RATE."""
    from .measures import migrated

    s = bench.sizes
    concurrency, source = CONCURRENCY, f"--rate {rate:,.0f} runs/s" if rate else None
    if rate is None and throughput:
        table = throughput["table"]
        twos = {c: v for (p, c), v in table.items() if p == 2}
        if twos:
            concurrency = max(twos, key=twos.get)
            rate = SHARE * twos[concurrency]
            source = (f"{SHARE:g} × two processes' best drain in {measured_in} ({twos[concurrency]:,.0f} runs/s "
                      f"at concurrency {concurrency})")
    if rate is None:
        rate, source = DEFAULT_RATE, f"the constant DEFAULT_RATE ({DEFAULT_RATE:,} runs/s): no §1 in this run"
    url, _ = migrated(bench, "bench_soak")
    out = run_soak(url, rate=rate, seconds=s["soak_seconds"], window=s["soak_window"], retain=s["soak_retain"],
                   prune_every=s["soak_prune_every"], concurrency=concurrency, log=bench.log)
    out["rate_source"] = source
    return out


def run_soak(url, *, rate, seconds, window, retain, prune_every, concurrency, log=print, processes=2):
    """Producer, `processes` workers and retention for `seconds`; the figures of each window."""
    from .measures import wait_for

    load_before = os.getloadavg()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASK_", "JOBSWEB_"))}
    env.update(DATABASE_URL=url, SECRET_KEY=SECRET, JOBSWEB_RETAIN_UNIT="seconds",
               JOBSWEB_RETAIN_SUCCEEDED=str(retain))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE job_definitions SET schedule = %s, next_run_at = now() WHERE name = 'jobsweb.prune'",
                     [f"@every {prune_every}s"])
        conn.execute("CHECKPOINT")
        workers = [subprocess.Popen([sys.executable, "-m", "flask", "--app", "wsgi", "run-jobs", "--forever",
                                     "--concurrency", str(concurrency)], cwd=ROOT, env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for _ in range(processes)]
        producer = None
        try:
            wait_for(conn, "SELECT 1 FROM job_workers HAVING count(*) = %s", [processes], 120)
            size0, indexes0 = conn.execute(SIZES).fetchone()
            deleted0 = conn.execute(DELETED).fetchone()[0]
            producer = subprocess.Popen([sys.executable, "-m", "bench.soak", "produce", url, str(rate), str(seconds)],
                                        cwd=ROOT, stdout=subprocess.PIPE, text=True)
            t0 = json.loads(producer.stdout.readline())["t0"]
            log(f"soak: producer at {rate:,.0f} runs/s for {seconds} s, {processes} workers × concurrency "
                f"{concurrency}, succeeded runs kept {retain} s, jobsweb.prune every {prune_every} s")
            windows = []
            for k in range(seconds // window):
                windows.append(read_window(conn, t0, k, window, retain, workers))
                w = windows[-1]
                log(f"soak window {k}: {w['runs']:,} runs, wait p50 {w['p50_ms']:.1f} / p95 {w['p95_ms']:.1f} ms, "
                    f"{w['size_mb']:.0f} MB, {w['deleted']:,} deleted so far")
            produced = json.loads(producer.stdout.readline())
            producer.wait(timeout=60)
            if producer.returncode != 0:
                raise RuntimeError(f"the producer exited {producer.returncode}")
        finally:
            for proc in ([producer] if producer and producer.poll() is None else []) + workers:
                proc.terminate()
            codes = [proc.wait(timeout=60) for proc in workers]
        if any(codes):
            raise RuntimeError(f"the workers exited {codes}")
        left = conn.execute("SELECT count(*) FROM job_runs WHERE job_type = 'jobsweb.noop' "
                            "AND created_at >= %s::timestamptz + make_interval(secs => %s)",
                            [t0, seconds // window * window]).fetchone()[0]
    return summary(windows, produced, left, size0, indexes0, deleted0, load_before, os.getloadavg(), rate=rate,
                   seconds=seconds, window=window, retain=retain, prune_every=prune_every, processes=processes,
                   concurrency=concurrency)


def read_window(conn, t0, k, window, retain, workers):
    """Window k's figures, read once its runs have ended, or once retention could delete its first
    runs were they read later (at most 10 s after it closed)."""
    bounds = conn.execute("SELECT %(t0)s::timestamptz + make_interval(secs => %(lo)s), "
                          "%(t0)s::timestamptz + make_interval(secs => %(hi)s)",
                          {"t0": t0, "lo": k * window, "hi": (k + 1) * window}).fetchone()
    params = {"lo": bounds[0], "hi": bounds[1]}
    # The window closes by the database's clock; then its last runs start and end.
    while conn.execute("SELECT now() < %(hi)s", params).fetchone()[0]:
        time.sleep(0.1)
        if any(proc.poll() is not None for proc in workers):
            raise RuntimeError(f"a worker exited {[proc.poll() for proc in workers]} during the soak")
    deleted = conn.execute(DELETED).fetchone()[0]  # by the window's close
    conn.execute(PRUNE_ON, {"on": (k + 1) % 2 == 0})
    deadline = time.monotonic() + min(10, (retain - window) / 2)
    while conn.execute(UNENDED, params).fetchone()[0] and time.monotonic() < deadline:
        time.sleep(0.2)
    runs, once, unended, attempts, attempted, (p50, p95, p99), longest = conn.execute(WINDOW, params).fetchone()
    size, indexes = conn.execute(SIZES).fetchone()
    return {"start_s": k * window, "runs": runs, "exactly_once": once, "unended": unended, "attempt_rows": attempts,
            "runs_with_attempts": attempted, "p50_ms": 1000 * p50, "p95_ms": 1000 * p95, "p99_ms": 1000 * p99,
            "max_ms": 1000 * longest, "size_mb": size / 2**20, "indexes_mb": indexes / 2**20,
            "deleted": deleted, "load": os.getloadavg()[0]}


def summary(windows, produced, left, size0, indexes0, deleted0, load_before, load_after, **settings):
    """What §21 and the targets read: per window, first vs last, before vs while deleting, growth."""
    previous = deleted0
    for w in windows:
        w["deleted_in"], previous = w["deleted"] - previous, w["deleted"]
        w["deleted"] -= deleted0
    runs = sum(w["runs"] for w in windows)
    # Runs that did not succeed on one attempt, or have more than one attempt row; a run still
    # queued or running when its window was read is counted apart (not seen to end).
    twice = sum(w["runs"] - w["exactly_once"] - w["unended"] + w["attempt_rows"] - w["runs_with_attempts"]
                for w in windows)
    unended = sum(w["unended"] for w in windows)
    # From retention's first deletes on, the windows with jobsweb.prune on (even) and those with it
    # off (odd), side by side: in the odd ones only a prune run begun before the switch deletes.
    deleting = next((i for i, w in enumerate(windows) if w["deleted_in"] > 0), None)
    before = windows[:deleting] if deleting is not None else windows
    later = list(enumerate(windows))[deleting:] if deleting is not None else []
    during = [w for i, w in later if i % 2 == 0]
    quiet = [w for i, w in later if i % 2 == 1]
    mb0 = size0 / 2**20

    def growth(first_mb, last_mb, first_runs, last_runs):
        return (last_mb - first_mb) / ((last_runs - first_runs) / 1e6) if last_runs > first_runs else None

    cumulative = [sum(w["runs"] for w in windows[:i + 1]) for i in range(len(windows))]
    free = before[-1] if before else None
    return {**settings, "windows": windows, "produced": produced["sent"],
            "produced_rate": produced["sent"] / produced["seconds"], "late_ms": produced["late_ms"],
            "runs": runs, "after_last_window": left, "bad_runs": twice, "unended": unended,
            "exactly_once": twice == 0 and unended == 0 and runs + left == produced["sent"],
            "p95_first": windows[0]["p95_ms"], "p95_last": windows[-1]["p95_ms"],
            "ratio": windows[-1]["p95_ms"] / windows[0]["p95_ms"],
            "deleting_from": deleting, "deleted": windows[-1]["deleted"],
            "p95_before_deletes": statistics.median(w["p95_ms"] for w in before) if before else None,
            "p95_while_deleting": statistics.median(w["p95_ms"] for w in during) if during else None,
            "p95_while_deleting_max": max(w["p95_ms"] for w in during) if during else None,
            "p95_quiet": statistics.median(w["p95_ms"] for w in quiet) if quiet else None,
            "deleted_on": sum(w["deleted_in"] for w in during), "deleted_off": sum(w["deleted_in"] for w in quiet),
            "size_start_mb": mb0, "size_end_mb": windows[-1]["size_mb"],
            "indexes_start_mb": indexes0 / 2**20, "indexes_end_mb": windows[-1]["indexes_mb"],
            # MB per million runs: over the soak, and before retention's first delete (every run's rows kept).
            "growth_mb_per_million": growth(mb0, windows[-1]["size_mb"], 0, runs),
            "growth_kept_mb_per_million": free and growth(mb0, free["size_mb"], 0, cumulative[len(before) - 1]),
            "index_growth_kept_mb_per_million": free and growth(indexes0 / 2**20, free["indexes_mb"], 0,
                                                                cumulative[len(before) - 1]),
            "load_before": load_before, "load_after": load_after}


def produce(url, rate, seconds):
    """The producer's process: enqueue_many every BATCH_SECONDS, as many runs as `rate` owes by
    then, for `seconds`. Prints its start by the database's clock, then what it sent."""
    from jobsweb import create_app, enqueue_many
    from jobsweb.core.database import database_url

    app = create_app({"SQLALCHEMY_DATABASE_URI": database_url(url), "JOBSWEB_WEB_ALERTS": False,
                      "SECRET_KEY": SECRET})
    with app.app_context(), psycopg.connect(url, autocommit=True) as conn:
        enqueue_many("jobsweb.noop", [])  # the imports and the connection, before the clock starts
        t0 = conn.execute("SELECT now()").fetchone()[0]
        print(json.dumps({"t0": t0.isoformat()}), flush=True)
        start = time.monotonic()
        sent, late, tick = 0, 0.0, 0
        while (due := (tick := tick + 1) * BATCH_SECONDS) <= seconds:
            pause = start + due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            else:
                late = max(late, -pause)
            if owed := round(rate * due) - sent:
                enqueue_many("jobsweb.noop", [{}] * owed)
                sent += owed
        elapsed = time.monotonic() - start
    print(json.dumps({"sent": sent, "seconds": elapsed, "late_ms": 1000 * late}), flush=True)


def soak_section(r):
    """§21: sustained load."""
    k = r.get("soak")
    lines = ["## 21. Sustained load: a steady producer, two `--forever` workers and retention", ""]
    if not k:
        return lines + ["**Not measured.**", ""]
    lines += [
        f"A producer process calls `enqueue_many` every {BATCH_SECONDS * 1000:.0f} ms with as many no-op runs "
        f"as its rate owes by then, **{k['rate']:,.0f} runs/s** (rate: {k['rate_source']}), for {k['seconds']} s: "
        f"it sent {k['produced']:,} runs ({k['produced_rate']:,.0f}/s, at most {k['late_ms']:.0f} ms behind "
        f"its schedule). {k['processes']} `flask run-jobs --forever --concurrency {k['concurrency']}` run them "
        f"(the per-run INFO log line on), with succeeded runs kept {k['retain']} s (JOBSWEB_RETAIN_UNIT=seconds) "
        f"and the built-in jobsweb.prune made to fire `@every {k['prune_every']}s` in every other window (off "
        "in the others), so that its deletes run during the soak beside windows without them. Wait: from run_at to started_at, the database's clock, by the window the run was created "
        f"in; load average {fmt_load(k['load_before'])} before, {fmt_load(k['load_after'])} after.",
        "",
        "| from s (jobsweb.prune) | runs | wait p50 ms | p95 ms | p99 ms | max ms | job_runs + job_attempts MB (indexes) "
        "| deleted in it | load (1 min) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for i, w in enumerate(k["windows"]):
        lines.append(f"| {w['start_s']} ({'on' if i % 2 == 0 else 'off'}) | {w['runs']:,} | {w['p50_ms']:.1f} | {w['p95_ms']:.1f} | "
                     f"{w['p99_ms']:.1f} | {w['max_ms']:.0f} | {w['size_mb']:.0f} ({w['indexes_mb']:.0f}) | "
                     f"{w['deleted_in']:,} | {w['load']:.1f} |")
    kept = k["growth_kept_mb_per_million"]
    lines += [
        "",
        f"p95 last window ÷ first: **{k['ratio']:.2f}×** ({k['p95_last']:.1f} vs {k['p95_first']:.1f} ms). "
        + (f"Retention deleted from the window at {k['windows'][k['deleting_from']]['start_s']} s on "
           f"({k['deleted']:,} rows of job_runs): median p95 **{fmt_ms(k['p95_while_deleting'])} ms** in the windows "
           f"with jobsweb.prune on ({k['deleted_on']:,} rows deleted in them; worst window "
           f"{fmt_ms(k['p95_while_deleting_max'])} ms) against **{fmt_ms(k['p95_quiet'])} ms** in those between with "
           f"it off ({k['deleted_off']:,} rows deleted in them, by prune runs begun before the switch), and "
           f"{fmt_ms(k['p95_before_deletes'])} ms before its first delete. " if k["deleting_from"] is not None
           else "Retention deleted nothing during the soak. ")
        + f"Every run exactly once: **{'yes' if k['exactly_once'] else 'NO'}** ({k['runs']:,} runs in the "
        f"windows and {k['after_last_window']:,} after the last, against {k['produced']:,} sent; "
        f"{k['bad_runs']:,} not succeeded on exactly one attempt, {k['unended']:,} not yet ended when their window "
        "was read).",
        "",
        f"job_runs and job_attempts with their indexes (pg_total_relation_size): {k['size_start_mb']:.0f} MB at "
        f"the start, {k['size_end_mb']:.0f} MB at the end, "
        + (f"**{kept:,.0f} MB per million runs** while every run was kept (of it, indexes "
           f"{k['index_growth_kept_mb_per_million']:,.0f} MB), " if kept else "")
        + f"{fmt_mb(k['growth_mb_per_million'])} MB per million runs over the whole soak with retention deleting, "
        f"and **{fmt_mb(late_growth(k))} MB per million runs** over its second half (autovacuum lets the inserts "
        "reuse what the deletes free).",
        "",
    ]
    return lines


def late_growth(k):
    """MB that job_runs and job_attempts grew per million runs over the soak's second half."""
    windows = k["windows"]
    half = len(windows) // 2
    runs = sum(w["runs"] for w in windows[half:])
    return (windows[-1]["size_mb"] - windows[half - 1]["size_mb"]) / (runs / 1e6) if half and runs else None


def fmt_ms(value):
    return "–" if value is None else f"{value:.1f}"


def fmt_mb(value):
    """MB per million runs; "–" when the soak had no window to measure it in (a short soak under
    load: retention deleting from its first window on, so no window kept every run)."""
    return "–" if value is None else f"{value:,.0f}"


def fmt_load(load):
    return ", ".join(f"{x:.1f}" for x in load)


def soak_target(r):
    """The Targets row of §21: (target, measured, met, what limits it)."""
    k = r.get("soak")
    if not k:
        return ("sustained load: p95 wait last 30 s window ≤ 1.5× the first, every run once", "–", None, "")
    # The windows with jobsweb.prune on against those between with it off (else, before the first delete).
    deleting, quiet = k["p95_while_deleting"], k["p95_quiet"] or k["p95_before_deletes"]
    # Deletes with no window without them to hold them against: the target cannot be judged.
    met = None if deleting is not None and quiet is None else (
        k["ratio"] <= TARGET_RATIO and k["exactly_once"] and (deleting is None or deleting <= TARGET_RATIO * quiet))
    return (f"sustained load ({k['rate']:,.0f} runs/s for {k['seconds']} s, two `--forever` workers, retention "
            f"deleting in every other window): p95 wait last {k['window']} s window ≤ {TARGET_RATIO}× the first, "
            f"and with jobsweb.prune on ≤ {TARGET_RATIO}× with it off, every run once",
            f"{k['p95_last']:.1f} vs {k['p95_first']:.1f} ms = {k['ratio']:.2f}×; deleting "
            + (f"{deleting:.1f} vs {fmt_ms(quiet)} ms" + (f" = {deleting / quiet:.2f}×" if quiet else "")
               if deleting is not None else "nothing")
            + f"; {'once' if k['exactly_once'] else 'NOT once'}; tables and indexes "
            f"{fmt_mb(k['growth_kept_mb_per_million'])} MB per million runs kept, "
            f"{fmt_mb(late_growth(k))} MB in the second half", met,
            "the 2 cores, shared by the producer, both workers and their log lines, retention's deletes, "
            "autovacuum and the machine's other load: a window's p95 follows the load average beside it (§21)")


def main(argv=None):
    if argv is None and sys.argv[1:2] == ["produce"]:
        produce(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
        return 0
    from .harness import FULL, Bench
    from .measures import drain, migrated
    from .server import Server

    parser = argparse.ArgumentParser(prog="python -m bench.soak")
    parser.add_argument("--seconds", type=int, default=FULL["soak_seconds"])
    parser.add_argument("--rate", type=float, help="runs/s (default: SHARE of two processes' best drain, "
                                                   "measured first on each server)")
    parser.add_argument("--servers", default="embedded,stock")
    args = parser.parse_args(argv)
    results = {}
    for kind in args.servers.split(","):
        server = Server.start(kind)
        try:
            bench = Bench(server, {**FULL, "soak_seconds": args.seconds}, 3, False)
            throughput = None
            if args.rate is None:
                # Two processes' best drain, as §1 measures it (median of 3 at each concurrency).
                url, _ = migrated(bench, "bench_throughput")
                drain(bench, url, 1, 4, FULL["warmup"])
                table = {(2, c): statistics.median(drain(bench, url, 2, c, FULL["drain"])[0] for _ in range(3))
                         for c in (16, 64)}
                bench.log(f"two processes drain: {table}")
                throughput = {"table": table}
            results[kind] = soak(bench, throughput, args.rate, "a drain just before, as §1 measures it")
        finally:
            server.stop()
        print(json.dumps({kind: results[kind]}, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
