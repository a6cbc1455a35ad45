"""The five fields of a cron expression, matched against wall-clock minutes.

croniter reads the text (names, ranges, steps, lists, `L`, `W`, `#`) into sets of values;
this module matches calendar days and wall-clock minutes against those sets itself, so that
the schedule module can map each matching wall time to instants under its DST rule (croniter
walks naive times one after the other and cannot tell a repeated hour's two passes apart).

Day of month and day of week: when both are restricted, a day matches if either does (the
POSIX "or": `0 0 1 * MON` fires on the 1st and on every Monday). A field is restricted when
it does not cover its whole range, whatever its text: `*/7` in day of week is Sunday only.

An expression that matches no calendar day at all (the 30th of February) is refused when it
is parsed, with the reason, instead of failing later when its next fire time is asked for.
"""

import calendar
from datetime import date, datetime, timedelta
from functools import lru_cache

from cron_descriptor import ExpressionDescriptor, Options
from croniter import CroniterError, croniter

from ..core.errors import InvalidInput

MONTH_NAMES = list(calendar.month_name)
MAX_DAYS = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31}
# Weekdays and dates repeat every 28 years from 1901 to 2099: a day pattern that matches no
# day of these 28 years matches none ever, and one that does is found well before the end.
CYCLE_START, CYCLE_DAYS = date(2001, 1, 1), (date(2029, 1, 1) - date(2001, 1, 1)).days
ONE_DAY = timedelta(days=1)
NTH_WORDS = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth"}


# Each field of a cron expression, in words, for errors that say which one is wrong (croniter's
# own "[61 * * * *] is not acceptable, out of range" names none).
FIELD_WORDS = (("minute", "0 to 59"), ("hour", "0 to 23"), ("day of month", "1 to 31"),
               ("month", "1 to 12 or jan to dec"), ("day of week", "0 to 7 or sun to sat, 0 and 7 both Sunday"))


def _which_field_is_wrong(fields):
    """'the minute field '61' is not valid: ...', found by trying each field alone."""
    for i, text in enumerate(fields):
        alone = ["*"] * 5
        alone[i] = text
        try:
            croniter(" ".join(alone))
        except (CroniterError, ValueError):
            name, values = FIELD_WORDS[i]
            return (f"the {name} field ({ordinal(i + 1)} of 5), {text!r}, is not valid: it takes {values}, "
                    "as a value, a range (1-5), a list (1,15) or a step (*/10)")
    return (f"{' '.join(fields)!r} is not a valid cron expression; its 5 fields are minute, hour, "
            "day of month, month and day of week")


