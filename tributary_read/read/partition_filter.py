"""``--partitions`` filters: conditions on partition values, like Hive's ``WHERE dt >= '...'``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Mapping

from tributary_read.errors import InvalidInputError
from tributary_read.table.layout import Layout, PartitionDir

_COND = re.compile(
    r"""^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(>=|<=|!=|==|=|>|<)\s*(?:'([^']*)'|"([^"]*)"|([^\s'"<>=!][^\s'"]*))\s*$"""
)
_SPLIT = re.compile(r"\s*,\s*|\s+(?:and|AND)\s+")
_OPS: dict[str, Callable[[str, str], bool]] = {
    ">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
    "<": lambda a, b: a < b, "=": lambda a, b: a == b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
}


@dataclass(frozen=True)
class Condition:
    key: str
    op: str
    value: str

    def __str__(self) -> str:
        return f"{self.key}{self.op}{self.value}"


@dataclass(frozen=True)
class PartitionFilter:
    """Conditions on partition values, ANDed, compared as strings like Hive's ``dt >= '...'``.

    The filter decides membership; the time range derived from it only prunes
    which directories get listed, so a value the derivation cannot read simply
    prunes nothing.
    """

    conditions: tuple[Condition, ...]

    @classmethod
    def parse(cls, text: str, layout: Layout | None) -> PartitionFilter:
        if layout is None:
            raise InvalidInputError("a partition filter needs a layout (give the layout and partition spec)",
                                    partitions="a partition filter", layout="the layout and partition spec")
        conds = []
        for part in _SPLIT.split(text.strip()):
            if not part:
                continue
            m = _COND.match(part)
            if not m:
                raise InvalidInputError(
                    f"bad partition condition {part!r} (e.g. 'dt>=2020061701,dt<=2020062401')")
            key, op = m.group(1), m.group(2)
            value = next(g for g in m.groups()[2:] if g is not None)
            if key not in layout.keys:
                raise InvalidInputError(
                    f"unknown partition key {key!r}; this layout's keys are {', '.join(layout.keys)}")
            conds.append(Condition(key, op, value))
        if not conds:
            raise InvalidInputError("empty partition filter", partitions="partition filter")
        return cls(tuple(conds))

    def matches(self, values: Mapping[str, str]) -> bool:
        return all(_OPS[c.op](values.get(c.key, ""), c.value) for c in self.conditions)

    def time_range(self, layout: Layout) -> tuple[int | None, int | None]:
        """[lo, hi) in ms of partition starts the conditions allow (None = unbounded)."""
        lo: int | None = None
        hi: int | None = None
        for c in self.conditions:
            span = layout.value_span(c.key, c.value)
            if span is None or c.op == "!=":
                continue
            start, end = span
            if c.op in (">=", "=", "=="):
                lo = start if lo is None else max(lo, start)
            if c.op == ">":
                lo = end if lo is None else max(lo, end)
            if c.op in ("<=", "=", "=="):
                hi = end if hi is None else min(hi, end)
            if c.op == "<":
                hi = start if hi is None else min(hi, start)
        return lo, hi

    def __str__(self) -> str:
        return ",".join(str(c) for c in self.conditions)


#: More candidate directories than this and a walk is cheaper than probing each.
MAX_CANDIDATES = 20_000


def candidate_dirs(layout: Layout, lo: int | None, hi: int | None) -> list[PartitionDir] | None:
    """Every partition directory whose period starts in [lo, hi), or None if too many."""
    if lo is None or hi is None:
        return None
    if hi <= lo:
        return []
    period_ms = int(layout.period.total_seconds() * 1000)
    if (hi - lo) // period_ms > MAX_CANDIDATES:
        return None
    out: list[PartitionDir] = []
    p = layout.for_time(lo)
    while p.start_ms < hi:
        if p.start_ms >= lo:
            out.append(p)
        p = layout.for_time(p.end_ms)
    return out
