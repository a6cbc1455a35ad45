"""A job type for bench/run_control.py's terminate row: its handler never looks at ctx.cancelled
and runs in a child process the worker ends (cancel="terminate"). Loaded by the bench's worker
through JOBSWEB_HANDLERS=bench.spin_jobs, and imported by the measuring process to enqueue it."""

import time

from jobsweb import job


@job("bench.deaf_sleep", cancel="terminate", max_attempts=1)
def deaf_sleep(ctx):
    """Say it began (progress note "began"), then sleep for ever in short naps."""
    ctx.progress(0.0, "began")
    while True:
        time.sleep(0.01)
