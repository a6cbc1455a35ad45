"""How long a /metrics scrape and a prune take on a big table; prints the numbers.

    DATABASE_URL=postgresql://... .venv/bin/python -m bench.operations [runs]

Uses (and empties) the jobsweb tables of that database; without DATABASE_URL, the embedded
server in instance/pgdata. Not a test: numbers depend on the machine.
"""

import os
import sys
import time

from sqlalchemy import text

from jobsweb import create_app
from jobsweb.core.database import db

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
TOKEN = "benchmark-token-0123456789"

FILL_RUNS = text("""
INSERT INTO job_runs (job_type, status, attempts, started_at, finished_at, created_at)
SELECT 'bench.' || (i % 7), CASE WHEN i % 50 = 0 THEN 'dead' ELSE 'succeeded' END, 1,
       now() - make_interval(mins => i / 10) - interval '2 seconds', now() - make_interval(mins => i / 10),
       now() - make_interval(mins => i / 10)
FROM generate_series(1, :n) AS i
""")
FILL_ATTEMPTS = text("""
INSERT INTO job_attempts (run_id, attempt, worker, started_at, finished_at, outcome)
SELECT id, 1, 'bench:1:a', started_at, finished_at, CASE status WHEN 'dead' THEN 'failed' ELSE 'succeeded' END
FROM job_runs
""")


def timed(what, work, repeat=3):
    best = None
    for _ in range(repeat):
        started = time.perf_counter()
        result = work()
        elapsed = time.perf_counter() - started
        best = elapsed if best is None or elapsed < best else best
    print(f"{what}: best of {repeat}: {best * 1000:.0f} ms")
    return result


def main():
    os.environ["JOBSWEB_METRICS_TOKEN"] = TOKEN
    app = create_app({"JOBSWEB_WEB_ALERTS": False})  # timing operations, not a web server
    with app.app_context():
        from flask_migrate import upgrade

        upgrade()
        db.session.execute(text("TRUNCATE job_attempts, job_runs, job_duration_totals, job_metrics_state "
                                "RESTART IDENTITY CASCADE"))
        db.session.execute(FILL_RUNS, {"n": RUNS})
        db.session.execute(FILL_ATTEMPTS)
        db.session.commit()
        db.session.execute(text("ANALYZE job_runs, job_attempts"))
        db.session.commit()
    print(f"{RUNS:,} finished runs with one attempt each, finished over the last {RUNS // 14400} days")
    client = app.test_client()
    headers = {"Authorization": f"Bearer {TOKEN}"}
    timed("GET /metrics, first (counts every attempt into the stored totals)",
          lambda: client.get("/metrics", headers=headers), repeat=1)
    timed("GET /metrics, then", lambda: client.get("/metrics", headers=headers))
    with app.app_context():
        from jobsweb.ops import retention

        timed("prune --dry-run", retention.dry_run)
        started = time.perf_counter()
        batches = []

        def stop():
            batches.append(time.perf_counter())

        pruned, _ = retention.prune(stop=stop)
        elapsed = time.perf_counter() - started
        deleted = sum(p.runs for p in pruned)
        gaps = [b - a for a, b in zip(batches, batches[1:])] or [elapsed]
        print(f"prune: {deleted:,} runs in {elapsed:.1f} s, {len(batches)} batches, "
              f"longest batch {max(gaps) * 1000:.0f} ms")
        db.session.execute(text("TRUNCATE job_attempts, job_runs RESTART IDENTITY CASCADE"))
        db.session.commit()


if __name__ == "__main__":
    main()
