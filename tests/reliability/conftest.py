"""Drill sizes (figures: tests/conftest.py): the short forms run in `make test`, the long forms via drills/run.py."""

import os

import pytest


def size(name, short):
    """DRILL_<NAME> from the environment (drills/run.py sets it for the long form), else `short`."""
    raw = os.environ.get(f"DRILL_{name}")
    return type(short)(raw) if raw else short


@pytest.fixture
def worker_log(tmp_path):
    """worker_log(): a new file for one worker process's output."""
    count = 0

    def new():
        nonlocal count
        count += 1
        return open(tmp_path / f"worker-{count}.log", "w+")

    return new
