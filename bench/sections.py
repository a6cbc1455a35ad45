"""One server's sections of docs/BENCHMARKS.md, §1 to §15, from its results; report.py puts
every server's under each heading."""

from .big_history import pages_big_section
from .run_control import run_control_section
from .search_cost import search_cost_section
from .seams import seams_section
from .soak import soak_section
from .targets import fmt, ratio, together_us
from .tick_start import tick_start_section


def server_sections(r):
    """§1 to §15 for one server, each under its '## ' heading."""
    t = r["throughput"]
    s = r["sizes"]
    lines = []
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
        what = "batch_size (MxB: M managers of B)" if name == "pgqueuer" else "concurrency"
        tried = ", ".join(f"{k}: {fmt(v[0])}/s" for k, v in peer["all"].items())
        lines.append(f"| {name} | {what} {peer['setting']} (tried {tried}) | {fmt(peer['rate'])} | "
                     f"{fmt(ratio(one, peer['rate']), 2)}× |")
    c = r["ceiling"]
    lines += [
        "",
        f"PgQueuer drains {s['pgqueuer_drain']:,} and Procrastinate {s['procrastinate_drain']:,} no-op jobs "
        "(fewer: it is slower) enqueued with their own batch APIs, in one worker process; runs/s from "
        "the first job started to the last finished in their own event tables (pgqueuer_log, "
        "procrastinate_events), as jobsweb's from job_runs. PgQueuer's settings: batch_size B with one "
        "QueueManager, or MxB, M QueueManagers of batch_size B in the one process, each on its own "
        "connection.",
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
        f"(1% dead, each with its job_attempts row); up to {s['claims']:,} claims, or {s['claim_seconds']} s "
        "of them where claims are slow:",
        "",
        "| finished runs | p50 ms | p95 ms | p99 ms | claims |",
        "| --- | --- | --- | --- | --- |",
    ]
    for p in r["history"]["points"]:
        lines.append(f"| {p['history']:,} | {p['p50']:.3f} | {p['p95']:.3f} | {p['p99']:.3f} | {p['claims']:,} |")
    points = r["history"]["points"]
    lines += [
        "",
        f"p95 at the largest history ÷ empty: **{fmt(ratio(points[-1]['p95'], points[0]['p95']), 2)}×**.",
        "",
        "![claim latency vs history](bench_claim_latency.png)",
        "",
        f"The plan of jobsweb_claim_runs_in_order' UPDATE of job_runs, with actual times (auto_explain), "
        f"at {points[-1]['history']:,} finished runs:",
        "",
        "```text",  # a text block to the docs' tests (tests/docs/test_other_docs.py): output, not code
        r["history"]["explain"],
        "```",
        "",
        f"The floor under any claim here: a one-row UPDATE committing on its own takes p50 "
        f"{r['history']['commit_floor']['p50']:.3f} ms, p95 {r['history']['commit_floor']['p95']:.3f} ms "
        "(fsync and synchronous_commit on).",
        "",
        "The claims above go the worker's way (Link.fetch): one pipelined transaction begun with "
        "SET LOCAL jit = off, and no statement prepared on the server (a pooler in transaction mode "
        "would lose it). CLAIM_RUNS calls the PL/pgSQL function "
        "jobsweb_claim_runs_in_order (migration 0025), which plans its statements at each call "
        "(plan_cache_mode = force_custom_plan), with job_runs as it is then, and never JIT-compiles them "
        "(jit = off on the function).",
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
        "counts: each status counted exactly up to 10,000 runs (a count over the status index with a "
        "LIMIT), the planner's estimate beyond, so the count costs the same at any size. A tenth of "
        "the history belongs to one definition (its page is measured), set by an update that leaves "
        "no page all-visible until autovacuum comes by, as a busy table is; a batch of 1,000 runs "
        "waits, and two definitions are overdue:",
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
        f"(steady state: {fmt(st['rss_mb'])} MB). Each worker's own peak (VmHWM): getrusage's ru_maxrss "
        "in a process the bench started counts the bench process's own peak too (bench/peak_rss.py).",
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
        *server_conditions(r),
        *workflow_section(r),
        *seams_section(r),
        *run_control_section(r),
        *search_cost_section(r),
        *tick_start_section(r),
        *soak_section(r),
        *pages_big_section(r),
    ]
    return lines


