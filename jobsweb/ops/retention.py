"""Retention: delete finished runs (and their attempts) older than their status's setting.

Run daily by the built-in `jobsweb.prune` definition (migration 0007_retention), whose job type
is defined here, and by `flask jobs prune [--dry-run]`. Deletes go in batches of JOBSWEB_PRUNE_BATCH runs, each its own
short transaction, so that workers claiming and finishing runs never wait long behind it and
autovacuum can reclaim the space as it goes. `failed` runs will be retried: never pruned.
JOBSWEB_RETAIN_UNIT=seconds makes the same settings count seconds, for a benchmark or test that
needs retention to delete while it runs (make bench's soak).

Workflows (docs/WORKFLOWS.md) need nothing of pruning: it deletes only ended runs (RETENTION's
statuses, past their days), and the end of each was counted when it happened, in its own
transaction (the trigger job_runs_workflow): runs waiting for it were counted down or cancelled
then, and its batch's `pending` counted it. So a waiting run waits only for runs not yet ended,
which are never pruned, and a batch's `pending` only for members not yet ended; the job_run_deps
rows of a pruned run go with it (ON DELETE CASCADE), and a retried dependent recounts from the
rows left (tests/test_prune.py). A run deleted before it ended is another matter: run_actions.delete.
"""

import time
from dataclasses import dataclass

from flask import current_app

from ..core.database import db, execute
from ..engine.jobs.registry import job
from ..engine.statements import PRUNE_RUNS

# status -> the setting that says how many days its runs are kept (0: forever).
RETENTION = {
    "succeeded": "JOBSWEB_RETAIN_SUCCEEDED",
    "dead": "JOBSWEB_RETAIN_DEAD",
    "cancelled": "JOBSWEB_RETAIN_CANCELLED",
    "skipped": "JOBSWEB_RETAIN_SKIPPED",
    "missed": "JOBSWEB_RETAIN_MISSED",
}
WORKER_RETAIN_DAYS = 30  # rows of worker processes not seen for this long are deleted too
# JOBSWEB_RETAIN_UNIT: what the JOBSWEB_RETAIN_* numbers count, as a fraction of a day.
UNIT_DAYS = {"days": 1, "seconds": 1 / 86400}

# What PRUNE_RUNS (engine/statements.py) would delete, for --dry-run. Uses index job_runs_prunable.
PRUNABLE = """
SELECT count(*), min(finished_at), max(finished_at),
       (SELECT count(*) FROM job_attempts a WHERE a.run_id IN (
           SELECT id FROM job_runs WHERE status = %(status)s
             AND finished_at < now() - %(days)s * interval '1 day'))
FROM job_runs
WHERE status = %(status)s AND finished_at < now() - %(days)s * interval '1 day'
"""

PRUNE_WORKERS = """
DELETE FROM job_workers WHERE last_seen_at < now() - make_interval(days => %(days)s)
"""


@dataclass
class Pruned:
    """What was (or, for a dry run, would be) deleted for one status."""

    status: str
    kept: int  # how long its runs are kept, in JOBSWEB_RETAIN_UNIT
    unit: str = "days"
    runs: int = 0
    attempts: int = 0
    oldest: object = None  # finished_at of the oldest such run (dry run only)
    newest: object = None

    @property
    def days(self):
        """How long its runs are kept, in days (a fraction with JOBSWEB_RETAIN_UNIT=seconds)."""
        return self.kept * UNIT_DAYS[self.unit]

    @property
    def age(self):
        """"14 days": how long its runs are kept, in words."""
        return f"{self.kept} {self.unit}"


def policy(config=None):
    """[Pruned] with nothing deleted yet, for every status that is pruned at all."""
    config = config or current_app.config
    return [Pruned(status, config[setting], config["JOBSWEB_RETAIN_UNIT"])
            for status, setting in RETENTION.items() if config[setting] > 0]


def dry_run():
    """[Pruned] for each pruned status: what a prune now would delete."""
    out = policy()
    for p in out:
        p.runs, p.oldest, p.newest, p.attempts = execute(PRUNABLE, {"status": p.status, "days": p.days}).one()
    db.session.rollback()
    return out


def prune(stop=lambda: None, batch=None, pause=None):
    """Delete what retention says, a batch per transaction; returns ([Pruned], workers deleted).

    `stop` is called between batches and may raise to end early (a handler's
    raise_if_cancelled): every batch already committed stays deleted. `pause(seconds)`, when
    given, is called after each full batch with the seconds it took (the prune job's ctx.sleep).
    """
    batch = batch or current_app.config["JOBSWEB_PRUNE_BATCH"]
    out = policy()
    for done in out:
        while True:
            stop()
            began = time.monotonic()
            runs, attempts = execute(PRUNE_RUNS, {"status": done.status, "days": done.days, "batch": batch}).one()
            db.session.commit()
            done.runs += runs
            done.attempts += attempts
            if runs < batch:
                break
            if pause is not None:
                pause(time.monotonic() - began)
    workers = execute(PRUNE_WORKERS, {"days": WORKER_RETAIN_DAYS}).rowcount
    db.session.commit()
    return out, workers


@job("jobsweb.prune", max_attempts=3)
def prune_job(ctx):
    """Delete finished runs past their retention (JOBSWEB_RETAIN_*), a small batch at a time."""
    # Between batches it waits as long as the last one took: batch after batch, a day's runs kept
    # PostgreSQL and the worker busy for minutes beside the other runs, and their wait rose 1.6x
    # (docs/BENCHMARKS.md, "Sustained load"); at half a core it still deletes thousands a second.
    # `flask jobs prune`, run by hand to be done with, does not wait.
    pruned, workers = prune(stop=ctx.raise_if_cancelled, pause=ctx.sleep)
    return {"deleted": {p.status: p.runs for p in pruned},
            "attempts": sum(p.attempts for p in pruned), "workers": workers}
