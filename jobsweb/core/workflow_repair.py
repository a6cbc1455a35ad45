"""What the workflow trigger would have done while it was missing or disabled, done afterwards.

The trigger job_runs_workflow moves a run's dependents on as the run ends: counted down (and
queued at zero) on a success, cancelled with everything below them on a failure, a batch's
callbacks released once its last member ended. Dropped (a restore of the tables, a worker of
the old deployment still finishing runs before `flask jobs migrate`) or disabled (a bulk load's
DISABLE TRIGGER ALL), it does none of that, and what ended meanwhile strands what waits for it:
chain steps and callbacks waiting for ever for runs that succeeded. `flask jobs migrate`,
once the trigger fires again, moves them on here, with the trigger's own functions where the
trigger would have called them (migration 0024_seams):

- a run that waits as after_failure="cancel" for a run that ended dead or cancelled: cancelled
  with everything below it by jobsweb_cancel_below, the dead run's (which also counts down the
  after_failure="run" runs that waited for them). Nothing else leaves such a run waiting: a retry
  leaves alone a run whose dependency is dead or cancelled (docs/WORKFLOWS.md);
- every other waiting run's count, taken again as the trigger takes it when a retried run waits
  again (jobsweb_workflow_step): the runs it waits for not ended as it needs. Only ever lowered,
  and queued at zero, as jobsweb_count_down does;
- an open batch whose count says more members pending than have not ended: the difference ended
  through jobsweb_batch_ended, which releases (or cancels) its callbacks at zero.

In one transaction, holding job_runs against writers (SHARE ROW EXCLUSIVE: workers' finishes
and enqueues wait the milliseconds it takes, readers do not), so that no run ends between a
count and its correction. Taken first in its transaction, so that a server whose default is
serializable takes the snapshot after it. Without a trigger brought back, STRANDED looks first,
without the lock: a restore that brought the trigger back itself may still have stranded runs.
"""

from typing import NamedTuple

from .database import db, execute

# What a dependency's end means for a run waiting for it, as jobsweb_workflow_step counts a
# retried run's wait: a success always, any end for after_failure="run" (a skipped or missed
# slot too, as enqueue counts them: engine/enqueue/dependencies.py FAILED).
PENDING = """count(*) FILTER (WHERE NOT (a.status = 'succeeded' OR (w.run_after_failure
                                   AND a.status IN ('dead', 'cancelled', 'skipped', 'missed'))))"""
# Runs waiting for other runs (not callbacks, whose waiting_for is NULL), with their count taken
# again (index job_runs_status_id for the status, job_run_deps_pkey and job_runs' key for the
# join). A run none of whose dependencies is left (deleted since) is not among them: what it
# waited for cannot be read any more, and it is left for an operator rather than run.
RECOUNTED = f"""
SELECT w.id, w.waiting_for, w.run_after_failure, {PENDING} AS pending,
       count(*) FILTER (WHERE a.status IN ('dead', 'cancelled')) AS failed
FROM job_runs w JOIN job_run_deps d ON d.run_id = w.id JOIN job_runs a ON a.id = d.after_id
WHERE w.status = 'waiting' AND w.waiting_for IS NOT NULL
GROUP BY w.id
"""
# Open batches (index job_batches_open) with their members counted (index job_runs_batch), as
# CLOSE_BATCH counts them when the batch closes.
BATCHES_COUNTED = """
SELECT b.id, b.pending, b.failures, c.pending AS members_pending, c.failures AS members_failed
FROM job_batches b
CROSS JOIN LATERAL (
    SELECT (count(*) FILTER (WHERE r.status NOT IN ('succeeded', 'dead', 'cancelled')))::int AS pending,
           (count(*) FILTER (WHERE r.status IN ('dead', 'cancelled')))::int AS failures
    FROM job_runs r WHERE r.batch_id = b.id AND r.batch_callback IS NULL
) c
WHERE b.finished_at IS NULL
"""

