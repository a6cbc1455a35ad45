"""The engine's named SQL that changes no run's status: the enqueuer's look-up by key, the
worker's job_workers row, the leases of the runs it holds (and those whose holder stopped
heartbeating) and the claims it lost track of. The status changes are in statements.py.
"""

from psycopg.types.json import Jsonb

# The run an enqueue with a key collided with (ENQUEUE's ON CONFLICT inserted nothing): the
# run holding the idempotency key, else the unfinished run holding the unique key.
RUN_BY_KEY = """
(SELECT id FROM job_runs WHERE idempotency_key = %(idempotency_key)s)
UNION ALL
(SELECT id FROM job_runs
 WHERE unique_key = %(unique_key)s AND status IN ('queued', 'running', 'failed'))
LIMIT 1
"""


# Runs locked by this worker that it does not know it holds: after a broken connection, the
# claim's transaction may have committed while its rows never arrived. Without this they
# would sit `running` until their lease ran out (60 s by default). Scans index
# job_runs_running (running runs only).
LOST_CLAIMS = """
SELECT id, job_type, attempts FROM job_runs
WHERE status = 'running' AND locked_by = %(worker)s AND NOT (id = ANY (%(known)s))
"""

# Which outcomes FINISH_RUNS's guard refused had been written by an earlier send of the same
# finish: its commit's answer was lost (a reset, a blackhole that swallowed the reply), the
# worker sent it again, and the guard saw the run no longer held. The attempt row is then this
# worker's (index job_attempts_worker) with this outcome: lease recovery records a lost lease's
# attempt under its holder's name too, as failed 'lease_expired', and a live worker's late
# outcome refused then is rejected, not written. A released run (no attempt row) has its
# claim's attempt given back. Read only for refused outcomes: a few after a lost answer, none otherwise.
WRITTEN_BEFORE = """
SELECT o.id
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(outcomes)s::text[], %(error_types)s::text[])
     AS o(id, attempt, outcome, error_type)
WHERE CASE WHEN o.outcome = 'released'
           THEN EXISTS (SELECT 1 FROM job_runs r WHERE r.id = o.id AND r.attempts < o.attempt)
           ELSE EXISTS (SELECT 1 FROM job_attempts a
                        WHERE a.worker = %(worker)s AND a.run_id = o.id AND a.attempt = o.attempt
                          AND a.outcome = o.outcome AND a.error_type IS NOT DISTINCT FROM o.error_type) END
"""

# Push out the leases of runs this worker still holds. A run missing from RETURNING was taken
# over (its lease had expired) or cancelled: the worker must stop treating it as its own.
# cancel_requested says an operator asked a running run to stop (admin "cancel"): the worker
# sets the handler's cancellation flag, and keeps the lease until the handler returns.
EXTEND_LEASES = """
UPDATE job_runs r
SET locked_until = now() + make_interval(secs => o.lease), updated_at = now()
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(leases)s::float8[]) AS o(id, attempt, lease)
WHERE r.id = o.id
  AND r.attempts = o.attempt
  AND r.locked_by = %(worker)s
  AND r.status = 'running'
RETURNING r.id, r.cancel_requested_at IS NOT NULL AS cancel_requested
"""

# A handler's ctx.progress(): guarded like every write of a held run, so a run given up or taken
# over meanwhile keeps what its current holder says. Sent from the handler's thread on a link of
# its own, never in the claim or finish round trips, at most every PROGRESS_INTERVAL seconds per
# run; committed without waiting for the WAL flush (ASYNC_COMMIT): a crash may lose the last
# half second of progress, which the next attempt says again, and each write costs a round trip
# instead of a disk flush. (On a durable server, a 4-thread worker whose handlers each said two
# progresses ran 80 runs/s while these writes flushed on the claim link, 316-361 runs/s so; the
# runs of handlers that say none are not slowed.)
ASYNC_COMMIT = "SET LOCAL synchronous_commit = off"
REPORT_PROGRESS = """
UPDATE job_runs
SET progress = %(progress)s, progress_note = %(note)s, progress_data = %(data)s, progress_at = now()
WHERE id = %(id)s AND attempts = %(attempt)s AND locked_by = %(worker)s AND status = 'running'
"""


