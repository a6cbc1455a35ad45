"""The run state machine and the worker's hot path, as SQL written as the database runs it.

The statements that change `job_runs.status` are here, next to each other: enqueue, run now
and schedule slots create runs; the claim, the finish and lease recovery move them along; the
retention job deletes them. An operator's retry, cancel and delete are in action_statements.py.
docs/ARCHITECTURE.md draws the states and names the statement behind each arrow.

Every statement that changes a run a worker holds is guarded by who holds it (`locked_by`) and
which attempt it is (`attempts`), and reports through RETURNING which rows it changed: a worker
whose lease was taken over can never overwrite a newer attempt, and learns that it lost the run.
Times are the database's `now()`. Other engine SQL (lease recovery's look-up of expired leases
too): upkeep.py; runs reported from outside (`flask jobs exec`, ping URLs) change status in
reported_runs.py. Runs of workflows (after=, batches) leave 'waiting' through the trigger
job_runs_workflow (migration 0020_workflows), in the transaction of the status change that
releases or cancels them."""

# skipped (overlap policy) and missed (misfire policy) are schedule slots that never ran;
# waiting runs wait for other runs (after=) or, as a batch's callbacks, for the batch to finish.
RUN_STATUSES = ("waiting", "queued", "running", "succeeded", "failed", "dead", "cancelled", "skipped", "missed")
ACTIVE_STATUSES = ("queued", "running", "failed")  # a run that will still execute
# A run that has ended: it will not execute again unless an operator retries it (get_run().done).
# Not the complement of ACTIVE_STATUSES: a waiting run has not ended and will execute later.
ENDED_STATUSES = ("succeeded", "dead", "cancelled", "skipped", "missed")
RETRYABLE = ("failed", "dead", "cancelled")  # what RETRY_RUNS takes
CANCELLABLE = ("waiting", "queued", "failed", "running")  # what CANCEL_WAITING and REQUEST_CANCEL take
DELETABLE = tuple(status for status in RUN_STATUSES if status != "running")  # what run_actions.delete takes

# -- runs come into being: queued or waiting (or, for schedule slots, skipped / missed) -------

# Enqueue one run. ON CONFLICT lets the unique indexes on idempotency_key and (for unfinished
# runs) unique_key decide between concurrent enqueuers: the loser inserts nothing and reads the
# winner's id afterwards (RUN_BY_KEY). The queue's job_queues row is created on first use.
# A queued run also tells the listening workers, in this same round trip: due now, it wakes them
# (see NOTIFY); due later, its due time on the database's clock ('at:' and the epoch, NOTIFY_AT),
# when they claim, not at their next poll.
# status is 'queued', or, for a run of after= (engine/enqueue/workflows.py decided it under
# LOCK_DEPENDENCIES' locks), 'waiting' for `waiting_for` runs, or 'cancelled' at once because
# one of them had ended dead or cancelled (`reason` says which). batch_id: a batch's member.
# The payload travels as JSON text cast here: a host's session may be on psycopg2, which cannot
# adapt psycopg 3's Jsonb.
ENQUEUE = """
WITH new_queue AS (INSERT INTO job_queues (name) VALUES (%(queue)s) ON CONFLICT DO NOTHING),
inserted AS (
    INSERT INTO job_runs (job_type, payload, run_at, max_attempts, idempotency_key, queue,
                          priority, unique_key, status, waiting_for, run_after_failure, reason,
                          finished_at, batch_id, trace_context)
    VALUES (%(job_type)s, %(payload)s::jsonb, coalesce(%(run_at)s, now()), %(max_attempts)s,
            %(idempotency_key)s, %(queue)s, %(priority)s, %(unique_key)s, %(status)s,
            %(waiting_for)s, %(run_after_failure)s, %(reason)s,
            CASE WHEN %(status)s = 'cancelled' THEN now() END, %(batch_id)s, %(trace_context)s)
    ON CONFLICT DO NOTHING
    RETURNING id, run_at, status
)
SELECT id FROM inserted
LEFT JOIN LATERAL (SELECT pg_notify('jobsweb_runs', CASE WHEN inserted.run_at <= now() THEN ''
                                                         ELSE 'at:' || extract(epoch FROM inserted.run_at) END)
                   WHERE inserted.status = 'queued') wake ON true
"""

