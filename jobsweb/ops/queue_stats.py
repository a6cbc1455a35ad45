"""Each queue's state for the Queues page and /metrics: waiting and running runs, the oldest
wait, its limits and pause, and the attempts it finished in the last hour."""

from dataclasses import dataclass

from ..core.database import execute

# Queues with a job_queues row, and queues that only plain-SQL inserts have used so far. Counts
# come from the partial indexes the claim uses (job_runs_queue_claimable, job_runs_running),
# so finished history costs nothing here.
QUEUES = """
WITH names AS (
    SELECT name FROM job_queues
    UNION
    SELECT DISTINCT queue FROM job_runs WHERE status IN ('queued', 'failed')
    UNION
    SELECT DISTINCT queue FROM job_runs WHERE status = 'running'
)
SELECT n.name,
       (SELECT count(*) FROM job_runs r WHERE r.queue = n.name AND r.status IN ('queued', 'failed')
                                          AND r.run_at <= now()) AS due,
       (SELECT count(*) FROM job_runs r WHERE r.queue = n.name AND r.status = 'running') AS running,
       (SELECT extract(epoch FROM now() - min(r.run_at)) FROM job_runs r
        WHERE r.queue = n.name AND r.status IN ('queued', 'failed') AND r.run_at <= now()) AS oldest_wait,
       q.concurrency_limit, q.rate_limit, q.rate_seconds, coalesce(q.paused, false) AS paused
FROM names n LEFT JOIN job_queues q ON q.name = n.name
ORDER BY n.name
"""

# Attempts that ended in the last hour, by queue. Uses index job_attempts_finished_outcome.
THROUGHPUT = """
SELECT r.queue, count(*) FROM job_attempts a JOIN job_runs r ON r.id = a.run_id
WHERE a.finished_at > now() - interval '1 hour'
GROUP BY r.queue
"""


@dataclass
class QueueState:
    name: str
    due: int  # queued or retrying, and due now
    running: int
    oldest_wait: float | None  # seconds the oldest due run has waited
    limit: int | None
    rate_limit: int | None
    rate_seconds: int | None
    paused: bool
    last_hour: int = 0  # attempts finished in the last hour

    @property
    def rate(self):
        """'N/SECONDS' as `flask jobs queue --rate` takes it, or None."""
        return f"{self.rate_limit}/{self.rate_seconds}" if self.rate_limit else None


def queues(with_throughput=True):
    """Every queue's QueueState, by name."""
    states = [QueueState(*row) for row in execute(QUEUES)]
    if with_throughput:
        done = dict(execute(THROUGHPUT).all())
        for state in states:
            state.last_hour = done.get(state.name, 0)
    return states
