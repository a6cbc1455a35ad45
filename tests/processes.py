"""Helpers for tests and drills that run real worker processes (tests/reliability, test_worker_processes)."""

import os
import random
import signal
import time

from jobsweb import enqueue
from tests.conftest import EVENT_TIMEOUT, wait_for


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


def finish(proc, timeout=EVENT_TIMEOUT):
    """Wait for a worker process to exit and return (exit code, output).

    A worker spawned with `output=` (a file) has its output read back from that file.
    """
    output, _ = proc.communicate(timeout=timeout)
    if output is None and getattr(proc, "output", None) is not None:
        proc.output.flush()
        with open(proc.output.name) as f:
            output = f.read()
    return proc.returncode, output


def stopped(proc, timeout=EVENT_TIMEOUT):
    """SIGTERM to a worker process, then finish(): (exit code, output, seconds from the signal to
    its exit)."""
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code, output = finish(proc, timeout)
    return code, output, time.monotonic() - signalled


def registered(sql, proc):
    """Wait until the worker `proc` has registered: it handles SIGTERM from then on."""
    wait_for(lambda: sql("SELECT count(*) FROM job_workers WHERE pid = %s AND stopped_at IS NULL",
                         [proc.pid])[0][0] == 1, message=f"worker {proc.pid} to start")


def stop_cost(sql, proc):
    """Seconds from SIGTERM to the exit of the worker `proc`, which has nothing to wait for, once
    registered: what this machine takes at its present load to have a worker hear the signal,
    write its stop and exit. A stop deadline a test measures from its own SIGTERM holds beyond
    this, so that a loaded machine, which slows every process's exit, does not fail a worker that
    keeps its deadline, while one that waits longer than it promises still fails."""
    registered(sql, proc)
    code, output, took = stopped(proc)
    assert code == 0 and "Traceback" not in output, output
    return took


def kill_at_random(alive, start, kill_every, done, before_kill=None):
    """SIGKILL a random worker of `alive`, replaced by start(), every `kill_every` seconds on
    average (0.5x to 1.5x) until done(); before_kill(victim) first, to note or give up."""
    while not done():
        victim = random.choice(alive)
        if before_kill is not None:
            before_kill(victim)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        alive[alive.index(victim)] = start()
        deadline = time.monotonic() + random.uniform(0.5, 1.5) * kill_every
        while time.monotonic() < deadline and not done():
            time.sleep(0.05)


def stop_workers(sql, alive):
    """SIGTERM the workers, once each has started (one still starting up has no SIGTERM handler
    yet and would die of the signal); their outputs, each asserted to have exited 0."""
    wait_for(lambda: sql("SELECT count(*) FROM job_workers WHERE pid = ANY(%s) AND stopped_at IS NULL",
                         [[p.pid for p in alive]])[0][0] == len(alive), message="the last workers to start")
    for proc in alive:
        proc.send_signal(signal.SIGTERM)
    outputs = [finish(proc, timeout=60) for proc in alive]
    assert [code for code, _ in outputs] == [0] * len(alive), outputs
    return outputs
