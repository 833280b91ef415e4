"""Hidden partitioning of the Iceberg mirror on the event-time column: ``hour(ts)`` or ``day(ts)``.

This module owns the ``partition-by`` text (parsed here and nowhere else) and the one value each file gets
under it. It imports no pyiceberg: the mirror setting (:mod:`tributary_read.iceberg.auto`) reads it too.

**The spec.** The mirror keeps an identity partition on each layout key (``dt``) and adds the transform
after them: ``identity(dt), hour(ts)``. Iceberg fills a column a data file does not hold from an identity
partition field only; trib's files do not hold ``dt``, so a spec of ``hour(ts)`` alone would give every
row a NULL ``dt``. The transform field is what lets a reader prune by ``ts`` without knowing ``dt``.

**Its value.** An Iceberg data file belongs to exactly one partition tuple, so each file needs one
``hour(ts)``. It comes from trib's manifest, as ``dt`` does: the period the file's partition values
stand for (the layout, in its zone: :meth:`Layout.parse`, the owner trib's writer places records by)
must lie inside one UTC hour (``day``: one UTC day; Iceberg's transforms are UTC), and that hour is the
value. Then it is checked against the file itself: the min and max of ``ts`` in its Parquet footer must
lie inside that hour, with no NULL ``ts``. A file that fails (a writer that partitions by arrival time,
a zone mistaken for UTC, a NULL time) would be skipped by an Iceberg reader's filter on ``ts`` that
should return its rows, so it is refused, never registered: identity partitioning mirrors such a table.

Every refusal is an :class:`InvalidInputError` (exit 3), as the mirror's other refusals: the trib table is
sound (a record outside its ``dt`` hour is a writer's choice, not corruption; VerificationError is for
bytes that differ from the log), and what must change is the argument, the transform asked for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Mapping

from tributary_read.errors import InvalidInputError, InvalidLayoutError, ManifestCorruptError
from tributary_read.table.layout import Layout, PartitionMapper, parse_timezone

#: transform -> its period in ms (Iceberg's hour and day are UTC: hours and days since the epoch).
PERIODS_MS = {"hour": 3_600_000, "day": 86_400_000}
_TEXT = re.compile(r"\s*(hour|day)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*")
#: How a message names the setting (a front end puts its flag in its place: TributaryError.params).
WORDS = "the Iceberg partition transform"
#: The remedy every refusal of a file or a layout names.
IDENTITY = ("mirror into a new Iceberg table without the Iceberg partition transform (identity partitioning "
            "on the layout's keys mirrors any table)")


@dataclass(frozen=True)
class PartitionBy:
    """``hour(ts)`` / ``day(ts)``: Iceberg's transform of a timestamp column."""

    transform: str
    column: str

    def __str__(self) -> str:
        return f"{self.transform}({self.column})"

    @property
    def field_name(self) -> str:
        """The partition field's name, as Iceberg names it by default (``ts_hour``, ``ts_day``)."""
        return f"{self.column}_{self.transform}"

    @property
    def period_ms(self) -> int:
        return PERIODS_MS[self.transform]


def parse(text: str | None) -> PartitionBy | None:
    """``"hour(ts)"`` -> PartitionBy; None or empty: no transform (identity partitioning only)."""
    if text is None or not text.strip():
        return None
    m = _TEXT.fullmatch(text)
    if not m:
        raise InvalidInputError(f"{WORDS} {text!r} is not hour(COLUMN) or day(COLUMN)", partition_by=WORDS)
    return PartitionBy(m.group(1), m.group(2))


def check_layout(by: PartitionBy | None, layout: Layout) -> None:
    """Refuse, before anything is created, a transform the layout's partitions cannot give each file: a
    period coarser than the transform (a daily layout has no hour per file), or a partition template that
    omits a token of the layout (a value that stands for several directories' periods)."""
    if by is None:
        return
    if by.column in layout.keys:
        raise InvalidInputError(f"{WORDS} {by} names the partition key {by.column!r}: name the event-time "
                                "column of the files", partition_by=WORDS)
    try:
        layout.check_one_to_one()
    except InvalidLayoutError:
        raise InvalidInputError(f"the partition template {layout.partition!r} omits a token of layout "
                                f"{layout.directory!r}, so a partition value is not one period: {by} cannot be "
                                f"read from it; {IDENTITY}", partition_by=WORDS) from None
    if layout.period > timedelta(milliseconds=by.period_ms):
        raise InvalidInputError(f"layout {layout.directory!r} makes one partition per {_words(layout.period)}, "
                                f"coarser than {by}: a file would hold several values of {by} and an Iceberg "
                                f"file has one; {IDENTITY}", partition_by=WORDS)
    if by.transform == "hour":
        offsets = _offsets(layout)
        reason = ("changes its UTC offset (daylight saving): the hour it repeats each autumn spans two UTC hours"
                  if len(offsets) > 1 else "is not a whole number of hours from UTC: each of its hours spans two "
                  "UTC hours") if len(offsets) > 1 or any(o % 3600 for o in offsets) else None
        if reason:  # refused now, not a year from now when the first such hour stops the mirror
            raise InvalidInputError(f"layout {layout.directory!r} in zone {layout.timezone}: the zone {reason}, "
                                    f"and an Iceberg file has one value of {by} (Iceberg's transforms are UTC); "
                                    f"use day({by.column}) or a layout in UTC, or {IDENTITY}", partition_by=WORDS)


def _offsets(layout: Layout) -> frozenset[int]:
    """The UTC offsets (s) the layout's zone has from a year ago to five years ahead, sampled daily."""
    return _zone_offsets(layout.timezone)


