"""Date-time inputs read in the viewer's own timezone.

A form with a date input carries a hidden `tz` field that static/local-times.js fills with the
browser's IANA zone; a wall-clock time typed in the input is read in that zone. Without the
script the field stays empty and the time is read as UTC, which the form says.
"""

from datetime import datetime, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..core.errors import InvalidInput

TZ_MAX_CHARS = 64  # the longest IANA name is about 32


def viewer_zone(raw, field="tz"):
    """The zone a form's date inputs are read in: UTC when `raw` is empty, else its ZoneInfo, or
    InvalidInput naming `field`."""
    name = (raw or "").strip()
    if not name:
        return timezone.utc
    try:
        if len(name) > TZ_MAX_CHARS:
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(field, f"{name[:TZ_MAX_CHARS]!r} is not a known time zone "
                                  "(an IANA name such as Europe/Madrid or UTC)") from None


def read_local(field, raw, zone):
    """A date-time typed as 2026-11-21T06:00 (read in `zone`) or with its own offset, as an
    aware datetime; InvalidInput naming `field` when it is not one."""
    try:
        value = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise InvalidInput(field, f"must be a date and time such as 2026-11-21T06:00, got {raw!r}") from None
    value = value if value.tzinfo else value.replace(tzinfo=zone)
    try:
        value.astimezone(timezone.utc)
        value.astimezone(zone)  # the form shows it back in the zone
    except OverflowError:  # 0001-01-01T00:00+14:00 is before the year 1 in UTC
        raise InvalidInput(field, f"is out of range, got {raw!r}") from None
    return value


def zone_name(zone):
    """The name a form sends back for `zone`: empty for UTC (the default), else its IANA key."""
    return "" if zone is timezone.utc else zone.key
