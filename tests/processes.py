"""Helpers for tests and drills that run real worker processes (tests/reliability, test_worker_processes)."""

from jobsweb import enqueue


def add_many(app, job_type, count, payload=None, **kwargs):
    """Enqueue `count` runs through the API; returns their ids."""
    with app.app_context():
        return [enqueue(job_type, payload, **kwargs) for _ in range(count)]


def insert_many(sql, job_type, count, payload="{}", max_attempts=5):
    """Enqueue `count` due runs in one INSERT, as another program would: for drill sizes."""
    sql("INSERT INTO job_runs (job_type, payload, run_at, max_attempts) "
        "SELECT %s, %s::jsonb, now(), %s FROM generate_series(1, %s)", [job_type, payload, max_attempts, count])


def status_of(sql, run_id):
    return sql("SELECT status FROM job_runs WHERE id = %s", [run_id])[0][0]


def finish(proc, timeout=30):
    """Wait for a worker process to exit and return (exit code, output).

    A worker spawned with `output=` (a file) has its output read back from that file.
    """
    output, _ = proc.communicate(timeout=timeout)
    if output is None and getattr(proc, "output", None) is not None:
        proc.output.flush()
        with open(proc.output.name) as f:
            output = f.read()
    return proc.returncode, output
