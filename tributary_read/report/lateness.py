"""How late a table's data arrives, and what a naive hourly job with a given lag would miss.

A file's **arrival** is its commit time when a trib commit lists it (the
writer's clock, at the moment the file became part of the table), else its
modification time. Its **delay** is arrival minus the end of its partition's
period. A job that runs "the previous hour's partition" at ``end + lag`` reads
the files that have arrived by then: a file is missed when ``delay > lag``
(a file arriving exactly at ``end + lag`` counts as caught, the kindest
reading of a race the job may as well lose).

Why these figures are a lower bound for foreign files: an mtime can lie.
``cp -p`` and ``rsync -t`` keep the source's old mtime, and a file renamed
from a hidden name keeps the mtime of its last write: both arrive late while
looking on time. Commit times do not lie that way, and only an incremental
consumer (which remembers what it delivered) catches every late file whatever
its mtime says: the report says so rather than promise a lag that catches 100%.
"""

from __future__ import annotations

import bisect
import math
import posixpath
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from tributary_read.errors import InvalidInputError
from tributary_read.read.fileset import FileSet
from tributary_read.read.resolve import Source
from tributary_read.read.selection import ReadRequest, select
from tributary_read.table.layout import Layout

#: Lags the report always evaluates, besides the caller's: a scheduler's usual choices.
DEFAULT_LAGS_MS = (0, 5 * 60_000, 10 * 60_000, 30 * 60_000, 3_600_000, 6 * 3_600_000)
#: The shares of files a recommended lag must catch.
TARGETS = (0.99, 0.999)
CONSUMER_NOTE = ("only an incremental consumer catches 100%: it delivers every file it has not delivered "
                 "yet, however late it lands and whatever its mtime says (trib etl run with a consumer input)")


@dataclass(frozen=True)
class Arrival:
    """One file: where it belongs in time and when it arrived."""

    path: str
    partition: str  # the Hive partition spec, dt=2020062401
    partition_start_ms: int
    partition_end_ms: int  # exclusive
    arrived_ms: int
    source: str  # "commit" or "mtime"
    bytes: int
    records: int | None = None

    @property
    def delay_ms(self) -> int:
        return self.arrived_ms - self.partition_end_ms

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "partition": self.partition, "partition_end_ms": self.partition_end_ms,
                "arrived_ms": self.arrived_ms, "delay_ms": self.delay_ms, "source": self.source,
                "bytes": self.bytes, "records": self.records}


@dataclass(frozen=True)
class Missed:
    """What a naive job running ``lag`` after each partition's end would not have read."""

    lag_ms: int
    files: int
    bytes: int
    records: int | None  # None: some missed file's record count is unknown (a foreign file)
    share_files: float
    share_bytes: float

    def to_json(self) -> dict[str, Any]:
        return {"lag_ms": self.lag_ms, "lag": format_duration(self.lag_ms), "files": self.files,
                "bytes": self.bytes, "records": self.records, "share_files": self.share_files,
                "share_bytes": self.share_bytes}


