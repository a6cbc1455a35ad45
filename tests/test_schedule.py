from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from jobsweb import InvalidInput
from jobsweb.scheduling.schedule import Schedule, next_fire_times

UTC = timezone.utc


def local_times(expression, tz, n, after):
    return [t.strftime("%Y-%m-%d %H:%M %z") for t in next_fire_times(expression, tz, n, after=after)]


def test_daily_at_six_in_madrid_fires_at_six_local_across_spring_forward():
    times = local_times("0 6 * * *", "Europe/Madrid", 3, datetime(2026, 3, 28, 0, tzinfo=UTC))
    assert times == ["2026-03-28 06:00 +0100", "2026-03-29 06:00 +0200", "2026-03-30 06:00 +0200"]


def test_daily_at_six_in_madrid_fires_once_a_day_across_fall_back():
    times = local_times("0 6 * * *", "Europe/Madrid", 3, datetime(2026, 10, 24, 0, tzinfo=UTC))
    assert times == ["2026-10-24 06:00 +0200", "2026-10-25 06:00 +0100", "2026-10-26 06:00 +0100"]


def test_a_fixed_time_in_the_skipped_hour_fires_at_the_jump_and_no_day_is_lost():
    times = local_times("30 2 * * *", "America/New_York", 3, datetime(2026, 3, 7, 0, tzinfo=UTC))
    assert times == ["2026-03-07 02:30 -0500", "2026-03-08 03:00 -0400", "2026-03-09 02:30 -0400"]


def test_a_time_in_the_repeated_hour_fires_once_at_its_first_occurrence():
    times = local_times("30 1 * * *", "America/New_York", 3, datetime(2026, 10, 31, 0, tzinfo=UTC))
    assert times == ["2026-10-31 01:30 -0400", "2026-11-01 01:30 -0400", "2026-11-02 01:30 -0500"]


def test_starting_inside_the_repeated_hour_does_not_fire_its_first_pass_again():
    second_pass = datetime(2026, 11, 1, 6, 10, tzinfo=UTC)  # 01:10 EST, the second 01:10
    times = local_times("30 1 * * *", "America/New_York", 1, second_pass)
    assert times == ["2026-11-02 01:30 -0500"]


def test_hourly_in_madrid_never_fires_twice_at_one_instant_during_spring_forward():
    times = next_fire_times("30 * * * *", "Europe/Madrid", 4, after=datetime(2026, 3, 29, 0, tzinfo=UTC))
    assert len(set(times)) == 4
    assert [t.astimezone(UTC).hour for t in times] == [0, 1, 2, 3]


def test_every_counts_intervals_from_the_epoch_whatever_the_timezone():
    after = datetime(2026, 1, 1, 0, 4, 59, tzinfo=UTC)
    times = next_fire_times("@every 10m", "Asia/Kolkata", 3, after=after)
    assert [t.astimezone(UTC).strftime("%H:%M") for t in times] == ["00:10", "00:20", "00:30"]
    assert all(t.tzinfo == ZoneInfo("Asia/Kolkata") for t in times)


def test_every_understands_compound_durations():
    after = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
    times = next_fire_times("@every 1h30m", "UTC", 3, after=after)
    assert [t.strftime("%H:%M") for t in times] == ["01:30", "03:00", "04:30"]


def test_macros_mean_what_cron_means():
    after = datetime(2026, 1, 1, 12, tzinfo=UTC)
    assert next_fire_times("@hourly", n=1, after=after)[0] == datetime(2026, 1, 1, 13, tzinfo=UTC)
    assert next_fire_times("@daily", n=1, after=after)[0] == datetime(2026, 1, 2, tzinfo=UTC)
    assert next_fire_times("@weekly", n=1, after=after)[0] == datetime(2026, 1, 4, tzinfo=UTC)  # Sunday
    assert next_fire_times("@monthly", n=1, after=after)[0] == datetime(2026, 2, 1, tzinfo=UTC)
    assert next_fire_times("@yearly", n=1, after=after)[0] == datetime(2027, 1, 1, tzinfo=UTC)


def test_it_describes_schedules_in_words():
    assert Schedule("0 6 * * *", "Europe/Madrid").describe() == "At 06:00 (Europe/Madrid)"
    assert Schedule("@every 1h30m").describe() == "Every 1 hour 30 minutes (UTC)"
    assert Schedule("*/15 9-17 * * 1-5").describe().startswith("Every 15 minutes, between 09:00 and 17:59")


def test_every_takes_up_to_a_leap_year():
    assert Schedule("@every 366d").describe() == "Every 366 days (UTC)"


@pytest.mark.parametrize("expression, tz, field", [
    ("61 * * * *", "UTC", "schedule"),
    ("* * *", "UTC", "schedule"),
    ("0 6 * * * 2026", "UTC", "schedule"),
    ("", "UTC", "schedule"),
    ("@sometimes", "UTC", "schedule"),
    ("@every", "UTC", "schedule"),
    ("@every ten minutes", "UTC", "schedule"),
    ("@every 0m", "UTC", "schedule"),
    ("@every 3000000d", "UTC", "schedule"),  # once overflowed datetime (the bad-input drill)
    ("@every 367d", "UTC", "schedule"),
    ("0 6 * * *", "Europe/Atlantis", "timezone"),
    ("0 6 * * *", "../../etc/passwd", "timezone"),
    ("0 6 * * *", "", "timezone"),
])
def test_it_refuses_invalid_schedules_naming_the_field(expression, tz, field):
    with pytest.raises(InvalidInput) as caught:
        Schedule(expression, tz)
    assert caught.value.field == field