# Enqueue many runs of one job type in one statement: one round trip and one index pass per
# chunk instead of one per run. Payloads travel as one text[] (cheaper to send than jsonb[]);
# WITH ORDINALITY keeps their order, so ids come out in the order of the payloads. Status,
# dependencies and batch as in ENQUEUE, the same for every run.
ENQUEUE_MANY = """
WITH new_queue AS (INSERT INTO job_queues (name) VALUES (%(queue)s) ON CONFLICT DO NOTHING)
INSERT INTO job_runs (job_type, payload, run_at, max_attempts, queue, priority, status, waiting_for,
                      run_after_failure, reason, finished_at, batch_id, trace_context)
SELECT %(job_type)s, p.payload::jsonb, coalesce(%(run_at)s, now()), %(max_attempts)s,
       %(queue)s, %(priority)s, %(status)s, %(waiting_for)s, %(run_after_failure)s, %(reason)s,
       CASE WHEN %(status)s = 'cancelled' THEN now() END, %(batch_id)s, %(trace_context)s
FROM unnest(%(payloads)s::text[]) WITH ORDINALITY AS p(payload, n)
ORDER BY p.n
RETURNING id
"""

# Wake the workers LISTENing on this channel (engine/worker/wakeup.py) when a run becomes due now.
# Delivered when the transaction commits, and PostgreSQL folds identical notifications of one
# transaction into one: a bulk enqueue wakes each worker once, not once per run.
NOTIFY_CHANNEL = "jobsweb_runs"
NOTIFY = "SELECT pg_notify('jobsweb_runs', '')"
# A run due later tells the listeners when (engine/worker/wakeup.py keeps each worker's due times):
# the epoch of its run_at, which they read against the database's clock. Runs enqueued together
# for one time send one notification (folded as above).
NOTIFY_AT = "SELECT pg_notify('jobsweb_runs', 'at:' || extract(epoch FROM %(run_at)s::timestamptz))"

# Wake Run.wait() (engine/runs/run_waiting.py), which LISTENs on this channel, when runs end. The
# payload is the ended runs' ids, comma-separated (FINISH_RUNS), or '' for "look at yours again"
# (an operator's cancel, which also ends the runs waiting below, or delete). A channel of its own:
# the workers' listeners are not woken by runs ending.
ENDED_CHANNEL = "jobsweb_ended"
ENDED_NOTIFY = "SELECT pg_notify('jobsweb_ended', '')"

# "Run now": a run of a definition due at once, outside its schedule (next_run_at does not
# move). The job's settings are copied from the definition, as INSERT_SLOTS copies them.
RUN_NOW = """
WITH inserted AS (
    INSERT INTO job_runs (definition_id, job_type, payload, run_at, status, max_attempts,
                          timeout_seconds, lease_seconds, backoff_base, backoff_cap, queue, priority)
    SELECT id, job_type, payload, now(), 'queued', max_attempts, timeout_seconds, lease_seconds,
           backoff_base, backoff_cap, queue, priority
    FROM job_definitions
    WHERE id = %(definition_id)s
    RETURNING id
)
SELECT id FROM inserted
LEFT JOIN LATERAL (SELECT pg_notify('jobsweb_runs', '')) wake ON true
"""

