"""What a definition runs: a job type this process registers, one only a worker imports (known
from the workers' registrations), or, for an external definition, none (a stand-in)."""

from dataclasses import dataclass

from sqlalchemy import select

from ..core.database import db, execute
from ..core.errors import InvalidInput
from ..core.models import JobDefinition, JobRun
from ..engine.enqueuing import check_job_type
from ..engine.reported_runs import EXTERNAL_JOB_TYPE


def external(name, job_type, max_attempts):
    """(a stand-in for the job type, EXTERNAL_JOB_TYPE, 1): what an external definition has
    instead of a handler. A definition that has runs waiting for a worker cannot become one."""
    if job_type not in (None, "", EXTERNAL_JOB_TYPE):
        raise InvalidInput("job_type", "an external definition has no job type: jobsweb does not run it")
    if max_attempts not in (None, 1):
        raise InvalidInput("max_attempts", "an external definition's runs are reported once each; leave it empty")
    waiting = select(JobRun.id).join(JobDefinition, JobDefinition.id == JobRun.definition_id).where(
        JobDefinition.name == name, JobRun.status.in_(("queued", "failed")))
    if db.session.scalar(waiting.limit(1)) is not None:
        raise InvalidInput("external", "the definition has runs waiting for a worker (queued or failed): "
                                       "cancel them before it becomes external")
    return _EXTERNAL, EXTERNAL_JOB_TYPE, 1


@dataclass(frozen=True)
class _Unregistered:
    """What check_max_attempts and the queue defaults read of a job type: for external definitions,
    and for one only a worker imports."""

    max_attempts: int | None = None
    queue: str = "default"
    priority: int = 0


_EXTERNAL = _Unregistered()

# A job type this process does not import but a worker registered when it started
# (job_workers.job_types) within the last week: a standalone web process without
# JOBSWEB_HANDLERS defines the jobs its workers run. job_workers holds a few rows (retention
# deletes workers not seen for days): no index.
WORKER_REGISTERED = """
SELECT 1 FROM job_workers
WHERE %(job_type)s = ANY (job_types) AND last_seen_at > now() - interval '7 days'
LIMIT 1
"""


def known(job_type):
    """The registered JobType; or, for one only a worker imports, what is known of it here (its
    own max_attempts, queue and priority are not: the defaults, unless the definition sets them);
    or InvalidInput listing the known ones."""
    try:
        return check_job_type(job_type)
    except InvalidInput:
        if isinstance(job_type, str) and execute(WORKER_REGISTERED, {"job_type": job_type}).first():
            return _Unregistered()
        raise
