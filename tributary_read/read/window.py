"""Modification-time windows: closed intervals [start, end] in epoch milliseconds.

Both bounds are inclusive, as in seed 002's ``dip.mapreduce.input.fileinputformat
.starttime/endtime``. Spark's ``modifiedAfter``/``modifiedBefore`` are both
strict, so two back-to-back Spark windows drop a file whose mtime sits exactly
on the shared boundary; here a schedule-derived window ends 1 ms before the
next one starts, so every millisecond belongs to exactly one window.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from typing import cast

from tributary_read.choice import Choice
from tributary_read.errors import InvalidInputError
from tributary_read.timespec import MAX_INSTANT_MS, MIN_INSTANT_MS, parse_instant
from tributary_read.timespec import iso as iso_instant

#: The seed's defaults when a bound is omitted (Java's Long.MIN_VALUE / MAX_VALUE).
MIN_MS = -(2**63)
MAX_MS = 2**63 - 1
DAY_MS = 86_400_000
_EPOCH = datetime(1970, 1, 1)

__all__ = ["DAY_MS", "MAX_INSTANT_MS", "MAX_MS", "MIN_MS", "Schedule", "TimeWindow", "WindowForm",
           "floor_to_period", "iso", "parse_instant", "shift_periods"]


def iso(ms: int, tz: tzinfo = timezone.utc) -> str | None:
    """ISO-8601 with milliseconds, or None for an open bound."""
    if ms in (MIN_MS, MAX_MS):
        return None
    return iso_instant(ms, tz)


def _instant(text: str | int, tz: tzinfo, param: str, what: str) -> int:
    """:func:`parse_instant` for the argument ``param``, its errors marking it (``TributaryError.params``)."""
    try:
        return parse_instant(text, tz, what)
    except InvalidInputError as e:
        raise InvalidInputError(str(e), **{param: what}) from None


class WindowForm(Choice):
    """Which window a scheduled run reads; docs/reading.md has worked examples of both."""

    #: the last whole period ending by T - lag (seed 002's "previous hour"): windows tile on the calendar,
    #: a DST day included, whatever minute a run starts. The default everywhere.
    ALIGNED = "aligned"
    #: [T - lag - window, T - lag): ending at the lag. ``trib etl run`` read this before the forms had
    #: names; a job file keeps it by saying ``window_form = "sliding"``. Its default length is the real
    #: length of the calendar period before T's (23 or 25 hours on a DST day), so consecutive runs tile.
    SLIDING = "sliding"


@dataclass(frozen=True)
class Schedule:
    """The one owner of "which time window does the run scheduled at T read".

    ``trib files``, ``trib sql``, ``trib etl run`` and the Spark helper build
    one and call :meth:`window`; the jar's ``trib_window_start_ms`` /
    ``trib_window_end_ms`` mirror it (a parity test keeps them equal).

    ``lag`` means one thing in both forms and in ``trib report lateness``: how
    long after its end a period (or a sliding window) waits before a run reads
    it. ``trib etl run`` first floors its schedule time to the job's period
    (:meth:`run_time`: one run, one transaction, one window per period, however
    late cron starts it) and passes that time here.
    """

    period_ms: int
    lag_ms: int = 0
    form: WindowForm = WindowForm.ALIGNED
    #: the sliding form's fixed length; None (or the period itself): the length of the calendar period
    #: before T's, so that consecutive runs tile on a DST day too. The aligned form reads exactly one period.
    window_ms: int | None = None
    tz: tzinfo = timezone.utc

    def __post_init__(self):
        if self.period_ms <= 0:
            raise InvalidInputError("the period must be positive", period="the period")
        if self.lag_ms < 0:
            raise InvalidInputError("the lag must not be negative", lag="the lag")
        object.__setattr__(self, "form", WindowForm.parse(self.form, "window form"))
        if self.window_ms == self.period_ms:
            object.__setattr__(self, "window_ms", None)  # "one period" means the calendar's, as in the aligned form
        if self.form is WindowForm.ALIGNED:
            if self.window_ms is not None and self.window_ms != self.period_ms:
                raise InvalidInputError(
                    "the aligned form reads exactly one period: drop the window length, or choose the sliding "
                    "form ([T - lag - window, T - lag))", window="the window length", form="the sliding form")
        elif self.window_ms is not None and self.window_ms <= 0:
            raise InvalidInputError("the window length must be positive", window="the window length")

    @property
    def length_ms(self) -> int:
        """The sliding form's fixed length (the nominal period when it follows the calendar)."""
        return self.window_ms if self.window_ms is not None else self.period_ms

    def _sliding_length(self, t_ms: int) -> int:
        """A fixed ``window``, else the real length of the period before the one holding ``t_ms``.

        A fixed 24 h after a 25 h day leaves an hour unread (and after a 23 h day reads one twice);
        the previous period's own length makes run N's start run N-1's end, in every zone.
        """
        if self.window_ms is not None:
            return self.window_ms
        b = floor_to_period(t_ms, self.period_ms, self.tz)
        return b - shift_periods(b, -1, self.period_ms, self.tz)

    def run_time(self, t_ms: int) -> int:
        """The start of the period holding ``t_ms``: an ETL run's identity (one run per period)."""
        return self._guard(t_ms, lambda: floor_to_period(t_ms, self.period_ms, self.tz))

    def interval(self, end_ms: int) -> tuple[int, int]:
        """The data interval a run at boundary ``end_ms`` covers: the one calendar period before it."""
        return shift_periods(end_ms, -1, self.period_ms, self.tz), end_ms

    def check_interval(self, start_ms: int, end_ms: int) -> None:
        """Refuse a scheduler's data interval ``[start, end)`` that is not exactly one period ending at a boundary.

        A run is named by its interval's end, floored to the period; an interval of another length, or one
        that ends between boundaries, would have a run read a window other than the interval the scheduler
        believes it covers (hours skipped, or read by two runs). An empty interval is what a trigger
        timetable gives (Airflow 3's default for a cron string): the run could not tell which hour it is for.
        """
        span = f"[{iso_instant(start_ms)}, {iso_instant(end_ms)})"
        if end_ms <= start_ms:
            raise InvalidInputError(
                f"the data interval {span} is empty: a trigger timetable (what a bare cron string such as "
                "@hourly gives in Airflow 3: CronTriggerTimetable) has no data interval; schedule with "
                "CronDataIntervalTimetable, whose interval is the period the run covers")
        aligned = self.run_time(end_ms)
        if aligned != end_ms or self.interval(end_ms)[0] != start_ms:
            from tributary_read.timespec import format_duration_ms

            raise InvalidInputError(
                f"the data interval {span} is not one period ({format_duration_ms(self.period_ms)}, in "
                f"{getattr(self.tz, 'key', None) or self.tz}) ending at a period boundary: a run covers exactly "
                "the period before its schedule time; schedule at the job's period (or change the job's period)")

    def window(self, t_ms: int) -> TimeWindow:
        """The closed window a run at ``t_ms`` reads (possibly empty: see :meth:`_run_window`)."""
        t = t_ms
        if self.form is WindowForm.ALIGNED:
            if self.lag_ms and self.run_time(t) == t:
                return self._guard(t_ms, lambda: self._run_window(t))
            return self._guard(t_ms, lambda: TimeWindow.previous_period(t, self.period_ms, self.lag_ms, self.tz))
        end = t - self.lag_ms
        return self._guard(t_ms, lambda: TimeWindow(end - self._sliding_length(t), end - 1))

    def _run_window(self, t: int) -> TimeWindow:
        """The aligned window of a run time ``t`` (a period boundary, as ``trib etl run`` passes) with a lag:
        the whole periods that reached their lag since the previous run time, [floor(prev - lag), floor(t - lag)).

        Where every period has one length this is the last whole period ending by ``t - lag``. Where they
        differ (a 65-minute "5m" period in a fall-back hour, Lord Howe's 30-minute jump) "the last whole
        period" skips a period between two runs, or reads one twice; this reads zero, one or two periods,
        and consecutive runs always tile.
        """
        prev = shift_periods(t, -1, self.period_ms, self.tz)
        end = floor_to_period(t - self.lag_ms, self.period_ms, self.tz)
        return TimeWindow(floor_to_period(prev - self.lag_ms, self.period_ms, self.tz), end - 1)

    def _guard(self, t_ms: int, fn):
        """Windows stay within years 1..9999 (the jar's PeriodClock.scheduleWindow says the same)."""
        try:
            value = fn()
        except (OverflowError, ValueError, OSError):  # InvalidInputError is a ValueError: keep its message
            value = None
        if value is None or (isinstance(value, TimeWindow) and (value.start_ms < MIN_INSTANT_MS
                                                                or value.end_ms > MAX_INSTANT_MS)):
            raise InvalidInputError(f"the window of the run at {t_ms} ms lies outside years 1..9999",
                                    schedule_time="the run")
        return value


