"""Running handlers: a bounded pool of threads and what one attempt of a run came to. How those
outcomes are written (FINISH_RUNS parameters) and logged: outcome_writes.py."""

import heapq
import itertools
import json
import threading
import time
import traceback
from dataclasses import dataclass

from ...core.errors import has_nul
from ..jobs import retry, signals
from ..jobs.registry import Cancelled, JobContext, JobType, Retry, handler_running
from . import output


@dataclass
class Outcome:
    """How one attempt ended, ready to be written by FINISH_RUNS."""

    run_id: int
    job_type: str
    attempt: int
    worker: str
    outcome: str  # succeeded | failed | interrupted | cancelled | released
    result: object = None
    error_type: str | None = None
    error: str | None = None
    stack: str | None = None
    delay: float = 0.0  # seconds before the retry, when it fails
    give_up: bool = False  # True: dead now, whatever attempts remain
    output: str | None = None  # the tail of what the handler logged (output.py)
    waited: float = 0.0  # seconds it was held before its handler began (claimed ahead): FINISH_RUNS


@dataclass
class Held:
    """A run whose lease this worker holds."""

    ctx: JobContext
    job: JobType
    lease: float  # seconds each heartbeat extends the lease by
    deadline: float | None  # time.monotonic() at which it times out, if it has a timeout
    timeout: float | None = None  # seconds
    backoff: tuple = (None, None)  # the run's own (base, cap) in seconds, from its definition
    cancel_requested: bool = False  # an operator cancelled it (seen by a heartbeat)
    abort: object = None  # cancels an async handler's task, ends a child process (set by what runs it)
    forced: bool = False  # stopped by force, maybe before its task started
    landed: float | None = None  # time.monotonic() when its claim came back to the worker
    began: float | None = None  # time.monotonic() when its handler began (None: not begun)
    # (priority, run_at, id), from its claim: held runs waiting for a slot start in this order,
    # whichever claim brought them (a later claim may bring runs of a smaller priority).
    order: tuple = ()

    def stop(self, force=False):
        """Ask the handler to stop (ctx.cancelled). force: the worker gave the run up or an operator
        cancelled it, so an async handler's task is cancelled too (CancelledError at its next
        await) and a child process is ended (`abort`); a thread cannot be, it only sees the flag.
        Whether this asked it first."""
        first = not self.ctx.cancelled
        self.ctx.cancel()
        if force:
            self.forced = True
            if self.abort is not None:
                self.abort()
        return first

    def waited(self):
        """Seconds between its claim's return and its handler's start: time spent claimed ahead."""
        return 0.0 if self.began is None or self.landed is None else max(self.began - self.landed, 0.0)


class Deadlines:
    """When held runs time out, earliest first, without a pass over every held run.

    The loop asks at every pass (a handler's return): with a few hundred runs claimed ahead,
    looking at each held run each time cost more than the runs themselves. A run that ended
    keeps its entry until it comes first or the heap is rebuilt (at twice the held runs).
    """

    def __init__(self):
        self.heap = []  # (deadline, run_id)

    def add(self, run_id, held):
        if held.deadline is not None:
            heapq.heappush(self.heap, (held.deadline, run_id))

    def _is_current(self, entry, held):
        h = held.get(entry[1])
        return h is not None and h.deadline == entry[0]

    def next(self, held):
        """The earliest deadline of the runs in `held` (run id -> Held), or None."""
        if len(self.heap) > 2 * len(held) + 64:
            self.heap = [(h.deadline, run_id) for run_id, h in held.items() if h.deadline is not None]
            heapq.heapify(self.heap)
        while self.heap and not self._is_current(self.heap[0], held):
            heapq.heappop(self.heap)
        return self.heap[0][0] if self.heap else None

    def due(self, held, now):
        """The ids of the runs in `held` whose deadline is past, taken off the heap."""
        ids = []
        while (deadline := self.next(held)) is not None and deadline <= now:
            ids.append(heapq.heappop(self.heap)[1])
        return ids


