"""Workflows (issue 27): a batch's enqueue and its callback's start, a chain's step-to-step
gap, and the claim with a million waiting runs."""

import time

import psycopg

from .measures import claims, median, migrated, percentile, spawn_worker, wait_for

BATCH_WORKERS, BATCH_CONCURRENCY = 4, 16
# The two databases' claims alternate in this many slices per repeat: the machine's other load
# (two cores, shared) comes and goes within seconds, and short slices spread it over both.
CLAIM_SLICES = 6
# Due runs, and waiting runs that sort before them in the claim's order (a smaller priority,
# older run_at) were they claimable: the claim must not see them at all.
DUE_SQL = """
INSERT INTO job_runs (job_type, priority, run_at)
SELECT 'jobsweb.noop', 5, now() - interval '1 hour' + g * interval '1 ms' FROM generate_series(1, %(n)s) g
"""
WAITING_SQL = """
INSERT INTO job_runs (job_type, priority, run_at, status, waiting_for)
SELECT 'jobsweb.noop', 0, now() - interval '2 hours' + g * interval '1 ms', 'waiting', 1
FROM generate_series(1, %(n)s) g
"""


def claim_with_waiting(bench):
    """Claim p50/p95 over a database without waiting runs and one with `waiting` of them, the
    same due runs in each, alternated so that the machine's other load hits both alike."""
    s = bench.sizes
    urls = {}
    for name, waiting in (("none", 0), ("waiting", s["workflow_waiting"])):
        urls[name], _ = migrated(bench, f"bench_waiting_{name}")
        with psycopg.connect(urls[name], autocommit=True) as conn:
            conn.execute(DUE_SQL, {"n": s["backlog_due"]})
            for start in range(0, waiting, 200_000):
                conn.execute(WAITING_SQL, {"n": min(200_000, waiting - start)})
            conn.execute("VACUUM ANALYZE job_runs")
    times = {"none": [], "waiting": []}
    order = ["none", "waiting"]
    for _ in range(bench.repeats * CLAIM_SLICES):
        for name in order:
            times[name] += claims(urls[name], s["claims"], seconds=s["claim_seconds"] / CLAIM_SLICES)
        order.reverse()
    out = {name: {"p50": percentile(t, 50), "p95": percentile(t, 95), "claims": len(t)} for name, t in times.items()}
    out["waiting_runs"] = s["workflow_waiting"]
    out["ratio_p95"] = out["waiting"]["p95"] / out["none"]["p95"]
    bench.log(f"claim p95 with {s['workflow_waiting']:,} waiting runs {out['waiting']['p95']:.3f} ms, "
              f"none {out['none']['p95']:.3f} ms ({out['ratio_p95']:.2f}x)")
    return out


def batch_and_callback(bench):
    """Seconds to enqueue a batch of `workflow_batch` members (enqueue_many in the batch), beside
    the same enqueue_many outside a batch just before (what the machine allows now), and from the
    batch's last member's end to its on_finish callback's start, with BATCH_WORKERS workers."""
    from jobsweb import batch, enqueue_many

    s = bench.sizes
    plain_url, plain_app = migrated(bench, "bench_batch_plain")
    with plain_app.app_context():
        started = time.perf_counter()
        enqueue_many("jobsweb.noop", [{}] * s["workflow_batch"])
        plain_seconds = time.perf_counter() - started
    url, app = migrated(bench, "bench_batch")
    with app.app_context():
        started = time.perf_counter()
        with batch(on_finish="jobsweb.noop") as members:
            members.enqueue_many("jobsweb.noop", [{}] * s["workflow_batch"])
        enqueue_seconds = time.perf_counter() - started
    bench.log(f"batch of {s['workflow_batch']:,} enqueued in {enqueue_seconds:.2f} s "
              f"(enqueue_many alone: {plain_seconds:.2f} s)")
    procs = [spawn_worker(url, BATCH_CONCURRENCY, "--forever", "--quiet", "--poll-interval", "1")
             for _ in range(BATCH_WORKERS)]
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            [(gap,)] = [wait_for(conn, "SELECT extract(epoch FROM c.started_at - (SELECT max(m.finished_at) "
                                       "FROM job_runs m WHERE m.batch_id = c.batch_id AND m.batch_callback IS NULL)) "
                                       "FROM job_runs c WHERE c.id = %s AND c.started_at IS NOT NULL",
                                 [members.callbacks["on_finish"]])]
    finally:
        for proc in procs:
            proc.terminate()
            proc.communicate(timeout=60)
    bench.log(f"on_finish started {gap * 1000:.1f} ms after the last member ended")
    return {"members": s["workflow_batch"], "enqueue_seconds": enqueue_seconds, "plain_seconds": plain_seconds,
            "callback_seconds": float(gap),
            "workers": BATCH_WORKERS, "concurrency": BATCH_CONCURRENCY}


def chain_gaps(bench):
    """Milliseconds between one step's end and the next one's start in a chain of `workflow_chain`
    steps, with one --forever worker listening: median and p95."""
    from jobsweb import chain

    s = bench.sizes
    url, app = migrated(bench, "bench_chain")
    proc = spawn_worker(url, 4, "--forever", "--quiet", "--poll-interval", "5")
    try:
        time.sleep(1)  # the worker's listener connects
        with app.app_context():
            steps = chain([("jobsweb.noop", {"step": n}) for n in range(s["workflow_chain"])])
        with psycopg.connect(url, autocommit=True) as conn:
            wait_for(conn, "SELECT finished_at FROM job_runs WHERE id = %s AND status = 'succeeded'", [steps.last])
            gaps = [row[0] for row in conn.execute(
                "SELECT extract(epoch FROM n.started_at - p.finished_at) * 1000 FROM job_run_deps d "
                "JOIN job_runs p ON p.id = d.after_id JOIN job_runs n ON n.id = d.run_id "
                "WHERE d.run_id = ANY(%s)", [list(steps.ids)])]
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    out = {"steps": s["workflow_chain"], "median_ms": median([float(g) for g in gaps]),
           "p95_ms": percentile([float(g) for g in gaps], 95)}
    bench.log(f"chain of {out['steps']}: step end -> next start median {out['median_ms']:.1f} ms")
    return out


def workflows(bench):
    """The three figures of issue 27."""
    return {"claim": claim_with_waiting(bench), "batch": batch_and_callback(bench), "chain": chain_gaps(bench)}
