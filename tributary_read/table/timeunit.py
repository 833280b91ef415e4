"""Integer event times: their unit, and the check that the unit is the right one.

An integer says nothing of its unit, and a wrong guess does not fail: epoch
seconds read as milliseconds are a time in January 1970, and every record lands
in a partition nobody reads, with exit 0. So every front end (``trib ingest``,
the Spark writer on driver and executors, the ETL) turns integers into epoch ms
here, and nowhere else, and checks the result is plausible: not before
2000-01-01 and not more than a day ahead of the clock.

Without a declared unit an integer is taken as milliseconds, and only when the
check passes. That default cannot misplace a time: the plausible ranges of the
four units are 1,000 times apart and never overlap, so a value plausible as ms
is implausible in every other unit, and a value of another unit fails as ms
(and the message names the unit that fits). With the check off
(``allow_any_time``) nothing tells the units apart, so the unit must be declared.

Timestamps carry their unit and are converted as they are, unchecked.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from tributary_read.choice import Choice
from tributary_read.errors import ImplausibleTimeError, InvalidInputError, TimeUnitError

#: 2000-01-01T00:00:00Z: an integer time before it is refused unless ``allow_any_time``.
EARLIEST_MS = 946_684_800_000
#: How far ahead of the clock an integer time may be (clock skew, a zone mistaken for UTC).
AHEAD_MS = 86_400_000
_INT64 = (-(1 << 63), (1 << 63) - 1)


class TimeUnit(Choice):
    """The unit of an integer event time (epoch seconds, milli-, micro-, nanoseconds)."""

    S = "s"
    MS = "ms"
    US = "us"
    NS = "ns"

    @property
    def words(self) -> str:
        return {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}[self.value]

    def to_ms(self, v: int | float) -> int:
        """``v`` of this unit as epoch ms, floored (exact for integers)."""
        mul, div = _SCALE[self.value]
        if isinstance(v, int):
            return v * mul // div
        return math.floor(v * mul / div)


#: unit -> (multiply, divide) that makes epoch ms
_SCALE = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}

#: How a front end names the two settings in a message: (the unit, ``{}`` for its value; the check off).
#: ``trib ingest`` passes its flags the same way.
PYTHON = ('time_unit="{}"', "allow_any_time=True")
JOB_FILE = ('time_unit = "{}"', "allow_any_time = true")


@dataclass(frozen=True)
class IntegerTimes:
    """How integer event times become epoch ms: their unit (None: undeclared, taken as ms) and the check.

    ``spelling`` is how the caller's front end names the settings (:data:`JOB_FILE`,
    ``trib ingest``'s flags), so a refusal tells the user what to write where they write it.
    """

    unit: TimeUnit | None = None
    allow_any: bool = False
    spelling: tuple[str, str] = field(default=PYTHON, compare=False)

    def __post_init__(self):
        if self.unit is not None and not isinstance(self.unit, TimeUnit):
            object.__setattr__(self, "unit", TimeUnit.parse(self.unit, "time unit"))
        if self.allow_any and self.unit is None:
            raise InvalidInputError(
                f"{self.spelling[1]} needs the unit of integer times ({self.spelling[0].format('s')} or ms, us, "
                "ns): with the plausibility check off nothing tells seconds from milliseconds")

    @property
    def effective(self) -> TimeUnit:
        return self.unit or TimeUnit.MS

    def latest_ms(self) -> int:
        """The latest plausible time now (one clock reading; executors get the driver's)."""
        return int(time.time() * 1000) + AHEAD_MS

    def to_ms(self, v: int | float, subject: str, latest_ms: int | None = None) -> int:
        """``v`` as epoch ms; an implausible time raises (see :meth:`refusal`)."""
        # An int of ms (declared or not) is its own value: the per-record path of every ingest.
        ms = v if type(v) is int and (self.unit is None or self.unit is TimeUnit.MS) else self.effective.to_ms(v)
        if not self.allow_any:
            latest = self.latest_ms() if latest_ms is None else latest_ms
            if not EARLIEST_MS <= ms <= latest:
                raise self.refusal(v, subject, latest)
        return ms

    def refusal(self, v: int | float, subject: str, latest_ms: int) -> InvalidInputError:
        """The error for implausible ``v``: TimeUnitError when the unit was not declared and
        another unit fits (the job is wrong, not the record), else ImplausibleTimeError (a bad record).
        """
        unit = self.effective
        ms = unit.to_ms(v)
        where = ("before 2000-01-01" if ms < EARLIEST_MS
                 else f"more than a day ahead of the clock ({_iso(latest_ms - AHEAD_MS)})")
        head = f"{subject}: {_num(v)} as {unit} is {_iso(ms)}, {where}"
        fit = next((u for u in TimeUnit if u is not unit and EARLIEST_MS <= u.to_ms(v) <= latest_ms), None)
        set_unit, allow = self.spelling
        if fit is not None:
            hint = f"; is it {fit.words}? set {set_unit.format(fit)}"
            if self.unit is None:
                return TimeUnitError(head + hint)
            return ImplausibleTimeError(head + hint)
        if self.unit is None:
            return ImplausibleTimeError(f"{head}; if such times are real, set the unit and {allow} "
                                        f"(e.g. {set_unit.format(unit)})")
        return ImplausibleTimeError(f"{head}; if such times are real, set {allow}")

    # -- Arrow columns (the Spark writer's tasks, TableWriter.write_table) --------------------
    def to_ms_array(self, column, latest_ms: int | None = None):
        """``(ms, implausible)``: the column as epoch ms (int64) and a mask of the integer times
        the check refuses (None when nothing is checked: timestamps, ``allow_any``)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        ms = epoch_ms(column, self.effective)
        if pa.types.is_timestamp(column.type) or self.allow_any:
            return ms, None
        latest = self.latest_ms() if latest_ms is None else latest_ms
        bad = pc.or_(pc.less(ms, EARLIEST_MS), pc.greater(ms, latest))
        return ms, pc.fill_null(bad, False)


def epoch_ms(column, unit: TimeUnit | str = TimeUnit.MS):
    """A time column (Arrow) as epoch milliseconds (int64), floored, unchecked.

    Integers are taken in ``unit``. A timestamp is converted from its own unit: a
    plain cast to int64 would give Spark's microseconds and route every row to a
    partition 1,000 times later. An integer of seconds too large for int64 ms
    becomes int64's extreme, which no partition holds.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    t = column.type
    if pa.types.is_timestamp(t):
        unit = t.unit
    else:
        unit = TimeUnit.parse(unit, "time unit").value
    v = column.cast(pa.int64())
    mul, div = _SCALE[unit]
    if mul != 1:
        lo, hi = _INT64[0] // mul, _INT64[1] // mul
        big, small = pc.greater(v, hi), pc.less(v, lo)
        safe = pc.if_else(pc.or_(big, small), 0, v)
        out = pc.multiply(safe, mul)
        out = pc.if_else(big, _INT64[1], out)
        return pc.if_else(small, _INT64[0], out)
    if div == 1:
        return v
    if len(v) and (pc.min(v).as_py() or 0) < 0:  # integer division truncates toward zero: floor it
        v = pc.if_else(pc.less(v, 0), pc.subtract(v, div - 1), v)
    return pc.divide(v, div)


def _iso(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):
        return "beyond year 9999" if ms > 0 else "before year 1"


def _num(v) -> str:
    return str(v) if isinstance(v, int) or not float(v).is_integer() else str(int(v))
