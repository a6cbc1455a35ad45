"""Job types for tests/test_integrations_worker.py: handlers that stop when asked, that never
look, and that fail. A handler that never looks waits for the file payload["release"] names,
which the test writes once it has seen what it waits for (no sleep hoping a race goes one way).
A handler whose payload names a file in payload["began"] makes it first: the run's `running`
status is its claim, and a signal in between releases it before its handler (and span) begins."""

import asyncio
import time
from pathlib import Path

from jobsweb import job


def _began(ctx):
    if "began" in ctx.payload:
        Path(ctx.payload["began"]).touch()


def _until_released(ctx):
    """Run on, whatever the worker asks, until the test writes the release file."""
    _began(ctx)
    release = Path(ctx.payload["release"])
    while not release.exists():
        time.sleep(0.02)


@job("test.observed.waits")
def waits(ctx):
    _began(ctx)
    ctx.sleep(60)  # until an operator's cancel or the worker's shutdown: Cancelled


@job("test.observed.async_waits")
async def async_waits(ctx):
    _began(ctx)
    await asyncio.sleep(60)  # not ctx.sleep: only a cancel by force (its task cancelled) ends it


@job("test.observed.never_looks")
def never_looks(ctx):
    _until_released(ctx)


@job("test.observed.too_slow", timeout=0.5, max_attempts=1)
def too_slow(ctx):
    _until_released(ctx)


@job("test.observed.fails", max_attempts=1)
def fails(ctx):
    raise ValueError("the import was refused")


@job("test.observed.fails_when_cancelled")
def fails_when_cancelled(ctx):
    _began(ctx)
    while not ctx.cancelled:
        time.sleep(0.02)
    raise ValueError("stopped half-way")  # any error once cancelled: the run ends cancelled
