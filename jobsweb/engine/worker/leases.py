"""Keeping the leases a worker holds: heartbeats, a handler's extend_lease and progress writes,
and the claims a broken connection may have committed unseen."""

import logging

from .. import upkeep
from ..jobs import retry, signals
from ..link import DatabaseUnavailable
from .execution import released

log = logging.getLogger("jobsweb.worker")


class Leases:
    """The leases of the runs `held` (engine/worker/held_runs.py) holds for worker `worker`: extended on
    `link` at each heartbeat (every third of `lease` seconds), by handlers on demand, and their
    progress written on `progress_link`, a connection of its own (made at the first write), so
    that progress never waits on, nor holds up, the claim and finish round trips."""

    def __init__(self, held, link, progress_link, worker, lease):
        self.held = held
        self.link = link
        self.progress_link = progress_link
        self.worker = worker
        self.lease = lease  # seconds

    def heartbeat(self):
        """Extend the held runs' leases; stop the handlers of runs cancelled or lost meanwhile."""
        held = self.held.snapshot()
        if not held:
            return
        rows = self.link.fetch(upkeep.EXTEND_LEASES, {
            "worker": self.worker, "ids": [h.ctx.run_id for h in held],
            "attempts": [h.ctx.attempt for h in held], "leases": [h.lease for h in held]})
        kept = {run_id: cancel_requested for run_id, cancel_requested in rows}
        for h in held:
            if kept.get(h.ctx.run_id) and not h.ctx.cancelled:
                h.cancel_requested = True
                h.stop(force=True)
                log.info("run %d %s: cancelled by an operator; %s", h.ctx.run_id, h.ctx.job_type,
                         "ending its process" if h.job.cancel == "terminate" else "asking the handler to stop")
            if h.ctx.run_id not in kept and self.held.drop(h):
                signals.attempt_over(h, "lease_lost")
                h.stop(force=True)
                log.warning("run %d %s: lease lost (another worker took it over or it was "
                            "cancelled); asking the handler to stop", h.ctx.run_id, h.ctx.job_type)

    def extend(self, ctx, seconds=None):
        """JobContext.extend_lease: called from a handler thread."""
        held = self.held.get(ctx.run_id)
        if held is None or held.ctx is not ctx:
            return False
        # Bounded like a retry delay: 1e300 would overflow EXTEND_LEASES at every heartbeat.
        held.lease = max(1.0, retry.bounded(seconds or self.lease))
        try:
            rows = self.link.fetch(upkeep.EXTEND_LEASES, {
                "worker": self.worker, "ids": [ctx.run_id], "attempts": [ctx.attempt], "leases": [held.lease]})
        except DatabaseUnavailable as exc:
            log.warning("run %d: could not extend its lease: %s", ctx.run_id, exc)
            return False
        return bool(rows)

    def report_progress(self, ctx, progress, note, data):
        """JobContext.progress's write (engine/jobs/registry.py throttles it): from a handler's thread,
        on the progress link, never the claims' or outcomes'."""
        try:
            upkeep.report_progress(self.progress_link, self.worker, ctx, progress, note, data)
        except DatabaseUnavailable as exc:
            log.warning("run %d: could not record its progress: %s", ctx.run_id, exc)

    def lost_claims(self, known, written=None):
        """The outcomes that give back the runs a claim took while the connection broke (found by
        LOST_CLAIMS): those this worker locks other than the `known` ids. `written`: run id ->
        attempt of the outcomes this worker wrote lately (Trips.lately_written)."""
        return lost_claims(self.link.fetch, self.worker, known, written)


def lost_claims(fetch, worker, known, written=None):
    """The outcomes that give back the runs locked by `worker` other than the `known` ids: a claim
    that committed while the connection broke, whose rows never came. No handler began them, so
    they are released as a stopping worker's unstarted runs are: queued as they were, no attempt
    recorded, the claim's attempt given back. As interrupted attempts, each left a history row
    for an attempt that never ran, and the run's next attempt counted from 2."""
    outcomes = []
    for run_id, job_type, attempt in fetch(upkeep.LOST_CLAIMS, {"worker": worker, "known": known}):
        if written and written.get(run_id) == attempt:
            # Its outcome was written and acknowledged, then lost: a failover to a standby that had
            # not received that commit. Its handler ran; it runs again.
            log.warning("run %d %s: the outcome of attempt %d was written and then lost (a failover?): the run "
                        "is running again in the database; released back to the queue to run again", run_id,
                        job_type, attempt)
        else:
            log.warning("run %d %s: claimed by attempt %d while the connection broke, never started; released "
                        "back to the queue", run_id, job_type, attempt)
        outcomes.append(released(run_id, job_type, attempt, worker))
    return outcomes
