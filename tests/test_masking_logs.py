"""A worker's log lines mask a failed run's error as the run page does (issue 53, item 1: the
failed and dead lines printed it raw to whoever reads the logs), with the app's own mask words."""

import importlib

from jobsweb import enqueue
from tests import masking_job_types
from tests.conftest import committed


def test_a_worker_process_logs_a_failure_and_a_death_with_the_error_masked(app, registry_snapshot, spawn_worker):
    importlib.reload(masking_job_types)  # registered here too, for enqueue's check
    with committed(app):
        enqueue("test.mask.failing", {"key": "x_Custom-Word", "value": "Zq9xK7wP"})
    log = ""
    for _ in range(2):  # the first attempt fails, the second (the last) dies
        worker = spawn_worker(JOBSWEB_HANDLERS="tests.job_types,tests.masking_job_types",
                              JOBSWEB_MASK_KEYS="custom_word")
        assert worker.wait(timeout=60) == 0
        log += worker.stdout.read()
    # The worker's own lines: the second tick may open the dead run's incident (jobsweb.alerts,
    # masked too, and tested in test_masking_incidents), or the first tick may have run both
    # attempts, the retry being due at once.
    failed = [line for line in log.splitlines() if " jobsweb.worker: run " in line and "test.mask.failing" in line]
    assert len(failed) == 2, log
    assert all("could not connect: x_Custom-Word=•••••• host=db" in line for line in failed), failed
    assert "Zq9xK7wP" not in log
