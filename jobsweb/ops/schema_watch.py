"""A running worker's look at jobsweb's schema: a duty (commands.build_worker hands it over) that
reads, as often as the worker heartbeats, whether a function or trigger went missing or a
trigger was disabled since it started, and says so in one line, and once more when it is whole
again. The worker keeps running meanwhile: its claims that fail for a missing function are an
outage of the schema (engine/link.py SchemaIncomplete), backed off until `flask jobs migrate`;
a missing or disabled trigger fails no statement, and only this look sees it before every
chain step and batch callback has waited for ever. The check at start is the command's
(commands/worker_commands.py), which refuses to start on an incomplete schema."""

import logging
import time

from ..core import schema_objects
from ..engine.link import SchemaIncomplete
from ..engine.worker.duties import Duty

log = logging.getLogger("jobsweb.worker")


class SchemaWatch:
    """What the last look found, so that each change is one line."""

    def __init__(self):
        self.said = ()  # what is missing or disabled, as the last line said (nothing: whole)

    def look(self, link):
        """One look on the worker's link (a round trip of catalog reads, about a millisecond).
        Finds no work: a one-shot worker is not kept running by it."""
        try:
            lacking = tuple(row[0] for row in link.fetch(
                schema_objects.MISSING_AT_HEAD, {**schema_objects.PARAMS, "head": schema_objects.HEAD}))
        except SchemaIncomplete as exc:
            # No jobsweb_alembic_version (a restore under way): said, not raised, so that the
            # claims, not this look, decide whether the worker backs off.
            lacking = (str(exc),)
            if lacking != self.said:
                log.warning("%s", exc)
        else:
            if lacking and lacking != self.said:
                log.warning("%s; this worker keeps running", schema_objects.describe(lacking))
            elif not lacking and self.said:
                log.info("jobsweb's schema is whole again")
        self.said = lacking
        return False


def duty(config):
    """The look as often as the worker heartbeats (a third of the lease: 20 s by default), the
    first one a heartbeat after start, as the command looked at start."""
    every = config["JOBSWEB_LEASE_SECONDS"] / 3
    return Duty("schema watch", SchemaWatch().look, every=every, next_at=time.monotonic() + every)
