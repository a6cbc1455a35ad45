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


def walls(expression, tz, after, until):
    """Local 'HH:MM+offset' of every fire time from `after` until `until` (UTC)."""
    return [t.strftime("%H:%M%z") for t in next_fire_times(expression, tz, 200, after=after) if t < until]


def test_a_frequent_job_fires_in_both_passes_of_the_repeated_hour():
    times = walls("*/15 * * * *", "Europe/Madrid", datetime(2026, 10, 25, 0, 20, tzinfo=UTC),
                  datetime(2026, 10, 25, 2, 1, tzinfo=UTC))
    assert times == ["02:30+0200", "02:45+0200", "02:00+0100", "02:15+0100", "02:30+0100", "02:45+0100",
                     "03:00+0100"]


def test_hourly_fires_in_both_passes_of_the_repeated_hour():
    times = walls("@hourly", "Europe/Madrid", datetime(2026, 10, 24, 23, 30, tzinfo=UTC),
                  datetime(2026, 10, 25, 2, 1, tzinfo=UTC))
    assert times == ["02:00+0200", "02:00+0100", "03:00+0100"]


def test_a_frequent_job_has_no_times_in_the_skipped_hour():
    times = walls("*/30 * * * *", "America/New_York", datetime(2026, 3, 8, 6, 20, tzinfo=UTC),
                  datetime(2026, 3, 8, 7, 31, tzinfo=UTC))
    assert times == ["01:30-0500", "03:00-0400", "03:30-0400"]


def test_real_wall_times_fire_when_lord_howe_jumps_half_an_hour():
    after, until = datetime(2026, 10, 3, 15, 0, tzinfo=UTC), datetime(2026, 10, 3, 16, 0, tzinfo=UTC)
    assert walls("0,20,40 * * * *", "Australia/Lord_Howe", after, until) == ["01:40+1030", "02:40+1100"]
    assert walls("*/7 * * * *", "Australia/Lord_Howe", after, until) == [
        "01:35+1030", "01:42+1030", "01:49+1030", "01:56+1030", "02:35+1100", "02:42+1100", "02:49+1100",
        "02:56+1100"]


def test_a_fixed_time_after_chathams_jump_fires_and_one_inside_it_fires_at_the_jump():
    times = walls("0,50 3 * * *", "Pacific/Chatham", datetime(2026, 9, 26, 12, tzinfo=UTC),
                  datetime(2026, 9, 27, 12, tzinfo=UTC))
    assert times == ["03:45+1345", "03:50+1345"]


def test_a_fixed_time_right_after_trolls_two_hour_jump_fires_once():
    times = walls("0 2,3 * * *", "Antarctica/Troll", datetime(2026, 3, 29, tzinfo=UTC),
                  datetime(2026, 3, 30, tzinfo=UTC))
    assert times == ["03:00+0200"]


def test_starting_again_from_any_slot_gives_the_slots_the_preview_lists():
    schedule = Schedule("10,40 * * * *", "Antarctica/Troll")
    preview = next_fire_times("10,40 * * * *", "Antarctica/Troll", 12, after=datetime(2026, 3, 28, 23, tzinfo=UTC))
    walked = [schedule.next_after(datetime(2026, 3, 28, 23, tzinfo=UTC))]
    while len(walked) < 12:
        walked.append(schedule.next_after(walked[-1]))
    assert walked == preview
    assert [t.strftime("%H:%M") for t in preview[2:8]] == ["00:10", "00:40", "03:10", "03:40", "04:10", "04:40"]


def test_fire_times_are_instants_in_utc_so_a_second_pass_sorts_after_the_first():
    times = list(zip(range(3), Schedule("@hourly", "Europe/Madrid").fire_times(
        datetime(2026, 10, 24, 23, 30, tzinfo=UTC))))
    assert [t.tzinfo for _, t in times] == [UTC] * 3
    assert [t.hour for _, t in times] == [0, 1, 2]


@pytest.mark.parametrize("expression, why", [
    ("0 0 30 2 *", "February never has a 30th"),
    ("0 0 31 4 *", "April never has a 31st"),
    ("0 0 31 2,4,6,9,11 *", "February, April, June, September and November never have a 31st"),
    ("0 0 1 * MON#4", "`#` or `L` in day of week with a day of month is not supported"),
    ("0 0 15 * MON#2", "`#` or `L` in day of week with a day of month is not supported"),
    ("0 0 1 2 MON#5", "`#` or `L` in day of week with a day of month is not supported"),
    ("0 0 15W * MON", "`W` in day of month with a day of week is not supported"),
])
def test_an_expression_that_can_never_fire_is_refused_with_the_reason(expression, why):
    with pytest.raises(InvalidInput) as caught:
        Schedule(expression, "Europe/Madrid")
    assert caught.value.field == "schedule" and why in caught.value.message


def test_rare_but_real_dates_are_accepted():
    after = datetime(2026, 1, 1, tzinfo=UTC)
    assert next_fire_times("0 0 29 2 *", n=1, after=after)[0] == datetime(2028, 2, 29, tzinfo=UTC)
    assert next_fire_times("0 0 * 2 MON#5", n=1, after=after)[0] == datetime(2044, 2, 29, tzinfo=UTC)
    assert next_fire_times("0 0 31 2,4,6,9,12 *", n=1, after=after)[0] == datetime(2026, 12, 31, tzinfo=UTC)


def test_day_of_month_and_day_of_week_together_fire_on_either():
    times = next_fire_times("0 0 13 * 5", n=4, after=datetime(2026, 2, 1, tzinfo=UTC))
    assert [t.strftime("%a %d") for t in times] == ["Fri 06", "Fri 13", "Fri 20", "Fri 27"]
    times = next_fire_times("0 0 1-7 * */7", n=3, after=datetime(2026, 3, 5, tzinfo=UTC))
    assert [t.strftime("%a %d") for t in times] == ["Fri 06", "Sat 07", "Sun 08"]


def test_every_is_case_insensitive_like_the_macros():
    assert Schedule("@EVERY 10m").describe() == "Every 10 minutes (UTC)"
    assert Schedule("@DAILY").describe() == "At 00:00 (UTC)"


@pytest.mark.parametrize("digits", ["9" * 5000, "0" * 5000 + "9" * 9])
def test_a_huge_every_number_is_refused_as_too_long(digits):
    with pytest.raises(InvalidInput) as caught:
        Schedule(f"@every {digits}m")
    assert "at most 366d" in caught.value.message and len(caught.value.message) < 200


@pytest.mark.parametrize("expression, words", [
    ("0 0 1-7 * */7", "At 00:00, between day 1 and 7 of the month, or on Sunday (UTC)"),
    ("*/61 * * * *", "Every hour (UTC)"),
    ("0 0 * * 0-7", "At 00:00 (UTC)"),
    ("0 0 1 * */2", "At 00:00, on day 1 of the month, or on Sunday, Tuesday, Thursday, and Saturday (UTC)"),
    ("0 0 * * 1#1,1#3", "At 00:00, on the first Monday or the third Monday of the month (UTC)"),
])
def test_descriptions_say_what_the_schedule_fires_on(expression, words):
    assert Schedule(expression).describe() == words
