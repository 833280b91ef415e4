"""Modification-time windows: closed intervals [start, end] in epoch milliseconds.

Both bounds are inclusive, as in seed 002's ``dip.mapreduce.input.fileinputformat
.starttime/endtime``. Spark's ``modifiedAfter``/``modifiedBefore`` are both
strict, so two back-to-back Spark windows drop a file whose mtime sits exactly
on the shared boundary; here a schedule-derived window ends 1 ms before the
next one starts, so every millisecond belongs to exactly one window.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo

from .errors import InvalidInputError

#: The seed's defaults when a bound is omitted (Java's Long.MIN_VALUE / MAX_VALUE).
MIN_MS = -(2**63)
MAX_MS = 2**63 - 1
DAY_MS = 86_400_000
# Below this an integer is almost certainly epoch *seconds* (1e11 ms is 1973).
_SECONDS_LIMIT = 100_000_000_000
_INT = re.compile(r"^\s*-?[0-9]+\s*$")


def iso(ms: int, tz: tzinfo = timezone.utc) -> str | None:
    """ISO-8601 with milliseconds, or None for an open bound."""
    if ms in (MIN_MS, MAX_MS):
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).astimezone(tz).isoformat(timespec="milliseconds")


def parse_instant(text: str | int, tz: tzinfo = timezone.utc, what: str = "time") -> int:
    """Epoch ms from an epoch-ms integer or an ISO-8601 string.

    A time without an offset is read in ``tz`` (the table's zone), the zone its
    directory names are written in.
    """
    if isinstance(text, bool):
        raise InvalidInputError(f"unparsable {what} {text!r}")
    if isinstance(text, int) or (isinstance(text, str) and _INT.match(text)):
        v = int(text)
        if v < 0 or 0 < v < _SECONDS_LIMIT:
            raise InvalidInputError(
                f"{what} {text} looks like epoch seconds, not milliseconds (e.g. 1592928000000)"
            )
        return v
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError(f"empty {what}")
    try:
        dt = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInputError(
            f"unparsable {what} {text!r}: use ISO-8601 (2020-06-24T01:05:00+08:00) or epoch milliseconds"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=tz)
    return int(dt.timestamp() * 1000)


@dataclass(frozen=True)
class TimeWindow:
    """A closed interval of epoch ms; a file is in it iff start <= mtime <= end."""

    start_ms: int = MIN_MS
    end_ms: int = MAX_MS

    def __post_init__(self):
        if self.end_ms < self.start_ms:
            raise InvalidInputError(
                f"window end {iso(self.end_ms) or self.end_ms} is before its start "
                f"{iso(self.start_ms) or self.start_ms}"
            )

    def __contains__(self, ms: int) -> bool:
        return self.start_ms <= ms <= self.end_ms

    @property
    def bounded(self) -> bool:
        return self.start_ms != MIN_MS or self.end_ms != MAX_MS

    @classmethod
    def parse(cls, start: str | int | None, end: str | int | None, tz: tzinfo = timezone.utc) -> TimeWindow:
        """From ``--start``/``--end`` (either may be omitted: that side is open)."""
        lo = MIN_MS if start is None else parse_instant(start, tz, "--start")
        hi = MAX_MS if end is None else parse_instant(end, tz, "--end")
        return cls(lo, hi)

    @classmethod
    def previous_period(cls, schedule_ms: int, period_ms: int, lag_ms: int = 0,
                        tz: tzinfo = timezone.utc) -> TimeWindow:
        """The last whole period before ``schedule - lag``.

        A run scheduled at 01:05 with a 1h period reads [00:00:00.000, 00:59:59.999];
        the run at 02:05 starts at 01:00:00.000, so consecutive runs tile time.
        """
        if period_ms <= 0:
            raise InvalidInputError("--period must be positive")
        if lag_ms < 0:
            raise InvalidInputError("--lag must not be negative")
        boundary = floor_to_period(schedule_ms - lag_ms, period_ms, tz)
        return cls(shift_periods(boundary, -1, period_ms, tz), boundary - 1)

    def to_json(self) -> dict:
        return {
            "start_ms": None if self.start_ms == MIN_MS else self.start_ms,
            "end_ms": None if self.end_ms == MAX_MS else self.end_ms,
            "start": iso(self.start_ms),
            "end": iso(self.end_ms),
        }


def floor_to_period(ms: int, period_ms: int, tz: tzinfo = timezone.utc) -> int:
    """The start of the period holding ``ms``, aligned to local time in ``tz``.

    Whole days floor to local midnight (a DST day is 23 or 25 hours long, as the
    directory names say); shorter periods floor on the local clock's offset at
    that instant, which for whole-hour zones is the same as flooring in UTC.
    """
    local = datetime.fromtimestamp(ms / 1000, tz=timezone.utc).astimezone(tz)
    if period_ms % DAY_MS == 0:
        days = period_ms // DAY_MS
        ordinal = local.date().toordinal()
        ordinal -= (ordinal - datetime(1970, 1, 1).toordinal()) % days
        day = datetime.fromordinal(ordinal).replace(tzinfo=tz)
        return int(day.timestamp() * 1000)
    offset = int(local.utcoffset().total_seconds() * 1000) if local.utcoffset() else 0
    wall = ms + offset
    return wall - wall % period_ms - offset


def shift_periods(boundary_ms: int, n: int, period_ms: int, tz: tzinfo = timezone.utc) -> int:
    """``boundary`` moved by ``n`` periods (whole days in wall-clock terms)."""
    if period_ms % DAY_MS == 0:
        local = datetime.fromtimestamp(boundary_ms / 1000, tz=timezone.utc).astimezone(tz)
        naive = local.replace(tzinfo=None) + timedelta(milliseconds=n * period_ms)
        return int(naive.replace(tzinfo=tz).timestamp() * 1000)
    return boundary_ms + n * period_ms
