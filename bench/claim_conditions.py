"""The claim under the conditions a team's server brings (issue 24): JIT as the distribution
ships it, and a backlog the claim does not take (runs scheduled far ahead, a paused queue)."""

import psycopg

from .measures import claims, drain, median, migrated, percentile

# The server's JIT settings as its postgresql.conf has them (ALTER SYSTEM RESET), switched off,
# and forced onto every statement: compiled, inlined and optimised whatever the plan's cost.
JIT_SETTINGS = ("jit", "jit_above_cost", "jit_inline_above_cost", "jit_optimize_above_cost")
JIT_SHIPPED = dict.fromkeys(JIT_SETTINGS)
JIT_OFF = {**JIT_SHIPPED, "jit": "off"}
JIT_FORCED = {"jit": "on", "jit_above_cost": "0", "jit_inline_above_cost": "0", "jit_optimize_above_cost": "0"}
# Two worker processes at the suite's usual best concurrency.
JIT_PROCESSES, JIT_CONCURRENCY = 2, 16


def jit(bench):
    """On a server that can JIT: two workers drain the same runs with JIT as shipped and with
    jit = off, alternated; then claim latency with JIT forced and off. None where it cannot."""
    server, s = bench.server, bench.sizes
    if not server.describe()["jit_available"]:
        bench.log("jit: this server's build cannot JIT: skipped")
        return None
    url, _ = migrated(bench, "bench_jit")
    rates = {"shipped": [], "off": []}
    # The worker's claim (judged), and the bare call as another client would make it (reported).
    latency = {(setting, path): [] for setting in ("forced", "off") for path in ("worker", "bare")}
    try:
        # Warm-up of the same shape: the first drain on a fresh database is the slowest.
        drain(bench, url, JIT_PROCESSES, JIT_CONCURRENCY, s["jit_drain"])
        order = [("shipped", JIT_SHIPPED), ("off", JIT_OFF)]
        for _ in range(bench.repeats):  # alternated, so that drift on a shared machine hits both
            for name, settings in order:
                server.set_system(settings)
                rates[name].append(drain(bench, url, JIT_PROCESSES, JIT_CONCURRENCY, s["jit_drain"])[0])
            bench.log(f"jit: drain as shipped {rates['shipped'][-1]:.0f}/s, off {rates['off'][-1]:.0f}/s")
            order.reverse()  # and neither is always the one right after the other
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("TRUNCATE job_attempts, job_runs RESTART IDENTITY CASCADE")
            conn.execute("INSERT INTO job_runs (job_type) SELECT 'jobsweb.noop' FROM generate_series(1, 1000)")
            conn.execute("VACUUM ANALYZE job_runs")
        order = [("off", JIT_OFF), ("forced", JIT_FORCED)]
        for _ in range(bench.repeats):
            for name, settings in order:
                server.set_system(settings)
                # claims() connects anew: each claim is planned (and the JIT decided) under these
                # settings. Most of the time on the judged figure: a p95 over a few seconds is at
                # the mercy of the machine's other load.
                for path, share in (("worker", 1 / 2), ("bare", 1 / 10)):
                    latency[(name, path)] += claims(url, s["claims"], seconds=s["claim_seconds"] * share,
                                                    worker_path=path == "worker")
            order.reverse()
            bench.log("jit: claim p95 " + ", ".join(f"{name} {path} {percentile(t, 95):.3f} ms"
                                                    for (name, path), t in latency.items()))
    finally:
        server.set_system(JIT_SHIPPED)
    return {"processes": JIT_PROCESSES, "concurrency": JIT_CONCURRENCY, "runs": s["jit_drain"],
            "shipped": median(rates["shipped"]), "off": median(rates["off"]),
            "claims": {f"{name} {path}": {"p50": percentile(t, 50), "p95": percentile(t, 95), "claims": len(t)}
                       for (name, path), t in latency.items()}}


# Due runs at priority 5; the backlog sorts before them in the claim's order (priority, run_at,
# id): runs due in 30 days at priority 0, and older due runs of a paused queue.
DUE_SQL = """
INSERT INTO job_runs (job_type, priority, run_at)
SELECT 'jobsweb.noop', 5, now() - interval '1 hour' + g * interval '1 ms' FROM generate_series(1, %(n)s) g
"""
FUTURE_SQL = """
INSERT INTO job_runs (job_type, priority, run_at)
SELECT 'jobsweb.noop', 0, now() + interval '30 days' + g * interval '1 ms' FROM generate_series(1, %(n)s) g
"""
PAUSED_SQL = """
INSERT INTO job_runs (job_type, priority, run_at, queue)
SELECT 'jobsweb.noop', 5, now() - interval '1 day' + g * interval '1 ms', 'paused' FROM generate_series(1, %(n)s) g
"""


def backlog(bench):
    """p50/p95 of claims of `backlog_claim` runs (CLAIM_RUNS, the worker's path) with the due runs
    alone, then with runs scheduled ahead and a paused queue's due runs added and analysed."""
    s = bench.sizes
    url, _ = migrated(bench, "bench_backlog")
    out = {"due": s["backlog_due"], "future": s["backlog_future"], "paused": s["backlog_paused"],
           "size": s["backlog_claim"]}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(DUE_SQL, {"n": s["backlog_due"]})
        conn.execute("VACUUM ANALYZE job_runs")
        for phase in ("bare", "backlog"):
            if phase == "backlog":
                conn.execute("INSERT INTO job_queues (name, paused) VALUES ('paused', true)")
                conn.execute(FUTURE_SQL, {"n": s["backlog_future"]})
                conn.execute(PAUSED_SQL, {"n": s["backlog_paused"]})
                conn.execute("ANALYZE job_runs")
            times = claims(url, s["claims"], size=s["backlog_claim"], seconds=s["claim_seconds"])
            out[phase] = {"p50": percentile(times, 50), "p95": percentile(times, 95), "claims": len(times)}
            bench.log(f"backlog {phase}: claim of {s['backlog_claim']} p50 {out[phase]['p50']:.3f} ms "
                      f"p95 {out[phase]['p95']:.3f} ms ({len(times)} claims)")
    return out
