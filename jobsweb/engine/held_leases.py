"""Keeping the leases a worker holds: heartbeats, a handler's extend_lease, and the claims a
broken connection may have committed unseen.

A mixin of Worker (engine/worker.py), which holds the state these read: `held` (run id ->
Held), `pending` outcomes, `link`, `progress_link`, `id`, `lease`, `done` and `quiet`.
"""

import logging

from . import retry, upkeep
from .execution import released
from .link import DatabaseUnavailable

log = logging.getLogger("jobsweb.worker")


class LeaseHolder:
    """Worker's lease keeping (a mixin: the state is the worker's)."""

    def _heartbeat(self):
        """Extend the held runs' leases; stop the handlers of runs cancelled or lost meanwhile."""
        if self.held:
            held = list(self.held.values())
            rows = self.link.fetch(upkeep.EXTEND_LEASES, {
                "worker": self.id, "ids": [h.ctx.run_id for h in held],
                "attempts": [h.ctx.attempt for h in held], "leases": [h.lease for h in held]})
            kept = {run_id: cancel_requested for run_id, cancel_requested in rows}
            for h in held:
                if kept.get(h.ctx.run_id) and not h.ctx.cancelled:
                    h.cancel_requested = True
                    h.stop(force=True)
                    log.info("run %d %s: cancelled by an operator; asking the handler to stop",
                             h.ctx.run_id, h.ctx.job_type)
                if h.ctx.run_id not in kept and self.held.get(h.ctx.run_id) is h:
                    del self.held[h.ctx.run_id]
                    h.stop(force=True)
                    log.warning("run %d %s: lease lost (another worker took it over or it was "
                                "cancelled); asking the handler to stop", h.ctx.run_id, h.ctx.job_type)
        rows = self.link.fetch(upkeep.WORKER_SEEN, {"worker": self.id, "done": self.done})
        self.done = 0
        quiet = bool(rows and rows[0][0])
        if quiet != self.quiet:
            self.quiet = quiet
            if quiet:
                log.info("worker %s quieted from the admin screen: finishing the %d run(s) it holds, "
                         "claiming nothing more", self.id, len(self.held))
            else:
                log.info("worker %s resumed from the admin screen: claiming again", self.id)

    def extend_lease(self, ctx, seconds=None):
        """JobContext.extend_lease: called from a handler thread."""
        held = self.held.get(ctx.run_id)
        if held is None or held.ctx is not ctx:
            return False
        # Bounded like a retry delay: 1e300 would overflow EXTEND_LEASES at every heartbeat.
        held.lease = max(1.0, retry.bounded(seconds or self.lease))
        try:
            rows = self.link.fetch(upkeep.EXTEND_LEASES, {
                "worker": self.id, "ids": [ctx.run_id], "attempts": [ctx.attempt], "leases": [held.lease]})
        except DatabaseUnavailable as exc:
            log.warning("run %d: could not extend its lease: %s", ctx.run_id, exc)
            return False
        return bool(rows)

    def report_progress(self, ctx, progress, note, data):
        """JobContext.progress's write (engine/registry.py throttles it): from a handler's thread,
        on the worker's progress link, never the claims' or outcomes'."""
        try:
            upkeep.report_progress(self.progress_link, self.id, ctx, progress, note, data)
        except DatabaseUnavailable as exc:
            log.warning("run %d: could not record its progress: %s", ctx.run_id, exc)

    def _release_lost_claims(self):
        """Queue again the runs a claim took while the connection broke (found in LOST_CLAIMS)."""
        self.pending += lost_claims(self.link.fetch, self.id, list(self.held) + [o.run_id for o in self.pending])
        self.claims_in_doubt = False


def lost_claims(fetch, worker, known):
    """The outcomes that give back the runs locked by `worker` other than the `known` ids: a claim
    that committed while the connection broke, whose rows never came. No handler began them, so
    they are released as a stopping worker's unstarted runs are: queued as they were, no attempt
    recorded, the claim's attempt given back. As interrupted attempts, each left a history row
    for an attempt that never ran, and the run's next attempt counted from 2."""
    outcomes = []
    for run_id, job_type, attempt in fetch(upkeep.LOST_CLAIMS, {"worker": worker, "known": known}):
        log.warning("run %d %s: claimed by attempt %d while the connection broke, never started; released "
                    "back to the queue", run_id, job_type, attempt)
        outcomes.append(released(run_id, job_type, attempt, worker))
    return outcomes