def workflow_section(r):
    """§16 workflows: a batch's enqueue and callback, a chain's gaps, the claim beside waiting runs."""
    wf = r["workflows"]
    c, b, ch = wf["claim"], wf["batch"], wf["chain"]
    return [
        "## 16. Workflows",
        "",
        f"A batch of {b['members']:,} members (`export.enqueue_many` inside `with batch(on_finish=...)`, one "
        f"transaction) is enqueued in **{b['enqueue_seconds']:.2f} s** (the same `enqueue_many` outside a "
        f"batch, just before: {b['plain_seconds']:.2f} s); {b['workers']} worker processes × "
        f"concurrency {b['concurrency']} then run its members, and its `on_finish` callback starts "
        f"**{1000 * b['callback_seconds']:.0f} ms** after the last member ended (database clock).",
        "",
        f"A chain of {ch['steps']:,} no-op steps, one `--forever` worker listening: from one step's end to the "
        f"next one's start, median **{ch['median_ms']:.1f} ms**, p95 {ch['p95_ms']:.1f} ms.",
        "",
        f"One-run claims as in §4 beside {c['waiting_runs']:,} waiting runs (due, at a smaller priority than "
        f"the {r['sizes']['backlog_due']:,} due runs, were they claimable), and on a database without them, "
        "alternated:",
        "",
        "| job_runs holds | p50 ms | p95 ms | claims |",
        "| --- | --- | --- | --- |",
        f"| due runs | {c['none']['p50']:.3f} | {c['none']['p95']:.3f} | {c['none']['claims']:,} |",
        f"| and {c['waiting_runs']:,} waiting | {c['waiting']['p50']:.3f} | {c['waiting']['p95']:.3f} | "
        f"{c['waiting']['claims']:,} |",
        "",
        f"p95 with the waiting runs ÷ without: **{fmt(c['ratio_p95'], 2)}×**.",
        "",
    ]


def server_conditions(r):
    """§14 a backlog the claim does not take, §15 JIT."""
    b, j = r["backlog"], r["jit"]
    lines = [
        "## 14. Claim latency with a backlog it does not take",
        "",
        f"Claims of {b['size']} runs (CLAIM_RUNS the worker's way, as in §4) with "
        f"{b['due']:,} runs due at priority 5; then with {b['future']:,} runs added that are due in 30 days at "
        f"priority 0 (before the due runs in the claim's order) and {b['paused']:,} older due runs of a paused "
        "queue, the table analysed, and a new connection (a worker starting now). Each claim's runs are put "
        f"back after it; up to {r['sizes']['claims']:,} claims, or {r['sizes']['claim_seconds']} s of them.",
        "",
        "| job_runs holds | p50 ms | p95 ms | claims |",
        "| --- | --- | --- | --- |",
        f"| {b['due']:,} due runs | {b['bare']['p50']:.3f} | {b['bare']['p95']:.3f} | {b['bare']['claims']:,} |",
        f"| and the backlog | {b['backlog']['p50']:.3f} | {b['backlog']['p95']:.3f} | {b['backlog']['claims']:,} |",
        "",
        f"p95 with the backlog ÷ without: **{fmt(ratio(b['backlog']['p95'], b['bare']['p95']), 2)}×**.",
        "",
        "## 15. JIT",
        "",
    ]
    if not r["settings"]["jit_available"]:
        return lines + ["This build cannot JIT (pg_jit_available() is false): nothing to compare.", ""]
    if j is None:
        return lines + ["**Not measured.**", ""]
    c = j["claims"]
    claim_rows = []
    for path in ("worker", "bare"):
        for setting, what in (("forced", "forced: jit_above_cost, jit_inline_above_cost, jit_optimize_above_cost = 0"),
                              ("off", "jit = off")):
            m = c[f"{setting} {path}"]
            claim_rows.append(f"| {what} | {path} | {m['p50']:.3f} | {m['p95']:.3f} | {m['claims']:,} |")
    return lines + [
        f"{j['processes']} worker processes × concurrency {j['concurrency']} drain {j['runs']:,} no-op runs with "
        "JIT as this server ships it and with `jit = off` (ALTER SYSTEM and a reload between drains, "
        f"alternated): **{fmt(j['shipped'])}** vs **{fmt(j['off'])} runs/s** "
        f"(**{fmt(ratio(j['shipped'], j['off']), 2)}×**).",
        "",
        "One-run claims as in §4 (1,000 runs due), each setting on new connections, alternated; the "
        "worker's claim (judged), and the bare `SELECT * FROM jobsweb_claim_runs_in_order(...)` as a client "
        "without the worker's SET LOCAL jit = off would send it (reported):",
        "",
        "| JIT | claim | p50 ms | p95 ms | claims |",
        "| --- | --- | --- | --- | --- |",
        *claim_rows,
        "",
        "p95 forced ÷ off: the worker's claim "
        f"**{fmt(ratio(c['forced worker']['p95'], c['off worker']['p95']), 2)}×**, the bare call "
        f"{fmt(ratio(c['forced bare']['p95'], c['off bare']['p95']), 2)}×. The server's JIT settings are put "
        "back as shipped afterwards.",
        "",
    ]