@dataclass
class Finished:
    """What a pool thread reports back: the held run and how its handler ended."""

    held: Held
    result: object = None
    exc: BaseException | None = None
    seconds: float = 0.0
    output: str | None = None
    begun: bool = True  # False: asked to stop before its handler was called, which never was


def clip(text, limit):
    """Keep error text bounded: the start says what, the end says where."""
    if text is None or len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - limit} characters cut] ...\n{text[-half:]}"


def check_result(result):
    """Raise if a handler's result cannot be stored: that is the handler's error, not the batch's."""
    json.dumps(result)
    if has_nul(result):
        # jsonb cannot hold U+0000: written as is, the batch's FINISH_RUNS failed and the
        # worker crashed, again on every retry (found following up the bad-input drill).
        raise ValueError("the result contains the NUL character (\\u0000), which PostgreSQL cannot store")
    return result


def run_handler(app, held):
    """Call the (sync) handler of one held run inside an app context; never raises."""
    if held.ctx.cancelled:  # released or given up while it waited for a slot (claimed ahead)
        return Finished(held, exc=Cancelled(f"run {held.ctx.run_id} was asked to stop before it started"),
                        begun=False)
    held.began = started = time.monotonic()
    with output.capture(app.config["JOBSWEB_OUTPUT_MAX_CHARS"]) as logged, handler_running(held.ctx):
        finished = _call(app, held, started)
    finished.output = logged.text()
    return finished


def _call(app, held, started):
    try:
        with app.app_context():
            signals.send(signals.attempt_started, ctx=held.ctx)
            try:
                result = check_result(held.job.func(held.ctx))
            except Exception as exc:
                signals.attempt_ended(held, exc=exc)
                raise
            signals.attempt_ended(held, result=result)
        return Finished(held, result=result, seconds=time.monotonic() - started)
    except Exception as exc:  # noqa: BLE001 - any handler error is recorded, never fatal
        return Finished(held, exc=exc, seconds=time.monotonic() - started)
    finally:
        held.ctx.flush_progress()  # the last value said, before the outcome is written


class Pool:
    """Up to `size` daemon threads running sync handlers (`run(held)`: run_handler's Finished, or a
    child process's, engine/worker/child_process.py), started as they are first needed (a worker of
    async handlers at --concurrency 1000 should not hold 1000 idle threads). Daemon threads: a
    handler that ignores its cancellation flag must not keep the process alive past the shutdown
    deadline: its run is released and the process exits."""

    def __init__(self, app, size, report, run=None):
        self.run = run or (lambda held: run_handler(app, held))
        self.size = size
        self.report = report  # called from the pool thread with a Finished
        self.waiting = Waiting()
        self.idle = 0  # threads waiting for a handler to run
        self.cond = threading.Condition()
        self.threads = []

    def withdraw(self):
        """Take back the held runs no thread has taken yet: they will not start here."""
        with self.cond:
            helds, self.waiting = self.waiting.all(), Waiting()
        return helds

    def submit(self, helds):
        """Queue held runs for the threads: one lock and one wake-up call per batch."""
        with self.cond:
            for held in helds:
                self.waiting.push(held)
            self.cond.notify(min(self.idle, len(self.waiting)))
            new = [threading.Thread(target=self._serve, name=f"jobsweb-pool-{n}", daemon=True)
                   for n in range(len(self.threads),
                                  min(self.size, len(self.threads) + len(self.waiting) - self.idle))]
            self.threads += new
        for thread in new:
            thread.start()

    def _serve(self):
        while True:
            with self.cond:
                self.idle += 1
                while not self.waiting:
                    self.cond.wait()
                self.idle -= 1
                held = self.waiting.pop()
            self.report(self.run(held))


class Waiting:
    """Held runs waiting for a slot, the smallest (priority, run_at, id) first: a heap, so that
    a claim of 2,000 runs ahead costs O(log n) a run, not a sort per pass. Runs of equal order
    (none from a claim: ids differ) start in the order they came."""

    def __init__(self):
        self.heap = []  # (order, arrival, held)
        self.arrivals = itertools.count()

    def __len__(self):
        return len(self.heap)

    def push(self, held):
        heapq.heappush(self.heap, (held.order, next(self.arrivals), held))

    def pop(self):
        return heapq.heappop(self.heap)[2]

    def all(self):
        return [held for _, _, held in self.heap]


