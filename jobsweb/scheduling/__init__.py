"""Schedules: cron and @every parsing, job definitions, and materialising due slots into runs.

Imports core/ and engine/. The public helpers are re-exported here.
"""

from .definitions import define, failing, overdue, pause, resume, run_now
from .schedule import Schedule, next_fire_times

__all__ = ["define", "pause", "resume", "run_now", "overdue", "failing", "Schedule", "next_fire_times"]
