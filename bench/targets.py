"""The issue's targets, judged on one server's results: (target, measured, met, what limits it).

met is True or False, None when the figure could not be measured (a peer not installed: the
report says so loudly), or a string when the target does not apply ("reported", a build
without JIT)."""

import math
import statistics

from .soak import soak_target


def fmt(value, digits=0):
    return "–" if value is None else f"{value:,.{digits}f}"


def ratio(a, b):
    return None if not a or not b else a / b


def cpu_needed(cores, rate):
    """(µs a run, µs a run of one process's own) at most, for a drain of `rate` runs/s on `cores`
    cores: no drain goes faster than its CPU per run allows with every core busy all the time,
    and one process's Python threads take turns on one core (the GIL), so its own CPU, but for
    the system calls in it, comes to one core at most. A peer's CPU per run halved is no such
    bound: its own drain keeps fewer than all the cores busy (§12)."""
    return cores / rate * 1e6, 1e6 / rate


def together_us(cpu):
    """{system: µs a run, PostgreSQL's and the worker process's CPU together} of §12's CPU per run,
    for each system it measured (a run before two processes were measured has no two_processes)."""
    return {system: cpu[system]["server_us"] + cpu[system]["client_us"]
            for system in ("jobsweb", "two_processes", "pgqueuer") if system in cpu}