class CronFields:
    """A valid 5-field cron expression: which days and wall-clock minutes it matches."""

    def __init__(self, expression):
        self.text = expression.split()
        if len(self.text) != 5:
            raise InvalidInput("schedule", f"{expression!r} has {len(self.text)} fields; a cron "
                                           "expression has 5: minute hour day-of-month month day-of-week")
        try:
            parsed = croniter(expression)
        except (CroniterError, ValueError):
            raise InvalidInput("schedule", _which_field_is_wrong(self.text)) from None
        minutes, hours, days, months, weekdays = parsed.expanded
        self.minutes = tuple(range(60)) if minutes == ["*"] else tuple(sorted(minutes))
        self.hours = tuple(range(24)) if hours == ["*"] else tuple(sorted(hours))
        self.months = None if months == ["*"] else frozenset(months)
        self.nearest = frozenset(parsed.nearest_weekday)  # W: the weekday nearest these days
        self.days = None if days == ["*"] and not self.nearest else frozenset(days)
        self.nth = {wday: frozenset(n) for wday, n in parsed.nth_weekday_of_month.items()}
        self.weekdays = None if weekdays == ["*"] and not self.nth else frozenset(weekdays)
        # Debian cron's rule for the repeated hour: a job whose minute or hour field is a
        # wildcard or a step (the field starts with `*`) runs in both passes; others run once.
        self.frequent = self.text[0].startswith("*") or self.text[1].startswith("*")
        self.expanded = parsed.expanded
        self._refuse_what_never_fires(expression)

    def _refuse_what_never_fires(self, expression):
        if self.days is not None and self.weekdays is not None:
            # croniter would intersect these instead of applying the "or": refuse, not guess.
            if self.nth:
                raise InvalidInput("schedule", f"{expression!r}: `#` or `L` in day of week with a day "
                                               "of month is not supported; use one or the other")
            if self.nearest:
                raise InvalidInput("schedule", f"{expression!r}: `W` in day of month with a day of "
                                               "week is not supported; use one or the other")
        start = CYCLE_START
        if any(self.day_matches(start + ONE_DAY * n) for n in range(CYCLE_DAYS)):
            return
        raise InvalidInput("schedule", f"{expression!r} never fires: {self._why_no_day()}")

    def _why_no_day(self):
        numbered = [d for d in self.days or () if isinstance(d, int)]
        if numbered and self.weekdays is None and not self.nearest and "l" not in self.days:
            months = sorted(self.months or MAX_DAYS)
            names = [MONTH_NAMES[m] for m in months]
            listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
            return f"{listed} never {'has' if len(names) == 1 else 'have'} a {ordinal(min(numbered))}"
        return "no date matches its day-of-month, month and day-of-week fields together"

    def day_matches(self, day):
        """Whether the calendar date `day` is one this expression fires on."""
        if self.months is not None and day.month not in self.months:
            return False
        if self.days is None:
            return self.weekdays is None or self._weekday_matches(day)
        if self.weekdays is None:
            return self._day_of_month_matches(day)
        return self._day_of_month_matches(day) or self._weekday_matches(day)  # POSIX "or"

    def _day_of_month_matches(self, day):
        last = calendar.monthrange(day.year, day.month)[1]
        if self.nearest:
            return any(day.day == nearest_weekday(day.year, day.month, last, d) for d in self.nearest)
        return day.day in self.days or ("l" in self.days and day.day == last)

    def _weekday_matches(self, day):
        weekday = day.isoweekday() % 7  # cron counts from Sunday = 0
        if not self.nth:
            return weekday in self.weekdays
        nths = self.nth.get(weekday, ())
        last = calendar.monthrange(day.year, day.month)[1]
        return (day.day + 6) // 7 in nths or ("l" in nths and day.day + 7 > last)

    def wall_times(self, start):
        """Matching naive wall-clock minutes from the naive datetime `start` on, forever."""
        day, first = start.date(), start.replace(second=0, microsecond=0)
        while True:
            if self.day_matches(day):
                for hour in self.hours:
                    if day == first.date() and hour < first.hour:
                        continue
                    for minute in self.minutes:
                        moment = datetime(day.year, day.month, day.day, hour, minute)
                        if moment >= first:
                            yield moment
            day += ONE_DAY

    def words(self):
        """The expression in words, e.g. "At 06:00, Monday through Friday"."""
        options = Options()
        options.use_24hour_time_format = True
        fields, nths = self._fields_for_words()
        words = ExpressionDescriptor(" ".join(fields), options).get_description()
        return f"{words}, on {nths} of the month" if nths else words

    def _fields_for_words(self):
        """The fields rewritten so that cron-descriptor's words say what fires, and the words
        for a list of `#`/`L` weekdays, which it reads as "the  Monday and Monday".

        A step larger than its range fires once (`*/61` in minutes is minute 0), a range that
        covers the whole field (`0-7` in day of week) is every value, and a step in day of
        week names its days: cron-descriptor would read "every 61 minutes", "Sunday through
        Sunday" and "on day 1 of the month, every 7 days of the week" (without the "or").
        """
        fields = []
        for index, (text, values) in enumerate(zip(self.text, self.expanded)):
            if values == ["*"]:
                fields.append("*")
            elif "/" in text and (len(values) == 1 or index == 4):
                fields.append(",".join(map(str, values)))
            else:
                fields.append(text)
        if not self.nth or "," not in self.text[4]:
            return fields, None
        fields[4] = "*"  # the day of month is unrestricted: `#` with one is refused
        nths = [f"the {'last' if n == 'l' else NTH_WORDS[n]} {calendar.day_name[(wday - 1) % 7]}"
                for wday, ns in sorted(self.nth.items()) for n in sorted(ns, key=str)]
        return fields, f"{', '.join(nths[:-1])} or {nths[-1]}"


@lru_cache(maxsize=4096)
def cron_fields(expression):
    """The CronFields of a cron text, parsed once per process: a worker re-reads every
    definition's schedule at each of its slots."""
    return CronFields(expression)


def nearest_weekday(year, month, last, day):
    """The weekday (Monday to Friday) nearest `day` of the month, without leaving the month."""
    day = min(day, last)
    weekday = calendar.weekday(year, month, day)
    if weekday == 5:  # Saturday: the Friday before, or the Monday after on the 1st
        return day - 1 if day > 1 else day + 2
    if weekday == 6:  # Sunday: the Monday after, or the Friday before on the last day
        return day + 1 if day < last else day - 2
    return day


def ordinal(n):
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
