"""after=: a run waits for other runs. What it waits for is decided here, under locks; what
releases or cancels it later is the trigger job_runs_workflow (migration 0020_workflows)."""

from ...core.database import execute
from ...core.errors import BIGINT_MAX, InvalidInput

AFTER_FAILURE = ("cancel", "run")  # what a dependency ending dead or cancelled does to the run
FAILED = ("dead", "cancelled", "skipped", "missed")  # ended without succeeding

# The runs of after=, locked and marked `awaited` (so that their status changes go through the
# trigger) before the new run is counted: a run of after= that ends meanwhile either committed
# before this lock (its status is read here as it ended) or waits for this transaction, and then
# finds the new run waiting for it. Locked in id order, as the trigger locks runs.
LOCK_DEPENDENCIES = """
WITH locked AS (
    SELECT id, status, awaited FROM job_runs WHERE id = ANY(%(after)s::bigint[])
    ORDER BY id FOR NO KEY UPDATE
),
marked AS (UPDATE job_runs r SET awaited = true FROM locked l WHERE r.id = l.id AND NOT l.awaited)
SELECT id, status FROM locked
"""

# The edges of the graph: each new run waits for each run of after=. A run that an idempotency
# key returned instead of creating (it was enqueued before, without after=) gets none.
RECORD_DEPENDENCIES = """
INSERT INTO job_run_deps (run_id, after_id)
SELECT r.id, a.id FROM job_runs r CROSS JOIN unnest(%(after)s::bigint[]) AS a(id)
WHERE r.id = ANY(%(ids)s::bigint[]) AND r.waiting_for IS NOT NULL
ON CONFLICT DO NOTHING
"""

# What a cancel of some runs reaches, a level of the graph at a time, for a page that asks first
# (the delete's): who waits for these runs (job_run_deps_after), then which of them are waiting
# (job_runs by id). One table per statement, as the trigger reads them (migration 0024_seams).
WAITING_FOR = "SELECT DISTINCT run_id FROM job_run_deps WHERE after_id = ANY(%(ids)s::bigint[])"
WAITING = """
SELECT id, run_after_failure, awaited FROM job_runs WHERE id = ANY(%(ids)s::bigint[]) AND status = 'waiting'
"""

NO_DEPENDENCIES = {"status": "queued", "waiting_for": None, "run_after_failure": False, "reason": None}


def check_after(after, after_failure):
    """after= as a sorted list of distinct run ids, or InvalidInput naming the field."""
    if after_failure not in AFTER_FAILURE:
        raise InvalidInput("after_failure", f"must be 'cancel' or 'run', got {after_failure!r}")
    if after is None:
        return []
    if isinstance(after, int) and not isinstance(after, bool):
        after = [after]
    if not isinstance(after, (list, tuple, set, frozenset)):
        raise InvalidInput("after", f"must be a list of run ids, got {type(after).__name__}")
    for run_id in after:
        if not isinstance(run_id, int) or isinstance(run_id, bool) or not 1 <= run_id <= BIGINT_MAX:
            raise InvalidInput("after", f"must hold run ids (whole numbers), got {run_id!r}")
    return sorted(set(after))


def wait_state(conn, after, after_failure):
    """ENQUEUE's status, waiting_for, run_after_failure and reason for a run of after=; locks
    and marks the runs of after= (LOCK_DEPENDENCIES). InvalidInput if one does not exist."""
    if not after:
        return NO_DEPENDENCIES
    statuses = dict(conn.exec_driver_sql(LOCK_DEPENDENCIES, {"after": after}).all())
    if missing := [run_id for run_id in after if run_id not in statuses]:
        raise InvalidInput("after", f"run {missing[0]} does not exist")
    run_anyway = after_failure == "run"
    failed = [(run_id, status) for run_id, status in sorted(statuses.items()) if status in FAILED]
    pending = sum(1 for status in statuses.values()
                  if status != "succeeded" and not (run_anyway and status in FAILED))
    if failed and not run_anyway:
        run_id, status = failed[0]
        return {"status": "cancelled", "waiting_for": pending, "run_after_failure": False,
                "reason": f"run {run_id} ended {status}"}
    return {"status": "waiting" if pending else "queued", "waiting_for": pending,
            "run_after_failure": run_anyway, "reason": None}


def record(conn, ids, after):
    """The new runs `ids` wait for the runs of `after`."""
    if after and ids:
        conn.exec_driver_sql(RECORD_DEPENDENCIES, {"ids": list(ids), "after": after})


def cancelled_below(roots, also_gone=lambda ids: set()):
    """How many waiting runs a cancel of `roots` (runs not yet ended) would cancel with them,
    down the whole graph: those enqueued with after_failure="run" are counted down instead, and
    `also_gone(ids)` names those among `ids` that go anyway (deleted with the roots)."""
    seen, frontier = set(roots), list(roots)
    cancelled = 0
    while frontier:
        ids = [row.run_id for row in execute(WAITING_FOR, {"ids": frontier})]
        rows = [row for row in execute(WAITING, {"ids": [i for i in ids if i not in seen]})
                if not row.run_after_failure]
        seen.update(row.id for row in rows)
        gone = also_gone([row.id for row in rows]) if rows else set()
        cancelled += sum(1 for row in rows if row.id not in gone)
        frontier = [row.id for row in rows if row.awaited]
    return cancelled
