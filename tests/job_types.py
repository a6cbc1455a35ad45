"""Job types used by the tests; loaded through JOBSWEB_HANDLERS=tests.job_types."""

import asyncio
import contextvars
import logging
import os
import random
import threading
import time

from sqlalchemy import text

from jobsweb import PermanentError, job
from jobsweb.core.database import db
from jobsweb.engine.jobs import builtin_jobs


class NotFound(Exception):
    """A handler-defined error that retrying cannot fix."""


@job("test.record")
def record(ctx):
    """Record that this process executed the run, to count executions across processes.

    payload["seconds"]: work that long first, so that competing workers overlap."""
    time.sleep(float(ctx.payload.get("seconds", 0)))
    db.session.execute(text("INSERT INTO test_executions (run_id, pid) VALUES (:r, :p)"),
                       {"r": ctx.run_id, "p": os.getpid()})
    db.session.commit()
    return {"pid": os.getpid()}


@job("test.span")
def span(ctx):
    """Record in test_executions (its `at`: clock_timestamp(), the database clock) the start and
    the end of this handler's execution: two rows for the run.

    payload["seconds"]: work that long in between."""
    for moment in ("start", "end"):
        if moment == "end":
            time.sleep(float(ctx.payload.get("seconds", 0)))
        db.session.execute(text("INSERT INTO test_executions (run_id, pid) VALUES (:r, :p)"),
                           {"r": ctx.run_id, "p": os.getpid()})
        db.session.commit()


@job("test.slow_first")
def slow_first(ctx):
    """Outlive any lease on the first attempt (ignoring cancellation); succeed after that."""
    if ctx.attempt == 1:
        time.sleep(float(ctx.payload.get("seconds", 60)))
    return {"attempt": ctx.attempt}


@job("test.slow_until")
def slow_until(ctx):
    """Record that its handler began (test_executions, committed at once), then sleep (ignoring
    cancellation) on every attempt before payload["attempt"]; then succeed."""
    record_execution(ctx)
    db.session.commit()
    if ctx.attempt < ctx.payload["attempt"]:
        time.sleep(float(ctx.payload["seconds"]))
    return {"attempt": ctx.attempt}


@job("test.stubborn")
def stubborn(ctx):
    """Sleep without ever looking at the cancellation flag."""
    time.sleep(float(ctx.payload.get("seconds", 30)))


@job("test.polite_once")
def polite_once(ctx):
    """On its first attempt, record that its handler began (test_executions, committed at once),
    then sleep 30 s, stopping early when asked; later attempts end at once."""
    if ctx.attempt == 1:
        record_execution(ctx)
        db.session.commit()
        ctx.sleep(30)


@job("test.polite")
def polite(ctx):
    """Record that its handler began (test_executions, committed at once), then jobsweb.sleep's
    own handler: sleep payload["seconds"], stopping early when asked."""
    record_execution(ctx)
    db.session.commit()
    return builtin_jobs.sleep(ctx)


@job("test.timeout", timeout=0.5)
def times_out(ctx):
    """Take longer than its 0.5 s timeout, ignoring cancellation."""
    time.sleep(float(ctx.payload.get("seconds", 2)))
    return "late"


@job("test.not_found", permanent=[NotFound])
def not_found(ctx):
    raise NotFound("customer 42 does not exist")


@job("test.unserialisable")
def unserialisable(ctx):
    return object()


@job("test.extend_lease")
def extend_lease(ctx):
    """Ask for a longer lease and report whether it was granted."""
    return {"extended": ctx.extend_lease(120)}


@job("test.permanent")
def permanent(ctx):
    raise PermanentError("the invoice was deleted")


def record_execution(ctx):
    """The effect the drills count: one test_executions row, in the caller's transaction."""
    db.session.execute(text("INSERT INTO test_executions (run_id, pid) VALUES (:r, :p)"),
                       {"r": ctx.run_id, "p": os.getpid()})


@job("test.effect", max_attempts=100)
def effect(ctx):
    """Sleep a random few milliseconds, then record this run's effect once (the chaos drill)."""
    time.sleep(random.uniform(0.001, float(ctx.payload.get("max_sleep", 0.01))))
    with ctx.once(f"effect:{ctx.run_id}") as first:
        if first:
            record_execution(ctx)
    return {"first": first}


