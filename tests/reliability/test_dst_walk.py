"""Drill 8, schedules across DST: every clock change of 2026, walked minute by minute.

An independent check of the schedule rule (docs/REFERENCE.md, "Schedules"): the fire times expected are
worked out here from the rule itself, by walking every UTC minute around each transition,
reading the wall clock with zoneinfo and matching it with a small matcher of our own (not
croniter, not jobsweb's cron_fields). Both ways jobsweb computes slots must agree with it:
next_fire_times (the admin form's preview) and materialise.plan walking slot to slot, as the
worker does when it advances a definition one tick at a time.

The short form (make test) takes the named zones and a few hours either side of each change;
`make drills` widens the window (DRILL_DST_HOURS) and adds every zone that changes its clock
in 2026 (DRILL_DST_ALL_ZONES=1).
"""

import zoneinfo
from datetime import datetime, timedelta, timezone

import pytest

from jobsweb.scheduling.materialise import plan
from jobsweb.scheduling.schedule import Schedule, next_fire_times
from tests.reliability.conftest import size

UTC = timezone.utc
MINUTE, HOUR = timedelta(minutes=1), timedelta(hours=1)
HOURS = size("DST_HOURS", 3)  # either side of each transition
ALL_ZONES = size("DST_ALL_ZONES", 0)
ZONES = ["Australia/Lord_Howe", "Pacific/Chatham", "Antarctica/Troll", "America/Sao_Paulo",
         "Asia/Kolkata", "Europe/Madrid", "America/New_York", "America/St_Johns", "Asia/Tehran"]
# Zones without a clock change in 2026 (Sao_Paulo, Kolkata, Tehran) are walked around these.
PLAIN_DAYS = [datetime(2026, 3, 29, 1, tzinfo=UTC), datetime(2026, 10, 4, 16, tzinfo=UTC)]
EXPRESSIONS = [
    "* * * * *", "*/5 * * * *", "*/7 * * * *", "*/15 * * * *", "*/45 * * * *", "*/61 * * * *",
    "0 * * * *", "30 * * * *", "45 * * * *", "0,20,40 * * * *", "10,40 * * * *", "15,45 * * * *",
    "0 */2 * * *", "*/30 1-4 * * *", "40 0-3/1 * * *", "0 0-4 * * *", "25 2-3 * * *",
    "0 0 * * *", "0 1 * * *", "30 1 * * *", "59 1 * * *", "0 2 * * *", "30 2 * * *", "45 2 * * *",
    "0 3 * * *", "0,50 3 * * *", "0 2,3 * * *", "0-59/10 2 * * *", "1-5 2 * * *",
    "5 * * * 0", "15 2 * * 0", "20 2 1-7 * 0", "0 2 25-31 3,9,10 *", "*/20 * * 3,4,9,10 *",
    "0 2 * * 6,0", "0 12 * * 1-5", "0 0 1 * *",
]
RANGES = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]


def field_values(text, low, high):
    """The values a cron field's text names: numbers, `*`, ranges, steps and lists."""
    values = set()
    for part in text.split(","):
        span, _, step = part.partition("/")
        if span == "*":
            first, last = low, high
        elif "-" in span:
            first, last = map(int, span.split("-"))
        else:
            first = last = int(span)
            if step:
                last = high
        values |= set(range(first, last + 1, int(step or 1)))
    return values


class Reference:
    """One expression, matched the plain way: is this naive wall-clock minute one of it?"""

    def __init__(self, expression):
        text = expression.split()
        self.minutes, self.hours, self.days, self.months, weekdays = (
            field_values(t, low, high) for t, (low, high) in zip(text, RANGES))
        self.weekdays = {d % 7 for d in weekdays}
        self.days_restricted = self.days != set(range(1, 32))
        self.weekdays_restricted = self.weekdays != set(range(7))
        self.frequent = text[0].startswith("*") or text[1].startswith("*")

    def matches(self, wall):
        if wall.minute not in self.minutes or wall.hour not in self.hours or wall.month not in self.months:
            return False
        day, weekday = wall.day in self.days, wall.isoweekday() % 7 in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return day or weekday  # POSIX: either
        return day and weekday