# The slots of a batch of definitions become runs, in one statement: queued to execute, or
# already finished as 'skipped'/'missed' with their reason. The job's settings come from the
# definition rows, locked by DUE_DEFINITIONS (scheduling/materialise.py) since they were read. Rows come back for the
# slots created; a slot missing from RETURNING existed already and is not created again.
#
# Exactly once: slots that exist already are left out (NOT EXISTS), and the unique
# (definition_id, scheduled_for) stays the last guard (ON CONFLICT). That guard is a unique index
# on the runs of definitions alone (migration 0031: an index entry fewer for each version of every
# other run), which only a conflict target naming its predicate infers; the constraint over every
# run that it replaced is inferred by the same target, so this statement works on either schema
# (a rolling deploy, a roll-back to the release before 0031). Leaving them out first
# matters for `chain`, which needs the ids of runs created by this same statement: ids are
# drawn from the sequence up front (ascending in slot order), so that
# - chain 'queue' (overlap 'queue', catching up): the run waits for the previous queued slot
#   of its definition in this batch (after_run_id), or, first in line, for the run the
#   definition had already (the after_run_id sent);
# - chain 'skip' (overlap 'skip', catching up): the first queued slot of its definition in
#   this batch runs; the others are skipped while it is queued.
# A chained slot thus never points at a run that was not created: a slot a concurrent writer
# created between NOT EXISTS and the insert (only possible outside scheduling/materialise.py, which holds
# the definition's lock) would make after_run_id point nowhere, and the foreign key fails the
# whole transaction rather than chain a run wrongly.
INSERT_SLOTS = """
WITH planned AS (
    SELECT * FROM unnest(
        %(definition_ids)s::bigint[], %(slots)s::timestamptz[], %(statuses)s::text[],
        %(reasons)s::text[], %(after_run_ids)s::bigint[], %(chains)s::text[]
    ) WITH ORDINALITY AS p(definition_id, scheduled_for, status, reason, after_run_id, chain, n)
),
fresh AS MATERIALIZED (
    SELECT nextval(pg_get_serial_sequence('job_runs', 'id')) AS id, p.*
    FROM (
        SELECT * FROM planned
        WHERE NOT EXISTS (SELECT 1 FROM job_runs r
                          WHERE r.definition_id = planned.definition_id
                            AND r.scheduled_for = planned.scheduled_for)
        ORDER BY n
    ) p
),
queued AS (
    SELECT id, lag(id) OVER slots AS previous_id, first_value(id) OVER slots AS first_id
    FROM fresh
    WHERE status = 'queued'
    WINDOW slots AS (PARTITION BY definition_id ORDER BY n)
),
decided AS (
    SELECT f.id, f.definition_id, f.scheduled_for, f.n,
           CASE WHEN f.chain = 'skip' AND q.first_id <> f.id THEN 'skipped' ELSE f.status END AS status,
           CASE WHEN f.chain = 'skip' AND q.first_id <> f.id
                THEN 'previous run ' || q.first_id || ' still queued' ELSE f.reason END AS reason,
           CASE WHEN f.chain = 'queue' THEN coalesce(q.previous_id, f.after_run_id)
                ELSE f.after_run_id END AS after_run_id
    FROM fresh f LEFT JOIN queued q ON q.id = f.id
)
INSERT INTO job_runs (id, definition_id, job_type, payload, run_at, status, max_attempts,
                      scheduled_for, reason, after_run_id, finished_at, timeout_seconds,
                      lease_seconds, backoff_base, backoff_cap, queue, priority)
SELECT s.id, s.definition_id, d.job_type, d.payload, now(), s.status, d.max_attempts,
       s.scheduled_for, s.reason, s.after_run_id, CASE WHEN s.status <> 'queued' THEN now() END,
       d.timeout_seconds, d.lease_seconds, d.backoff_base, d.backoff_cap, d.queue, d.priority
FROM decided s JOIN job_definitions d ON d.id = s.definition_id
ORDER BY s.n
ON CONFLICT (definition_id, scheduled_for) WHERE definition_id IS NOT NULL DO NOTHING
RETURNING id, definition_id, scheduled_for, status, reason
"""

# -- a worker claims, holds and finishes runs: queued/failed -> running -> any --------------

