"""The runs list: filters read from the query string, keyset pages, and bulk actions over them.

Pages are keyset pages on id (newest first: WHERE id < :before ORDER BY id DESC LIMIT n), never
OFFSET, and there is no unbounded COUNT(*) over the table: with a million runs both would read
most of it. A filter's counts are exact up to COUNT_CAP matching runs, estimated beyond.
Indexes job_runs_status_id, job_runs_job_type_id, job_runs_definition and job_runs_created_at
(migration 0003), job_attempts_worker (0007) and job_runs_payload (0014) serve the filters.
"""

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone, tzinfo

from sqlalchemy import BigInteger, and_, any_, cast, func, literal, or_, select, tuple_
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import aliased, load_only
from sqlalchemy.sql.expression import ClauseElement, Executable

from ..core.database import db, execute
from ..core.models import JobAttempt, JobDefinition, JobRun
from ..engine.jobs.flow import check_priority
from ..engine.runs import run_actions
from ..engine.statements import RUN_STATUSES
from ..ops import stats
from .filter_args import (  # BadFilter, finished_cursor, number, text_filter: read as runlist's too
    BadFilter, error_text as _error_text, finished_cursor, number, optional as _optional,  # noqa: F401
    payload_filter as _payload, sort_arg as _sort, text_filter, time_range)
from .local_time import viewer_zone, zone_name
from . import error_search, search_limits

PAGE_SIZE = 50


@dataclass
class RunFilter:
    statuses: list = field(default_factory=list)
    job_type: str = ""
    definition_id: int | None = None
    since: datetime | None = None
    until: datetime | None = None
    text: str = ""
    worker: str = ""  # runs this worker process executed (an attempt) or holds now
    queue: str = ""
    priority: int | None = None
    payload: dict | str | None = None  # runs whose payload contains this JSON object, or these words in a value
    batch_id: int | None = None  # members of this batch
    zone: tzinfo = timezone.utc  # the viewer's, which since and until are typed in
    sort: str = ""  # "": newest first (by id); "finished": finished runs, the last finished first
    # (id, status) of the runs the error text search lists, read once (error_search.matching)
    _searched: list | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_args(cls, args):
        """Read the filter from request.args (or a POSTed form); BadFilter on a bad value."""
        statuses = [s for s in args.getlist("status") if s]
        for status in statuses:
            if status not in RUN_STATUSES:
                raise BadFilter(f"status {status!r} is not one of {', '.join(RUN_STATUSES)}")
        zone = _optional(args, "tz", viewer_zone) or timezone.utc
        since, until = time_range(args, zone)
        return cls(sorted(set(statuses), key=RUN_STATUSES.index), text_filter(args, "job_type"),
                   number(args, "definition"), since, until,
                   _error_text(args), text_filter(args, "worker"),
                   text_filter(args, "queue"), _optional(args, "priority", check_priority), _payload(args),
                   number(args, "batch"), zone, _sort(args))

    def args(self):
        """The filter as query-string arguments, for links and hidden form fields."""
        out = {}
        if self.statuses:
            out["status"] = self.statuses
        if self.job_type:
            out["job_type"] = self.job_type
        if self.definition_id is not None:
            out["definition"] = self.definition_id
        if self.since:
            out["since"] = self.since.astimezone(self.zone).strftime("%Y-%m-%dT%H:%M")
        if self.until:
            out["until"] = self.until.astimezone(self.zone).strftime("%Y-%m-%dT%H:%M")
        if zone_name(self.zone):
            out["tz"] = zone_name(self.zone)
        if self.text:
            out["q"] = self.text
        if self.worker:
            out["worker"] = self.worker
        if self.queue:
            out["queue"] = self.queue
        if self.priority is not None:
            out["priority"] = self.priority
        if self.payload:
            out["payload"] = self.payload if self.words() else json.dumps(self.payload, ensure_ascii=False)
        if self.batch_id is not None:
            out["batch"] = self.batch_id
        if self.sort:
            out["sort"] = self.sort
        return out

    def narrows(self):
        """True when something other than the statuses narrows the runs (the chips then count
        the runs of this filter, not all runs)."""
        return any(value for name, value in self.args().items() if name not in ("status", "tz", "sort"))

    def reads_many(self):
        """True when the filter may read many runs for a page: an error text search, or a queue,
        priority or worker filter, which no index serves (with a status or job type they ride
        its index; alone, the id order walk reads until a page is full). Such reads take
        search_limits' locks and limit: 16 viewer loops on them made /healthz take 10.5 s."""
        return bool(self.text or self.words() or self.queue or self.priority is not None or self.worker)

    def words(self):
        """The words to find within the payloads' values ("" for none or a JSON object)."""
        return self.payload if isinstance(self.payload, str) else ""

    def searched(self):
        """(id, status) of the runs the error text search lists, newest first: its window read
        and masked once a request, so that the page, its counts and a bulk action over the
        filter all mean the same runs."""
        if self._searched is None:
            self._searched = error_search.matching(self.conditions(with_statuses=False, with_text=False), self.text,
                                                   self.words())
        return self._searched

    def conditions(self, with_statuses=True, with_text=True):
        where = []
        if self.statuses and with_statuses:
            where.append(JobRun.status.in_(self.statuses))
        if self.job_type:
            where.append(JobRun.job_type == self.job_type)
        if self.definition_id is not None:
            where.append(JobRun.definition_id == self.definition_id)
        if self.since:
            where.append(JobRun.created_at >= self.since)
        if self.until:
            where.append(JobRun.created_at < self.until)
        if (self.text or self.words()) and with_text:
            # The runs error_search.matching lists: of the newest runs with an error (or a
            # payload) matching the rest of the filter, those whose masked error holds the text
            # (and a value of whose masked payload holds the words).
            where.append(JobRun.id == any_(literal([id for id, _ in self.searched()], ARRAY(BigInteger))))
        # No index of their own: with a status or job type the filter rides that index; alone,
        # the id order scan reads until a page is full.
        if self.queue:
            where.append(JobRun.queue == self.queue)
        if self.priority is not None:
            where.append(JobRun.priority == self.priority)
        if self.payload and not self.words():
            # jsonb containment through the GIN index job_runs_payload, which leaves out empty
            # payloads: the same condition here lets the planner use it (an empty payload
            # contains no key, so it never matched anyway).
            where.append(and_(JobRun.payload.contains(cast(self.payload, JSONB)),
                              JobRun.payload != cast({}, JSONB)))
        if self.batch_id is not None:
            # Index job_runs_batch; a batch's callbacks are its runs too, but not its members.
            where += [JobRun.batch_id == self.batch_id, JobRun.batch_callback.is_(None)]
        if self.worker:
            # Finished attempts are recorded with their worker (index job_attempts_worker); the
            # attempt a worker is running now is only in locked_by (few running runs).
            executed = select(JobAttempt.run_id).where(JobAttempt.worker == self.worker)
            where.append(or_(JobRun.id.in_(executed),
                             and_(JobRun.status == "running", JobRun.locked_by == self.worker)))
        return where