def cpu_lines(cpu):
    """§12's CPU per run, ours and PgQueuer's, and the fastest drain each allows on these cores."""
    lines = [
        f"CPU per run: one `flask run-jobs --concurrency {cpu['concurrency']}`"
        f"{', two at once' if 'two_processes' in cpu else ''} and one PgQueuer process "
        f"({cpu['pgqueuer_setting']}) each drain {cpu['runs']:,} runs enqueued beforehand, less the same processes "
        "with none (their start-up and shutdown); PostgreSQL's CPU is its postmaster's and every child's, "
        "those that exited included. On a machine of C cores no drain goes faster than C over the two "
        "together, however well its threads overlap.",
        "",
        "| | PostgreSQL µs a run | worker process µs a run | together | fastest drain on "
        f"{cpu['cores']} cores |",
        "| --- | --- | --- | --- | --- |",
    ]
    together = together_us(cpu)
    for name, system in (("jobsweb", "jobsweb"), ("jobsweb, 2 processes", "two_processes"), ("PgQueuer", "pgqueuer")):
        if system not in together:
            continue  # results of a run before the two processes were measured
        f = cpu[system]
        lines.append(f"| {name} | {f['server_us']:.0f} | {f['client_us']:.0f} | {together[system]:.0f} µs | "
                     f"{fmt(cpu['cores'] / together[system] * 1e6)} runs/s |")
    if "two_to_one" in cpu:
        lines += ["", "Side by side in each repeat (issue 55: ≤ 0.60 and ≤ 1.05): ours / PgQueuer's "
                  f"{', '.join(f'{x:.2f}' for x in cpu['to_pgqueuer'])}; two processes / one "
                  f"{', '.join(f'{x:.2f}' for x in cpu['two_to_one'])}."]
    return lines + [""]


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
        "One invocation each, timed from its start to its exit, the runs already due. PgQueuer's "
        "`run()` in drain mode returns only once its buffers have timed out, seconds after its last job "
        "is done: its row is timed to that last job (its start-up included), and the wait after it is "
        "its own row. Drain span: first start to last finish in each one's own tables (job_runs, "
        "pgqueuer_log).",
        "",
        "| command | wall s | drain span s |",
        "| --- | --- | --- |",
    ]
    for conc, wall in w["jobsweb"].items():
        lines.append(f"| `flask run-jobs --concurrency {conc}` (INFO log line per run) | {wall:.1f} | "
                     f"{w['one_spans'][conc]:.2f} |")
    pq = w["pgqueuer"]
    lines += [
        f"| two `flask run-jobs --concurrency {w['two_processes']['concurrency']}` started together, to the last "
        f"one's exit | {w['two_processes']['wall']:.1f} | {w['two_processes']['span']:.2f} |",
        f"| PgQueuer, one process, {w['pgqueuer_setting']} (drain mode), to its last job done | "
        f"{fmt(pq['done'], 1)} | {pq['span']:.2f} |",
        f"| PgQueuer: then its shutdown, waiting for its buffers, to its exit | {fmt(pq['shutdown'], 1)} | – |",
        "",
        "Ratios measured side by side in each repeat, two of ours vs PgQueuer's: whole processes "
        + ", ".join(f"{x:.2f}×" for x in w["whole_ratios"]) + "; drain spans "
        + ", ".join(f"{x:.2f}×" for x in w["span_ratios"]) + ". One of ours vs PgQueuer's, drain spans: "
        + "; ".join(f"--concurrency {c}: " + ", ".join(f"{x:.2f}×" for x in v)
                    for c, v in w["one_span_ratios"].items()) + ".",
        "",
        *cpu_lines(r["cpu"]),
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
