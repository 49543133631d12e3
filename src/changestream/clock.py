"""Commit timestamps: integer microseconds since the Unix epoch, UTC, rendered as RFC 3339."""

from __future__ import annotations

import datetime as dt
import functools
import re
import time
from collections.abc import Callable

from changestream.errors import InvalidArgument

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
#: Spanner's TIMESTAMP range, 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z, in microseconds.
MIN_TS_US = -62_135_596_800_000_000
MAX_TS_US = 253_402_300_799_999_999
_RANGE_TEXT = "0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z"
_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(Z|z|[+-]\d{2}:\d{2})?$",
    re.ASCII,  # \d would otherwise match other scripts' digits, which int() then reads
)


def now_us() -> int:
    """The wall clock in microseconds since the epoch."""
    return time.time_ns() // 1000


Clock = Callable[[], int]


def next_commit_ts(now: int, last_us: int, floor_us: int = 0) -> int:
    """The hybrid clock: the wall clock, but always above the last timestamp handed out."""
    return max(now, last_us + 1, floor_us + 1)


@functools.lru_cache(maxsize=4096)
def second_text(seconds: int) -> str:
    """Seconds since the epoch as RFC 3339 without a fraction or zone: ``YYYY-MM-DDTHH:MM:SS``.

    Cached because the timestamps of a batch share few distinct seconds, and building the
    text is most of formatting one (the server formats every record's commit timestamp);
    not strftime, which is slower and does not zero-pad years below 1000."""
    m = _EPOCH + dt.timedelta(seconds=seconds)
    return f"{m.year:04d}-{m.month:02d}-{m.day:02d}T{m.hour:02d}:{m.minute:02d}:{m.second:02d}"


def format_ts(us: int) -> str:
    """Render microseconds as RFC 3339 with six fractional digits and ``Z``."""
    seconds, micros = divmod(us, 1_000_000)
    return f"{second_text(seconds)}.{micros:06d}Z"


def to_datetime(us: int) -> dt.datetime:
    """Microseconds as an aware UTC datetime."""
    return _EPOCH + dt.timedelta(microseconds=us)


def parse_ts(value: object, name: str = "timestamp") -> int:
    """Microseconds from an RFC 3339 string, an aware datetime, or integer microseconds,
    within Spanner's TIMESTAMP range."""
    us = _parse_ts(value, name)
    if not MIN_TS_US <= us <= MAX_TS_US:
        raise InvalidArgument(f"{name} must lie within {_RANGE_TEXT}, got {value!r}")
    return us


def _finer_than_micros(name: str, value: object) -> str:
    # Truncating would change the value without a word; the store keeps microseconds.
    return (
        f"{name} has more precision than microseconds: {value!r}; timestamps are kept to "
        "the microsecond (6 fractional digits), so round it first"
    )


def _parse_ts(value: object, name: str) -> int:
    if isinstance(value, bool):
        raise InvalidArgument(f"{name} must be a timestamp, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, dt.datetime):
        if value.utcoffset() is None:
            raise InvalidArgument(f"{name} must be timezone-aware (UTC), got naive {value!r}")
        if getattr(value, "nanosecond", 0):  # a pandas Timestamp carries nanoseconds
            raise InvalidArgument(_finer_than_micros(name, value))
        delta = value - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(value, str):
        match = _RFC3339.match(value.strip())
        if match is None:
            raise InvalidArgument(
                f"{name} must be an RFC 3339 timestamp such as 2022-09-27T12:30:00.123456Z, "
                f"got {value!r}"
            )
        year, month, day, hour, minute, second, frac, zone = match.groups()
        try:
            moment = dt.datetime(
                int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=dt.UTC
            )
        except ValueError as exc:
            raise InvalidArgument(
                f"{name} is not a valid date/time: {value!r} ({exc}); allowed: {_RANGE_TEXT}"
            ) from exc
        if frac and frac[6:].strip("0"):
            raise InvalidArgument(_finer_than_micros(name, value))
        micros = int((frac or "").ljust(6, "0")[:6])
        us = _parse_ts(moment, name) + micros
        if zone and zone.upper() != "Z":
            sign = 1 if zone[0] == "+" else -1
            if int(zone[1:3]) > 23 or int(zone[4:6]) > 59:
                raise InvalidArgument(f"{name} has an invalid UTC offset: {value!r}")
            us -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60) * 1_000_000
        return us
    raise InvalidArgument(
        f"{name} must be a timestamp string or datetime, got {type(value).__name__}"
    )
