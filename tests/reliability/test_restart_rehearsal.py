"""Drill 3, the worker-pool article's restart rehearsal: 100 receipts, 20 transient failures,
SIGTERM mid-run and a restart."""

import json
import signal
from collections import Counter

from tests.conftest import wait_for
from tests.processes import finish, stopped
from tests.reliability.conftest import size

BACKOFF_BASE = 0.5  # seconds
BACKOFF_CAP = 2.0  # seconds
SHUTDOWN_TIMEOUT = 1.0  # seconds


def test_a_restart_mid_run_sends_every_receipt_once_and_retries_with_backoff(app, sql, spawn_worker, worker_log,
                                                                             tmp_path, figures):
    jobs, failing = size("REHEARSAL_JOBS", 100), size("REHEARSAL_FAILING", 20)
    outbox = tmp_path / "outbox.txt"
    outbox.touch()
    payloads = [{"order": n, "outbox": str(outbox), "fail_first": n % (jobs // failing) == 0}
                for n in range(1, jobs + 1)]
    payloads[0]["seconds"] = 60  # a slow send, certainly in flight when SIGTERM comes
    sql("INSERT INTO job_runs (job_type, payload) SELECT 'test.receipt', p FROM unnest(%s::jsonb[]) AS p",
        [[json.dumps(p) for p in payloads]])
    settings = {"JOBSWEB_BACKOFF_BASE": BACKOFF_BASE, "JOBSWEB_BACKOFF_CAP": BACKOFF_CAP}

    def start():
        return spawn_worker("--forever", "--poll-interval", "0.05", "--concurrency", "4",
                            "--shutdown-timeout", str(SHUTDOWN_TIMEOUT), output=worker_log(), **settings)

    first = start()
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")[0][0] >= jobs // 3
             and sql("SELECT status FROM job_runs WHERE payload->>'order' = '1'")[0][0] == "running",
             message="a third of the receipts sent, the slow one in flight")
    code, output, stop_seconds = stopped(first)
    assert code == 0 and "Traceback" not in output, output
    assert sql("SELECT count(*) FROM job_runs WHERE status = 'running'") == [(0,)]
    interrupted = {r for (r,) in sql("SELECT run_id FROM job_attempts WHERE outcome = 'interrupted'")}
    assert interrupted, "work in flight was stopped and released"

    second = start()
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")[0][0] == jobs,
             timeout=120, message="every receipt to be sent after the restart")
    second.send_signal(signal.SIGTERM)
    assert finish(second)[0] == 0

    sent = Counter(outbox.read_text().splitlines())
    assert len(sent) == jobs and set(sent.values()) == {1}, "every receipt sent, none twice"
    # Each transient failure was retried, no sooner than the documented backoff allows
    # (base * 2^(attempt-1), capped, minus the 20% jitter).
    retries = sql("SELECT a.attempt, extract(epoch FROM b.started_at - a.finished_at)::float8 "
                  "FROM job_attempts a JOIN job_attempts b ON b.run_id = a.run_id AND b.attempt = a.attempt + 1 "
                  "WHERE a.outcome = 'failed'")
    # A run told to fail whose first attempt was interrupted by the SIGTERM never failed.
    [(interrupted_first,)] = sql("SELECT count(*) FROM job_attempts a JOIN job_runs r ON r.id = a.run_id "
                                 "WHERE a.attempt = 1 AND a.outcome = 'interrupted' "
                                 "AND (r.payload->>'fail_first')::boolean")
    assert len(retries) + interrupted_first == failing
    assert all(waited >= min(BACKOFF_BASE * 2 ** (attempt - 1), BACKOFF_CAP) * 0.8 for attempt, waited in retries)
    assert {r for (r,) in sql("SELECT run_id FROM job_attempts WHERE outcome = 'succeeded'")} >= interrupted
    figures(jobs=jobs, transient_failures=sql("SELECT count(*) FROM job_attempts WHERE outcome = 'failed'")[0][0],
            emails_sent=sum(sent.values()), duplicated_emails=sum(sent.values()) - len(sent),
            interrupted_at_sigterm=len(interrupted), sigterm_to_exit_seconds=round(stop_seconds, 2),
            shortest_retry_wait_seconds=round(min(w for _, w in retries), 2))
