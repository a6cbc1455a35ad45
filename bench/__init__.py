"""The benchmark suite: `python -m bench` (make bench) writes docs/BENCHMARKS.md and its plots."""
