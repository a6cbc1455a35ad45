import pytest

from jobsweb.engine.jobs.retry import backoff_seconds


@pytest.mark.parametrize("attempt, expected", [(1, 10), (2, 20), (3, 40), (4, 80), (10, 3600), (5000, 3600)])
def test_the_delay_doubles_per_attempt_up_to_the_cap(attempt, expected):
    assert backoff_seconds(attempt, 10, 3600, rand=lambda: 0.5) == pytest.approx(expected)


def test_jitter_stays_within_twenty_percent_either_way():
    assert backoff_seconds(3, 10, 3600, rand=lambda: 0.0) == pytest.approx(40 * 0.8)
    assert backoff_seconds(3, 10, 3600, rand=lambda: 1.0) == pytest.approx(40 * 1.2)
    assert backoff_seconds(20, 10, 3600, rand=lambda: 1.0) == pytest.approx(3600 * 1.2)


def test_jitter_spreads_retries_of_runs_that_failed_together():
    delays = {round(backoff_seconds(2, 10, 3600), 6) for _ in range(50)}
    assert len(delays) > 40
    assert all(16 <= d <= 24 for d in delays)
