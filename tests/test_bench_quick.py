"""The benchmark suite's quick mode runs end to end on both servers, so the benchmark code cannot rot.

Only that it runs and writes its report is checked here: its numbers come from `make bench`.
"""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ["## Targets", "## 1. Throughput", "## 2. Peers", "## 3. Ceiling", "## 4. Claim latency",
            "## 5. Enqueue", "## 6. Enqueue → start", "## 7. Admin pages", "## 8. Scheduler tick",
            "## 9. Memory", "## 10. Queues", "## 11. Async handlers", "## 12. Whole processes",
            "## 13. Scale on paper", "## 14. Claim latency with a backlog", "## 15. JIT", "## 16. Workflows",
            "## 17. A wide workflow graph from the web", "## 20. A cron tick's start-up", "## 21. Sustained load",
            "## The servers"]
# Per server: 30 targets, of which one is only reported; the embedded server's build has no JIT,
# so its two JIT targets do not apply (the stock server's are judged).
JUDGED = {"embedded": 27, "stock": 29}


# Both servers, every section, the two servers' suites at once (--side-by-side): its numbers are
# not read here, and one after the other they took 394 s of a loaded make test.
@pytest.mark.slow
def test_the_quick_benchmark_suite_writes_its_report_and_plots(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bench", "--quick", "--side-by-side", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = (tmp_path / "BENCHMARKS.md").read_text()
    for section in SECTIONS:
        assert section in report
    assert "(quick mode)" in report
    for server in JUDGED:
        assert f"### {server}: PostgreSQL" in report
    verdicts = report.count("| met |") + report.count("| **not met** |") + report.count("| not measured |")
    assert verdicts == sum(JUDGED.values())
    assert report.count("| reported |") == len(JUDGED)
    assert report.count("| n/a (no JIT) |") == 2
    for plot in ("bench_throughput.png", "bench_claim_latency.png"):
        assert (tmp_path / plot).read_bytes().startswith(b"\x89PNG")


def test_the_benchmark_suite_refuses_to_run_without_its_peers(tmp_path):
    # As if PgQueuer were not installed: `make bench-quick` fails, naming it, before any server starts.
    hide = ("import sys; sys.modules['pgqueuer'] = None; from bench.__main__ import main; "
            f"sys.exit(main(['--quick', '--out', {str(tmp_path)!r}]))")
    done = subprocess.run([sys.executable, "-c", hide], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "pgqueuer not installed" in done.stderr and "pip install -e '.[bench]'" in done.stderr
    assert list(tmp_path.iterdir()) == []