@lru_cache(maxsize=32)
def _zone_offsets(zone: str) -> frozenset[int]:
    """:func:`_offsets` of one zone, computed once a process: every mirrored commit checks its layout again."""
    tz = parse_timezone(zone)
    now = datetime.now(timezone.utc)
    out = set()
    for d in range(-366, 5 * 366):
        off = (now + timedelta(days=d)).astimezone(tz).utcoffset()
        out.add(int(off.total_seconds()) if off is not None else 0)
    return frozenset(out)


def _words(period: timedelta) -> str:
    return {timedelta(days=1): "day", timedelta(hours=1): "hour", timedelta(minutes=1): "minute"}.get(period,
                                                                                                        str(period))


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass
class Buckets:
    """Each file's value of ``by`` from its manifest partition values, checked against its footer."""

    by: PartitionBy
    layout: Layout
    _mapper: PartitionMapper = field(init=False)
    _cache: dict[tuple[str, ...], int] = field(init=False, default_factory=dict)

    def __post_init__(self):
        check_layout(self.by, self.layout)
        self._mapper = PartitionMapper(self.layout)

    def value(self, values: Mapping[str, str], where: str) -> int:
        """The transform's value (hours or days since the epoch, UTC) of a partition, from its span."""
        key = tuple(values.get(k, "") for k in self.layout.keys)
        got = self._cache.get(key)
        if got is not None:
            return got
        directory = self._mapper.directory({k: values[k] for k in self.layout.keys if k in values})
        if directory is None:
            raise ManifestCorruptError(f"{where}: partition {dict(values)} is not a partition of layout "
                                       f"{self.layout.directory!r}")
        span = self.layout.parse(directory)
        p = self.by.period_ms
        first, last = span.start_ms // p, (span.end_ms - 1) // p
        if first != last:
            raise InvalidInputError(
                f"partition {'/'.join(f'{k}={v}' for k, v in values.items())} spans {_utc(span.start_ms)} to "
                f"{_utc(span.end_ms)} in zone {self.layout.timezone}, more than one UTC {self.by.transform} "
                f"(Iceberg's transforms are UTC): its files have no one value of {self.by}; {IDENTITY}",
                partition_by=WORDS)
        if len(self._cache) >= 100_000:
            self._cache.clear()
        self._cache[key] = first
        return first

    def check(self, value: int, times: tuple[int, int, int] | None, uri: str) -> None:
        """Refuse a file whose event times are not all inside the bucket ``value``: ``times`` is (min ms,
        max ms, NULL count) from its footer, None when the footer has no statistics for the column."""
        if times is None:
            raise InvalidInputError(f"{uri}: its Parquet footer has no min/max statistics of {self.by.column!r}, "
                                    f"so it cannot be shown to lie inside one {self.by.transform}; {IDENTITY}",
                                    partition_by=WORDS)
        lo, hi, nulls = times
        p = self.by.period_ms
        if nulls:
            raise InvalidInputError(f"{uri}: {nulls} rows have a NULL {self.by.column!r}, which no {self.by} "
                                    f"partition holds; {IDENTITY}", partition_by=WORDS)
        if lo // p != value or hi // p != value:
            raise InvalidInputError(
                f"{uri}: its {self.by.column!r} runs from {_utc(lo)} to {_utc(hi)}, outside the "
                f"{self.by.transform} its partition stands for ({_utc(value * p)} to {_utc((value + 1) * p)}): "
                f"an Iceberg reader filtering on {self.by.column!r} would skip its rows; {IDENTITY}",
                partition_by=WORDS)


def footer_times(footer, column: str, uri: str) -> tuple[int, int, int] | None:
    """(min, max, NULL count) of a timestamp ``column`` in a Parquet footer, as epoch ms (floored), over all
    row groups; None when a row group with values has no min/max. A column that is not a timestamp is
    refused: epoch numbers are not a timestamp Iceberg's transforms take."""
    import pyarrow as pa

    from tributary_read.table.timeunit import epoch_ms

    arrow = footer.schema.to_arrow_schema()
    if column not in arrow.names:
        raise InvalidInputError(f"{uri} has no column {column!r} for {WORDS}", partition_by=WORDS)
    check_type(column, arrow.field(column).type)
    index = next(i for i in range(len(footer.schema)) if footer.schema.column(i).path == column)
    lo = hi = None
    nulls = 0
    for g in range(footer.num_row_groups):
        rg = footer.row_group(g)
        stats = rg.column(index).statistics
        if rg.num_rows == 0:
            continue
        if stats is None or not stats.has_min_max:
            if stats is not None and stats.has_null_count and stats.null_count == rg.num_rows:
                nulls += rg.num_rows
                continue
            return None
        nulls += stats.null_count if stats.has_null_count else 0
        lo = stats.min_raw if lo is None else min(lo, stats.min_raw)
        hi = stats.max_raw if hi is None else max(hi, stats.max_raw)
    if lo is None or hi is None:
        return (0, 0, nulls) if nulls else None
    ms = epoch_ms(pa.array([lo, hi], pa.int64()).cast(arrow.field(column).type)).to_pylist()
    return ms[0], ms[1], nulls


def check_type(column: str, arrow_type) -> None:
    """Refuse a column that is not a Parquet timestamp (an epoch-number column, a date, a string)."""
    import pyarrow as pa

    if not pa.types.is_timestamp(arrow_type) or arrow_type.unit not in ("ms", "us"):
        raise InvalidInputError(
            f"column {column!r} is {arrow_type}, not a timestamp of milli- or microseconds: Iceberg's hour() "
            f"and day() take a timestamp column (epoch numbers are not one); {IDENTITY}", partition_by=WORDS)
