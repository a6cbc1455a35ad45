"""Running `async def` handlers: one event loop, on its own thread, awaits them all.

A handler waiting on the network then costs a task, not a thread: one process can hold a
thousand such runs. As with the thread pool, the worker's loop thread alone talks to the
database (claims, heartbeats, finishes); the event loop only runs handlers and reports each
Finished back through the same callback.
"""

import asyncio
import contextlib
import heapq
import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ..jobs import signals
from ..jobs.registry import Cancelled, handler_running
from . import output
from .execution import Finished, check_result

STOP_WAIT = 1.0  # seconds the loop gets to unwind cancelled handlers when the worker exits


class AsyncPool:
    """One event loop thread awaiting async handlers, started when the first one is submitted.

    A daemon thread, like the pool's: a handler that never yields must not keep the process
    alive past the shutdown deadline.
    """

    def __init__(self, app, size, report):
        self.app = app
        self.size = size  # handlers awaited at once; runs claimed ahead wait for a slot
        self.report = report  # called on the loop thread with a Finished
        self.slots = None  # Slots of size, made on the loop
        self.loop = None
        self.thread = None
        self.tasks = set()

    def submit(self, held):
        """Called from the worker's loop thread."""
        if self.loop is None:
            self.loop = asyncio.new_event_loop()
            self.thread = threading.Thread(target=self.loop.run_forever, name="jobsweb-asyncio", daemon=True)
            self.thread.start()
        self.loop.call_soon_threadsafe(self._spawn, held)

    def _spawn(self, held):
        # A task runs in a copy of this thread's context: what a handler sets in a context
        # variable (its app context, its attempt's captured output) stays its own.
        if self.slots is None:
            self.slots = Slots(self.size)
        task = self.loop.create_task(run_async_handler(self.app, held, self.slots))
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task):
        self.tasks.discard(task)
        self.report(task.result())  # run_async_handler never raises

    def stop(self):
        """Cancel the handlers still running (the worker released their runs) and end the loop."""
        if self.loop is None or not self.thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._cancel_all(), self.loop).result(STOP_WAIT * 2)
        except TimeoutError:
            pass  # a handler that blocks the loop: the daemon thread ends with the process
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(STOP_WAIT)

    async def _cancel_all(self):
        for task in self.tasks:
            task.cancel()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=STOP_WAIT)


class Slots:
    """The loop's --concurrency handler slots. A run waiting for one (claimed ahead) gets it before
    every waiting run of a larger (priority, run_at, id), whichever claim brought it, as the
    thread pool's execution.Waiting; an asyncio.Semaphore would wake them in arrival order.
    Used on the loop's thread only."""

    def __init__(self, size):
        self.free = size  # more than 0 only while no run waits
        self.waiting = []  # (order, arrival, future); a run cancelled while it waited leaves its entry
        self.arrivals = itertools.count()

    @contextlib.asynccontextmanager
    async def taken(self, order):
        await self._acquire(order)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, order):
        if self.free:
            self.free -= 1
            return
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self.waiting, (order, next(self.arrivals), future))
        try:
            await future
        except asyncio.CancelledError:
            if not future.cancelled():  # handed the slot as it was cancelled: hand it on
                self._release()
            raise

    def _release(self):
        while self.waiting:
            future = heapq.heappop(self.waiting)[2]
            if not future.done():
                future.set_result(None)
                return
        self.free += 1


async def run_async_handler(app, held, slots=None):
    """Await the async handler of one held run inside an app context, once it has one of `slots`
    (Slots), capturing what it logs (this task's context is its own); never raises.
    """
    with output.capture(app.config["JOBSWEB_OUTPUT_MAX_CHARS"]) as logged:
        finished = await _await_handler(app, held, slots)
    finished.output = logged.text()
    return finished


async def _await_handler(app, held, slots):
    """run_async_handler's body.

    Asking it to stop wakes its `await ctx.sleep()`; stopping it by force (timeout, lost
    lease, an operator's cancel) cancels its task, which it sees as CancelledError at its
    next await and which is recorded as Cancelled, as a thread's ctx.raise_if_cancelled().
    """
    started = time.monotonic()
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    ctx = held.ctx
    ctx._cancel_waker = asyncio.Event()

    def cancelled():
        ctx._cancel_waker.set()
        # A run asked to stop before its handler began never begins (a SIGTERM releases it, as
        # the thread pool's run_handler does): on this thread, `began` cannot change meanwhile.
        if held.began is None:
            task.cancel()

    ctx._on_cancel = lambda: loop.call_soon_threadsafe(cancelled)
    held.abort = lambda: loop.call_soon_threadsafe(task.cancel)
    try:
        # Asked to stop before its handler began, before this task existed (a SIGTERM, a timeout
        # shorter than the queue's wait) or while it waited for a slot: it never begins.
        if ctx.cancelled:
            raise asyncio.CancelledError
        async with slots.taken(held.order) if slots else contextlib.nullcontext():
            if ctx.cancelled:  # asked from another thread as the slot came: `cancelled` not yet run
                raise asyncio.CancelledError
            held.began = started = time.monotonic()
            with app.app_context(), handler_running(ctx):
                signals.send(signals.attempt_started, ctx=ctx)
                try:
                    result = check_result(await held.job.func(ctx))
                except Exception as exc:
                    signals.attempt_ended(held, exc=exc)
                    raise
                signals.attempt_ended(held, result=result)
        return Finished(held, result=result, seconds=time.monotonic() - started)
    except asyncio.CancelledError:
        return Finished(held, exc=Cancelled(f"run {ctx.run_id} was asked to stop"),
                        seconds=time.monotonic() - started, begun=held.began is not None)
    except Exception as exc:  # noqa: BLE001 - any handler error is recorded, never fatal
        return Finished(held, exc=exc, seconds=time.monotonic() - started)
    finally:
        # The last value said, before the outcome is written: a round trip on this loop's thread,
        # once per run at most (ctx.progress holds back at most one value).
        ctx.flush_progress()


def run_coroutine(coroutine):
    """Run the coroutine on a fresh event loop (drain(), inline mode): in this thread, or on a
    thread of its own when a loop already runs in this one (pytest-asyncio's, Playwright's sync
    API), where asyncio.run() refuses to start another."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, coroutine).result()