LIST_COLUMNS = (JobRun.id, JobRun.job_type, JobRun.status, JobRun.attempts, JobRun.max_attempts,
                JobRun.run_at, JobRun.created_at, JobRun.finished_at, JobRun.error_type, JobRun.last_error,
                JobRun.definition_id, JobRun.cancel_requested_at, JobRun.queue, JobRun.priority,
               JobRun.deleted_definition, JobRun.progress, JobRun.progress_note, JobRun.payload)


# psycopg prepares a statement run 5 times on one connection, and PostgreSQL may then plan it
# once for any parameter (a generic plan). For `payload @> $1` that plan walks the primary key
# newest first, filtering: 300 ms for a payload that matches one run of a million, against
# 0.1 ms through job_runs_payload when planned for the value. Only this transaction is told.
CUSTOM_PLANS = "SET LOCAL plan_cache_mode = force_custom_plan"


def _plan_for_the_values(run_filter):
    if run_filter.payload:
        execute(CUSTOM_PLANS)


def page(run_filter, before=None, size=PAGE_SIZE, finished_before=None):
    """One page of runs, newest first, and the id to pass as `before` for the next (or None).
    An error search is bounded (search_limits): its counts, read next, in the same transaction.
    Sorted by finish time (run_filter.sort), only finished runs, the last finished first, keyset
    on (finished_at, id): the next page's cursor is `before` and the last row's finished_at."""
    _plan_for_the_values(run_filter)
    if run_filter.reads_many():
        search_limits.begin()
    try:
        where = run_filter.conditions()  # an error text search reads its window here
    except OperationalError as exc:
        raise (search_limits.stopped(exc) if run_filter.reads_many() else None) or exc
    by_finish = run_filter.sort == "finished"
    # Index job_runs_prunable (status, finished_at) serves a status filter sorted by finish time.
    order = (JobRun.finished_at.desc(), JobRun.id.desc()) if by_finish else (JobRun.id.desc(),)
    runs = select(*LIST_COLUMNS).where(*where).order_by(*order).limit(size + 1)
    if by_finish:
        runs = runs.where(JobRun.finished_at.isnot(None))
        if before is not None and finished_before is not None:
            runs = runs.where(tuple_(JobRun.finished_at, JobRun.id) < tuple_(finished_before, before))
    elif before is not None:
        runs = runs.where(JobRun.id < before)
    # The page is cut before definitions are joined: when the planner misjudges how many runs
    # match (jsonb containment above all), it would join every matching run first, each against
    # every definition; 1,000 runs of a customer and 200 definitions took 16 ms instead of 6.
    run = aliased(JobRun, runs.subquery("run"))
    stmt = (select(run, JobDefinition.name).outerjoin(JobDefinition, JobDefinition.id == run.definition_id)
            .options(load_only(*(getattr(run, column.key) for column in LIST_COLUMNS)))
            .order_by(*((run.finished_at.desc(), run.id.desc()) if by_finish else (run.id.desc(),))))
    try:
        rows = db.session.execute(stmt).all()
    except OperationalError as exc:
        raise (search_limits.stopped(exc) if run_filter.reads_many() else None) or exc
    more = len(rows) > size
    rows = rows[:size]
    return rows, (rows[-1][0].id if more else None)


