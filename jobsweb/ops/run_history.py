"""What the admin screen draws: one definition's latest runs (durations and outcomes, for its
chart and success rate) and the runs each worker holds now."""

from ..core.database import execute

HISTORY_SIZE = 50  # runs on a definition's chart

# Index job_runs_definition (definition_id, id) read backwards: the newest runs of one definition
# without a sort, however many runs it has had.
DEFINITION_HISTORY = """
SELECT id, status, created_at, scheduled_for, EXTRACT(EPOCH FROM finished_at - started_at) AS seconds
FROM job_runs
WHERE definition_id = %(definition_id)s
ORDER BY id DESC
LIMIT %(limit)s
"""

# Index job_runs_running (partial, status = 'running'): only the few runs held right now.
CURRENT_RUNS = """
SELECT locked_by, id, job_type, started_at
FROM job_runs
WHERE status = 'running' AND locked_by = ANY(%(workers)s)
ORDER BY locked_by, id
"""

# Outcomes a success rate is taken over: runs that ran to an end of their own. Active runs have
# no outcome yet; cancelled, skipped and missed ones say nothing about whether the job works.
RATED = ("succeeded", "dead")


def definition_history(definition_id, limit=HISTORY_SIZE):
    """The definition's newest `limit` runs, oldest first: id, status, created_at, scheduled_for
    and seconds (None until it finished, or when it never started)."""
    rows = execute(DEFINITION_HISTORY, {"definition_id": definition_id, "limit": limit}).all()
    return rows[::-1]


def success_rate(history):
    """(succeeded, rated) over the runs of `history` that ran to an end of their own."""
    rated = [row for row in history if row.status in RATED]
    return sum(row.status == "succeeded" for row in rated), len(rated)


def current_runs(worker_ids):
    """{worker id: [(run id, job type, started_at)]} for the runs those workers hold now."""
    held = {}
    for worker, run_id, job_type, started_at in execute(CURRENT_RUNS, {"workers": list(worker_ids)}):
        held.setdefault(worker, []).append((run_id, job_type, started_at))
    return held
