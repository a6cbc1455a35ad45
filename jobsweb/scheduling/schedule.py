"""Schedule expressions: 5-field cron, the @hourly-style macros and `@every <duration>`.

Cron expressions are read on the wall clock of the definition's IANA timezone, so that
"0 6 * * *" in Europe/Madrid fires at 06:00 local time in winter and in summer. The rule,
which is Debian cron's:

- every wall-clock time that exists and matches fires, exactly once;
- in the hour repeated when clocks go back, a job with a wildcard or step (`*`, `*/n`) in its
  minute or hour field fires in both passes (so `*/15` keeps its 15 minutes and `@hourly`
  its hours); a job at a fixed minute and hour fires once, in the first pass;
- a fixed time inside the hour skipped when clocks go forward fires once, at the moment of
  the jump (02:30 fires at 03:00 when 02:00 becomes 03:00): no day loses its run; for a
  frequent job (`*` or a step, as above) those wall times simply do not exist;
- this holds for jumps of any size at any minute: Australia/Lord_Howe's 30 minutes,
  Pacific/Chatham's at 02:45, Antarctica/Troll's two hours.

Day of month and day of week both restricted: a day matches if either does (the POSIX "or";
see cron_fields.py, which matches the fields). An expression that can never fire (the 30th
of February) is refused with the reason when it is parsed.

`fire_times` is the one place slots are computed: the admin form's preview
(`next_fire_times`) and the materialiser (materialise.py) both walk it, and starting it
again from any slot it gave continues the same sequence.

`@every` intervals are counted from the Unix epoch in UTC, so "@every 10m" fires at :00, :10,
:20, ... whatever the timezone, DST or not, and a slot's time does not depend on when the
definition was saved.
"""