def bulk_where(run_filter, statuses):
    """The runs a bulk action over the filter reads, among `statuses` (those it takes), or None
    when the filter ticks none of them; the action's own statements then decide each run."""
    wanted = [s for s in (run_filter.statuses or statuses) if s in statuses]
    if not wanted:
        return None
    if not (run_filter.text or run_filter.words()):
        return [*run_filter.conditions(), JobRun.status.in_(wanted)]
    # A search's runs as a set to join, not `id = ANY(...)`: with an action's status condition
    # beside the array, the planner expected a few of its thousands of ids to pass, and ANDed
    # them with the status index (300,000 entries at 10,000,000 runs: a retry's count of 4,000
    # dead runs took 113 ms, past its 50 ms budget on every search; 14 ms joined).
    ids = [id for id, _ in run_filter.searched()]
    return [*run_filter.conditions(with_text=False), JobRun.status.in_(wanted),
            JobRun.id.in_(select(func.unnest(literal(ids, ARRAY(BigInteger)))))]


# What a bulk action's confirmation says it will change ("Retry 331 runs?"): counted by the
# action's own condition (run_actions.count_changed), exactly up to BULK_COUNT_CAP runs and
# within BULK_COUNT_BUDGET (on every page an operator sees, live polls too); past either, "at
# least" what it could count, never less than the page's own runs it would change. It said
# "about 0" from the planner's estimate, and then retried 331 (issue 54).
BULK_COUNT_CAP = 10_000
BULK_COUNT_BUDGET = 0.05  # seconds


def bulk_count(run_filter, action, statuses, page_ids=()):
    """(runs `action` would change among those the filter matches in `statuses`, True or "at least")."""
    _plan_for_the_values(run_filter)
    where = bulk_where(run_filter, statuses)
    if where is None:
        return 0, True
    return run_actions.count_changed(action, where, BULK_COUNT_CAP, BULK_COUNT_BUDGET, page_ids)


def matching_ids_in_batches(run_filter, statuses, batch_size):
    """Ids of runs matching the filter and in `statuses`, newest first, `batch_size` at a time.

    Each batch is read fresh after the caller has committed the previous one, so a bulk action
    over 100,000 runs is many short transactions, never one long lock on the table.
    """
    where = bulk_where(run_filter, statuses)
    if where is None:
        return
    before = None
    while True:
        _plan_for_the_values(run_filter)  # each batch is a transaction of its own
        stmt = select(JobRun.id).where(*where).order_by(JobRun.id.desc()).limit(batch_size)
        if before is not None:
            stmt = stmt.where(JobRun.id < before)
        ids = db.session.scalars(stmt).all()
        if not ids:
            return
        yield ids
        before = ids[-1]