# Claim up to `limit` due runs in one call, in order of priority (smaller first), run_at, id.
# SKIP LOCKED lets concurrent workers take disjoint sets instead of queueing on each other's row
# locks; the UPDATE happens under the locks the SELECTs took, so no run is claimed twice. Only job
# types this worker can execute (an older worker in a rolling deploy leaves new ones alone), only its
# --queues (NULL: all); never a paused queue or paused job type. Limits hold across all workers.
# `held` locks the limited queues' job_queues rows SKIP LOCKED: while one claimer holds a row the
# others leave that queue alone this time, so two can never both see "one slot left". A claimer whose
# statement began before another's claim committed would still see those runs queued (one snapshot per
# statement; the locked row is the newest version), so every claim that takes runs of a limited queue
# bumps its `claims`, and a claimer whose snapshot's `claims` differs from the locked row's takes
# nothing from it. The rate window is in the row (rate_starts). Starts and leases count from the clock
# read at the call's start: no run that ended before it seems to overlap, no lease ends before
# started_at + lease. A limited queue gives at most `free` runs (slots free now, none ahead:
# engine/worker/claim_ahead.py): no run waits holding its slot. Runs beyond the first `free` are claimed
# ahead up to the first on its last attempt (a killed worker would spend it), which waits for a slot.
# The runs are read front by front: each (queue, priority) with claimable runs that this claim may
# take from, through job_runs_queue_claimable up to the first run not yet due, smallest priority
# first; so runs scheduled for later, and paused or full queues, cost a claim nothing.
# The claim is the PL/pgSQL function jobsweb_claim_runs_in_order, written out in 0025_claim_order
# (0015_claim_path made the claim a function, jobsweb_claim_runs): one round trip whatever the
# number of fronts, nothing prepared on the client's side (which a pooler in transaction mode would
# lose), each statement planned at each call with the table as it is then, and never JIT-compiled.
# Since 0032_unbegun_claims it also marks the runs it claims ahead (beyond the first `free`) as not
# begun: job_runs.unbegun_claims counts the claims in a row that held a run ahead with no handler
# known to have begun it. The first `free` runs start at once, as if begun at the claim (0); a
# round trip clears a run ahead's mark once its handler has run a moment (upkeep.RUNS_BEGAN), and
# lease recovery gives a marked run back uncharged (engine/worker/lease_recovery.py).
CLAIM_RUNS = """
SELECT * FROM jobsweb_claim_runs_in_order(%(worker)s, %(lease)s, %(job_types)s, %(limit)s, %(free)s, %(queues)s)
"""

