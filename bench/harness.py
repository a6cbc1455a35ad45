"""What every measure is handed, a `Bench` (the server, its sizes, the repeats, a log), and the sizes.

Apart from bench/__main__.py so that a measure's own command line (`python -m bench.soak`,
`python -m bench.tick_start`) builds one without importing the suite that imports it.
"""

import time
from dataclasses import dataclass, field

from .server import Server

FULL = {
    "warmup": 2000, "drain": 20_000, "processes": [1, 2], "concurrency": [1, 4, 8, 16, 64],
    "steady_seconds": 20, "steady_backlog": 2000,
    "pgqueuer_drain": 20_000, "procrastinate_drain": 1000, "pgqueuer_batch": [10, 100, 500, "4x50"],
    "pgqueuer_whole": 100, "procrastinate_concurrency": [16],
    "async_runs": 2000, "async_concurrency": 1000, "whole_runs": 40_000, "whole_concurrency": [4, 64],
    "history": [0, 100_000, 1_000_000], "claims": 10_000,
    "enqueue_seconds": 8, "bulk": 100_000,
    "wake_samples": 500, "poll_interval": 0.05,
    "page_requests": 100, "definitions": 10_000, "pages_runs": 10_000_000,
    "queues_workers": (2, 16), "queues_rate": 500,
    "claim_seconds": 10, "jit_drain": 5000,
    "backlog_due": 10_000, "backlog_future": 1_000_000, "backlog_paused": 100_000, "backlog_claim": 100,
    "workflow_waiting": 1_000_000, "workflow_batch": 100_000, "workflow_chain": 1000,
    "seams_dependents": 100_000,
    "control_waits": 20, "control_finishes": 4000,
    "search_errors": 300_000, "search_seconds": 20,
    "soak_seconds": 600, "soak_window": 30, "soak_retain": 120, "soak_prune_every": 10,
}
QUICK = {
    "warmup": 100, "drain": 1000, "processes": [1, 2], "concurrency": [8],
    "steady_seconds": 1, "steady_backlog": 500,
    "pgqueuer_drain": 500, "procrastinate_drain": 200, "pgqueuer_batch": [10, "2x10"], "pgqueuer_whole": 10,
    "procrastinate_concurrency": [16],
    "async_runs": 200, "async_concurrency": 100, "whole_runs": 500, "whole_concurrency": [4],
    "history": [0, 5000], "claims": 100,
    "enqueue_seconds": 1, "bulk": 2000,
    "wake_samples": 5, "poll_interval": 0.1,
    "page_requests": 3, "definitions": 200, "pages_runs": 20_000,
    "queues_workers": (1, 16), "queues_rate": 500,
    "claim_seconds": 1, "jit_drain": 300,
    "backlog_due": 300, "backlog_future": 5000, "backlog_paused": 500, "backlog_claim": 100,
    "workflow_waiting": 5000, "workflow_batch": 500, "workflow_chain": 20,
    "seams_dependents": 1000,
    "control_waits": 5, "control_finishes": 100,
    "search_errors": 5000, "search_seconds": 1,
    # A soak that only proves itself (its windows, retention's deletes): about 14 s a server.
    "soak_seconds": 12, "soak_window": 3, "soak_retain": 6, "soak_prune_every": 1,
}


@dataclass
class Bench:
    """One server's run of measures: its sizes (FULL, QUICK or a measure's own), repeats and log."""

    server: Server
    sizes: dict
    repeats: int
    quick: bool
    started: float = field(default_factory=time.monotonic)

    def log(self, message):
        print(f"[{time.monotonic() - self.started:7.1f}s {self.server.kind:>8}] {message}", flush=True)