# A filter's counts by status: exact while at most COUNT_CAP runs match, counted by one scan that
# stops after COUNT_CAP + 1 matching runs (LIMIT) and within COUNT_BUDGET. Beyond either, the
# planner's estimate of the filter's runs (one EXPLAIN), shared out by status as the runs counted
# were (or, with none counted, as the whole table's statistics say), shown as "≈". The scan is
# not even started when the planner expects far more than the cap (a job type of a million
# runs); the budget bounds a filter that matches few runs through no index (error text), which
# would otherwise read the whole table to say "12".
COUNT_CAP = 10_000
COUNT_BUDGET = 0.01  # seconds


class _Explain(Executable, ClauseElement):
    """EXPLAIN (FORMAT JSON) of a select, with its parameters bound as SQLAlchemy binds them."""
    inherit_cache = False

    def __init__(self, statement):
        self.statement = statement


@compiles(_Explain)
def _compile_explain(element, compiler, **kw):
    return "EXPLAIN (FORMAT JSON) " + compiler.process(element.statement, **kw)


def _capped_count(where, budget=COUNT_BUDGET):
    """{status: runs} of the first COUNT_CAP + 1 runs matching, or None past `budget` seconds."""
    capped = select(JobRun.status).where(*where).limit(COUNT_CAP + 1).subquery()
    by_status = select(capped.c.status, func.count().label("runs")).group_by(capped.c.status).subquery()
    return run_actions.within_budget(select(func.coalesce(func.jsonb_object_agg(by_status.c.status, by_status.c.runs),
                                                          func.jsonb_build_object())), budget)


def filtered_counts(run_filter, statuses, rows=()):
    """{status: (count, exact?)} of the runs matching the filter's other conditions, whatever
    statuses it ticks: exact up to COUNT_CAP, estimated beyond (at least what was counted, and
    at least the page's own `rows` of that status: "Showing 50 of about 0 runs" was the planner's
    estimate of a filter, shared out by the whole table's statuses)."""
    if run_filter.text or run_filter.words():  # the search's window was read whole: counted exactly
        found = Counter(status for _, status in run_filter.searched())
        return {status: (found[status], True) for status in statuses}
    _plan_for_the_values(run_filter)
    where = run_filter.conditions(with_statuses=False)
    expected = db.session.execute(_Explain(select(JobRun.id).where(*where))).scalar()[0]["Plan"]["Plan Rows"]
    counted = _capped_count(where) if expected <= 2 * COUNT_CAP else None
    if counted is not None and sum(counted.values()) <= COUNT_CAP:
        return {status: (counted.get(status, 0), True) for status in statuses}
    shares = counted or dict(execute(stats.ESTIMATED_COUNTS).all())
    whole = sum(shares.values()) or 1
    found = counted or {}
    shown = Counter(run.status for run, _ in rows)
    return {status: (max(round(expected * shares.get(status, 0) / whole), found.get(status, 0), shown[status]), False)
            for status in statuses}


def every_match(run_filter, before, next_before):
    """True when a page (runs newest first, after `before`, with `next_before` for the next) is
    every run its filter matches: the first page, with no next one and no status ticked (nor
    sorted by finish time, which leaves unfinished runs out)."""
    return before is None and next_before is None and not run_filter.statuses and not run_filter.sort


def counts_of(rows, statuses):
    """{status: (count, exact)} of a page that holds every matching run (every_match): the
    chips count its rows, with no statement at all. A filter matching a few runs through no
    index of its own would otherwise be counted by a scan of the whole table, cut by its budget
    and estimated (a search matching nothing showed "≈ 10" dead runs beside an empty list)."""
    found = Counter(run.status for run, _ in rows)
    return {status: (found[status], True) for status in statuses}


def total(counts, run_filter, statuses=RUN_STATUSES):
    """(runs the filter matches among `statuses`, exact?) from its counts by status."""
    shown = [counts[s] for s in statuses if s in counts and (not run_filter.statuses or s in run_filter.statuses)]
    return sum(n for n, _ in shown), all(exact for _, exact in shown)
