"""Resolve the exact set of files a run should read.

This module answers "which files" and nothing else, returning a typed
:class:`FileSet` that the CLI prints and engines consume. Three ways to ask:

* ``manifest``: the files of commits in a version range or a commit-time window;
* ``mtime``: the files whose modification time lies in a closed window [start, end]
  (seed 002's semantics), optionally pruned to a partition range;
* ``auto``: manifest for a trib table (it has a manifest log), mtime for a plain directory.

Durable consumers (:mod:`tributary_read.consumer`) build on the same pieces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import InvalidInputError, NoSuchTableError, StorageError
from .layout import Layout
from .listing import PartitionFilter, Progress, Skipped, is_visible, scan
from .manifest import KIND_DATA, Commit
from .storage import Storage, open_storage
from .table import Table
from .window import TimeWindow

MODES = ("auto", "manifest", "mtime")
#: Commit timestamps come from writers' clocks; a commit-time window reads this
#: far past its bounds so commits from writers this far out of step are not missed.
MAX_CLOCK_SKEW_MS = 5 * 60 * 1000
_TOKENS = re.compile(r"\{(yyyy|MM|dd|HH|mm)\}")


@dataclass(frozen=True)
class ResolvedFile:
    path: str
    size: int
    partition: Mapping[str, str] = field(hash=False)
    mtime_ms: int | None = None
    records: int | None = None
    version: int | None = None
    valid_length: int | None = None

    @property
    def readable_bytes(self) -> int:
        return self.size if self.valid_length is None else self.valid_length

    def to_json(self) -> dict:
        d: dict[str, Any] = {"path": self.path, "size": self.size, "mtime_ms": self.mtime_ms,
                             "partition": dict(self.partition)}
        for k in ("records", "version", "valid_length"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        return d

    @classmethod
    def from_json(cls, d: Mapping) -> ResolvedFile:
        return cls(d["path"], int(d["size"]), dict(d.get("partition") or {}), d.get("mtime_ms"),
                   d.get("records"), d.get("version"), d.get("valid_length"))


@dataclass(frozen=True)
class FileSet:
    """The resolved files plus how they were chosen (mode and window/plan)."""

    mode: str
    files: tuple[ResolvedFile, ...]
    plan: Mapping[str, Any] = field(default_factory=dict, hash=False)
    root: str = ""
    #: Files that look like data but are not returned, each with the reason.
    skipped: tuple[Skipped, ...] = ()
    stats: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def uris(self, storage) -> list[str]:
        return [storage.uri_for(f.path) for f in self.files]

    @property
    def bytes(self) -> int:
        return sum(f.readable_bytes for f in self.files)

    def to_json(self) -> dict:
        d = {"mode": self.mode, "root": self.root, **dict(self.plan),
             "count": len(self.files), "bytes": self.bytes,
             "files": [f.to_json() for f in self.files],
             "skipped": [s.to_json() for s in self.skipped]}
        if self.stats:
            d["stats"] = dict(self.stats)
        return d


@dataclass(frozen=True)
class Source:
    """What a reader reads: a root, its layout if known, and its trib table if any.

    A plain directory (no ``_tributary/table.json``) is read with a layout given
    by the caller; a read-only directory works as long as nothing is written.
    """

    storage: Storage
    layout: Layout | None = None
    table: Table | None = None

    @property
    def uri(self) -> str:
        return self.storage.uri

    def has_log(self) -> bool:
        """A trib table always has a log, even before its first commit.

        An empty log then means "nothing committed yet", not "read the
        directory": uncommitted files written under final names are visible
        there and must not be returned. Data written into a trib table's
        directory by other tools is read with ``mode="mtime"``.
        """
        return self.table is not None

    @classmethod
    def open(cls, root: str, options: Mapping[str, str] | None = None, layout: Layout | None = None) -> Source:
        try:
            table = Table.load(root, options)
        except NoSuchTableError:
            table = None
        if table is not None:
            if layout is not None and layout != table.layout:
                raise InvalidInputError(
                    f"{table.uri} is a trib table with layout {table.layout.directory!r} -> "
                    f"{table.layout.partition!r} ({table.layout.timezone}); drop --layout/--partition/--timezone"
                )
            return cls(table.storage, table.layout, table)
        storage = open_storage(root, options)
        if storage.scheme == "file":
            try:
                info = storage.fs.get_file_info(storage.root)
            except OSError as e:
                raise StorageError(f"cannot stat {storage.uri}: {e}") from None
            if info.type.name != "Directory":
                raise NoSuchTableError(f"no directory at {storage.uri}")
        return cls(storage, layout, None)

    @classmethod
    def of(cls, x: Source | Table | str, options: Mapping[str, str] | None = None,
           layout: Layout | None = None) -> Source:
        if isinstance(x, Source):
            return x
        if isinstance(x, Table):
            return cls(x.storage, x.layout, x)
        return cls.open(x, options, layout)


def plain_layout(directory: str, partition: str | None = None, timezone: str = "UTC") -> Layout:
    """A layout for a plain directory; the partition spec defaults to ``dt=`` + every token."""
    if partition is None:
        toks = list(dict.fromkeys(_TOKENS.findall(directory)))
        partition = "dt=" + "".join("{%s}" % t for t in toks)
    return Layout(directory, partition, timezone)


def choose_mode(source: Source, mode: str) -> str:
    if mode not in MODES:
        raise InvalidInputError(f"unknown mode {mode!r}; choose {', '.join(MODES)}")
    if mode == "auto":
        return "manifest" if source.has_log() else "mtime"
    if mode == "manifest" and source.table is None:
        raise InvalidInputError(f"--mode manifest needs a trib table; {source.uri} has no manifest log")
    return mode


def resolve(
    source: Source | Table | str,
    *,
    mode: str = "auto",
    since_version: int = 0,
    until_version: int | None = None,
    window: TimeWindow | None = None,
    partitions: PartitionFilter | str | None = None,
    options: Mapping[str, str] | None = None,
    layout: Layout | None = None,
    parallel: int | None = None,
    progress: Progress | None = None,
) -> FileSet:
    """The exact file set for one run (see the module docstring for the modes)."""
    src = Source.of(source, options, layout)
    pf = PartitionFilter.parse(partitions, src.layout) if isinstance(partitions, str) else partitions
    mode = choose_mode(src, mode)
    if mode == "manifest":
        if window is not None:
            if since_version or until_version is not None:
                raise InvalidInputError("give a version range or a time window, not both")
            return manifest_window(src.table, window, pf)
        return manifest_files(src.table, since_version, until_version, pf)
    if since_version or until_version is not None:
        raise InvalidInputError("--since-version/--until-version need --mode manifest")
    return mtime_files(src, window, pf, parallel=parallel, progress=progress)


def _entry_files(commits_or_entries, pfilter: PartitionFilter | None) -> list[ResolvedFile]:
    out = []
    for e, v in commits_or_entries:
        if e.kind != KIND_DATA or not is_visible(e.path):
            continue
        if pfilter is not None and not pfilter.matches(e.partition):
            continue
        out.append(ResolvedFile(e.path, e.size, e.partition, records=e.records, version=v))
    out.sort(key=lambda f: f.path)
    return out


def manifest_files(table: Table, since_version: int = 0, until_version: int | None = None,
                   partitions: PartitionFilter | None = None) -> FileSet:
    """Files of commits with ``since_version < version <= until_version``.

    The full range reads one checkpoint plus its tail; a narrow range reads
    only its own commit files, which keeps "the newest hour" cheap on long logs.
    """
    if since_version < 0 or (until_version is not None and until_version < since_version):
        raise InvalidInputError("version range must satisfy 0 <= since <= until")
    log = table.log
    latest = log.latest_version()
    until = latest if until_version is None else min(until_version, latest)
    if since_version >= until:
        entries: list = []
    elif since_version == 0 and until == latest:
        state = log.state()
        until = state.version
        entries = [(e, None) for e in state.files.values()]
    else:
        entries = [(e, c.version) for c in log.commits(since_version, until) for e in c.files]
    plan = {"since_version": since_version, "until_version": until}
    if partitions is not None:
        plan["partitions"] = str(partitions)
    return FileSet("manifest", tuple(_entry_files(entries, partitions)), plan, table.uri)


def manifest_window(table: Table, window: TimeWindow, partitions: PartitionFilter | None = None) -> FileSet:
    """Files of commits whose commit time lies in ``window`` (both ends inclusive).

    Commit times rise with versions up to writers' clock skew, so a binary
    search finds the first version that can qualify and the scan stops once
    times pass the window by :data:`MAX_CLOCK_SKEW_MS`: O(log n) + the window's
    own commits, however long the log.
    """
    log = table.log
    latest = log.latest_version()
    lo_ts = window.start_ms - MAX_CLOCK_SKEW_MS
    hi_ts = window.end_ms + MAX_CLOCK_SKEW_MS

    def commit(v: int) -> Commit:
        c = log.read_commit(v)
        if c is None:
            from .errors import ManifestCorruptError

            raise ManifestCorruptError(f"commit {v} is missing from {table.uri} (log has a gap)")
        return c

    lo, hi = 1, latest + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if commit(mid).timestamp_ms < lo_ts:
            lo = mid + 1
        else:
            hi = mid
    entries = []
    versions = []
    for c in log.commits(lo - 1, latest) if lo <= latest else ():
        if c.timestamp_ms > hi_ts:
            break
        if c.timestamp_ms in window:
            versions.append(c.version)
            entries.extend((e, c.version) for e in c.files)
    plan: dict[str, Any] = {"window": window.to_json(),
                            "versions": [versions[0], versions[-1]] if versions else None,
                            "commits": len(versions)}
    if partitions is not None:
        plan["partitions"] = str(partitions)
    return FileSet("manifest", tuple(_entry_files(entries, partitions)), plan, table.uri)


def mtime_files(source: Source | Table | str, window: TimeWindow | None = None,
                partitions: PartitionFilter | None = None, *, parallel: int | None = None,
                progress: Progress | None = None) -> FileSet:
    """Visible files whose mtime (ms) lies in ``window``, both ends inclusive.

    An mtime is when the bytes were last written, not when the file became
    visible: a rename keeps it, ``rsync -t`` and S3 multipart uploads backdate
    it. Such a file can appear after the window its mtime belongs to was read;
    consumers (:mod:`tributary_read.consumer`) deliver those too.
    """
    src = Source.of(source)
    listing = scan(src.storage, src.layout, window=window, partitions=partitions,
                   parallel=parallel, progress=progress)
    parts = listing.partitions
    files = [
        ResolvedFile(f.path, f.size, parts[f.directory].values if f.directory else {},
                     mtime_ms=f.mtime_ms, valid_length=f.valid_length)
        for f in listing.files
    ]
    files.sort(key=lambda f: f.path)
    plan = {"window": window.to_json() if window is not None else None,
            "partitions": str(partitions) if partitions is not None else None}
    skipped = tuple(sorted(listing.skipped, key=lambda s: s.path))
    return FileSet("mtime", tuple(files), plan, src.uri, skipped, listing.stats())