def report_progress(link, worker, ctx, progress, note, data):
    """Write one run's progress (the worker's and drain()'s ctx.progress)."""
    link.fetch_together([(ASYNC_COMMIT, None), (REPORT_PROGRESS, {
        "worker": worker, "id": ctx.run_id, "attempt": ctx.attempt, "progress": progress, "note": note,
        "data": None if data is None else Jsonb(data)})])

# Runs whose holder stopped heartbeating. Locked here (SKIP LOCKED: one recoverer per run)
# and finished with statements.FINISH_RUNS in the same transaction. Uses index job_runs_running.
# unbegun_claims > 0: claimed ahead, and its handler not known to have begun (RUNS_BEGAN).
EXPIRED_LEASES = """
SELECT id, attempts, locked_by, job_type, backoff_base, backoff_cap, unbegun_claims
FROM job_runs
WHERE status = 'running' AND locked_until < now()
ORDER BY locked_until
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
"""

# The runs claimed ahead whose handlers have run a moment (held_runs.BEGAN_AFTER) and are still
# held (HeldRuns.began_ahead): their claim marked them not begun (unbegun_claims, 0032_unbegun_claims),
# and from this commit on lease recovery charges them a failed attempt if the worker is lost. It
# rides on the next round trip (round_trips.Trip.build), never one of its own per run; a run that
# returned before it is left out (its finish sets 0), and so is one no longer marked: no new row
# version for nothing. Guarded like every write of a held run; by id, through the primary key.
# SKIP LOCKED: a run locked now is being finished (on the worker's other lane, whose finish sets
# 0), cancelled or recovered, and waiting for it could close a circle with that finish's locks
# (definitions, batches); a mark left so errs towards a release, which UNBEGUN_CLAIMS bounds.
# NO KEY: FINISH_RUNS's attempt rows take KEY SHARE locks on their runs.
RUNS_BEGAN = """
UPDATE job_runs SET unbegun_claims = 0
WHERE id = ANY (ARRAY(
    SELECT r.id FROM unnest(%(ids)s::bigint[], %(attempts)s::int[]) AS b(id, attempt)
    JOIN job_runs r ON r.id = b.id
    WHERE r.attempts = b.attempt AND r.locked_by = %(worker)s AND r.status = 'running' AND r.unbegun_claims > 0
    FOR NO KEY UPDATE OF r SKIP LOCKED))
"""

# Sent again when the connection broke before the answer came: the first one may have
# committed, and the worker's id is its own, so a row already there is this worker's.
REGISTER_WORKER = """
INSERT INTO job_workers (id, host, pid, job_types, queues, concurrency)
VALUES (%(worker)s, %(host)s, %(pid)s, %(job_types)s, %(queues)s, %(concurrency)s)
ON CONFLICT (id) DO NOTHING
"""

# Also the heartbeat's read of whether an operator quieted this worker or asked it to stop (the
# Workers page).
WORKER_SEEN = """
UPDATE job_workers SET last_seen_at = now(), runs_done = runs_done + %(done)s
WHERE id = %(worker)s
RETURNING quiet_at IS NOT NULL AS quiet, stop_requested_at IS NOT NULL AS stop, stop_requested_by
"""

# An operator quieted, resumed or stopped a worker: a listening one heartbeats at once (it reads
# its row then: WORKER_SEEN), as for a cancel of a run it holds (action_statements.CANCEL_CHANNEL,
# whose payload names the workers to tell). Delivered at the commit.
TELL_WORKER = "SELECT pg_notify('jobsweb_cancels', %(worker)s)"

WORKER_STOPPED = """
UPDATE job_workers SET last_seen_at = now(), stopped_at = now(), runs_done = runs_done + %(done)s
WHERE id = %(worker)s
"""