def describe_error(exc):
    """(error_type, message, stack) of a handler's exception (one from a child process: as it said)."""
    if (described := getattr(exc, "jobsweb_described", None)) is not None:
        return described
    stack = "".join(traceback.format_exception(exc))
    # PostgreSQL text cannot hold U+0000; an error quoting a bad byte must still be recorded.
    message = (str(exc) or type(exc).__name__).replace("\x00", "\\x00")
    return type(exc).__name__, message, stack.replace("\x00", "\\x00")


def was_cancelled(exc):
    return isinstance(exc, Cancelled)


@dataclass(frozen=True)
class Failures:
    """How a failed or interrupted attempt is recorded: error sizes and retry delay, from settings."""

    backoff: tuple  # (base, cap) seconds: JOBSWEB_BACKOFF_BASE and _CAP
    error_chars: int
    stack_chars: int

    @classmethod
    def from_config(cls, config):
        return cls((config["JOBSWEB_BACKOFF_BASE"], config["JOBSWEB_BACKOFF_CAP"]),
                   config["JOBSWEB_ERROR_MAX_CHARS"], config["JOBSWEB_STACK_MAX_CHARS"])

    def failed(self, worker, job, ctx, error_type, message, stack=None, give_up=False, backoff=(None, None),
               retry_in=None):
        """A failed attempt, retried after `retry_in` s (a handler's Retry), else the backoff of the run
        (its definition's), its job type or the settings; dead instead if give_up or out of attempts."""
        base = backoff[0] or (job and job.backoff_base) or self.backoff[0]
        cap = backoff[1] or (job and job.backoff_cap) or self.backoff[1]
        delay = retry.backoff_seconds(ctx.attempt, base, cap) if retry_in is None else retry.bounded(retry_in)
        return Outcome(ctx.run_id, ctx.job_type, ctx.attempt, worker, "failed", error_type=error_type,
                       error=clip(message, self.error_chars), stack=clip(stack, self.stack_chars),
                       delay=delay, give_up=give_up)

    def outcome_of(self, worker, finished, stopping):
        """What a handler's return comes to: succeeded, cancelled by an operator, released by a
        stopping worker, or failed (retried or dead); with what it logged."""
        outcome = self._ended(worker, finished, stopping)
        outcome.output = finished.output
        outcome.waited = finished.held.waited()
        return outcome

    def _ended(self, worker, finished, stopping):
        held, exc = finished.held, finished.exc
        ctx = held.ctx
        if exc is None:
            return Outcome(ctx.run_id, ctx.job_type, ctx.attempt, worker, "succeeded", result=finished.result)
        if was_cancelled(exc) and held.cancel_requested:
            return Outcome(ctx.run_id, ctx.job_type, ctx.attempt, worker, "cancelled", error_type="cancelled",
                           error=getattr(exc, "jobsweb_cancel_error", "cancelled by an operator"))
        if was_cancelled(exc) and stopping:
            return self.interrupted(worker, ctx, "stopped by worker shutdown")
        error_type, message, stack = describe_error(exc)
        return self.failed(worker, held.job, ctx, error_type, message, stack, give_up=held.job.is_permanent(exc),
                           backoff=held.backoff, retry_in=exc.in_ if isinstance(exc, Retry) else None)

    def interrupted(self, worker, ctx, why):
        return interrupted(ctx.run_id, ctx.job_type, ctx.attempt, worker, why)


def interrupted(run_id, job_type, attempt, worker, why):
    """An attempt that did not end by itself: the run goes back to the queue, due now."""
    return Outcome(run_id, job_type, attempt, worker, "interrupted", error_type="interrupted",
                   error=f"worker {worker}: {why}")


def released(run_id, job_type, attempt, worker):
    """A run a stopping worker held whose handler never began: back to the queue as it was, with
    no attempt recorded and the claim's given back (FINISH_RUNS)."""
    return Outcome(run_id, job_type, attempt, worker, "released")