@dataclass(frozen=True)
class LatenessReport:
    table: str
    arrivals: tuple[Arrival, ...]
    lags: tuple[Missed, ...]
    recommended: Mapping[str, int | None]  # "p99" / "p99.9" -> lag in ms
    since_ms: int | None = None
    notes: tuple[str, ...] = field(default=())
    unplaced: int = 0  # files outside any partition directory of the layout

    @property
    def files(self) -> int:
        return len(self.arrivals)

    def partitions(self) -> list[dict[str, Any]]:
        by: dict[str, list[Arrival]] = {}
        for a in self.arrivals:
            by.setdefault(a.partition, []).append(a)
        out = []
        for spec in sorted(by, key=lambda s: by[s][0].partition_start_ms):
            arr = by[spec]
            delays = sorted(a.delay_ms for a in arr)
            out.append({"partition": spec, "start_ms": arr[0].partition_start_ms, "end_ms": arr[0].partition_end_ms,
                        "files": len(arr), "bytes": sum(a.bytes for a in arr),
                        "late_files": sum(1 for d in delays if d > 0),
                        "delay_ms": {"min": delays[0], "p50": _quantile(delays, 0.5), "p90": _quantile(delays, 0.9),
                                     "p99": _quantile(delays, 0.99), "max": delays[-1]}})
        return out

    def to_json(self, *, files: bool = False) -> dict[str, Any]:
        delays = sorted(a.delay_ms for a in self.arrivals)
        out: dict[str, Any] = {
            "table": self.table,
            "since_ms": self.since_ms,
            "files": self.files,
            "bytes": sum(a.bytes for a in self.arrivals),
            "records": _sum_known(a.records for a in self.arrivals),
            "arrival_from": {"commit": sum(1 for a in self.arrivals if a.source == "commit"),
                             "mtime": sum(1 for a in self.arrivals if a.source == "mtime")},
            "late_files": sum(1 for d in delays if d > 0),
            "delay_ms": ({"min": delays[0], "p50": _quantile(delays, 0.5), "p90": _quantile(delays, 0.9),
                          "p99": _quantile(delays, 0.99), "max": delays[-1]} if delays else None),
            "missed": [m.to_json() for m in self.lags],
            "recommended_lag": {k: ({"lag_ms": v, "lag": format_duration(v)} if v is not None else None)
                                for k, v in self.recommended.items()},
            "consumer": CONSUMER_NOTE,
            "partitions": self.partitions(),
            "unplaced_files": self.unplaced,
            "notes": list(self.notes),
        }
        if files:
            out["arrivals"] = [a.to_json() for a in self.arrivals]
        return out


def _sum_known(values) -> int | None:
    total = 0
    for v in values:
        if v is None:
            return None
        total += v
    return total


def _quantile(sorted_values: Sequence[int], q: float) -> int:
    """The smallest value with at least ``q`` of the values at or below it (no interpolation)."""
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def format_duration(ms: int) -> str:
    """``0s``, ``45s``, ``10m``, ``2h5m``, ``-3m``: compact, exact to the second."""
    sign, ms = ("-", -ms) if ms < 0 else ("", ms)
    s = round(ms / 1000)
    if s == 0:
        return f"{sign}{ms}ms" if ms else "0s"
    parts = []
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            parts.append(f"{s // size}{unit}")
            s %= size
    return sign + "".join(parts)


def missed(arrivals: Sequence[Arrival], lag_ms: int) -> Missed:
    """What a job reading each partition at ``end + lag_ms`` would not have read (``delay > lag``)."""
    gone = [a for a in arrivals if a.delay_ms > lag_ms]
    total_b = sum(a.bytes for a in arrivals)
    return Missed(lag_ms, len(gone), sum(a.bytes for a in gone), _sum_known(a.records for a in gone),
                  len(gone) / len(arrivals) if arrivals else 0.0,
                  sum(a.bytes for a in gone) / total_b if total_b else 0.0)


def lag_for(arrivals: Sequence[Arrival], share: float) -> int | None:
    """The smallest lag (ms, at least 0) that catches ``share`` of the files; None without files."""
    if not arrivals:
        return None
    delays = sorted(a.delay_ms for a in arrivals)
    return max(0, _quantile(delays, share))