@job("test.effect_then_fail")
def effect_then_fail(ctx):
    """Record the effect, then fail the first attempt as if the worker died before finishing it."""
    with ctx.once(f"effect:{ctx.run_id}") as first:
        if first:
            record_execution(ctx)
    if ctx.attempt == 1:
        raise ConnectionError("lost the database before the completion was written")
    return {"first": first}


@job("test.receipt", max_attempts=10)
def send_receipt(ctx):
    """The restart rehearsal's "send receipt email": work that stops when asked, a transient
    failure on the first attempt when told to, then the email, once, to the outbox file."""
    slow = ctx.attempt == 1 and ctx.payload.get("seconds")  # a slow first try
    ctx.sleep(float(slow or random.uniform(0.05, 0.3)))
    if ctx.payload.get("fail_first") and ctx.attempt == 1:
        raise ConnectionError("SMTP server said 421: try again later")
    order = ctx.payload["order"]
    # Send, then record: a kill between the two would send again (see docs/REFERENCE.md); SIGTERM cannot
    # land there, since the handler is only stopped where it looks at its cancellation flag.
    with ctx.once(f"receipt_email:{order}") as first:
        if first:
            with open(ctx.payload["outbox"], "a") as outbox:  # the SMTP edge
                outbox.write(f"receipt for order {order}\n")


@job("test.overstay_lease")
def overstay_lease(ctx):
    """On attempt 1, keep going until another worker has taken the run over (a stuck handler
    on a worker whose heartbeats stopped); then return, late."""
    while ctx.attempt == 1:
        attempts = db.session.execute(text("SELECT attempts FROM job_runs WHERE id = :r"),
                                      {"r": ctx.run_id}).scalar_one()
        db.session.rollback()  # a fresh snapshot on the next look
        if attempts > 1:
            break
        time.sleep(0.05)
    return {"attempt": ctx.attempt}


@job("test.nul_result")
def nul_result(ctx):
    """Return (or fail with) text holding U+0000, which PostgreSQL text and jsonb cannot store."""
    if ctx.payload.get("fail"):
        raise ValueError("bad byte \x00 in the upstream reply")
    return {"text": "a\x00b"}


@job("test.urgent_mail", queue="mail", priority=-5)
def urgent_mail(ctx):
    """A job type whose runs default to queue 'mail' at priority -5."""


_pair = threading.Barrier(2)


@job("test.chatty")
def chatty(ctx):
    """Log a line, then (payload "pair") wait until a second chatty run has logged its own first
    line in this process, then log again: two attempts whose log records interleave."""
    log = logging.getLogger("tests.chatty")
    name = ctx.payload["name"]
    log.info("%s begins", name)
    if ctx.payload.get("pair"):
        _pair.wait(timeout=20)
    log.warning("%s ends", name)
    return name


# -- async def handlers (awaited on the worker's event loop) ------------------------------

attempt_owner = contextvars.ContextVar("attempt_owner")


@job("test.async_record")
async def async_record(ctx):
    """Await payload["seconds"], then record the execution as test.record does. payload["started"]:
    a file to append to when the handler starts; payload["record_first"]: record it (its time, as
    the database saw it) when the handler starts instead."""
    attempt_owner.set(ctx.run_id)
    if ctx.payload.get("started"):
        with open(ctx.payload["started"], "a") as started:
            started.write(f"{ctx.run_id}\n")
    if ctx.payload.get("record_first"):
        record_execution(ctx)
        db.session.commit()
    await asyncio.sleep(float(ctx.payload.get("seconds", 0)))
    if not ctx.payload.get("record_first"):
        record_execution(ctx)
        db.session.commit()
    # Set before the await: another handler's set while this one slept must not show here.
    return {"pid": os.getpid(), "owner": attempt_owner.get()}


@job("test.async_fail", max_attempts=2)
async def async_fail(ctx):
    await asyncio.sleep(0)
    raise ConnectionError(f"upstream refused attempt {ctx.attempt}")


@job("test.async_timeout", timeout=0.5)
async def async_timeout(ctx):
    """Await longer than its 0.5 s timeout, ignoring cancellation; count how it ended."""
    try:
        await asyncio.sleep(float(ctx.payload.get("seconds", 30)))
    except asyncio.CancelledError:
        with open(ctx.payload["marker"], "a") as marker:
            marker.write("cancelled\n")
        raise
    return "late"


