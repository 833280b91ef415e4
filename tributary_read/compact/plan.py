"""Which files a compaction merges: closed partitions, one mtime period at a time, up to a target size.

Only trib-committed data files are merged (a ``both`` table's files from other
tools are left where they are: their readers find them by listing, and a
rewrite would hand those readers the same records under a new name). A
partition is closed when its newest file is older than ``min_age``: a writer
still adding to it would make the compaction outdated at once, though never
wrong (its new files are simply not part of the rewrite).

Files are merged only with files modified in the same period of the table's
compaction period (the layout's, unless set): an aligned mtime window of that
period (any lag: aligned windows are whole periods) then takes a compacted
file whole or not at all, and a compacted file
never shows up in a window after the one its records were first read in
(tributary_read/read/visibility.py judges it by the span its name carries).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from tributary_read.errors import VerificationError
from tributary_read.read.partition_filter import PartitionFilter
from tributary_read.read.tracking import is_written
from tributary_read.read.window import Schedule, iso
from tributary_read.table.config import CompactSettings, Table
from tributary_read.table.manifest import KIND_DATA, FileEntry, SourceFile
from tributary_read.table.state import TableState
from tributary_read.write.rewrite import group as size_groups


@dataclass(frozen=True)
class Group:
    """Files of one partition and one mtime period, to become one compacted file."""

    directory: str
    inputs: tuple[FileEntry, ...]
    #: The inputs' originals, each with the version that added it and its mtime now.
    sources: tuple[SourceFile, ...]
    span: tuple[int, int]

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.inputs)

    @property
    def records(self) -> int:
        return sum(f.records for f in self.inputs)

    def to_json(self) -> dict:
        return {"directory": self.directory, "files": len(self.inputs), "bytes": self.bytes,
                "records": self.records, "mtime_span": [iso(self.span[0]), iso(self.span[1])],
                "inputs": [f.path for f in self.inputs]}


@dataclass(frozen=True)
class CompactPlan:
    """What one run merges, planned on the state at ``version``; ``left``: partitions left alone, and why."""

    version: int
    groups: tuple[Group, ...]
    partitions: int
    left: Mapping[str, str]
    settings: CompactSettings
    #: (partitions, files) left because a file was modified within ``min_age`` (tributary_read.read.min_age)
    held: tuple[int, int] = (0, 0)

    @property
    def files(self) -> int:
        return sum(len(g.inputs) for g in self.groups)

    def to_json(self) -> dict[str, Any]:
        return {"base_version": self.version, "partitions": self.partitions, "groups": len(self.groups),
                "files_in": self.files, "files_out": len(self.groups),
                "bytes": sum(g.bytes for g in self.groups), "records": sum(g.records for g in self.groups),
                "settings": self.settings.to_json(), "left": dict(sorted(self.left.items())),
                "held_for_min_age": {"partitions": self.held[0], "files": self.held[1]},
                "plan": [g.to_json() for g in self.groups]}


def plan_compaction(table: Table, *, partitions: PartitionFilter | None = None,
                    settings: CompactSettings | None = None, now_ms: int) -> CompactPlan:
    """The groups to merge in the table's latest state (nothing is written)."""
    cfg = settings or table.config.compact
    state = table.log.state()
    by_dir: dict[str, list[FileEntry]] = {}
    for f in state.files.values():
        if f.kind != KIND_DATA or not is_written(f.path):
            continue
        if partitions is not None and not partitions.matches(f.partition):
            continue
        by_dir.setdefault(posixpath.dirname(f.path), []).append(f)
    mtimes = _mtimes(table, [f for fs in by_dir.values() for f in fs])
    versions = _versions(table, state, [f for fs in by_dir.values() for f in fs if not f.sources])
    # The periods an aligned mtime window of this length reads whole, whatever its lag (read/window.py).
    periods = Schedule(cfg.period_ms or int(table.layout.period.total_seconds() * 1000), tz=table.layout.tz)
    groups: list[Group] = []
    left: dict[str, str] = {}
    held = [0, 0]
    for d in sorted(by_dir):
        files = by_dir[d]
        newest = max(mtimes[f.path] for f in files)
        if newest > now_ms - cfg.min_age_ms:
            left[d] = f"a file was modified {iso(newest)}, within the minimum age ({cfg.min_age_ms // 1000} s)"
            held[0] += 1
            held[1] += len(files)
            continue
        spans = {f.path: _span(f, mtimes) for f in files}
        buckets: dict[int, list[FileEntry]] = {}
        for f in files:
            lo, hi = spans[f.path]
            start = periods.run_time(lo)
            if periods.run_time(hi) != start:
                continue  # a compacted file of an older period setting: left as it is
            buckets.setdefault(start, []).append(f)
        made = 0
        for start in sorted(buckets):
            ordered = sorted(buckets[start], key=lambda f: (_first_version(f, versions), f.path))
            for g in size_groups(ordered, target_size=cfg.target_size, min_files=cfg.min_files):
                sources = tuple(s for f in g for s in _sources(f, versions, mtimes))
                span = (min(spans[f.path][0] for f in g), max(spans[f.path][1] for f in g))
                groups.append(Group(d, tuple(g), sources, span))
                made += 1
        if not made:
            left[d] = f"fewer than {cfg.min_files} small files in any one period"
    return CompactPlan(state.version, tuple(groups), len(by_dir), left, cfg, (held[0], held[1]))


def _mtimes(table: Table, files: Sequence[FileEntry]) -> dict[str, int]:
    """Each live file's mtime now (under its final name, else its staged one: a crash before the rename)."""
    st = table.storage
    out: dict[str, int] = {}
    final = st.stat_many([f.path for f in files])
    for f, info in zip(files, final):
        if info is None and f.staged:
            info = st.info(f.staged)
        if info is None:
            raise VerificationError(f"committed file {st.uri}/{f.path} is missing; see `trib verify {st.uri}`: "
                                    "nothing was compacted")
        out[f.path] = info.mtime_ms
    return out


def _span(f: FileEntry, mtimes: Mapping[str, int]) -> tuple[int, int]:
    """The mtime span of a file's records: its sources' for a compacted file (its own mtime may be newer)."""
    if f.sources and all(s.mtime_ms is not None for s in f.sources):
        return min(s.mtime_ms for s in f.sources), max(s.mtime_ms for s in f.sources)  # type: ignore[type-var]
    return mtimes[f.path], mtimes[f.path]


def _first_version(f: FileEntry, versions: Mapping[str, int]) -> int:
    return min(s.version for s in f.sources) if f.sources else versions[f.path]


def _sources(f: FileEntry, versions: Mapping[str, int], mtimes: Mapping[str, int]) -> tuple[SourceFile, ...]:
    """The originals a file holds: itself, or (compacted before) the ones it names."""
    if f.sources:
        return f.sources
    return (SourceFile(f.path, versions[f.path], f.records, mtimes[f.path]),)


def _versions(table: Table, state: TableState, files: Sequence[FileEntry]) -> dict[str, int]:
    """The version that added each file. A state read from a checkpoint of an older trib may not say;
    the retained commits then do, and a file older than all of them gets the version before the
    oldest: no version range a reader can still ask for holds it (tributary_read/read/changes.py)."""
    out = {f.path: state.added[f.path] for f in files if f.path in state.added}
    missing = {f.path for f in files} - set(out)
    if missing:
        log = table.log
        oldest = max(log.oldest_version(), 1)
        for c in log.commits(oldest - 1, state.version):
            for e in c.new_data:
                if e.path in missing:
                    out[e.path] = c.version
        for p in missing - set(out):
            out[p] = max(oldest - 1, 1)
    return out
