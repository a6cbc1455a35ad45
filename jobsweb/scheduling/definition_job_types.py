"""What an external definition has instead of a job type: a stand-in, since jobsweb never runs
it. (A definition's own job type is checked as enqueue's is: engine/enqueuing.check_job_type,
which also takes one only a worker imports.)"""

from sqlalchemy import select

from ..core.database import db
from ..core.errors import InvalidInput
from ..core.models import JobDefinition, JobRun
from ..engine.jobs.registry import EXTERNAL_JOB_TYPE
from ..engine.jobs.worker_job_types import Unregistered


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


_EXTERNAL = Unregistered()