@dataclass(frozen=True)
class TimeWindow:
    """A closed interval of epoch ms; a file is in it iff start <= mtime <= end.

    ``end == start - 1`` is the empty window: a scheduled run whose periods all went to its
    neighbours (:meth:`Schedule._run_window`). A user's bounds are never read as one (:meth:`parse`).
    """

    start_ms: int = MIN_MS
    end_ms: int = MAX_MS

    def __post_init__(self):
        if self.end_ms < self.start_ms - 1:
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
        if hi < lo:
            raise InvalidInputError(f"window end {iso(hi) or hi} is before its start {iso(lo) or lo}")
        return cls(lo, hi)

    @classmethod
    def for_schedule(cls, start: str | int | None = None, end: str | int | None = None, *,
                     schedule_time: str | int | None = None, period_ms: int | None = None,
                     lag_ms: int | None = None, form: str | WindowForm | None = None,
                     window_ms: int | None = None, tz: tzinfo = timezone.utc) -> TimeWindow | None:
        """The window a run reads: explicit bounds, or the :class:`Schedule` window of its schedule time.

        Either ``start``/``end`` (each optional) or ``schedule_time`` with
        ``period_ms`` (and optionally ``lag_ms``, ``form``, ``window_ms``),
        never both. None when nothing is given: no window, every file.
        """
        if schedule_time is None:
            if period_ms is not None or lag_ms is not None:
                raise InvalidInputError("a period and a lag go with a schedule time", period="a period",
                                        lag="a lag", schedule_time="a schedule time")
            if form is not None or window_ms is not None:
                raise InvalidInputError("a window form and a window length go with a schedule time",
                                        form="a window form", window="a window length",
                                        schedule_time="a schedule time")
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
        # cast: Schedule parses a string form itself, after checking the period and lag
        return Schedule(period_ms, lag_ms or 0, cast(WindowForm, WindowForm.ALIGNED if form is None else form),
                        window_ms, tz).window(when)

    @classmethod
    def previous_period(cls, schedule_ms: int, period_ms: int, lag_ms: int = 0,
                        tz: tzinfo = timezone.utc) -> TimeWindow:
        """The last whole period ending by ``schedule - lag`` (the aligned form, given a run time).

        A run of 01:00 with a 1h period reads [00:00:00.000, 00:59:59.999];
        the run of 02:00 starts at 01:00:00.000, so consecutive runs tile time.
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
