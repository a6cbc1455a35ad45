"""Why a run that is not running is not running, in one sentence: the single source of that
answer for the run page, the runs list's state column, the definition page and the overdue
incident (alerts.py) with its webhook.

A queued, retrying (failed) or waiting run is held by the first of these that applies, in the
order the claim would meet them:
- waiting: it waits for other runs (after=, each named with its own state and due time) or for
  its batch to finish (a callback);
- after: it is queued behind its definition's previous run (overlap policy 'queue');
- paused_queue / paused_type: a person paused its queue or its job type;
- due_later: its time (or its retry's) has not come;
- no_worker: no worker seen within stats.UNHANDLED_WINDOW (an hour) handles its job type or takes its
  queue; no_live_worker: some did, but none is alive now by the Workers page's rule (fleet.py:
  stopped, or no heartbeat for two leases: crontab mode between ticks, a killed worker, every
  worker down), and the sentence names the last one seen and its queue; quiet: those alive are
  all quieted by an operator (they claim nothing until resumed), one of them named;
- at_limit / rate_limited: its queue's concurrency limit is reached, or its rate window is full;
- next: nothing holds it: it is due and goes to the next free slot of a worker, after the runs
  ahead of it (smaller priority, earlier due time).
A reason is a list of parts so that pages can link the queue and the runs it names and show
times in the viewer's zone, while notifications read its plain text (times in UTC).
"""

from dataclasses import dataclass, field
from datetime import datetime, timezone

from flask import current_app

from . import fleet
from .stats import UNHANDLED_WINDOW
from ..core.database import execute
from ..core.time_words import relative_words, seconds_words

AWAITED_SHOWN = 5  # awaited runs named in one sentence; the rest are counted

# One statement for any number of runs (the runs list asks for 50 at once): the runs by primary
# key; queue rows and paused types are a few rows; running counts are grouped once per queue
# that has a limit (index job_runs_running); each run's awaited runs come from job_run_deps'
# primary key, its predecessor by primary key; workers are a few rows per process.
REASONS = f"""
WITH runs AS (
    SELECT r.id, r.status, r.run_at, r.queue, r.job_type, r.after_run_id, r.waiting_for,
           r.batch_id, r.batch_callback
    FROM job_runs r WHERE r.id = ANY(%(ids)s::bigint[]) AND r.status IN ('queued', 'failed', 'waiting')
), limited AS (
    SELECT q.name FROM job_queues q WHERE q.concurrency_limit IS NOT NULL AND q.name IN (SELECT queue FROM runs)
), running AS (
    SELECT queue, count(*) AS n FROM job_runs WHERE status = 'running' AND queue IN (SELECT name FROM limited)
    GROUP BY queue
), workers AS (
    SELECT id, job_types, queues, last_seen_at, stopped_at, quiet_at, {fleet.LIVE} AS live
    FROM job_workers WHERE last_seen_at > now() - make_interval(secs => %(window)s)
)
SELECT r.id, r.status, r.run_at, r.queue, r.job_type, r.waiting_for, r.batch_id, r.batch_callback, now() AS now,
       coalesce(q.paused, false) AS queue_paused,
       EXISTS (SELECT 1 FROM job_paused_types p WHERE p.job_type = r.job_type) AS type_paused,
       q.concurrency_limit, coalesce(n.n, 0) AS running, q.rate_limit, q.rate_seconds,
       (SELECT min(t) + make_interval(secs => q.rate_seconds) FROM unnest(q.rate_starts) t
        WHERE t > now() - make_interval(secs => q.rate_seconds)
        HAVING count(*) >= q.rate_limit) AS rate_frees_at,
       seen.last_seen_at AS handler_seen_at, seen.id AS handler_id, seen.stopped_at AS handler_stopped_at,
       EXISTS (SELECT 1 FROM workers w WHERE w.live AND (w.job_types IS NULL OR r.job_type = ANY(w.job_types))
                                         AND (w.queues IS NULL OR r.queue = ANY(w.queues))) AS handler_live,
       (SELECT min(w.id) FILTER (WHERE w.quiet_at IS NOT NULL) FROM workers w
        WHERE w.live AND (w.job_types IS NULL OR r.job_type = ANY(w.job_types))
          AND (w.queues IS NULL OR r.queue = ANY(w.queues))
        HAVING bool_and(w.quiet_at IS NOT NULL)) AS quiet_id,
       EXISTS (SELECT 1 FROM workers w WHERE w.job_types IS NULL OR r.job_type = ANY(w.job_types)) AS type_handled,
       p.id AS before_id, p.status AS before_status, p.run_at AS before_run_at,
       b.pending AS batch_pending,
       coalesce(a.ids, '{{}}') AS awaited_ids, coalesce(a.statuses, '{{}}') AS awaited_statuses,
       coalesce(a.run_ats, '{{}}') AS awaited_run_ats
FROM runs r
LEFT JOIN job_queues q ON q.name = r.queue
LEFT JOIN running n ON n.queue = r.queue
LEFT JOIN job_runs p ON p.id = r.after_run_id AND p.status IN ('queued', 'running', 'failed')
LEFT JOIN job_batches b ON b.id = r.batch_id AND r.batch_callback IS NOT NULL
LEFT JOIN LATERAL (
    SELECT w.id, w.last_seen_at, w.stopped_at FROM workers w
    WHERE (w.job_types IS NULL OR r.job_type = ANY(w.job_types)) AND (w.queues IS NULL OR r.queue = ANY(w.queues))
    ORDER BY w.last_seen_at DESC, w.id LIMIT 1
) seen ON true
LEFT JOIN LATERAL (
    SELECT array_agg(x.id ORDER BY x.id) AS ids, array_agg(x.status ORDER BY x.id) AS statuses,
           array_agg(x.run_at ORDER BY x.id) AS run_ats
    FROM (SELECT w.id, w.status, w.run_at FROM job_run_deps d JOIN job_runs w ON w.id = d.after_id
          WHERE d.run_id = r.id AND r.status = 'waiting'
            AND w.status NOT IN ('succeeded', 'dead', 'cancelled', 'skipped', 'missed')
          ORDER BY w.id LIMIT %(shown)s) x
) a ON true
"""


