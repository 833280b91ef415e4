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

from tributary_read.errors import InvalidInputError

#: The seed's defaults when a bound is omitted (Java's Long.MIN_VALUE / MAX_VALUE).
MIN_MS = -(2**63)
MAX_MS = 2**63 - 1
DAY_MS = 86_400_000
#: 9999-12-31T23:59:59.999Z: the last instant a window bound can name.
MAX_INSTANT_MS = 253_402_300_799_999
_EPOCH = datetime(1970, 1, 1)
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
        if v > MAX_INSTANT_MS:
            raise InvalidInputError(f"{what} {str(text).strip()[:30]} is past the year 9999 (epoch ms)")
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


def _instant(text: str | int, tz: tzinfo, param: str, what: str) -> int:
    """:func:`parse_instant` for the argument ``param``, its errors marking it (``TributaryError.params``)."""
    try:
        return parse_instant(text, tz, what)
    except InvalidInputError as e:
        raise InvalidInputError(str(e), **{param: what}) from None


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
        """From a start and an end (either may be omitted: that side is open)."""
        lo = MIN_MS if start is None else _instant(start, tz, "start", "window start")
        hi = MAX_MS if end is None else _instant(end, tz, "end", "window end")
        return cls(lo, hi)

    @classmethod
    def for_schedule(cls, start: str | int | None = None, end: str | int | None = None, *,
                     schedule_time: str | int | None = None, period_ms: int | None = None,
                     lag_ms: int | None = None, tz: tzinfo = timezone.utc) -> TimeWindow | None:
        """The window a run reads: explicit bounds, or the period before its schedule time.

        Either ``start``/``end`` (each optional) or ``schedule_time`` with
        ``period_ms`` (and optionally ``lag_ms``), never both: a scheduled run
        derives its window so consecutive runs tile time (:meth:`previous_period`).
        None when nothing is given: no window, every file.
        """
        if schedule_time is None:
            if period_ms is not None or lag_ms is not None:
                raise InvalidInputError("a period and a lag go with a schedule time", period="a period",
                                        lag="a lag", schedule_time="a schedule time")
            if start is None and end is None:
                return None
            return cls.parse(start, end, tz)
        if start is not None or end is not None:
            raise InvalidInputError("give a window start/end or a schedule time, not both",
                                    bounds="a window start/end", schedule_time="a schedule time")
        if period_ms is None:
            raise InvalidInputError("a schedule time needs a period (e.g. 1h)", schedule_time="a schedule time",
                                    period="a period")
        when = _instant(schedule_time, tz, "schedule_time", "schedule time")
        return cls.previous_period(when, period_ms, lag_ms or 0, tz)

    @classmethod
    def previous_period(cls, schedule_ms: int, period_ms: int, lag_ms: int = 0,
                        tz: tzinfo = timezone.utc) -> TimeWindow:
        """The last whole period before ``schedule - lag``.

        A run scheduled at 01:05 with a 1h period reads [00:00:00.000, 00:59:59.999];
        the run at 02:05 starts at 01:00:00.000, so consecutive runs tile time.
        """
        if period_ms <= 0:
            raise InvalidInputError("the period must be positive", period="the period")
        if lag_ms < 0:
            raise InvalidInputError("the lag must not be negative", lag="the lag")
        try:
            boundary = floor_to_period(schedule_ms - lag_ms, period_ms, tz)
            return cls(shift_periods(boundary, -1, period_ms, tz), boundary - 1)
        except (OverflowError, ValueError, OSError):  # InvalidInputError is a ValueError: keep its message
            raise InvalidInputError(
                f"no whole {period_ms} ms period before {iso(schedule_ms) or schedule_ms} minus the lag "
                "lies within years 1..9999") from None

    def to_json(self) -> dict:
        return {
            "start_ms": None if self.start_ms == MIN_MS else self.start_ms,
            "end_ms": None if self.end_ms == MAX_MS else self.end_ms,
            "start": iso(self.start_ms),
            "end": iso(self.end_ms),
        }


def _wall_ms(ms: int, tz: tzinfo) -> int:
    """The local wall-clock reading at instant ``ms``, as ms since the naive epoch."""
    local = datetime.fromtimestamp(ms / 1000, tz=timezone.utc).astimezone(tz)
    off = local.utcoffset()
    return ms + (int(off.total_seconds() * 1000) if off else 0)


def _boundary(wall: int, tz: tzinfo) -> int:
    """The first instant whose wall clock reads ``wall`` or later.

    A reading that occurs twice (a fall-back) starts at its first occurrence; a
    reading that never occurs (a spring-forward gap) starts at the jump, where
    the clock first reads past it.
    """
    naive = _EPOCH + timedelta(milliseconds=wall)
    first = int(naive.replace(tzinfo=tz, fold=0).timestamp() * 1000)
    if _wall_ms(first, tz) == wall:
        return first
    # In a gap: fold=1 lands before the jump and fold=0 after it; the clock is
    # monotonic in between, so bisect for the first instant reading >= wall.
    lo = int(naive.replace(tzinfo=tz, fold=1).timestamp() * 1000)
    lo, hi = min(lo, first), max(lo, first)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _wall_ms(mid, tz) >= wall:
            hi = mid
        else:
            lo = mid
    return hi


def _index(ms: int, period_ms: int, tz: tzinfo) -> int:
    """The largest wall-clock multiple of the period whose boundary is <= ``ms``.

    After a fall-back the clock reads less than it did, so the floor of the
    current reading can be too small: step up while the next boundary has passed.
    """
    wall = _wall_ms(ms, tz)
    k = wall - wall % period_ms
    while _boundary(k + period_ms, tz) <= ms:
        k += period_ms
    return k


def floor_to_period(ms: int, period_ms: int, tz: tzinfo = timezone.utc) -> int:
    """The start of the period holding ``ms``.

    Periods are aligned to the local wall clock of ``tz``: a boundary is the
    first instant the clock reads a multiple of the period since 1970-01-01
    00:00 local (so 1h, 2h, 3h and 12h periods start at local 00:00 and every
    multiple after, whole days at local midnight). A DST change makes the one
    period it falls in shorter or longer, never a gap or an overlap: in New
    York the 2h period 00:00-02:00 on the spring-forward day is 00:00 EST to
    03:00 EDT, and on the fall-back day 00:00 EDT to 02:00 EST (3 real hours,
    as the directory names ``{HH}`` written in local time also say). A wall
    time a jump skips over starts its period at the jump, so a skipped period
    is empty and simply does not exist.
    """
    if period_ms <= 0:
        raise InvalidInputError("the period must be positive", period="the period")
    return _boundary(_index(ms, period_ms, tz), tz)


def shift_periods(boundary_ms: int, n: int, period_ms: int, tz: tzinfo = timezone.utc) -> int:
    """``boundary`` moved by ``n`` periods, skipping periods a DST jump made empty."""
    if period_ms <= 0:
        raise InvalidInputError("the period must be positive", period="the period")
    b = boundary_ms
    for _ in range(abs(n)):
        k = _index(b, period_ms, tz)
        step = period_ms if n > 0 else -period_ms
        nb = _boundary(k, tz)
        while (nb <= b) if n > 0 else (nb >= b):
            k += step
            nb = _boundary(k, tz)
        b = nb
    return b
