"""The bounds the benchmark report sets beside its targets (bench/targets.py)."""

from bench.targets import cpu_needed


def test_twice_a_peer_draining_10000_runs_a_second_on_2_cores_needs_100_us_a_run_and_50_of_one_process():
    assert cpu_needed(2, 20_000) == (100.0, 50.0)


def test_a_drain_of_8000_runs_a_second_on_4_cores_needs_500_us_a_run_and_125_of_one_process():
    assert cpu_needed(4, 8_000) == (500.0, 125.0)
