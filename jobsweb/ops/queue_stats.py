"""Each queue's state for the Queues page and /metrics: waiting and running runs, the oldest
wait, its limits and pause, and the attempts it finished in the last hour."""

from dataclasses import dataclass

from . import job_type_metrics
from .stats import HELD_BY_A_PAUSE
from ..core.database import execute

# Queues with a job_queues row, and queues that only plain-SQL inserts have used so far. Counts
# come from the partial indexes the claim uses (job_runs_queue_claimable, job_runs_running), each
# read once and grouped, so finished history costs nothing here. Not a subquery per queue: an
# empty job_queues is never analysed (autovacuum waits for 50 rows), the planner then expects 630
# queues, and 630 times the subqueries' cost passed the stock server's JIT threshold as soon as a
# thousand runs waited (145 ms of compiling for one queue).
QUEUES = """
WITH waiting AS (
    SELECT queue, count(*) FILTER (WHERE run_at <= now()) AS due,
           min(run_at) FILTER (WHERE run_at <= now()) AS oldest
    FROM job_runs WHERE status IN ('queued', 'failed') GROUP BY queue
), running AS (
    SELECT queue, count(*) AS running FROM job_runs WHERE status = 'running' GROUP BY queue
), names AS (
    SELECT name FROM job_queues UNION SELECT queue FROM waiting UNION SELECT queue FROM running
)
SELECT n.name, coalesce(w.due, 0) AS due, coalesce(r.running, 0) AS running,
       extract(epoch FROM now() - w.oldest) AS oldest_wait,
       q.concurrency_limit, q.rate_limit, q.rate_seconds, coalesce(q.paused, false) AS paused
FROM names n
LEFT JOIN waiting w ON w.queue = n.name
LEFT JOIN running r ON r.queue = n.name
LEFT JOIN job_queues q ON q.name = n.name
ORDER BY n.name
"""

# Attempts that ran to an end in the last hour (from the start of its first minute), by queue:
# the minutes the rollup has counted (job_type_metrics by primary key: span, then bucket; see
# ops/job_type_metrics.py), and the attempts finished since it was sealed, each joined to its run
# (index job_attempts_finished_outcome; seconds of them once a page has sealed the rollup, an
# hour of them at most). Not every attempt of the hour joined to its run: 16,000 were 20 ms.
# sealed_until comes as a value, read just before: as a subquery here, unknown when planning,
# the page took 168 ms p95 (194 ms on PostgreSQL 15, JIT-compiled) at a million runs.
LAST_HOUR = f"""
SELECT queue, sum(n)::bigint FROM (
    SELECT queue, runs AS n FROM job_type_metrics
    WHERE span = 'minute' AND bucket >= date_trunc('minute', now() - interval '1 hour', 'UTC')
    UNION ALL
    SELECT r.queue, 1 FROM job_attempts a JOIN job_runs r ON r.id = a.run_id
    WHERE {job_type_metrics.RAN_TO_AN_END}
      AND a.finished_at >= greatest(CAST(%(sealed_until)s AS timestamptz),
                                    date_trunc('minute', now() - interval '1 hour', 'UTC'))
) counted
GROUP BY queue
"""

# The due runs no worker may take because a person paused something (stats.HELD_BY_A_PAUSE, the
# rule the claim applies and the dashboard's DUE_NOW counts), by what holds each: its paused
# queue first, else its paused job type, the order in which why_waiting.py names them. Read only
# when DUE_NOW found held runs, the way DUE_NOW reads (index job_runs_claimable; a scan once much
# of the table is due): 300,000 due runs among a million, 200,000 of them held, took 234 ms p50
# against DUE_NOW's 237 ms (stock server, machine shared). The paused lists are a few rows.
HELD_BY_CAUSE = f"""
SELECT by_queue, CASE WHEN by_queue THEN queue ELSE job_type END AS name, count(*) AS n
FROM (SELECT queue, job_type, queue IN (SELECT name FROM job_queues WHERE paused) AS by_queue
      FROM job_runs WHERE status IN ('queued', 'failed') AND run_at <= now() AND {HELD_BY_A_PAUSE}) held
GROUP BY 1, 2
ORDER BY 1 DESC, 3 DESC, 2
"""


@dataclass(frozen=True)
class Held:
    """Due runs held by one pause: `queue` (a paused queue) or `job_type` (a paused job type, in a
    queue that is not paused), its name and how many."""

    kind: str
    name: str
    n: int


def held_by_pause():
    """[Held], paused queues first, then paused job types; most runs first within each."""
    return [Held("queue" if by_queue else "job_type", name, n) for by_queue, name, n in execute(HELD_BY_CAUSE)]


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
    last_hour: int = 0  # attempts that ran to an end (succeeded or failed) in the last hour

    @property
    def rate(self):
        """'N/SECONDS' as `flask jobs queue --rate` takes it, or None."""
        return f"{self.rate_limit}/{self.rate_seconds}" if self.rate_limit else None


def queues(with_throughput=True):
    """Every queue's QueueState, by name; with the last hour's attempts as far as the rollup
    counted them and since (job_type_metrics.seal first keeps the rest short)."""
    states = [QueueState(*row) for row in execute(QUEUES)]
    if with_throughput:
        done = dict(execute(LAST_HOUR, {"sealed_until": execute(job_type_metrics.SEALED).scalar()}).all())
        for state in states:
            state.last_hour = done.pop(state.name, 0)
        # A queue that only finished runs this hour (nothing waits or runs, no limits set) is
        # listed too: "default" after a busy hour is not an unknown queue.
        states += [QueueState(name, 0, 0, None, None, None, None, False, n) for name, n in done.items()]
        states.sort(key=lambda state: state.name)
    return states