@dataclass(frozen=True)
class Part:
    """A piece of a reason: text, or a link to a queue (`queue`), a run (`run`) or a worker
    (`worker`), or a time."""

    text: str = ""
    queue: str | None = None
    run: int | None = None
    time: datetime | None = None
    worker: str | None = None


@dataclass(frozen=True)
class Reason:
    kind: str
    parts: tuple = field(default_factory=tuple)

    @property
    def text(self):
        """The sentence as plain text, times in UTC with how far they are from now."""
        return "".join(_plain(part) for part in self.parts)


def reasons(run_ids):
    """{run id: Reason} for those of `run_ids` that are queued, failed (a retry is due) or
    waiting; other runs are left out. One round trip whatever the number of runs."""
    ids = sorted(set(run_ids))
    if not ids:
        return {}
    gone_after = fleet.gone_after(current_app.config)
    rows = execute(REASONS, {"ids": ids, "gone_after": gone_after, "window": UNHANDLED_WINDOW,
                             "shown": AWAITED_SHOWN}).all()
    return {row.id: _reason(row, gone_after) for row in rows}


def reason(run_id):
    """The Reason of one run, or None when it is not queued, failed or waiting."""
    return reasons([run_id]).get(run_id)


def _reason(r, gone_after):
    now = r.now
    if r.status == "waiting":
        if r.batch_callback:
            pending = r.batch_pending or 0
            return Reason("waiting", (Part(f"Waits for its batch #{r.batch_id} to finish: {pending} member"
                                           f"{'s' if pending != 1 else ''} not yet ended."),))
        parts = [Part("Waits for run" + ("s " if (r.waiting_for or 0) > 1 else " "))]
        for n, (run_id, status, run_at) in enumerate(zip(r.awaited_ids, r.awaited_statuses, r.awaited_run_ats)):
            if n:
                parts.append(Part(" and " if n == len(r.awaited_ids) - 1 and not _more(r) else ", "))
            parts += [Part(f"#{run_id}", run=run_id), Part(" (")] + _state(status, run_at, now) + [Part(")")]
        if _more(r):
            parts.append(Part(f" and {r.waiting_for - len(r.awaited_ids)} more"))
        return Reason("waiting", tuple(parts) + (Part("."),))
    if r.before_id is not None:
        return Reason("after", (Part("Waits for the previous run of its definition, "),
                                Part(f"#{r.before_id}", run=r.before_id), Part(" (")) +
                      tuple(_state(r.before_status, r.before_run_at, now)) +
                      (Part("), to end: its overlap policy is 'queue'."),))
    if r.queue_paused:
        return Reason("paused_queue", (Part("Its queue "), Part(r.queue, queue=r.queue),
                                       Part(" is paused: no worker takes its runs until it is resumed.")))
    if r.type_paused:
        return Reason("paused_type", (Part(f"Its job type {r.job_type} is paused: no worker takes its runs "
                                           "until it is resumed."),))
    if r.run_at > now:
        return Reason("due_later", (Part("Its retry is due " if r.status == "failed" else "Due "),
                                    Part(time=r.run_at), Part(".")))
    if r.handler_seen_at is None:
        if r.type_handled:
            return Reason("no_worker", (Part("No worker seen in the last hour takes runs from its queue "),
                                        Part(r.queue, queue=r.queue), Part(" (flask run-jobs --queues)."),))
        return Reason("no_worker", (Part(f"No worker seen in the last hour handles job type {r.job_type}: "
                                         "none has a handler for it."),))
    if not r.handler_live:
        # A worker's stop writes its last heartbeat too (upkeep.py), so last_seen_at dates either.
        last = (Part(", stopped "), Part(time=r.handler_seen_at), Part(" (a cron tick, or a worker process, starts one)."))
        if r.handler_stopped_at is None:
            last = (Part(", was last heard from "), Part(time=r.handler_seen_at),
                    Part(f" and is gone (no heartbeat for {seconds_words(gone_after)}: killed, frozen or cut off)."))
        return Reason("no_live_worker", (Part("No worker that takes runs from its queue "), Part(r.queue, queue=r.queue),
                                         Part(f" and handles {r.job_type} is running now; the last one, "),
                                         Part(r.handler_id, worker=r.handler_id)) + last)
    if r.quiet_id is not None:
        return Reason("quiet", (Part("No running worker that takes it claims runs: all are quiet (an operator's "
                                     "Quiet, until resumed), such as "), Part(r.quiet_id, worker=r.quiet_id), Part(".")))
    if r.concurrency_limit is not None and r.running >= r.concurrency_limit:
        return Reason("at_limit", (Part("Its queue "), Part(r.queue, queue=r.queue),
                                   Part(f" is at its limit ({r.running} running of {r.concurrency_limit}).")))
    if r.rate_frees_at is not None:
        return Reason("rate_limited", (Part("Its queue "), Part(r.queue, queue=r.queue),
                                       Part(f" is rate-limited ({r.rate_limit} starts per {r.rate_seconds} s); "
                                            "its next start is free "), Part(time=r.rate_frees_at), Part(".")))
    return Reason("next", (Part("Due since "), Part(time=r.run_at),
                           Part(": nothing holds it; a worker takes it at its next free slot, after the runs "
                                "ahead of it (smaller priority, earlier due time).")))


def _more(r):
    return (r.waiting_for or 0) > len(r.awaited_ids)


def _state(status, run_at, now):
    """An awaited run's state: 'queued, due in 2 h', 'running', 'waiting'."""
    if status in ("queued", "failed"):
        return [Part(f"{status}, {'retry ' if status == 'failed' else ''}due "), Part(time=run_at)]
    return [Part(status)]


def _plain(part):
    if part.time is None:
        return part.text or part.queue or part.worker or ""
    utc = part.time.astimezone(timezone.utc)
    seconds = (datetime.now(timezone.utc) - utc).total_seconds()
    return f"{relative_words(seconds)} ({utc.strftime('%Y-%m-%d %H:%M:%S')} UTC)"
