"""A worker's duties: periodic work of its loop besides running jobs (lease recovery,
materialising schedule slots, alert evaluation), handed in by whoever builds the worker
(commands.build_worker), as Oban hands plugins to its queues. The queue core itself knows
nothing of them.
"""

from dataclasses import dataclass
from typing import Callable


@dataclass
class Duty:
    """Periodic work of the loop besides running jobs, handed in by whoever builds the worker.

    `run(link)` does one pass on the worker's connection and says whether it found work: a
    one-shot worker keeps going while its duties find work, and `after_work` (when given)
    spaces the next pass instead of `every`. The loop writes pending outcomes before a pass,
    so a duty sees every attempt that ended (overlap 'skip' must see a run that just ended).
    """

    name: str
    run: Callable  # (Link) -> bool; may raise DatabaseUnavailable, like the loop's own statements
    every: float  # seconds from a pass that found nothing to the next
    after_work: float | None = None  # seconds from a pass that found work to the next (None: every)
    stop: Callable = lambda until: None  # called once when the worker stops; returns by `until` (time.monotonic())
    # Called from the signal handler when the worker is told to stop: a pass under way on a
    # connection of the duty's own (not the worker's link, which the stop cuts) ends by then.
    cut: Callable = lambda deadline: None
    next_at: float = 0.0  # time.monotonic() of the next pass