# Finish many attempts in one statement and record each in job_attempts. One row per attempt:
# outcome 'succeeded', 'failed' (retry after `delay` seconds unless give_up or out of attempts,
# then dead), 'interrupted' (back to queued, due now, the attempt given back), 'cancelled' (the
# handler stopped because an operator cancelled it) or 'released' (held by a stopping worker, no
# handler began: queued again, nothing recorded; also lease recovery's for a run claimed ahead whose
# handler never began, job_runs.unbegun_claims). A run whose cancellation was requested ends
# cancelled whatever its attempt came to. `worker` is the holder the guard expects: this worker,
# or the dead holder when recovering a lease. Runs of a definition also update its state.
# `waited`: seconds a run claimed ahead waited in the worker for a slot (time.monotonic there),
# added to the claim's started_at; the database's clock stays the only wall clock.
FINISH_RUNS = """
-- The outcomes come as one JSON array of objects (outcome_writes.finish_params): json.dumps writes
-- it in C, where psycopg dumped twelve arrays element by element in Python (half the client's
-- CPU for this statement, and less for the server to parse too; issue 41).
WITH outcome AS (
    SELECT * FROM json_to_recordset(%(outcomes)s::json) AS o(
        id bigint, attempt int, worker text, outcome text, result jsonb, error_type text, error text,
        stack text, delay float8, give_up bool, output text, waited float8)
),
-- Workflows: the batches of these runs and the runs waiting for them are locked first, in id
-- order (batches, then runs), before any run is updated. The trigger job_runs_workflow (migration
-- 0020_workflows) then counts them down in rows this transaction holds already, and workers
-- ending runs of the same batches queue behind each other instead of deadlocking. A run outside
-- any workflow finds nothing here (batch_id NULL, awaited false).
workflow_locked AS MATERIALIZED (
    SELECT (SELECT count(*) FROM (
                SELECT b.id FROM job_batches b
                WHERE b.id IN (SELECT r.batch_id FROM job_runs r WHERE r.id IN (SELECT id FROM outcome))
                ORDER BY b.id FOR NO KEY UPDATE) batches)
         + (SELECT count(*) FROM (
                SELECT w.id FROM job_run_deps d JOIN job_runs w ON w.id = d.run_id
                WHERE d.after_id IN (SELECT r.id FROM job_runs r WHERE r.id IN (SELECT id FROM outcome) AND r.awaited)
                  AND w.status = 'waiting'
                ORDER BY w.id FOR NO KEY UPDATE OF w) dependents) AS locked
),
decided AS (
    SELECT o.*,
           CASE
               WHEN o.outcome = 'succeeded' THEN 'succeeded'
               WHEN o.outcome = 'cancelled' OR r.cancel_requested_at IS NOT NULL THEN 'cancelled'
               WHEN o.outcome IN ('interrupted', 'released') THEN 'queued'
               WHEN o.give_up OR r.attempts >= r.max_attempts THEN 'dead'
               ELSE 'failed'
           END AS new_status
    FROM outcome o JOIN job_runs r ON r.id = o.id CROSS JOIN workflow_locked
),
finished AS (
    UPDATE job_runs r
    SET status = d.new_status,
        run_at = CASE d.new_status
                     WHEN 'failed' THEN now() + make_interval(secs => d.delay)
                     WHEN 'queued' THEN CASE d.outcome WHEN 'released' THEN r.run_at ELSE now() END
                     ELSE r.run_at
                 END,
        finished_at = CASE WHEN d.new_status IN ('succeeded', 'dead', 'cancelled') THEN now() END,
        result = CASE WHEN d.outcome = 'succeeded' THEN d.result ELSE r.result END,
        -- A succeeded run's progress reads as finished, whatever its handler said last (0.95, say).
        progress = CASE WHEN d.new_status = 'succeeded' AND r.progress IS NOT NULL THEN 1 ELSE r.progress END,
        last_error = coalesce(d.error, r.last_error),
        error_type = coalesce(d.error_type, r.error_type),
        last_stack = CASE WHEN d.error IS NULL THEN r.last_stack ELSE d.stack END,
        -- An interrupted attempt (a deploy's SIGTERM) was not the run's fault: recorded, but given
        -- back, as Oban's snooze does (three deploys during a long run do not end it dead); a
        -- released run never began: no attempt recorded, and the claim's is taken back.
        max_attempts = r.max_attempts + (d.new_status = 'queued' AND d.outcome = 'interrupted')::int,
        attempts = r.attempts - (d.outcome = 'released')::int,
        -- Every outcome but a release ends the attempt as one that counts (a charged lease expiry
        -- too): the unbegun claims in a row start again. A release keeps them, and the next claim
        -- ahead counts on (0032_unbegun_claims: a handler that kills its worker before the worker
        -- says it began is given back uncharged only so many times in a row).
        unbegun_claims = CASE WHEN d.outcome = 'released' THEN r.unbegun_claims ELSE 0 END,
        started_at = r.started_at + make_interval(secs => d.waited),
        locked_by = NULL, locked_until = NULL, updated_at = now()
    FROM decided d
    WHERE r.id = d.id
      AND r.attempts = d.attempt
      AND r.locked_by = d.worker
      AND r.status = 'running'
    RETURNING r.id, r.status, r.run_at, r.started_at, r.definition_id, d.attempt, d.worker,
              d.outcome, d.error_type, d.error, d.stack, d.output
),
-- Definitions are locked in id order before they are updated: two workers finishing runs of
-- the same definitions at once then queue behind each other instead of deadlocking.
definitions_locked AS (
    SELECT id FROM job_definitions
    WHERE id IN (SELECT definition_id FROM finished WHERE status IN ('succeeded', 'dead'))
    ORDER BY id
    FOR NO KEY UPDATE
),
-- A definition's state follows its newest finished run; failure_count counts consecutive
-- dead runs and a success resets it. One batch may hold several runs of a definition, so
-- only the dead runs newer than the batch's newest success count (successes_after = 0),
-- added to the old count only when the batch holds no success at all.
definition_state AS (
    UPDATE job_definitions d
    SET last_run_at = s.started_at,
        last_status = s.status,
        last_duration_ms = s.duration_ms,
        failure_count = CASE WHEN s.any_success THEN 0 ELSE d.failure_count END + s.deaths
    FROM (
        SELECT DISTINCT ON (definition_id) definition_id, status, started_at,
               (extract(epoch FROM now() - started_at) * 1000)::bigint AS duration_ms,
               count(*) FILTER (WHERE status = 'dead' AND successes_after = 0)
                   OVER (PARTITION BY definition_id) AS deaths,
               bool_or(status = 'succeeded') OVER (PARTITION BY definition_id) AS any_success
        FROM (
            SELECT definition_id, id, status, started_at,
                   count(*) FILTER (WHERE status = 'succeeded')
                       OVER (PARTITION BY definition_id ORDER BY id DESC) AS successes_after
            FROM finished
            WHERE definition_id IS NOT NULL AND status IN ('succeeded', 'dead')
        ) newest_first
        ORDER BY definition_id, id DESC
    ) s
    JOIN definitions_locked l ON l.id = s.definition_id
    WHERE d.id = s.definition_id
),
recorded AS (
    INSERT INTO job_attempts (run_id, attempt, worker, started_at, finished_at, outcome,
                              error_type, error, stack, output)
    SELECT id, attempt, worker, started_at, now(), outcome, error_type, error, stack, output
    FROM finished WHERE outcome <> 'released'
),
-- Run.wait() of the runs ended here returns at commit: one notification per statement, the
-- ended ids as its payload (ENDED_CHANNEL). Past NOTIFY's 8000-byte payload, '' ("look again"):
-- pg_notify would fail the statement. Referenced below, so that it runs (a plain SELECT in WITH
-- runs only if read); MATERIALIZED, so once.
ended_notice AS MATERIALIZED (
    SELECT pg_notify('jobsweb_ended', CASE WHEN length(ids) < 8000 THEN ids ELSE '' END)
    FROM (SELECT string_agg(id::text, ',') AS ids FROM finished
          WHERE status IN ('succeeded', 'dead', 'cancelled')) ended
    WHERE ids IS NOT NULL
)
-- seconds: how long the attempt took by the database clock, for the worker's log line.
SELECT id, status, extract(epoch FROM run_at - now()) AS retry_in,
       extract(epoch FROM now() - started_at) AS seconds
FROM finished LEFT JOIN ended_notice ON true
"""