@job("test.async_ctx_sleep")
async def async_ctx_sleep(ctx):
    """Sleep with ctx.sleep, which wakes when the worker asks the run to stop. payload["started"]:
    a file to append to when the handler starts."""
    if ctx.payload.get("started"):
        with open(ctx.payload["started"], "a") as started:
            started.write(f"{ctx.run_id}\n")
    await ctx.sleep(float(ctx.payload.get("seconds", 60)))
    return {"slept": ctx.payload.get("seconds", 60)}


@job("test.export")
def export(ctx):
    """Export payload["pages"] pages, saying how far it is; before each page it waits for the
    test's file payload["gate"].<page>, saying the same progress again meanwhile (each one held
    back by the interval is written by a later one)."""
    pages = ctx.payload["pages"]
    for page in range(pages):
        while not os.path.exists(f"{ctx.payload['gate']}.{page}"):
            ctx.progress(page / pages, f"Exporting page {page + 1} of {pages}")
            ctx.sleep(0.05)
    for _ in range(1000):  # far more often than it is written
        ctx.progress(0.99, "Finishing")
    ctx.progress(1, "Exported")  # written when the handler returns, whatever the interval
    return {"pages": pages}


@job("test.async_progress")
async def async_progress(ctx):
    """An async handler saying how far it is, as a sync one does."""
    ctx.progress(0.5, "half")
    await ctx.sleep(0)
    ctx.progress(0.75, "three quarters")
    return "done"


@job("test.batch_callback")
def batch_callback(ctx):
    """Report the batch it is a callback of, as ctx.batch shows it."""
    batch = ctx.batch
    return {"batch": batch.id, "payload": batch.payload, "counts": batch.counts, "finishes": batch.finishes}


@job("test.fail_first")
def fail_first(ctx):
    """Fail the first attempt, succeed after: a dead run that a retry fixes."""
    if ctx.attempt == 1:
        raise RuntimeError("first attempt fails on purpose")
    return {"attempt": ctx.attempt}


@job("test.until_file")
def until_file(ctx):
    """Run (ignoring cancellation) until the file payload["file"] exists: as long as a test needs."""
    while not os.path.exists(ctx.payload["file"]):
        time.sleep(0.02)


@job("test.async_until_file")
async def async_until_file(ctx):
    """test.until_file, awaited."""
    while not os.path.exists(ctx.payload["file"]):
        await asyncio.sleep(0.02)


@job("test.chatty_timeout", timeout=0.5)
def chatty_timeout(ctx):
    """Log a line, then outlive its 0.5 s timeout (ignoring cancellation) and log again."""
    log = logging.getLogger("tests.chatty")
    log.warning("working on it")
    time.sleep(float(ctx.payload.get("seconds", 2)))
    log.warning("done, too late")


@job("test.thread_logs")
def thread_logs(ctx):
    """Log a line, and another from a thread of its own."""
    log = logging.getLogger("tests.chatty")
    log.warning("from the handler")
    helper = threading.Thread(target=log.warning, args=("from its own thread",))
    helper.start()
    helper.join()


# test.pair_up's record of its handlers running at once, in this process (in-process workers).
pairs = {"running": 0, "most": 0}
_pairs_lock = threading.Lock()
_pairs_meet = threading.Barrier(2)


@job("test.pair_up")
def pair_up(ctx):
    """Wait (up to 20 s) until another pair_up handler runs alongside, then work a moment, counting
    how many ran at once (a third one started meanwhile shows)."""
    with _pairs_lock:
        pairs["running"] += 1
        pairs["most"] = max(pairs["most"], pairs["running"])
    try:
        _pairs_meet.wait(timeout=20)
        time.sleep(0.2)
    finally:
        with _pairs_lock:
            pairs["running"] -= 1


@job("test.started")
def started(ctx):
    """Record that its handler began (test_executions.at is clock_timestamp(), committed at once),
    then sleep payload["seconds"]: the order and times handlers start in, as the database saw them.
    payload["until"]: then also wait (ignoring cancellation) until that file exists."""
    record_execution(ctx)
    db.session.commit()
    time.sleep(float(ctx.payload.get("seconds", 0)))
    while ctx.payload.get("until") and not os.path.exists(ctx.payload["until"]):
        time.sleep(0.02)