def missed_curve(arrivals: Sequence[Arrival], points: int = 200) -> list[tuple[int, float]]:
    """(lag ms, share of files missed) from lag 0 to the largest delay: the chart's line."""
    delays = sorted(a.delay_ms for a in arrivals)
    if not delays:
        return []
    top = max(delays[-1], 60_000)
    n = len(delays)
    # The steps at delays that occur, but at most ~points of them (quantiles): a million files
    # must not become a million-point line; the table below the chart gives exact figures.
    steps = {delays[min(n - 1, (n * i) // points)] for i in range(points + 1)} | {delays[-1]}
    lags = sorted({0, *(round(top * i / points) for i in range(points + 1)), *(d for d in steps if d >= 0)})
    return [(lag, (n - bisect.bisect_right(delays, lag)) / n) for lag in lags]


def arrivals_of(fs: FileSet, layout: Layout, commit_times: Mapping[str, int],
                compacted: Mapping[str, Sequence[tuple[str, int | None, int]]] | None = None,
                ) -> tuple[list[Arrival], int]:
    """Each file of ``fs`` with its partition and arrival; and how many lie outside any partition.

    A compacted file arrived as its originals did (``compacted``: path -> (original, commit time,
    records) each): one arrival per original, never the compaction's own time, which would show
    every record of a closed partition as hours late.
    """
    out, unplaced = [], 0
    for f in fs.files:
        part = layout.try_parse(posixpath.dirname(f.path))
        if part is None:
            unplaced += 1
            continue
        if compacted and f.path in compacted:
            sources = compacted[f.path]
            total = sum(r for _, _, r in sources) or 1
            for original, at, records in sources:
                if at is None:
                    unplaced += 1
                else:
                    out.append(Arrival(original, part.spec, part.start_ms, part.end_ms, at, "commit",
                                       f.size * records // total, records))
            continue
        committed = commit_times.get(f.path)
        if committed is not None:
            arrived, source = committed, "commit"
        elif f.mtime_ms is not None:
            arrived, source = f.mtime_ms, "mtime"
        else:  # a committed file whose commit the log no longer holds: nothing tells its arrival
            unplaced += 1
            continue
        out.append(Arrival(f.path, part.spec, part.start_ms, part.end_ms, arrived, source, f.size, f.records))
    return out, unplaced


def commit_times(source: Source) -> tuple[dict[str, int], list[str], dict[str, list[tuple[str, int | None, int]]]]:
    """path -> the time of the commit that added it, for every commit the log still holds; notes; and
    for each compacted file, its originals with the time each was committed (None: no longer in the log)."""
    if source.table is None:
        return {}, [], {}
    log = source.table.log
    oldest = log.oldest_version()
    times: dict[str, int] = {}
    stamps: dict[int, int] = {}
    compacted: dict[str, list[tuple[str, int | None, int]]] = {}
    notes = []
    if oldest > 1:
        notes.append(f"log retention removed commits before version {oldest}: files committed earlier "
                     "have no known arrival and are left out")
    if oldest:
        for c in log.commits(oldest - 1):
            stamps[c.version] = c.timestamp_ms
            for e in c.new_data:  # a replace commit's files arrived as their originals did
                times.setdefault(e.path, c.timestamp_ms)
            for e in c.files:
                if e.sources:
                    compacted[e.path] = [(s.path, stamps.get(s.version), s.records) for s in e.sources]
    return times, notes, compacted


def lateness(root: str | Source, *, lags_ms: Sequence[int] = (), since_ms: int | None = None,
             layout: Layout | None = None, options: Mapping[str, str] | None = None) -> LatenessReport:
    """The lateness report of a trib table or a plain directory (give its ``layout``).

    ``since_ms``: only partitions that end after it. ``lags_ms``: the naive jobs
    to evaluate, besides :data:`DEFAULT_LAGS_MS`.
    """
    src = Source.of(root, options, layout)
    if src.layout is None:
        raise InvalidInputError(f"{src.uri} is not a trib table: give its layout", layout="its layout")
    if any(lag < 0 for lag in lags_ms):
        raise InvalidInputError("a lag must not be negative")
    fs = select(src, ReadRequest(allow_untracked=True, all_files=True)).fileset  # a report delivers nothing: untracked is a note
    times, notes, compacted = commit_times(src)
    found, unplaced = arrivals_of(fs, src.layout, times, compacted)
    if since_ms is not None:
        found = [a for a in found if a.partition_end_ms > since_ms]
    found.sort(key=lambda a: (a.partition_start_ms, a.arrived_ms, a.path))
    if fs.untracked is not None:
        notes.append(fs.untracked.message())
    if any(a.source == "mtime" for a in found):
        notes.append("arrival of files other tools wrote is their mtime, which can lie: cp -p, rsync -t and a "
                     "rename from a hidden name keep an old mtime, so such late files look on time here")
    if unplaced:
        notes.append(f"{unplaced} files lie outside any partition directory of the layout (or have no known "
                     "arrival) and are not counted")
    lags = sorted(set(DEFAULT_LAGS_MS) | set(lags_ms))
    return LatenessReport(src.uri, tuple(found), tuple(missed(found, lag) for lag in lags),
                          {f"p{t * 100:g}": lag_for(found, t) for t in TARGETS}, since_ms, tuple(notes), unplaced)