# -- retention: prune ------------------------------------------------------------------------
# An operator's retry, cancel, delete, run now and reschedule: action_statements.py.

# Retention: the oldest finished runs of a status past its retention are deleted with their
# attempts, one batch per transaction (ops/retention.py). SKIP LOCKED: a run an operator is
# retrying right now is left for the next pass. The lock also re-checks status, so a run
# retried since it was read is not deleted. Uses index job_runs_prunable; job_runs_after_run
# serves the ON DELETE SET NULL of runs queued behind a deleted one, and
# job_attempts_run_attempt the attempts' delete: the batch's ids go to it as one array, looked
# up one by one. Joined to the batch instead, the planner hashed it and read job_attempts whole
# for every batch (100,000 attempts: 18 of a batch's 30 ms), and a busy retention, a batch after
# another, doubled the workers' p95 wait (docs/BENCHMARKS.md, "Sustained load").
# %(days)s may be a fraction of a day (JOBSWEB_RETAIN_UNIT=seconds: ops/retention.py).
PRUNE_RUNS = """
WITH doomed AS (
    SELECT id FROM job_runs
    WHERE status = %(status)s AND finished_at < now() - %(days)s * interval '1 day'
    ORDER BY finished_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
),
attempts AS (
    DELETE FROM job_attempts WHERE run_id = ANY (ARRAY(SELECT id FROM doomed)) RETURNING id
),
runs AS (
    DELETE FROM job_runs WHERE id = ANY (ARRAY(SELECT id FROM doomed)) RETURNING id
)
SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM attempts)
"""