def targets(r):
    """(target, measured, met, what limits it) for every target of the issue."""
    t = r["throughput"]
    table = t["table"]
    one = table[tuple(t["best_one_process"])]
    best = table[tuple(t["best"])]
    peers = r["peers"]
    pgq = peers["pgqueuer"]["rate"]
    pro = peers["procrastinate"]["rate"]
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
    two_whole = w["runs"] / w["two_processes"]["wall"]
    # Like for like (§12): PgQueuer's whole process on the same runs, its start-up included, to its
    # last job done: the ~4 s its run() then waits for its buffers is left out (reported apart).
    pgq_whole = w["runs"] / w["pgqueuer"]["done"]
    spans = "drain spans, start-up left out on both sides: first start to last finish in each one's own tables"
    cpu = r["cpu"]
    per_run = together_us(cpu)
    ours = cpu["jobsweb"]
    need, need_one = cpu_needed(cpu["cores"], 2 * pgq)
    bound = (f"CPU per run, PostgreSQL's and the worker's together (§12): ours {per_run['jobsweb']:.0f} µs "
             f"({ours['server_us']:.0f} + {ours['client_us']:.0f}), PgQueuer's {per_run['pgqueuer']:.0f} µs, "
             f"whose drain keeps {pgq * per_run['pgqueuer'] / 1e6:.2f} of the {cpu['cores']} cores busy; "
             f"twice its drain ({fmt(2 * pgq)} runs/s) needs "
             f"{fmt(need)} µs a run or less with every core busy all the time, where ours allows "
             f"{fmt(cpu['cores'] / per_run['jobsweb'] * 1e6)} runs/s at most")
    rows = [
        (f"1 process ≥ 2× PgQueuer's best ({spans})",
         f"{fmt(one)} vs {fmt(pgq)} runs/s = {fmt(ratio(one, pgq), 2)}× (side by side in §12, each repeat: "
         + "; ".join(f"--concurrency {c} " + ", ".join(f"{fmt(x, 2)}×" for x in v)
                     for c, v in w["one_span_ratios"].items()) + ")",
         one >= 2 * pgq,
         f"{bound}; and one process's own CPU about {fmt(need_one)} µs a run or less (ours "
         f"{ours['client_us']:.0f}: its Python threads take turns on one core). A run's two versions are "
         "non-HOT updates of job_runs (status is in most of its indexes) plus an attempt row (§3, §13); "
         "PgQueuer deletes its job row and keeps no attempt history"),
        (f"2 processes ≥ 2× PgQueuer's best ({spans})",
         f"{fmt(two)} vs {fmt(pgq)} runs/s = {fmt(ratio(two, pgq), 2)}× (side by side in §12, each repeat: "
         + ", ".join(f"{fmt(x, 2)}×" for x in w["span_ratios"]) + ")",
         None if two is None else two >= 2 * pgq,
         f"{bound}; two processes overlap better than one (four PostgreSQL backends, two lanes a process)"),
        (f"2 × `flask run-jobs --concurrency {w['two_processes']['concurrency']}` drain {w['runs']:,} runs, "
         f"start-up and exit included, ≥ 2× PgQueuer's whole process ({w['pgqueuer_setting']}), its start-up "
         "included, its shutdown's buffer wait left out",
         f"{fmt(two_whole)} vs {fmt(pgq_whole)} runs/s = {fmt(ratio(two_whole, pgq_whole), 2)}× (each repeat: "
         + ", ".join(f"{fmt(x, 2)}×" for x in w["whole_ratios"])
         + f"; with its buffer wait, {fmt(w['pgqueuer']['shutdown'], 1)} s, counted: "
         f"{fmt(ratio(two_whole, w['runs'] / (w['pgqueuer']['done'] + w['pgqueuer']['shutdown'])), 2)}×)",
         two_whole >= 2 * pgq_whole,
         "each of our processes starts in ~1 s (Python, Flask, SQLAlchemy, psycopg imports, §20) before its "
         "first claim, and both must start; the drain itself as in the rows above (§12)"),
        ("--concurrency 4 and 8 ≥ 80% of one process's best",
         ", ".join(f"{c}: {fmt(100 * ratio(v, one), 0)}%" for c, v in low.items()) or "–",
         None if not low else all(v >= 0.8 * one for v in low.values()),
         "a claim takes the free slots plus about 0.1 s of work at the recent finishing rate "
         "(engine/worker/claim_ahead.py), so the claim's size no longer hangs on --concurrency; the runs waiting "
         "are held like running ones (heartbeats, SIGTERM release, lease recovery)"),
        ("1 process ≥ 10× Procrastinate's", f"{fmt(one)} vs {fmt(pro)} runs/s = {fmt(ratio(one, pro), 2)}×",
         one >= 10 * pro,
         "Procrastinate fetches and finishes one job per statement; ours a batch per statement"),
        ("best processes ≥ 30% of the pgbench ceiling",
         f"{fmt(best)} vs {fmt(r['ceiling']['rate'])} runs/s = {fmt(100 * ratio(best, r['ceiling']['rate']), 0)}%",
         best >= 0.3 * r["ceiling"]["rate"],
         "2 cores shared by PostgreSQL and the workers' Python; pgbench spends no CPU on handlers"),
        (f"claim p95 at {n_hist:,} finished ≤ 2 ms", f"{fmt(full['p95'], 3)} ms", full["p95"] <= 2,
         f"a claim is a durable commit: the cheapest one (one-row UPDATE) takes p50 {floor['p50']:.3f} / "
         f"p95 {floor['p95']:.3f} ms here; the claim's statements are planned at each call inside the "
         "PL/pgSQL function jobsweb_claim_runs_in_order (pooler-safe: no client-side prepare), §4; history size "
         "barely matters (finished runs are in none of the claim's partial indexes)"),
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
         worst_page[1]["p95"] <= 50, "the error search: every search masks its window, the newest 10,000 errors, "
         "in SQL whatever it looks for, so that its cost tells nothing of what it matches (issue 53; §22); the "
         "other pages: template rendering (about two thirds of a runs page); a payload filter "
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
         f"queues themselves: a limit-{q['limit']} queue gives at most {q['limit']} runs per claim, one claim at "
         "a time (its job_queues row is locked SKIP LOCKED), and its runs wait for its slots; since migration "
         "0017 the claim no longer reads their backlog (it works from fronts, §14)"),
        (f"async: {a['runs']:,} runs of `await asyncio.sleep(0.5)` at --concurrency {a['concurrency']:,} "
         "< 8 s wall, peak RSS < 250 MB", f"{a['wall']:.2f} s, {fmt(a['rss_mb'])} MB",
         a["wall"] < 8 and a["rss_mb"] < 250,
         f"process start-up (~1 s: Flask, SQLAlchemy, psycopg imports), then claims of up to "
         f"{a['concurrency']:,} runs and their sleeps; one event loop thread, a task per run, no thread "
         "per run (§11)"),
        (f"one `flask run-jobs` for {w['runs']:,} no-op runs, start-up included (reported)",
         f"{w['jobsweb'][whole_c]:.1f} s at --concurrency {whole_c} vs PgQueuer {fmt(w['pgqueuer']['done'], 1)} s "
         f"to its last job done (+ {fmt(w['pgqueuer']['shutdown'], 1)} s to its exit)",
         "reported", "start-up and the per-run INFO log line; PgQueuer's run() returns only after its "
         "buffers time out, seconds after its last job (§12)"),
        ("no worker running: an overdue definition's webhook ≤ 60 s after the web app starts",
         f"{al['seconds']:.1f} s (worst {al['worst']:.1f} s)", al["worst"] <= 60,
         "gunicorn's start-up, then the web processes' alert thread: its first evaluation comes one "
         "JOBSWEB_ALERT_INTERVAL (5 s) after start, then one webhook POST (ops/web_alerts.py)"),
        ("worker peak RSS ≤ 120 MB", f"{fmt(t['rss_mb'], 0)} MB", t["rss_mb"] <= 120,
         "the imports (Python, Flask, SQLAlchemy, psycopg: ~53 MB) and the Flask app (~15 MB) before any run; "
         "the runs themselves add a few MB at concurrency 64 (§9). Each worker's own peak (VmHWM): "
         "getrusage counted the bench process's peak too, which the second server's runs inherited"),
    ]
    return rows + server_targets(r)


