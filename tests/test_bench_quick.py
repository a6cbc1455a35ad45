"""The benchmark suite's quick mode runs end to end, so the benchmark code cannot rot.

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


# Every section on the stock server, whose build has JIT (the embedded one's has not, and the bench
# starts either as the suite does, tests/servers.py): 34 targets, of which one is only reported.
# Both servers side by side were 354 s of CPU, about a sixth of a make test's; one is about 100.
@pytest.mark.slow
def test_the_quick_benchmark_suite_writes_its_report_and_plots(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bench", "--quick", "--servers", "stock", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = (tmp_path / "BENCHMARKS.md").read_text()
    for section in SECTIONS:
        assert section in report
    assert "(quick mode)" in report
    assert "### stock: PostgreSQL" in report
    verdicts = report.count("| met |") + report.count("| **not met** |") + report.count("| not measured |")
    assert verdicts == 33
    assert report.count("| reported |") == 1
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


def window(k, deleted, p95=10.0):
    return {"start_s": 3 * k, "runs": 1000, "exactly_once": 1000, "unended": 0, "attempt_rows": 1000,
            "runs_with_attempts": 1000, "p50_ms": 5.0, "p95_ms": p95, "p99_ms": 2 * p95, "max_ms": 50.0,
            "size_mb": 1.0 + k, "indexes_mb": 0.5, "deleted": deleted, "load": 9.0}


@pytest.mark.parametrize("deleted, met", [
    ([100, 300, 600, 900], True),  # retention deleting from the first window: no window kept every run
    ([0, 0, 0, 500], True),  # its first deletes in a window with jobsweb.prune off: none with it on
    ([100], None),  # one window, deleting: nothing to hold its p95 against, so not judged
])
def test_a_short_soak_under_load_is_reported_whatever_window_retention_began_in(deleted, met):
    # A quick soak at load 10 saw retention delete from its first window, and §21 failed to format
    # the growth "while every run was kept", which it had no window for: make test's benchmark failed.
    from bench import soak

    k = soak.summary([window(n, d) for n, d in enumerate(deleted)], {"sent": 1000 * len(deleted), "seconds": 12,
                     "late_ms": 3.0}, 0, 2**20, 2**19, 0, (9.0, 9.0, 9.0), (9.0, 9.0, 9.0), rate=333.0, seconds=12,
                     window=3, retain=6, prune_every=1, processes=2, concurrency=8)
    k["rate_source"] = "a test's"
    section = "\n".join(soak.soak_section({"soak": k}))
    target, measured, judged, _ = soak.soak_target({"soak": k})
    assert "every run once" in target and "; once;" in measured
    assert judged is met
    # What it had no window for reads as a dash, in the section and in the targets row.
    if deleted[0]:
        assert "– MB per million runs kept" in measured and "– ms before its first delete" in section
    else:
        assert "median p95 **– ms** in the windows with jobsweb.prune on" in section


def test_a_new_report_keeps_the_sections_after_the_suites_own(tmp_path):
    # Written by bench.first_start and by hand after `make bench`'s own: a new run writes its
    # sections anew and keeps those.
    from bench import report

    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\n## 1. Throughput\n\nold figures\n\n## Re-running\n\n`make bench` again\n\n"
                    "## First start\n\nits runs\n\n## By hand (issue 55)\n\nbefore and after\n")
    assert report.kept_sections(path) == "\n## First start\n\nits runs\n\n## By hand (issue 55)\n\nbefore and after\n"
    assert report.kept_sections(tmp_path / "new.md") == ""
