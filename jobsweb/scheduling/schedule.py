"""Schedule expressions: 5-field cron, the @hourly-style macros and `@every <duration>`.

Cron expressions are evaluated on the wall clock of the definition's IANA timezone, so that
"0 6 * * *" in Europe/Madrid fires at 06:00 local time in winter and in summer. croniter walks
naive local times and zoneinfo turns each into an instant:

- a local time that does not exist (the hour skipped when clocks go forward) fires at the
  same offset from midnight as before the change, i.e. just after the jump (02:30 -> 03:30):
  no day loses its run;
- a local time that happens twice (the hour repeated when clocks go back) fires once, at its
  first occurrence (fold=0): no day runs twice. A job that runs every hour therefore has one
  two-hour gap per year; that is how cron has always behaved.

`@every` intervals are counted from the Unix epoch in UTC, so "@every 10m" fires at :00, :10,
:20, ... whatever the timezone, and a slot's time does not depend on when the definition was
saved.
"""

import re
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cron_descriptor import ExpressionDescriptor, Options
from croniter import CroniterError, croniter

from ..core.errors import InvalidInput

MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
DURATION_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}  # seconds
DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
MIN_EVERY = 1  # seconds; the worker ticks no faster than that anyway
# seconds; longer intervals run past datetime's year 9999 when fire times are computed
# (found by the bad-input drill), and a yearly job reads better as cron or @yearly anyway.
MAX_EVERY = 366 * 86400
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MAX_FIRE_TIMES = 1000  # next_fire_times answers at most this many


class Schedule:
    """A parsed, valid schedule in a timezone; iterate fire times with `after`."""

    def __init__(self, expression, tz_name="UTC"):
        self.expression = expression.strip() if isinstance(expression, str) else expression
        self.tz = parse_timezone(tz_name)
        self.every = None  # seconds, for @every
        self.cron = None  # the 5-field cron expression, macros expanded
        if not isinstance(self.expression, str) or not self.expression:
            raise InvalidInput("schedule", "is required: a cron expression such as '0 6 * * *', "
                                           "a macro such as @daily, or '@every 10m'")
        if self.expression.startswith("@every"):
            self.every = parse_duration(self.expression[len("@every"):])
        elif self.expression.startswith("@"):
            if self.expression.lower() not in MACROS:
                raise InvalidInput("schedule", f"unknown macro {self.expression!r} "
                                               f"(known: {', '.join(MACROS)}, @every <duration>)")
            self.cron = MACROS[self.expression.lower()]
        else:
            self.cron = parse_cron(self.expression)

    def fire_times(self, after):
        """Fire times strictly after the aware datetime `after`, in order, forever."""
        if self.every is not None:
            elapsed = (after - EPOCH).total_seconds()
            slot = EPOCH + timedelta(seconds=(elapsed // self.every + 1) * self.every)
            while True:
                yield slot.astimezone(self.tz)
                slot += timedelta(seconds=self.every)
        local = after.astimezone(self.tz)
        # Start one hour early: `after` may be the second pass through a repeated hour, whose
        # naive wall time is earlier than where the first pass left off.
        walker = croniter(self.cron, local.replace(tzinfo=None) - timedelta(hours=1))
        # Compared in UTC: Python compares two datetimes of one zone by wall time, ignoring fold.
        last = after.astimezone(timezone.utc)
        while True:
            local_fire = walker.get_next(datetime).replace(tzinfo=self.tz)  # fold=0: first occurrence
            # Through UTC, a non-existent local time becomes the instant after the jump.
            fire = local_fire.astimezone(timezone.utc)
            if fire > last:  # two wall times in the skipped hour can map to one instant: fire once
                last = fire
                yield fire.astimezone(self.tz)

    def next_after(self, after):
        """The first fire time strictly after `after`."""
        return next(self.fire_times(after))

    def describe(self):
        """The schedule in words, e.g. "At 06:00 (Europe/Madrid)"."""
        if self.every is not None:
            words = f"Every {format_duration(self.every)}"
        else:
            options = Options()
            options.use_24hour_time_format = True
            words = ExpressionDescriptor(self.cron, options).get_description()
        return f"{words} ({self.tz.key})"


def parse_timezone(name):
    """The ZoneInfo for an IANA name such as Europe/Madrid, or InvalidInput naming `timezone`."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput("timezone", "is required: an IANA name such as UTC or Europe/Madrid")
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput("timezone", f"{name!r} is not an IANA timezone name "
                                       "(for example UTC, Europe/Madrid, America/New_York)") from None


def parse_cron(expression):
    fields = expression.split()
    if len(fields) != 5:
        raise InvalidInput("schedule", f"{expression!r} has {len(fields)} fields; a cron expression "
                                       "has 5: minute hour day-of-month month day-of-week")
    try:
        walker = croniter(expression, datetime(2000, 1, 1))
    except (CroniterError, ValueError) as exc:
        raise InvalidInput("schedule", f"{expression!r} is not a valid cron expression: {exc}") from None
    try:
        # 0 0 31 2 * parses but names no day: croniter gives up looking, which was a 500.
        walker.get_next(datetime)
    except CroniterError:
        raise InvalidInput("schedule", f"{expression!r} never fires (no such date)") from None
    return " ".join(fields)


def parse_duration(text):
    """Seconds in a duration such as 10m, 1h30m, 2d or 45s (for `@every`)."""
    text = text.strip()
    match = DURATION.fullmatch(text)
    if not text or not match:
        raise InvalidInput("schedule", f"@every needs a duration such as 10m, 1h30m or 45s, got {text!r}")
    seconds = sum(int(n) * DURATION_UNITS[unit] for n, unit in zip(match.groups(), "dhms") if n)
    if seconds < MIN_EVERY:
        raise InvalidInput("schedule", f"@every needs a duration of at least {MIN_EVERY}s, got {text!r}")
    if seconds > MAX_EVERY:
        raise InvalidInput("schedule", f"@every takes at most {MAX_EVERY // 86400}d, got {text!r}; "
                                       "for longer intervals use a cron expression or @yearly")
    return seconds


def format_duration(seconds):
    parts = []
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        n, seconds = divmod(seconds, size)
        if n:
            parts.append(f"{n} {unit}{'s' if n > 1 else ''}")
    return " ".join(parts)


def next_fire_times(expression, tz_name="UTC", n=5, after=None):
    """The next `n` fire times of `expression` in `tz_name`, after `after` (default: now)."""
    if not isinstance(n, int) or not 1 <= n <= MAX_FIRE_TIMES:
        raise InvalidInput("n", f"must be a whole number from 1 to {MAX_FIRE_TIMES}")
    schedule = Schedule(expression, tz_name)
    # Only the admin form calls this without `after`; slots are always computed from the
    # database clock (materialise.py), never from this one.
    after = after or datetime.now(timezone.utc)
    times = schedule.fire_times(after)
    return [next(times) for _ in range(n)]


def local_time(moment, tz):
    """A time as people at a definition read it, in its zone (a ZoneInfo): 2026-03-29 06:00 CEST."""
    return moment.astimezone(tz).strftime("%Y-%m-%d %H:%M %Z")