def expected_fire_times(reference, tz, start, end):
    """The rule, instant by instant: the UTC minutes in [start, end) at which it fires."""
    fires = []
    moment = start
    while moment < end:
        local = moment.astimezone(tz)
        wall = local.replace(tzinfo=None)
        repeated = local.replace(fold=1 - local.fold).utcoffset() != local.utcoffset()
        if reference.matches(wall) and (not repeated or local.fold == 0 or reference.frequent):
            fires.append(moment)
        following = (moment + MINUTE).astimezone(tz).replace(tzinfo=None)
        skipped = wall + MINUTE
        while skipped < following and not reference.frequent:
            if reference.matches(skipped) and moment + MINUTE < end:
                fires.append(moment + MINUTE)  # a fixed time the jump skipped: at the jump, once
                break
            skipped += MINUTE
        moment += MINUTE
    return sorted(set(fires))


def transitions(tz, year=2026):
    """The instants in `year` at which `tz` changes its UTC offset, to the minute."""
    found = []
    moment = datetime(year, 1, 1, tzinfo=UTC)
    while moment.year == year:
        if (moment + HOUR).astimezone(tz).utcoffset() != moment.astimezone(tz).utcoffset():
            low, high = moment, moment + HOUR
            while high - low > MINUTE:
                middle = low + (high - low) / 2
                if middle.astimezone(tz).utcoffset() == high.astimezone(tz).utcoffset():
                    high = middle
                else:
                    low = middle
            found.append(high)
        moment += HOUR
    return found


def windows():
    names = ZONES
    if ALL_ZONES:
        names = sorted(set(ZONES) | {name for name in zoneinfo.available_timezones()
                                     if transitions(zoneinfo.ZoneInfo(name))})
    for name in names:
        tz = zoneinfo.ZoneInfo(name)
        for moment in transitions(tz) or PLAIN_DAYS:
            yield name, moment - HOURS * HOUR, moment + HOURS * HOUR


def preview_times(expression, name, start, end):
    """next_fire_times from `start` on, asked in pages as the form would, until `end`."""
    times, after = [], start - MINUTE
    while not times or times[-1] < end:
        page = next_fire_times(expression, name, 200, after=after)
        assert all(t.tzinfo == zoneinfo.ZoneInfo(name) for t in page)
        times += page
        after = page[-1]
    return [t.astimezone(UTC) for t in times if t < end]


def slot_walk(schedule, start, end):
    """Slots as materialise.plan gives them, one tick per slot: each tick starts afresh from
    the definition's next_run_at, exactly as a worker does."""
    slots, due = [], schedule.next_after(start - MINUTE)
    while due < end:
        row = {"next_run_at": due, "now": due, "misfire_policy": "latest", "grace_seconds": 300}
        planned, due, missed = plan(row, schedule)
        assert missed == 0 and [status for _, status, _ in planned] == ["queued"]
        slots.append(planned[0][0].astimezone(UTC))
    return slots


def test_every_matching_wall_time_fires_by_the_rule_across_every_clock_change_of_2026(figures):
    cases = compared = 0
    references = {expression: Reference(expression) for expression in EXPRESSIONS}
    walked = list(windows())
    for name, start, end in walked:
        tz = zoneinfo.ZoneInfo(name)
        for expression, reference in references.items():
            expected = expected_fire_times(reference, tz, start, end)
            where = f"{expression!r} in {name} from {start:%Y-%m-%d %H:%M} UTC"
            assert preview_times(expression, name, start, end) == expected, where
            assert slot_walk(Schedule(expression, name), start, end) == expected, where
            cases += 1
            compared += len(expected)
    figures(zones=len({name for name, _, _ in walked}), clock_changes_and_plain_days=len(walked),
            expressions=len(EXPRESSIONS), cases=cases, fire_times_compared=compared, hours_either_side=HOURS)
    assert compared > 0


@pytest.mark.parametrize("name", ["Australia/Lord_Howe", "Pacific/Chatham", "Antarctica/Troll",
                                  "Europe/Madrid", "America/New_York"])
def test_the_walk_finds_the_clock_changes_it_is_meant_to_check(name):
    assert len(transitions(zoneinfo.ZoneInfo(name))) == 2
