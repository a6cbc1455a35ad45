"""A team's history at the size the admin pages must stay fast at (issue 55, item 3): `pages_runs`
runs (10,000,000 in full mode) with their attempts, written with one INSERT ... SELECT
generate_series per table, then VACUUM ANALYZE.

The mix is what a history kept under the default retention holds: 97 % succeeded (3 % of them
after a failed first attempt, whose error the run keeps), 2 % dead after 3 attempts, 1 %
cancelled before starting. Kept that way, JOBSWEB_RETAIN_SUCCEEDED (14 days),
JOBSWEB_RETAIN_DEAD (90) and JOBSWEB_RETAIN_CANCELLED (30) make 10,000,000 runs the history of a
team running about 485 a minute (`growth` says the figures for any size). The runs are spread
over the last 14 days, a run every 0.12 s at 10,000,000, newest last, across six job types and
three queues.

The indexes of job_runs and job_attempts are dropped before the INSERTs and built after them
(each from its own definition, read from pg_indexes): building an index once is several times
cheaper than keeping it through ten million inserts, and the result is the same index.
"""

import os
import time

import psycopg

RETAIN_DAYS = {"succeeded": 14, "dead": 90, "cancelled": 30}  # core/settings.py's defaults
MIX = {"succeeded": 0.97, "dead": 0.02, "cancelled": 0.01}
SPREAD_DAYS = 14

# One run per g; the status by g % 100: 0-1 dead, 2 cancelled, 3-5 succeeded after a retry.
RUNS_SQL = """
INSERT INTO job_runs (job_type, queue, status, attempts, max_attempts, run_at, started_at, finished_at,
                      created_at, updated_at, last_error, error_type, last_stack, payload, definition_id)
SELECT (ARRAY['jobsweb.noop', 'billing.invoice', 'emails.send', 'reports.daily', 'sync.crm',
              'media.thumbnail'])[g %% 6 + 1],
       (ARRAY['default', 'default', 'emails', 'reports'])[g %% 4 + 1],
       s.status, s.attempts, 3, t, CASE WHEN s.status <> 'cancelled' THEN t END,
       t + interval '40 ms', t, t + interval '40 ms',
       CASE WHEN s.status = 'dead' THEN
                 'ConnectionError: connection refused by upstream api.example.com:443 (run ' || g
                 || ', token=' || md5(g::text) || ')'
            WHEN s.retried THEN 'TimeoutError: read timed out after 30 s (request ' || g || ')' END,
       CASE WHEN s.status = 'dead' THEN 'ConnectionError' WHEN s.retried THEN 'TimeoutError' END,
       CASE WHEN s.status = 'dead' THEN
                 E'Traceback (most recent call last):\\n  File "app/jobs.py", line 41, in handle\\n'
                 || E'    client.post(url, json=payload)\\nConnectionError: connection refused' END,
       -- One invoice per run, a thousand customers: what the payload filters search.
       jsonb_build_object('invoice_id', g, 'customer_id', g %% 1000),
       -- A tenth of the history belongs to one definition (its page is measured).
       CASE WHEN g %% 10 = 0 THEN %(definition)s END
FROM generate_series(1, %(n)s) g,
     LATERAL (SELECT now() - (%(n)s - g) * (interval '1 day' * %(days)s / %(n)s) AS t) ts,
     LATERAL (SELECT CASE WHEN g %% 100 < 2 THEN 'dead' WHEN g %% 100 = 2 THEN 'cancelled' ELSE 'succeeded' END
                         AS status,
                     CASE WHEN g %% 100 < 2 THEN 3 WHEN g %% 100 = 2 THEN 0 WHEN g %% 100 < 6 THEN 2 ELSE 1 END
                         AS attempts,
                     g %% 100 BETWEEN 3 AND 5 AS retried) s
"""

# Every attempt of every run: failed ones keep the error, the last of a succeeded run succeeded.
ATTEMPTS_SQL = """
INSERT INTO job_attempts (run_id, attempt, worker, started_at, finished_at, outcome, error_type, error)
SELECT r.id, a, 'worker-' || mod(r.id, 4), r.started_at - (r.attempts - a) * interval '30 s',
       r.finished_at - (r.attempts - a) * interval '30 s',
       CASE WHEN r.status = 'dead' OR a < r.attempts THEN 'failed' ELSE 'succeeded' END,
       CASE WHEN r.status = 'dead' OR a < r.attempts THEN r.error_type END,
       CASE WHEN r.status = 'dead' OR a < r.attempts THEN r.last_error END
FROM job_runs r, generate_series(1, r.attempts) a
WHERE r.status IN ('succeeded', 'dead')
"""

# Indexes to drop and build again: every one but those a constraint owns (the primary keys).
INDEXES = """
SELECT i.indexname, i.indexdef FROM pg_indexes i
WHERE i.schemaname = 'public' AND i.tablename = ANY(%s)
  AND NOT EXISTS (SELECT FROM pg_constraint c WHERE c.conindid = (quote_ident(i.indexname))::regclass)
"""


def growth(n):
    """How a team's history reaches `n` runs of MIX under the default retention: runs a minute of
    each status (each kept RETAIN_DAYS) and in all."""
    per_minute = {status: n * share / (RETAIN_DAYS[status] * 1440) for status, share in MIX.items()}
    return {"runs": n, "retain_days": RETAIN_DAYS, "mix": MIX, "per_minute": per_minute,
            "runs_a_minute": sum(per_minute.values())}