# How many runs are stranded: read without a lock (one statement sees a run's end and what the
# trigger did with it together, or neither), before deciding to take one.
STRANDED = f"""
SELECT (SELECT count(*) FROM ({RECOUNTED}) n
        WHERE n.pending < n.waiting_for OR (NOT n.run_after_failure AND n.failed > 0))
     + (SELECT count(*) FROM ({BATCHES_COUNTED}) b WHERE b.pending > b.members_pending)
"""
HOLD = "LOCK TABLE job_runs IN SHARE ROW EXCLUSIVE MODE"
# Index-only on job_runs_status_id; exact under HOLD, where only this transaction moves runs.
WAITING_AND_QUEUED = """
SELECT count(*) FILTER (WHERE status = 'waiting'), count(*) FILTER (WHERE status = 'queued')
FROM job_runs WHERE status IN ('waiting', 'queued')
"""
# Each dead or cancelled run an after_failure="cancel" run still waits for, in id order (the
# order in which the trigger's calls lock), its end handed to jobsweb_cancel_below with the
# trigger's words. First: the count below then finds the after_failure="run" runs it counted.
CANCEL_BELOW_FAILED = f"""
SELECT count(jobsweb_cancel_below(f.id, CASE WHEN f.reason = 'deleted' THEN ' was deleted'
                                             ELSE ' ended ' || f.status END))
FROM (SELECT DISTINCT a.id, a.status, a.reason
      FROM ({RECOUNTED}) n JOIN job_run_deps d ON d.run_id = n.id JOIN job_runs a ON a.id = d.after_id
      WHERE NOT n.run_after_failure AND n.failed > 0 AND a.status IN ('dead', 'cancelled')
      ORDER BY a.id) f
"""
# jobsweb_count_down's update, with the counts taken again instead of lowered by one end.
# waiting -> queued does not fire the trigger (neither status has ended).
COUNT_DOWN_AGAIN = f"""
UPDATE job_runs w
SET waiting_for = n.pending,
    status = CASE WHEN n.pending = 0 THEN 'queued' ELSE 'waiting' END,
    run_at = CASE WHEN n.pending = 0 THEN greatest(w.run_at, now()) ELSE w.run_at END,
    updated_at = now()
FROM ({RECOUNTED}) n
WHERE w.id = n.id AND n.pending < w.waiting_for
"""
# The members that ended uncounted, ended through jobsweb_batch_ended in batch id order (as
# every transaction that counts a batch down locks them). How many of them failed is what the
# members' failures exceed the batch's by: a member deleted after it was counted leaves the
# batch's count above, and then it may say one failure too few (it says one at least).
END_BATCHES_AGAIN = f"""
SELECT count(jobsweb_batch_ended(s.id, s.ended, s.failed))
FROM (SELECT b.id, b.pending - b.members_pending AS ended,
             least(b.pending - b.members_pending, greatest(0, b.members_failed - b.failures)) AS failed
      FROM ({BATCHES_COUNTED}) b WHERE b.pending > b.members_pending ORDER BY b.id) s
"""
WAKE_WORKERS = "SELECT pg_notify('jobsweb_runs', '')"


class Released(NamedTuple):
    """Runs moved on out of `waiting`: to the queue, and cancelled."""

    queued: int
    cancelled: int


def release_stranded(trigger_back):
    """Move on every run the workflow trigger left waiting, as it would have (see above), in
    one transaction of the current app's database, committed; a Released. `trigger_back`: the
    trigger was just recreated or enabled (without it, nothing is done unless STRANDED finds
    a stranded run)."""
    if not trigger_back:
        found = execute(STRANDED).scalar()
        db.session.rollback()
        if not found:
            return Released(0, 0)
    execute(HOLD)
    waiting, queued = execute(WAITING_AND_QUEUED).one()
    execute(CANCEL_BELOW_FAILED)
    execute(COUNT_DOWN_AGAIN)
    execute(END_BATCHES_AGAIN)
    still_waiting, now_queued = execute(WAITING_AND_QUEUED).one()
    released = Released(now_queued - queued, waiting - still_waiting - (now_queued - queued))
    if released.queued:
        execute(WAKE_WORKERS)  # delivered at the commit
    db.session.commit()
    return released
