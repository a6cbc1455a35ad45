"""What a batch is now, and what a run waits for: the reads of batches and dependencies, for
handlers (`ctx.batch`), the public `get_batch`, and the admin screen. Batches and chains are
made by engine/enqueue/workflows.py."""

from dataclasses import dataclass, field

from ...core.database import execute, require_postgresql

# A batch's state: its row, its members' counts by status (job_runs_batch, index only) and its
# callback runs, newest first (job_runs_batch_callbacks).
BATCH = """
SELECT b.id, b.payload, b.on_finish, b.on_success, b.members, b.pending, b.finishes, b.created_at, b.finished_at,
       coalesce((SELECT jsonb_object_agg(status, n) FROM (
                     SELECT status, count(*) AS n FROM job_runs
                     WHERE batch_id = b.id AND batch_callback IS NULL GROUP BY status) c), '{}') AS counts,
       coalesce((SELECT jsonb_agg(jsonb_build_object('id', r.id, 'callback', r.batch_callback, 'status', r.status,
                                                     'reason', r.reason) ORDER BY r.id DESC)
                 FROM job_runs r WHERE r.batch_id = b.id AND r.batch_callback IS NOT NULL), '[]') AS callbacks,
       b.label
FROM job_batches b
WHERE b.id = %(batch_id)s
"""
# What a run waits for and what waits for it (the primary key of job_run_deps and
# job_run_deps_after), for its page: at most `limit` of each, oldest first.
RUN_DEPENDENCIES = """
(SELECT 'waits_for' AS side, r.id, r.job_type, r.status FROM job_run_deps d JOIN job_runs r ON r.id = d.after_id
 WHERE d.run_id = %(run_id)s ORDER BY r.id LIMIT %(limit)s)
UNION ALL
(SELECT 'waited_by', r.id, r.job_type, r.status FROM job_run_deps d JOIN job_runs r ON r.id = d.run_id
 WHERE d.after_id = %(run_id)s ORDER BY r.id LIMIT %(limit)s)
"""
BATCH_OF_RUN = "SELECT batch_id FROM job_runs WHERE id = %(run_id)s"
OPEN_BATCHES = "SELECT count(*) FROM job_batches WHERE finished_at IS NULL"
# The members of a batch not yet ended, for cancel_batch; failed and dead ones for retry.
BATCH_MEMBERS = """
SELECT id FROM job_runs WHERE batch_id = %(batch_id)s AND batch_callback IS NULL AND status = ANY(%(statuses)s)
ORDER BY id
"""


@dataclass(frozen=True)
class BatchState:
    """A batch as it is now: counts holds its members by status, e.g. {"succeeded": 98, "dead": 1}."""

    id: int
    payload: dict
    on_finish: str | None
    on_success: str | None
    members: int
    pending: int  # members not yet ended
    finishes: int  # times it finished (a retried member reopens it)
    created_at: object
    finished_at: object  # None while open
    counts: dict = field(default_factory=dict)
    callbacks: list = field(default_factory=list)  # {"id", "callback", "status", "reason"}, newest first
    label: str | None = None  # batch(label=...)

    @property
    def finished(self):
        return self.finished_at is not None


def read_batch(fetch, batch_id):
    """The BatchState of `batch_id` (None if there is none), read with fetch(sql, params) -> rows."""
    rows = fetch(BATCH, {"batch_id": batch_id})
    return BatchState(*rows[0]) if rows else None


def batch_of_run(fetch, run_id):
    """The BatchState of the batch run `run_id` belongs to (a member or a callback), or None."""
    rows = fetch(BATCH_OF_RUN, {"run_id": run_id})
    return read_batch(fetch, rows[0][0]) if rows and rows[0][0] is not None else None


def _fetch(sql, params):
    return execute(sql, params).all()


def get_batch(batch_id):
    """The state of batch `batch_id` (a BatchState), or None if there is none."""
    require_postgresql(from_code=True)  # on SQLite: this, not a raw syntax error
    return read_batch(_fetch, batch_id)


def open_batches():
    """How many batches have members not yet ended."""
    return execute(OPEN_BATCHES).scalar()


def dependencies(run_id, limit=100):
    """{"waits_for": [rows], "waited_by": [rows]} of run `run_id`, each row (id, job_type, status)."""
    found = {"waits_for": [], "waited_by": []}
    for row in execute(RUN_DEPENDENCIES, {"run_id": run_id, "limit": limit}):
        found[row.side].append(row)
    return found


def batch_members(batch_id, statuses):
    """Ids of the members of `batch_id` in these statuses."""
    return [row.id for row in execute(BATCH_MEMBERS, {"batch_id": batch_id, "statuses": list(statuses)})]