import heapq
import re
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..core.errors import InvalidInput
from .cron_fields import cron_fields

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
# More digits than MAX_EVERY has in seconds is over it; checked before int(), which refuses
# numbers of over 4,300 digits with a bare ValueError.
MAX_DIGITS = 8
MIN_EVERY = 1  # seconds; the worker ticks no faster than that anyway
# seconds; longer intervals run past datetime's year 9999 when fire times are computed
# (found by the bad-input drill), and a yearly job reads better as cron or @yearly anyway.
MAX_EVERY = 366 * 86400
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MAX_FIRE_TIMES = 1000  # next_fire_times answers at most this many
# The longest fall-back of any zone today (Antarctica/Troll's two hours), with room: the
# second pass of a repeated hour can be this far behind the first in wall-clock time.
LONGEST_FALL_BACK = timedelta(hours=3)


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
        if self.expression.lower().startswith("@every"):
            self.every = parse_duration(self.expression[len("@every"):])
        elif self.expression.startswith("@"):
            if self.expression.lower() not in MACROS:
                raise InvalidInput("schedule", f"unknown macro {self.expression!r} "
                                               f"(known: {', '.join(MACROS)}, @every <duration>)")
            self.cron = MACROS[self.expression.lower()]
        else:
            self.cron = parse_cron(self.expression)
        self.fields = cron_fields(self.cron) if self.cron else None

    def fire_times(self, after):
        """Fire times strictly after the aware datetime `after`, in order, forever, in UTC.

        In UTC because Python compares two times of one zone by their wall clock, ignoring
        fold: the second pass of a repeated hour would sort before the first pass's end.
        """
        if self.every is not None:
            elapsed = (after - EPOCH).total_seconds()
            slot = EPOCH + timedelta(seconds=(elapsed // self.every + 1) * self.every)
            while True:
                yield slot
                slot += timedelta(seconds=self.every)
        after = after.astimezone(timezone.utc)
        local = after.astimezone(self.tz)
        # A fall-back just after `after`: the second passes still to come belong to wall
        # times up to its length before `after`'s own.
        behind = local.utcoffset() - (after + LONGEST_FALL_BACK).astimezone(self.tz).utcoffset()
        start = local.replace(tzinfo=None, fold=0) - max(behind, timedelta(0))
        # Wall times come in order and so do their first instants; a second pass comes later
        # than the first passes that follow it, so it waits here until its turn.
        second_passes = []
        last = after
        for wall in self.fields.wall_times(start):
            first, second = self._instants(wall)
            if first is None:
                continue
            while second_passes and second_passes[0] <= first:
                moment = heapq.heappop(second_passes)
                if moment > last:
                    last = moment
                    yield moment
            if first > last:  # several skipped wall times fire at one jump: once
                last = first
                yield first
            if second is not None:
                heapq.heappush(second_passes, second)

    def _instants(self, wall):
        """(first instant, second-pass instant or None) at which the naive `wall` time fires,
        in UTC; (None, None) if it does not fire at all."""
        fold0 = wall.replace(tzinfo=self.tz).astimezone(timezone.utc)
        fold1 = wall.replace(tzinfo=self.tz, fold=1).astimezone(timezone.utc)
        if fold0 == fold1:
            return fold0, None
        if fold0 < fold1:  # the hour repeated when clocks go back: first pass, second pass
            return fold0, fold1 if self.fields.frequent else None
        # A time in a skipped hour: zoneinfo reads it with the offset from before the jump
        # (fold 0, an instant after the jump) or from after it (fold 1, an instant before).
        return (None, None) if self.fields.frequent else (self._jump(fold1, fold0), None)

    def _jump(self, before, after):
        """The instant the zone's offset changes, between `before` and `after` (UTC)."""
        offset = after.astimezone(self.tz).utcoffset()
        while after - before > timedelta(seconds=1):
            middle = before + (after - before) / 2
            if middle.astimezone(self.tz).utcoffset() == offset:
                after = middle
            else:
                before = middle
        return after.replace(microsecond=0)

    def next_after(self, after):
        """The first fire time strictly after `after`."""
        return next(self.fire_times(after))

    def describe(self):
        """The schedule in words, e.g. "At 06:00 (Europe/Madrid)"."""
        if self.every is not None:
            words = f"Every {format_duration(self.every)}"
        else:
            words = self.fields.words()
        return f"{words} ({self.tz.key})"


# The longest IANA name is 32 characters (America/Argentina/ComodRivadavia). ZoneInfo reads the
# name as a file path: a 256-character one was OSError "File name too long" (a 500 on the
# definition form, a traceback from `flask jobs define` and define()).
TIMEZONE_MAX_CHARS = 64


def parse_timezone(name):
    """The ZoneInfo for an IANA name such as Europe/Madrid, or InvalidInput naming `timezone`:
    the one check of the definition form, `flask jobs define`, define() and @job's schedules."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput("timezone", "is required: an IANA name such as UTC or Europe/Madrid")
    if len(name.strip()) > TIMEZONE_MAX_CHARS:
        raise InvalidInput("timezone", f"must be at most {TIMEZONE_MAX_CHARS} characters (an IANA name such as "
                                       f"Europe/Madrid), got {len(name.strip())}")
    try:
        return ZoneInfo(name.strip())
    # OSError: a folder of the zone database ("America"), or a name the file system refuses.
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidInput("timezone", f"{name!r} is not an IANA timezone name "
                                       "(for example UTC, Europe/Madrid, America/New_York)") from None


def parse_cron(expression):
    """The expression with its fields single-spaced, or InvalidInput saying why it is refused."""
    normal = " ".join(expression.split())
    cron_fields(normal)
    return normal


def parse_duration(text):
    """Seconds in a duration such as 10m, 1h30m, 2d or 45s (for `@every`)."""
    text = text.strip()
    match = DURATION.fullmatch(text)
    shown = repr(text) if len(text) <= 40 else repr(text[:40]) + "..."
    if not text or not match:
        raise InvalidInput("schedule", f"@every needs a duration such as 10m, 1h30m or 45s, got {shown}")
    numbers = [(n.lstrip("0") or "0", unit) for n, unit in zip(match.groups(), "dhms") if n]
    if any(len(n) > MAX_DIGITS for n, _ in numbers):
        raise InvalidInput("schedule", f"@every takes at most {MAX_EVERY // 86400}d, got {shown}")
    seconds = sum(int(n) * DURATION_UNITS[unit] for n, unit in numbers)
    if seconds < MIN_EVERY:
        raise InvalidInput("schedule", f"@every needs a duration of at least {MIN_EVERY}s, got {shown}")
    if seconds > MAX_EVERY:
        raise InvalidInput("schedule", f"@every takes at most {MAX_EVERY // 86400}d, got {shown}; "
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
    return [next(times).astimezone(schedule.tz) for _ in range(n)]


def local_time(moment, tz):
    """A time as people at a definition read it, in its zone (a ZoneInfo): 2026-03-29 06:00 CEST."""
    return moment.astimezone(tz).strftime("%Y-%m-%d %H:%M %Z")
