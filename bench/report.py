"""docs/BENCHMARKS.md and its plots, from the results of one run of the suite."""

import math
from datetime import datetime, timezone
from pathlib import Path


def fmt(value, digits=0):
    return "–" if value is None else f"{value:,.{digits}f}"


def ratio(a, b):
    return None if not a or not b else a / b


def targets(r):
    """(target, measured, met, what limits it) for every target of the issue."""
    t = r["throughput"]
    table = t["table"]
    one = table[tuple(t["best_one_process"])]
    best = table[tuple(t["best"])]
    peers = r["peers"]
    pgq = peers.get("pgqueuer") and peers["pgqueuer"]["rate"]
    pro = peers.get("procrastinate") and peers["procrastinate"]["rate"]
    points = r["history"]["points"]
    empty, full = points[0], points[-1]
    enq, wake, tick, q = r["enqueue"], r["wake"], r["tick"], r["queues"]
    n_hist = full["history"]
    worst_page = max(r["pages"].items(), key=lambda kv: kv[1]["p95"])
    poll_ms = wake["poll_interval"] * 1000
    floor = r["history"]["commit_floor"]
    two = max(table[(2, c)] for c in r["sizes"]["concurrency"]) if 2 in r["sizes"]["processes"] else None
    low = {c: table[(1, c)] for c in (4, 8) if (1, c) in table}
    a, w, al = r["async"], r["whole"], r["alerts"]
    # The rate-limited queue's first runs start at once, then `rate` more at the start of each second.
    rate_bound_s = max(math.ceil(q["n"] // 10 / q["rate"]) - 1, 1)
    whole_c = min(w["jobsweb"])
    rows = [
        ("1 process ≥ 2× PgQueuer's best", f"{fmt(one)} vs {fmt(pgq)} runs/s = {fmt(ratio(one, pgq), 2)}×",
         None if pgq is None else one >= 2 * pgq,
         "the machine's 2 cores: a process claims on one connection and writes outcomes on a second, "
         "so two PostgreSQL backends (~45 us of CPU a run between them: two non-HOT updates of job_runs, "
         "status being in most of its indexes, plus an attempt row, §3 and §13) and the worker's Python "
         "(~28 us a run) share them; PgQueuer deletes its job row and keeps no attempt history"),
        ("2 processes ≥ 2× PgQueuer's best", f"{fmt(two)} vs {fmt(pgq)} runs/s = {fmt(ratio(two, pgq), 2)}×",
         None if pgq is None or two is None else two >= 2 * pgq,
         "2 cores shared by four PostgreSQL backends (two lanes a process), both workers' Python and "
         "the machine's other load"),
        ("--concurrency 4 and 8 ≥ 80% of one process's best",
         ", ".join(f"{c}: {fmt(100 * ratio(v, one), 0)}%" for c, v in low.items()) or "–",
         None if not low else all(v >= 0.8 * one for v in low.values()),
         "a claim takes the free slots plus about 0.1 s of work at the recent finishing rate "
         "(engine/claim_ahead.py), so the claim's size no longer hangs on --concurrency; the runs waiting "
         "are held like running ones (heartbeats, SIGTERM release, lease recovery)"),
        ("1 process ≥ 10× Procrastinate's", f"{fmt(one)} vs {fmt(pro)} runs/s = {fmt(ratio(one, pro), 2)}×",
         None if pro is None else one >= 10 * pro,
         "Procrastinate fetches and finishes one job per statement; ours a batch per statement"),
        ("best processes ≥ 30% of the pgbench ceiling",
         f"{fmt(best)} vs {fmt(r['ceiling']['rate'])} runs/s = {fmt(100 * ratio(best, r['ceiling']['rate']), 0)}%",
         best >= 0.3 * r["ceiling"]["rate"],
         "2 cores shared by PostgreSQL and the workers' Python; pgbench spends no CPU on handlers"),
        (f"claim p95 at {n_hist:,} finished ≤ 2 ms", f"{fmt(full['p95'], 3)} ms", full["p95"] <= 2,
         f"a claim is a durable commit: the cheapest one (one-row UPDATE) takes p50 {floor['p50']:.3f} / "
         f"p95 {floor['p95']:.3f} ms here; the claim's statement is planned once per server connection "
         "(PL/pgSQL function jobsweb_claim_runs, pooler-safe: no client-side prepare), §4; history size "
         "barely matters (partial index job_runs_claimable)"),
        ("claim p95 ≤ 1.5× empty history", f"{fmt(ratio(full['p95'], empty['p95']), 2)}×",
         full["p95"] <= 1.5 * empty["p95"], "the claim's UPDATE is not HOT: it adds entries to every "
         "index of job_runs, and status_id, job_type_id and created_at grow with the history; plus "
         "WAL-flush jitter"),
        ("bulk enqueue ≥ 30,000 runs/s", f"{fmt(enq['bulk_rate'])} runs/s", enq["bulk_rate"] >= 30_000,
         "JSON encoding of payloads in Python and index maintenance on job_runs"),
        ("single enqueue p50 ≤ 1 ms", f"{fmt(enq['single_p50'], 3)} ms", enq["single_p50"] <= 1,
         "one commit = one WAL flush (fsync on) plus SQLAlchemy's connection checkout"),
        ("enqueue → start p50 ≤ 5 ms with NOTIFY", f"{fmt(wake['notify']['p50'], 1)} ms",
         wake["notify"]["p50"] <= 5, "wake-up of the worker thread and one claim round trip"),
        (f"enqueue → start p50 ≤ poll/2 + 5 ms polling only (poll {poll_ms:g} ms)",
         f"{fmt(wake['polling']['p50'], 1)} ms", wake["polling"]["p50"] <= poll_ms / 2 + 5,
         "the poll interval itself"),
        (f"admin pages p95 ≤ 50 ms at {n_hist:,} runs", f"worst: {worst_page[0]} {fmt(worst_page[1]['p95'], 1)} ms",
         worst_page[1]["p95"] <= 50, "template rendering (about two thirds of a runs page); a payload filter "
         "reads every run whose payload matches before the newest 50 are kept (jsonb containment through the "
         "GIN index job_runs_payload; definitions are joined to the page only); the dashboard's 24-hour chart "
         "counts only the current hour on refresh, with an index-only scan (migration 0006)"),
        (f"{tick['definitions']:,} due definitions materialised ≤ 1 s", f"{fmt(tick['1']['seconds'], 2)} s",
         tick["1"]["seconds"] <= 1, "one INSERT of every slot and one UPDATE of every definition per "
         "batch of 500; what remains is the runs' index maintenance and croniter/zoneinfo per definition in Python"),
        ("exactly once under 4 concurrent ticks", f"{tick['4']['runs']:,} runs for {tick['definitions']:,} slots",
         tick["4"]["exactly_once"], "SKIP LOCKED on definitions and the unique (definition_id, scheduled_for)"),
        ("10 queues (2 limited, 1 rate-limited) drain ≥ 80% of one queue",
         f"{fmt(q['queues'])} vs {fmt(q['plain'])} runs/s = {fmt(100 * ratio(q['queues'], q['plain']), 0)}%",
         q["queues"] >= 0.8 * q["plain"],
         f"first the rate limit itself: the rate-limited queue's {q['n'] // 10:,} runs at {q['rate']}/s cannot all "
         f"start within {rate_bound_s} s, so no claim drains the mix faster than {fmt(q['n'] / rate_bound_s)} "
         f"runs/s ({fmt(100 * ratio(q['n'] / rate_bound_s, q['plain']), 0)}% of one queue); then the limited "
         "queues' backlog: the claim takes unlimited queues' runs in one ordered scan of job_runs_claimable, "
         f"which reads past every run waiting in a limited or paused queue (here {2 * q['n'] // 10:,}) on every "
         f"claim, and a limit-{q['limit']} queue gives at most {q['limit']} runs per claim"),
        (f"async: {a['runs']:,} runs of `await asyncio.sleep(0.5)` at --concurrency {a['concurrency']:,} "
         "< 8 s wall, peak RSS < 250 MB", f"{a['wall']:.2f} s, {fmt(a['rss_mb'])} MB",
         a["wall"] < 8 and a["rss_mb"] < 250,
         f"process start-up (~1 s: Flask, SQLAlchemy, psycopg imports), then claims of up to "
         f"{a['concurrency']:,} runs and their sleeps; one event loop thread, a task per run, no thread "
         "per run (§11)"),
        (f"one `flask run-jobs` for {w['runs']:,} no-op runs, start-up included (reported)",
         f"{w['jobsweb'][whole_c]:.1f} s at --concurrency {whole_c} vs PgQueuer {fmt(w['pgqueuer'], 1)} s",
         "reported", "start-up and the per-run INFO log line; PgQueuer's drain also waits ~4 s for its "
         "buffers on shutdown (§12)"),
        ("no worker running: an overdue definition's webhook ≤ 60 s after the web app starts",
         f"{al['seconds']:.1f} s (worst {al['worst']:.1f} s)", al["worst"] <= 60,
         "gunicorn's start-up, then the web processes' alert thread: its first evaluation comes one "
         "JOBSWEB_ALERT_INTERVAL (5 s) after start, then one webhook POST (ops/web_alerts.py)"),
        ("worker peak RSS ≤ 120 MB", f"{fmt(t['rss_mb'], 0)} MB", t["rss_mb"] <= 120,
         "Flask app, SQLAlchemy and psycopg imported in every worker; the peak is at concurrency 64 "
         "(64 handler threads and their batches)"),
    ]
    return rows


def plots(r, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = r["throughput"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for c in r["sizes"]["concurrency"]:
        xs = r["sizes"]["processes"]
        ax.plot(xs, [t["table"][(p, c)] for p in xs], marker="o", label=f"jobsweb, concurrency {c}")
    ax.axhline(r["ceiling"]["rate"], color="grey", linestyle="--", label="pgbench replay of our SQL")
    for name, peer in r["peers"].items():
        if peer:
            ax.axhline(peer["rate"], linestyle=":", color="C3" if name == "pgqueuer" else "C4",
                       label=f"{name} (1 process, best)")
    ax.set_xlabel("worker processes")
    ax.set_ylabel("no-op runs per second")
    ax.set_xticks(r["sizes"]["processes"])
    ax.set_title("Throughput vs processes")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "bench_throughput.png", dpi=100)
    plt.close(fig)

    points = r["history"]["points"]
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [max(p["history"], 1) for p in points]
    for key in ("p50", "p95", "p99"):
        ax.plot(xs, [p[key] for p in points], marker="o", label=key)
    ax.set_xscale("log")
    ax.set_xlabel("finished runs in job_runs (0 shown at 1)")
    ax.set_ylabel("claim latency, ms")
    ax.set_title("Claim latency vs history size")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "bench_claim_latency.png", dpi=100)
    plt.close(fig)


def write(r, out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # JSON-friendly keys for the tick results.
    r["tick"] = {str(k): v for k, v in r["tick"].items()}
    plots(r, out)
    t = r["throughput"]
    s = r["sizes"]
    lines = [
        "# Benchmarks",
        "",
        f"Written by `{'make bench-quick' if r['mode'] == 'quick' else 'make bench'}` ({r['mode']} mode) on "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC in {r['seconds'] / 60:.1f} minutes: "
        f"PostgreSQL {r['pg_version']} (fresh server, fsync and synchronous_commit on), "
        f"{r['cpus']} CPUs, Python {r['python']}, git revision `{r['revision']}`. Every figure is the "
        f"median of {r['repeats']} repeat(s) after a warm-up. Absolute numbers drift on shared "
        "machines, so read the ratios (all measured in this one run) rather than the absolute numbers.",
        "",
        "## Targets",
        "",
        "| target | measured | met? | what limits it |",
        "| --- | --- | --- | --- |",
    ]
    for target, measured, met, limit in targets(r):
        verdict = met if isinstance(met, str) else "not measured" if met is None else ("met" if met else "**not met**")
        lines.append(f"| {target} | {measured} | {verdict} | {limit} |")
    lines += [
        "",
        f"## 1. Throughput: draining {s['drain']:,} no-op runs (attempt history on)",
        "",
        "Runs per second from the first claim to the last finish (database clock), with the workers "
        "started and idle before the runs appear in one INSERT, so process start-up is not counted. "
        f"Below concurrency 16 fewer runs are drained (concurrency c: {s['drain']:,} × c/16, at least "
        f"{s['drain'] // 10:,}), or those rows alone would take most of the run.",
        "",
        "| processes | " + " | ".join(f"concurrency {c}" for c in s["concurrency"]) + " |",
        "| --- | " + " | ".join("---" for _ in s["concurrency"]) + " |",
    ]
    for p in s["processes"]:
        lines.append(f"| {p} | " + " | ".join(fmt(t["table"][(p, c)]) for c in s["concurrency"]) + " |")
    st = t["steady"]
    one = t["table"][tuple(t["best_one_process"])]
    lines += [
        "",
        f"Steady state ({st['processes']} process(es) × concurrency {st['concurrency']}, a producer keeping "
        f"~{s['steady_backlog']:,} runs due, {st['seconds']} s): **{fmt(st['rate'])} runs/s**.",
        "",
        f"Cost of the per-run INFO log line (one per finished run; `started` is DEBUG): one process at concurrency {t['best_one_process'][1]} runs "
        f"{fmt(one)} runs/s with them and {fmt(t['quiet_one_process'])} runs/s at WARNING level "
        f"({fmt(100 * (t['quiet_one_process'] / one - 1), 0)}% more).",
        "",
        "![throughput vs processes](bench_throughput.png)",
        "",
        "## 2. Peers on the same server",
        "",
        "| queue | best setting | runs/s (1 process) | jobsweb 1 process ÷ peer |",
        "| --- | --- | --- | --- |",
        f"| jobsweb | concurrency {t['best_one_process'][1]} | {fmt(one)} | 1 |",
    ]
    for name, peer in r["peers"].items():
        if peer is None:
            lines.append(f"| {name} | not installed | – | – |")
            continue
        what = "batch_size" if name == "pgqueuer" else "concurrency"
        tried = ", ".join(f"{k}: {fmt(v[0])}/s" for k, v in peer["all"].items())
        lines.append(f"| {name} | {what} {peer['setting']} (tried {tried}) | {fmt(peer['rate'])} | "
                     f"{fmt(ratio(one, peer['rate']), 2)}× |")
    c = r["ceiling"]
    lines += [
        "",
        f"PgQueuer drains {s['pgqueuer_drain']:,} and Procrastinate {s['procrastinate_drain']:,} no-op jobs "
        "(fewer: it is slower) enqueued with their own batch APIs, in one worker process; runs/s from "
        "the first job started to the last finished in their own event tables (pgqueuer_log, "
        "procrastinate_events), as jobsweb's from job_runs.",
        "",
        "## 3. Ceiling: pgbench replaying our own SQL",
        "",
        f"What the worker sent while draining {s['drain']:,} runs (pg_stat_statements):",
        "",
        "| calls | rows | mean ms | ms per row | statement |",
        "| --- | --- | --- | --- | --- |",
    ]
    for calls, rows, mean, query in c["statements"]:
        per_row = f"{mean * calls / rows:.4f}" if rows else "–"
        lines.append(f"| {calls:,} | {rows:,} | {mean:.3f} | {per_row} | `{query}` |")
    best = t["table"][tuple(t["best"])]
    lines += [
        "",
        f"pgbench replays CLAIM_RUNS (batch {c['batch']}) then FINISH_RUNS for the claimed ids with "
        f"{c['processes']} connection(s), as many as the best jobsweb configuration has processes "
        f"({t['best'][0]} × concurrency {t['best'][1]}): **{fmt(c['rate'])} runs/s**; jobsweb reaches "
        f"{fmt(best)} runs/s = **{fmt(100 * ratio(best, c['rate']), 0)}%** of it.",
        "",
        "## 4. Claim latency vs history",
        "",
        "One-run claims (CLAIM_RUNS as the worker sends it) with 1,000 runs due and finished history "
        "(1% dead, each with its job_attempts row):",
        "",
        "| finished runs | p50 ms | p95 ms | p99 ms |",
        "| --- | --- | --- | --- |",
    ]
    for p in r["history"]["points"]:
        lines.append(f"| {p['history']:,} | {p['p50']:.3f} | {p['p95']:.3f} | {p['p99']:.3f} |")
    points = r["history"]["points"]
    lines += [
        "",
        f"p95 at the largest history ÷ empty: **{fmt(ratio(points[-1]['p95'], points[0]['p95']), 2)}×**.",
        "",
        "![claim latency vs history](bench_claim_latency.png)",
        "",
        f"The plan jobsweb_claim_runs keeps for CLAIM_RUNS' statement, with actual times (auto_explain), "
        f"at {points[-1]['history']:,} finished runs:",
        "",
        "```",
        r["history"]["explain"],
        "```",
        "",
        f"The floor under any claim here: a one-row UPDATE committing on its own takes p50 "
        f"{r['history']['commit_floor']['p50']:.3f} ms, p95 {r['history']['commit_floor']['p95']:.3f} ms "
        "(fsync and synchronous_commit on).",
        "",
        "The claims above go over a connection like the worker's, which never prepares a statement on "
        "the server (a pooler in transaction mode would lose it). CLAIM_RUNS calls the PL/pgSQL function "
        "jobsweb_claim_runs (migrations 0015 and 0016), which keeps its statement's plan in each server "
        "connection: the claim is planned once per connection, not on every call, and with enable_seqscan "
        "off that plan reads job_runs through its indexes even when it was made while the table was empty.",
        "",
        "## 5. Enqueue",
        "",
        f"- `enqueue()` one at a time for {s['enqueue_seconds']} s: p50 **{r['enqueue']['single_p50']:.3f} ms**, "
        f"p95 {r['enqueue']['single_p95']:.3f} ms, {fmt(r['enqueue']['single_rate'])} runs/s.",
        f"- `enqueue_many()` of {r['enqueue']['bulk_n']:,} runs: **{fmt(r['enqueue']['bulk_rate'])} runs/s**.",
        "",
        "## 6. Enqueue → start (`--forever`, database clock: created_at to started_at)",
        "",
        f"{s['wake_samples']:,} sequential samples each, arriving at random points of the poll cycle "
        f"(poll interval {r['wake']['poll_interval'] * 1000:g} ms):",
        "",
        "| mode | p50 ms | p95 ms |",
        "| --- | --- | --- |",
        f"| LISTEN/NOTIFY | {r['wake']['notify']['p50']:.1f} | {r['wake']['notify']['p95']:.1f} |",
        f"| polling only (JOBSWEB_LISTEN=off) | {r['wake']['polling']['p50']:.1f} | {r['wake']['polling']['p95']:.1f} |",
        "",
        f"## 7. Admin pages at {points[-1]['history']:,} runs",
        "",
        f"{s['page_requests']} requests each through `flask run` on loopback, signed in (time to the "
        "last byte, which includes the loopback round trip). The runs pages include the status chips' "
        "counts: each status counted exactly up to 10,000 runs (an index-only count with a LIMIT), "
        "the planner's estimate beyond, so the count costs the same at any size:",
        "",
        "| page | path | p50 ms | p95 ms |",
        "| --- | --- | --- | --- |",
    ]
    for name, page in r["pages"].items():
        lines.append(f"| {name} | `{page['path']}` | {page['p50']:.1f} | {page['p95']:.1f} |")
    tick = r["tick"]
    q_ = r["queues"]
    lines += [
        "",
        "## 8. Scheduler tick",
        "",
        f"{tick['definitions']:,} definitions due at once (`@every 1h`, overlap allow):",
        "",
        f"- one ticking worker: {tick['1']['seconds']:.2f} s, {tick['1']['runs']:,} runs",
        f"- four concurrent ticks: {tick['4']['seconds']:.2f} s, {tick['4']['runs']:,} runs, exactly once: "
        f"{'yes' if tick['4']['exactly_once'] else '**no**'}",
        "",
        "## 9. Memory",
        "",
        f"Peak RSS of a worker process during the throughput runs: **{fmt(t['rss_mb'])} MB** "
        f"(steady state: {fmt(st['rss_mb'])} MB).",
        "",
        "## 10. Queues",
        "",
        f"{q_['n']:,} no-op runs drained by {q_['processes']} process(es) × concurrency {q_['concurrency']}, "
        "from one queue, then dealt round-robin into ten queues of which q0 and q1 have a concurrency "
        f"limit of {q_['limit']} and q2 a rate limit of {q_['rate']}/1 (alternated, median of the repeats): "
        f"one queue **{fmt(q_['plain'])} runs/s**, ten queues **{fmt(q_['queues'])} runs/s** "
        f"(**{fmt(100 * ratio(q_['queues'], q_['plain']), 0)}%**). The rate-limited queue's most starts "
        f"in one second: {q_['rate_queue_most_per_second']}.",
        "",
        *extra_sections(r),
        "## Re-running",
        "",
        f"`make bench` (full, about {max(1, round(r['seconds'] / 60))} minutes here) or `make bench-quick` (about a minute, "
        "small sizes; CI runs it in tests/test_bench_quick.py). The peers come from the `bench` extra "
        "(`pip install -e '.[bench]'`).",
        "",
    ]
    path = out / "BENCHMARKS.md"
    path.write_text("\n".join(lines))
    return path


def extra_sections(r):
    """§11 async handlers, §12 whole processes, §13 scale on paper."""
    a, w, c, t = r["async"], r["whole"], r["ceiling"], r["throughput"]
    growth = r["history"]["growth"]
    drained = r["sizes"]["drain"]
    # PostgreSQL's execution time per run: every statement the worker sent, over the runs drained.
    pg_ms = sum(mean * calls for calls, _rows, mean, _query in c["statements"]) / drained
    per_core = 1000 / pg_ms if pg_ms else None
    wal = c["wal_bytes_per_run"]
    attempts, runs = growth["sizes"]["job_attempts"], growth["sizes"]["job_runs"]
    bytes_per_run = ((attempts["table_mb"] + attempts["indexes_mb"] + runs["table_mb"] + runs["indexes_mb"])
                     * 2**20 / max(runs["rows"], 1))
    prune_ms = growth["prune_ms_per_1000"] / 1000  # per run
    one = t["table"][tuple(t["best_one_process"])]
    lines = [
        "## 11. Async handlers",
        "",
        f"One process at `--concurrency {a['concurrency']:,}` runs {a['runs']:,} runs that each "
        f"`await asyncio.sleep(0.5)` (`jobsweb.async_sleep`): **{a['wall']:.2f} s** from the process's start "
        f"to its exit (the runs themselves span {a['span']:.2f} s by the database clock), peak RSS "
        f"**{fmt(a['rss_mb'])} MB**. The handlers are tasks on one event loop thread; the worker's loop "
        "thread claims, heartbeats and finishes for them as for threads.",
        "",
        f"## 12. Whole processes: {w['runs']:,} no-op runs, start-up included",
        "",
        "One invocation each, timed from its start to its exit, the runs already due:",
        "",
        "| command | wall s |",
        "| --- | --- |",
    ]
    for conc, wall in w["jobsweb"].items():
        lines.append(f"| `flask run-jobs --concurrency {conc}` (INFO log line per run) | {wall:.1f} |")
    lines += [
        f"| PgQueuer, one process, batch_size {w['pgqueuer_batch']} (drain mode) | {fmt(w['pgqueuer'], 1)} |",
        "",
        "## 13. Scale on paper",
        "",
        f"From §3: PostgreSQL spends **{pg_ms:.3f} ms** executing statements per run (claim, finish with its "
        f"attempt row), about {fmt(per_core)} runs/s per PostgreSQL core before commits, WAL writing and "
        f"connections; each run writes **{fmt(wal / 1024, 1)} kB of WAL** (its INSERT, two non-HOT "
        f"updates of job_runs, one job_attempts row, full-page images after checkpoints). One process "
        f"drains {fmt(one)} runs/s here; the pgbench replay of our SQL with as many connections as the "
        f"best configuration reaches {fmt(c['rate'])} runs/s on these 2 cores.",
        "",
        "With N worker hosts on one PostgreSQL server of C cores, throughput grows with N until "
        "PostgreSQL's CPU is spent: roughly C × "
        f"{fmt(per_core)} runs/s for no-op jobs (real handlers take longer, so N must be larger to get "
        "there). What saturates first, in order:",
        "",
        f"1. **WAL**: {fmt(wal / 1024, 1)} kB per run is {fmt(wal * 1000 / 2**20, 1)} MB/s at 1,000 runs/s; "
        "each worker round trip is one commit (one WAL flush), batched over the runs it finishes and claims, "
        "so more processes mean more flushes, which PostgreSQL groups. A disk with slow fsync caps every "
        "round trip (§4's commit floor).",
        "2. **Index maintenance**: a claim and a finish are non-HOT updates (status is in most of job_runs' "
        f"indexes), each adding an entry to every index; job_runs' indexes are {fmt(runs['indexes_mb'])} MB "
        f"for its {runs['rows']:,} rows here, so they leave memory long before the tables do at tens of "
        "millions of kept runs.",
        "3. **Connections**: each worker process holds one connection, a second while it is busy with "
        "short jobs (its outcomes are written there while the first claims) and one more for LISTEN; "
        "hundreds of processes need a pooler in transaction mode (docs/DEPLOY.md), which jobsweb supports.",
        "",
        "What jobsweb offers then: more worker hosts (exactly once under any number, §1), a pooler for the "
        "connections, retention (`jobsweb.prune` daily, JOBSWEB_RETAIN_*) to keep job_runs and job_attempts "
        "near their working set, and `--queues` to split work between fleets.",
        "",
        f"**Partitioning job_attempts by time: not worth doing now.** At {runs['rows']:,} finished runs, "
        f"job_runs and job_attempts take {fmt(bytes_per_run)} bytes per run with their indexes "
        f"(job_attempts: {fmt(attempts['table_mb'])} MB + {fmt(attempts['indexes_mb'])} MB of indexes), and "
        f"pruning the oldest runs costs {growth['prune_ms_per_1000']:.0f} ms per 1,000 runs (PRUNE_RUNS, "
        f"batches of {growth['prune_batch']}): keeping up with 1,000 runs/s keeps one database "
        f"connection busy {fmt(100 * prune_ms * 1000 / 1000, 1)}% of the time, against {pg_ms:.3f} ms of PostgreSQL time per "
        "run to execute it. Dropping a day's partition would be cheaper than deleting it, but "
        "job_attempts would then need the partition key in its primary key and every foreign key, and "
        "the delete is not what limits throughput: the claim and finish are.",
        "",
    ]
    return lines