def server_targets(r):
    """The targets of the server itself (issue 24): a backlog the claim does not take, and JIT
    as the distribution ships it, which only a build with JIT can be judged on."""
    b = r["backlog"]
    rows = [
        (f"claim p95 ({b['size']} runs) with {b['future']:,} runs scheduled ahead and {b['paused']:,} due "
         f"in a paused queue ≤ 1.5× with neither ({b['due']:,} due)",
         f"{fmt(b['backlog']['p95'], 3)} vs {fmt(b['bare']['p95'], 3)} ms = "
         f"{fmt(ratio(b['backlog']['p95'], b['bare']['p95']), 2)}×",
         b["backlog"]["p95"] <= 1.5 * b["bare"]["p95"],
         "what a claim reads besides the runs it takes: working from fronts (migration 0017), one index "
         "descent per (queue, priority) that has claimable runs, the backlog's included (§14)"),
    ]
    wf = r["workflows"]
    c, b, ch = wf["claim"], wf["batch"], wf["chain"]
    rows += [
        (f"a batch of {b['members']:,} members enqueued in ≤ 3 s", f"{b['enqueue_seconds']:.2f} s",
         b["enqueue_seconds"] <= 3, "one INSERT per 10,000 members (ENQUEUE_MANY), as enqueue_many (§16)"),
        (f"its on_finish callback starts ≤ 1 s after the last member ends ({b['workers']} workers)",
         f"{b['callback_seconds']:.3f} s", b["callback_seconds"] <= 1,
         "released in the transaction that ends the last member; its wake-up reaches the listening workers at "
         "that commit (§16)"),
        (f"a chain of {ch['steps']:,} steps: step end → next start ≤ 20 ms (median)", f"{ch['median_ms']:.1f} ms",
         ch["median_ms"] <= 20, "the next step is queued in the finishing transaction and wakes the worker (§16)"),
        (f"claim p95 with {c['waiting_runs']:,} waiting runs ≤ 1.2× with none",
         f"{fmt(c['waiting']['p95'], 3)} vs {fmt(c['none']['p95'], 3)} ms = {fmt(c['ratio_p95'], 2)}×",
         c["ratio_p95"] <= 1.2, "waiting runs are outside the claim's partial indexes (§16)"),
    ]
    j = r["jit"]
    if not r["settings"]["jit_available"]:
        na = "n/a (no JIT)"
        shipped = off = forced = claim_off = None
    else:
        na = None
        shipped, off = (j["shipped"], j["off"]) if j else (None, None)
        forced, claim_off = ((j["claims"]["forced worker"]["p95"], j["claims"]["off worker"]["p95"]) if j
                             else (None, None))
    rows += [
        (f"JIT as shipped: two processes drain {r['sizes']['jit_drain']:,} no-op runs ≥ 0.8× the rate "
         "with jit = off",
         "– (built without JIT)" if na else f"{fmt(shipped)} vs {fmt(off)} runs/s = {fmt(ratio(shipped, off), 2)}×",
         na or (None if not j else shipped >= 0.8 * off),
         "PostgreSQL JIT-compiles a statement whose estimate passes jit_above_cost (100,000 as shipped) at "
         "every execution, and compiling costs milliseconds where the worker's statements run in less; the "
         "claim function runs with jit = off and the worker's transactions begin with SET LOCAL jit = off "
         "(migration 0017) (§15)"),
        ("the worker's claim p95 with JIT forced (jit_above_cost, jit_inline_above_cost, "
         "jit_optimize_above_cost = 0) ≤ 1.2× jit = off",
         "– (built without JIT)" if na else
         f"{fmt(forced, 3)} vs {fmt(claim_off, 3)} ms = {fmt(ratio(forced, claim_off), 2)}×",
         na or (None if not j else forced <= 1.2 * claim_off),
         "the claim function's own jit = off holds whatever the server's settings: only the call itself, "
         "a one-line SELECT, is left to JIT (§15)"),
    ]
    imports = ("Python, Flask, SQLAlchemy (with its ORM, for Flask-SQLAlchemy and the alerts' queries) and "
               "psycopg take most of it before jobsweb's own code starts (§20)")
    for kind, words, why in (
            ("empty", "an empty `flask run-jobs` tick", imports),
            ("one_run", "a tick with one due no-op run", imports),
            ("empty_busy", "an empty tick with two busy loops beside it",
             "the same CPU with two thirds of a core: three processes share the two (§20)")):
        f = r["tick_start"][kind]
        rows.append((f"{words} ≤ {f['target']:.1f} s as a whole process (median of {f['runs']})",
                     f"{f['median']:.2f} s (min {f['min']:.2f}, max {f['max']:.2f}; CPU {f['cpu_median']:.2f} s)",
                     f["median"] <= f["target"], why))
    rows.append(soak_target(r))
    return rows + cost_targets(r)