def build(url, n, log=print):
    """Write `n` runs and their attempts into the migrated database at `url` (empty), with 200
    definitions (`def-1` holds a tenth of the runs); {seconds of each step, sizes}."""
    took = {}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '256MB'")
        conn.execute("INSERT INTO job_definitions (name, job_type, schedule, next_run_at) "
                     "SELECT 'def-' || g, 'jobsweb.noop', '@every 1h', now() + interval '1 h' "
                     "FROM generate_series(1, 200) g")
        definition = conn.execute("SELECT id FROM job_definitions WHERE name = 'def-1'").fetchone()[0]
        indexes = conn.execute(INDEXES, [["job_runs", "job_attempts"]]).fetchall()
        for name, _ in indexes:
            conn.execute(f"DROP INDEX {name}")
        t = time.monotonic()
        conn.execute(RUNS_SQL, {"n": n, "days": SPREAD_DAYS, "definition": definition})
        took["runs_insert"] = time.monotonic() - t
        log(f"{n:,} runs written in {took['runs_insert']:.0f} s")
        t = time.monotonic()
        conn.execute(ATTEMPTS_SQL)
        took["attempts_insert"] = time.monotonic() - t
        log(f"their attempts written in {took['attempts_insert']:.0f} s")
        t = time.monotonic()
        for _, definition_sql in indexes:
            conn.execute(definition_sql)
        took["indexes"] = time.monotonic() - t
        log(f"{len(indexes)} indexes built in {took['indexes']:.0f} s")
        t = time.monotonic()
        conn.execute("VACUUM ANALYZE job_runs")
        conn.execute("VACUUM ANALYZE job_attempts")
        conn.execute("VACUUM ANALYZE job_definitions")
        took["vacuum"] = time.monotonic() - t
        conn.execute("CHECKPOINT")
        sizes = dict(conn.execute(
            "SELECT relname, pg_total_relation_size(oid) FROM pg_class "
            "WHERE relname IN ('job_runs', 'job_attempts')").fetchall())
        counts = dict(conn.execute("SELECT status, count(*) FROM job_runs GROUP BY status").fetchall())
        attempts = conn.execute("SELECT count(*) FROM job_attempts").fetchone()[0]
    return {"seconds": took, "bytes": sizes, "statuses": counts, "attempts": attempts}


def pages_at_scale(bench):
    """§22: every admin page over a history of `pages_runs` runs (big_history.build), each page
    `page_requests` times; {"growth", "build", "pages", "first_scrape", "load"}."""
    from . import measures

    n = bench.sizes["pages_runs"]
    url, app = measures.migrated(bench, "bench_pages_big")
    built = build(url, n, log=bench.log)
    notes = {}
    pages = measures.measure_pages(bench, url, measures.seed_pages(url, app), notes=notes)
    return {"growth": growth(n), "build": built, "pages": pages, "first_scrape": notes.get("first_scrape"),
            "load": os.getloadavg()}


def pages_big_section(r):
    """§22: the admin pages at `pages_runs` runs, and how a team's history grows to that size."""
    big = r["pages_big"]
    g, b = big["growth"], big["build"]
    per = g["per_minute"]
    lines = [
        f"## 22. Admin pages at {g['runs']:,} runs (issue 55, item 3)",
        "",
        f"A history of {g['runs']:,} runs kept under the default retention ({g['retain_days']['succeeded']} days "
        f"succeeded, {g['retain_days']['dead']} dead, {g['retain_days']['cancelled']} cancelled) is a team running "
        f"about **{g['runs_a_minute']:,.0f} runs a minute** ({per['succeeded']:,.1f} succeeding, {per['dead']:,.1f} "
        f"dying, {per['cancelled']:,.1f} cancelled). Written by bench/big_history.py: "
        + ", ".join(f"{n:,} {status}" for status, n in sorted(b["statuses"].items()))
        + f", {b['attempts']:,} attempts (3 % of succeeded runs after a failed attempt; dead after 3), one "
        f"INSERT ... SELECT generate_series per table ({b['seconds']['runs_insert']:.0f} s and "
        f"{b['seconds']['attempts_insert']:.0f} s, indexes built after in {b['seconds']['indexes']:.0f} s), "
        f"job_runs {b['bytes']['job_runs'] / 2**30:.1f} GiB and job_attempts {b['bytes']['job_attempts'] / 2**30:.1f} "
        f"GiB with their indexes. Each page {r['sizes']['page_requests']} times after 5, as §7 (its pages, its "
        "other rows); the load average is the machine's 1-minute one when the page's requests ended.",
        "",
    ]
    if big.get("first_scrape"):
        lines += [f"The first /metrics scrapes add the history's attempts to the duration totals "
                  f"(ops/durations.py), 200,000 a scrape: {big['first_scrape']['seals']} scrapes' worth, "
                  f"{big['first_scrape']['seal_seconds']:.0f} s in all here, done before the scrapes measured.", ""]
    lines += ["| page | path | p50 ms | p95 ms | load |", "| --- | --- | --- | --- | --- |"]
    for name, page in big["pages"].items():
        lines.append(f"| {name} | `{page['path']}` | {page['p50']:.1f} | {page['p95']:.1f} | {page['load']:.1f} |")
    lines.append("")
    return lines
