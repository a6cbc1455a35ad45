"""Every job type an operator may filter by: those present in the runs, in the definitions and
in what recently seen workers handle, as well as those the web process imports itself.

The web process often imports none of a separate worker's modules, so registry.names() alone
left the runs of such a worker out of every job-type filter ("Retry all matching" then acted on
the wrong runs).
"""

from ..core.database import execute
from ..engine.jobs import registry
from ..engine.jobs.worker_job_types import worker_job_types

# A distinct over a million runs reads them all; this walks index job_runs_job_type_id
# (job_type, id) instead, one index probe per job type ("loose index scan"). The walk stops
# after :most job types, so a table of countless distinct types (a type per customer) still
# answers in a bounded time; the filter input takes any name typed in besides.
JOB_TYPE_NAMES = """
WITH RECURSIVE present(job_type, n) AS (
    (SELECT job_type, 1 FROM job_runs ORDER BY job_type LIMIT 1)
    UNION ALL
    SELECT (SELECT r.job_type FROM job_runs r WHERE r.job_type > p.job_type ORDER BY r.job_type LIMIT 1),
           p.n + 1
    FROM present p WHERE p.job_type IS NOT NULL AND p.n < %(most)s
)
SELECT job_type FROM present WHERE job_type IS NOT NULL
UNION SELECT job_type FROM job_definitions
"""

MOST_PRESENT = 500  # job types read from the runs; the rest can still be typed in


def job_type_names():
    """Sorted names of every job type known anywhere: runs, definitions, workers, this process."""
    found = {name for (name,) in execute(JOB_TYPE_NAMES, {"most": MOST_PRESENT})}
    return sorted(found.union(registry.names(), worker_job_types(in_session=True)))