def cost_targets(r):
    """Issue 55's targets of cost: CPU per run against PgQueuer's and two processes' against one's,
    each repeat's ratio measured side by side (§12), and every admin page at ten million runs (§22)."""
    cpu, pages = r["cpu"], r["pages_big"]["pages"]
    per_run = together_us(cpu)
    to_pgqueuer, two_to_one = statistics.median(cpu["to_pgqueuer"]), statistics.median(cpu["two_to_one"])
    over = [name for name, page in pages.items() if page["p95"] > 300]
    worst = max(pages.items(), key=lambda kv: kv[1]["p95"])
    runs = r["pages_big"]["growth"]["runs"]
    return [
        (f"CPU per run, PostgreSQL's and the worker's, start-up and shutdown left out: one `flask run-jobs "
         f"--concurrency {cpu['concurrency']}` ≤ 0.60× one PgQueuer process ({cpu['pgqueuer_setting']}), "
         f"{cpu['runs']:,} runs each",
         f"{per_run['jobsweb']:.0f} vs {per_run['pgqueuer']:.0f} µs = {to_pgqueuer:.2f}× (median of the repeats, "
         "each side by side: " + ", ".join(f"{x:.2f}×" for x in cpu["to_pgqueuer"]) + ")",
         to_pgqueuer <= 0.60,
         "PostgreSQL's share of ours: the two status changes the contract keeps in job_runs (each a new version "
         "writing an entry into every index) and the attempt row with its entries and its key, where PgQueuer "
         "deletes its row; at 0.60 the worker could spend a few µs a run at most (BENCHMARKS: CPU per run, "
         "round five)"),
        ("CPU per run of two of those processes at once ≤ 1.05× one's",
         f"{per_run['two_processes']:.0f} vs {per_run['jobsweb']:.0f} µs = {two_to_one:.2f}× (median of the "
         "repeats: " + ", ".join(f"{x:.2f}×" for x in cpu["two_to_one"]) + ")",
         two_to_one <= 1.05,
         "PostgreSQL's: the same buffers read and the same WAL written a run, by four backends at once on the "
         "cores (BENCHMARKS: CPU per run, round five)"),
        (f"every admin page p95 ≤ 300 ms at {runs:,} runs (§22)",
         f"worst: {worst[0]} {worst[1]['p95']:.0f} ms (load {worst[1]['load']:.1f})"
         + (f"; over 300 ms: {', '.join(over)}" if over else ""),
         not over,
         "the error search masks its window of 10,000 errors in SQL at every search, whatever it looks for "
         "(about 110 ms of statement when the machine is quiet), and the page's own 50-80 ms; past that the "
         "machine's load (§22's load column; BENCHMARKS: Admin pages at 10,000,000 runs)"),
    ]
