"""Listing a table directory: partition pruning, sidecars, parallelism.

What is visible is :mod:`~tributary_read.read.visibility`'s rule; ``--partitions``
filters are :mod:`~tributary_read.read.partition_filter`.

One :func:`scan` serves every listing-based reader (mtime windows and listing
consumers). It picks the cheapest strategy that still sees every file the
request can match:

* ``candidates``: the directories of a partition range (``dt>=..,dt<=..``);
* ``tree``: each top-level directory with one recursive listing,
  concurrently (stat calls release the GIL, so even local stat-bound listings
  overlap);
* ``walk``: level by level down to the partition directories, which are then
  listed concurrently; it prunes by partition filters and, for consumers on
  stores with real directories, skips leaves whose mtime has not changed.

Each strategy ends in recursive listings of many directories. A
:class:`DirectoryLister` can run those elsewhere (Spark executors:
:mod:`tributary_read.spark.listing`); their entries come back here and go
through the same collector, so the answer is the one a local scan gives.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Iterable, Mapping, NamedTuple, Protocol

from tributary_read.errors import CompactedAwayError, InvalidLayoutError
from tributary_read.read.partition_filter import candidate_dirs
from tributary_read.table.layout import Layout, PartitionDir
from tributary_read.io.storage import COMPACTED_MARK, ENTRY_DIR, ENTRY_FILE, LINK_REASON, Entry, Storage, Unlisted
from tributary_read.read.fanout import Progress, fan_out as _map, gc_paused
from tributary_read.read.partition_filter import PartitionFilter
from tributary_read.read.visibility import (
    span_in_window,
    VALID_LENGTH_PREFIX,
    VALID_LENGTH_SUFFIX,
    is_hidden_name,
    is_visible,
    parse_valid_length,
)
from tributary_read.read.window import TimeWindow

REMOTE_PARALLELISM = 16
#: A tree listing for a :class:`DirectoryLister` descends at most this deep in a table without a layout.
MAX_SPREAD_DEPTH = 4
#: Up to this many window matches, their sidecars are probed by name (one stat each).
SIDECAR_PROBE_LIMIT = 2_000
#: One thread for local disks. The local walk (io/localwalk.py) runs Python per entry
#: and drops the GIL only for each fstatat, so threads hand the GIL back and forth
#: once per file: measured on 2 idle cores, 100k files listed in 0.54 s with one
#: thread, 0.70 s with two and 1.1 s with four (pyarrow's C++ listing, used before,
#: did gain from threads). A network filesystem mounted as a path still gains:
#: pass ``parallel`` (``--parallel``).
LOCAL_PARALLELISM = 1

#: Takes one listed partition directory with files (visible or left out) at a time (a streaming scan): its
#: path, its partition, its mtime (None without real directories), its visible files and what its listing
#: left out.
LeafSink = Callable[[str, "PartitionDir", "int | None", "list[ListedFile]", "list[Skipped]"], None]
#: ``Storage.list_infos`` results: the entries and what was left out.
Listed = tuple[list[Entry], list[Unlisted]]


class DirectoryLister(Protocol):
    """Lists many directories recursively, somewhere other than this thread pool.

    ``list_many`` returns ``storage.list_infos(rel, True, mtime_ns)`` of each
    ``rel``, in order (entries may be any :class:`Entry`; a list may carry
    ``seen`` and ``links`` as the store's own does). ``spread``: a tree
    listing first descends, flat, until it holds this many directories to
    hand out (a ``{yyyy}/{MM}/...`` table has one top-level directory a year).
    """

    spread: int

    def list_many(self, storage: Storage, rels: list[str],
                  mtime_ns: tuple[int, int] | None) -> Iterable[Listed]: ...


class ListedFile(NamedTuple):
    """A visible file. A NamedTuple rather than a dataclass: a listing makes 10^5 of these."""

    path: str
    size: int
    mtime_ms: int
    directory: str  # the partition directory ("" without a layout)
    valid_length: int | None = None


@dataclass(frozen=True)
class Skipped:
    """A file that could be data but is not returned, and why (never guessed)."""

    path: str
    reason: str
    size: int = 0
    mtime_ms: int = 0

    def to_json(self) -> dict:
        return {"path": self.path, "reason": self.reason, "size": self.size, "mtime_ms": self.mtime_ms}


# -- the listing --------------------------------------------------------------
@dataclass
class Listing:
    """What a scan saw.

    ``leaves`` holds every partition directory seen (listed or unchanged) with
    its mtime where the store has real directories, else None.
    """

    files: list[ListedFile] = field(default_factory=list)
    partitions: dict[str, PartitionDir] = field(default_factory=dict)
    leaves: dict[str, int | None] = field(default_factory=dict)
    unchanged: set[str] = field(default_factory=set)
    skipped: list[Skipped] = field(default_factory=list)
    started_ms: int = 0
    listed_dirs: int = 0
    listed_entries: int = 0
    seconds: float = 0.0
    strategy: str = ""
    #: Under a partition filter: directories that fit the layout but not the filter, and one that does not
    #: fit the layout (dropped, not reported): whether "0 files" means a wrong layout (tracking.refuse_unmatched).
    filtered_out: int = 0
    unfit: str = ""

    def stats(self) -> dict:
        return {"strategy": self.strategy, "listed_dirs": self.listed_dirs,
                "unchanged_dirs": len(self.unchanged), "listed_entries": self.listed_entries,
                "seconds": round(self.seconds, 4)}


_PLAIN = object()  # a visible directory of a table without a layout


class _Collector:
    """Turns raw pyarrow FileInfos into a Listing; the per-file loop is the hot path."""

    def __init__(self, storage: Storage, layout: Layout | None, window: TimeWindow | None,
                 pfilter: PartitionFilter | None, listing: Listing, spans: bool = False):
        self.storage = storage
        self.window = window
        self.spans = spans and window is not None  # compacted files: judged by their names' spans
        self.layout = layout
        self.pfilter = pfilter
        self.listing = listing
        self.cut = len(storage.root.rstrip("/")) + 1
        self.windowed = window is not None
        self.lo_ns, self.hi_ns = (-(2**63), 2**63 - 1) if window is None else _ns_bounds(window)
        self.matched: list[Entry] = []
        self.batches: list[list[Entry]] = []  # kept to find sidecars when many files match
        self.sidecars: dict[str, str] = {}  # target path -> sidecar path
        self._dirs: dict[str, PartitionDir | Skipped | object | None] = {}  # object: _PLAIN
        self.real_dirs = storage.capabilities.real_directories
        self.link_paths: set[str] | None = set()  # linked files the listings named (None: one did not say)
        self.flushed_skips = 0  # listing.skipped already handed to a sink

    def feed(self, infos: list[Entry]) -> None:
        if self.windowed:
            self._feed_window(infos)
            return
        cut = self.cut
        FILE, DIR = ENTRY_FILE, ENTRY_DIR
        for i in infos:
            t = i.type
            if t == FILE:
                path = i.path
                if path.endswith(VALID_LENGTH_SUFFIX):
                    self._sidecar(path[cut:])
                else:
                    self._file(path[cut:], i.size or 0, (i.mtime_ns or 0) // 1_000_000)
            elif t == DIR:
                self._leaf(i)
        self.listing.listed_entries += len(infos)

    def _feed_window(self, infos: list[Entry]) -> None:
        """The hot loop of an mtime window: one attribute read per entry.

        Types, names and sidecars are looked at afterwards, for matches only
        (:meth:`finish`); an mtime window has no use for directory mtimes.
        """
        lo, hi = self.lo_ns, self.hi_ns
        matched = self.matched
        self.batches.append(infos)
        if self.spans:  # a compacted file's own mtime may lie anywhere: its name's span decides (finish)
            mark = COMPACTED_MARK
            for i in infos:
                m = i.mtime_ns
                if (m is not None and lo <= m <= hi) or mark in i.path:
                    matched.append(i)
        else:
            for i in infos:
                m = i.mtime_ns
                if m is not None and lo <= m <= hi:
                    matched.append(i)
        self.listing.listed_entries += getattr(infos, "seen", len(infos))

    def _leaf(self, i: Entry) -> None:
        if self.layout is None:
            return
        rel = i.path[self.cut :]
        if rel.count("/") + 1 == self.layout.depth:
            part = self._dir(rel)
            if isinstance(part, PartitionDir):
                self.listing.leaves[rel] = _ms(i) if self.real_dirs else None

    def _sidecar(self, rel: str) -> None:
        d, _, name = rel.rpartition("/")
        target = name[len(VALID_LENGTH_PREFIX) : -len(VALID_LENGTH_SUFFIX)]
        if name.startswith(VALID_LENGTH_PREFIX) and target and (not d or is_visible(d)):
            self.sidecars[f"{d}/{target}" if d else target] = rel

    def _dir(self, d: str):
        """Classify a directory once: PartitionDir, Skipped, _PLAIN, or None (drop silently)."""
        try:
            return self._dirs[d]
        except KeyError:
            pass
        layout = self.layout
        result: PartitionDir | Skipped | object | None
        if d and not is_visible(d):
            result = None
        elif layout is None:
            result = _PLAIN
        else:
            depth = d.count("/") + 1 if d else 0
            if depth == layout.depth:
                try:
                    result = layout.parse(d)
                except InvalidLayoutError:
                    result = Skipped(d, f"directory does not match layout {layout.directory!r}")
            elif depth < layout.depth:
                result = Skipped(d, "not inside a partition directory")
            else:
                top = "/".join(d.split("/")[: layout.depth])
                outer = self._dir(top)
                result = (Skipped(d, f"nested inside partition directory {top}")
                          if isinstance(outer, PartitionDir) else outer)
            if isinstance(result, PartitionDir):
                if self.pfilter is not None and not self.pfilter.matches(result.values):
                    result = None
                    self.listing.filtered_out += 1
                else:
                    self.listing.partitions[d] = result
            elif isinstance(result, Skipped) and self.pfilter is not None:
                result = None  # an unparsable directory cannot be in the requested range
                self.listing.unfit = self.listing.unfit or d
        self._dirs[d] = result
        return result

    def _file(self, rel: str, size: int, mtime_ms: int, by_span: bool = False) -> None:
        """``by_span``: a window's match whose path holds the compacted mark, judged by :func:`span_in_window`
        once it is known to be a file a reader would take (a hidden one, or one left out, is never refused)."""
        d, _, name = rel.rpartition("/")
        if is_hidden_name(name):
            return
        part = self._dir(d)
        if part is None:
            return
        if by_span:
            try:
                if not span_in_window(rel, self.window, mtime_ms):  # type: ignore[arg-type]
                    return
            except CompactedAwayError:
                if not isinstance(part, Skipped):  # a skipped file is reported, not read: nothing to refuse
                    raise
        if part is _PLAIN:
            self.listing.files.append(ListedFile(rel, size, mtime_ms, ""))
        elif isinstance(part, Skipped):
            self.listing.skipped.append(Skipped(rel, part.reason, size, mtime_ms))
        else:
            self.listing.files.append(ListedFile(rel, size, mtime_ms, d))
            if d not in self.listing.leaves:
                self.listing.leaves[d] = None

    def finish(self) -> None:
        """Resolve window matches, then apply valid-length sidecars; a malformed one withholds its file."""
        if self.windowed:
            self._finish_window()
        linked: Collection[str]
        if not self.storage.capabilities.symbolic_links:
            linked = ()
        elif self.link_paths is not None:  # every listing named its linked files
            linked = self.link_paths
        else:
            linked = self.storage.links([f.path for f in self.listing.files])
        if linked:  # a linked file may point anywhere: reported, never returned
            self.listing.skipped.extend(Skipped(f.path, LINK_REASON, f.size, f.mtime_ms)
                                        for f in self.listing.files if f.path in linked)
            self.listing.files = [f for f in self.listing.files if f.path not in linked]
        if not self.sidecars:
            return
        kept: list[ListedFile] = []
        for f in self.listing.files:
            side = self.sidecars.get(f.path)
            if side is None:
                kept.append(f)
                continue
            try:
                vl = parse_valid_length(self.storage.read(side))
            except FileNotFoundError:
                kept.append(f)  # removed since the listing: no cap applies
                continue
            except ValueError as e:
                self.listing.skipped.append(
                    Skipped(f.path, f"malformed valid-length sidecar {side}: {e}", f.size, f.mtime_ms))
                continue
            kept.append(f._replace(valid_length=min(vl, f.size)))
        self.listing.files = kept

    def flush(self, sink: LeafSink) -> None:
        """Hand what the listings so far found to ``sink``, one partition directory at a time, and forget it.

        A directory's sidecars and links are named by the listing that holds
        it, so finishing one listing alone gives the answer finishing the whole
        scan would.
        """
        self.finish()
        files, self.listing.files, self.sidecars = self.listing.files, [], {}
        skipped = self.listing.skipped[self.flushed_skips:]
        self.flushed_skips = len(self.listing.skipped)
        by_dir: dict[str, list[ListedFile]] = {}
        for f in files:
            by_dir.setdefault(f.directory, []).append(f)
        parts, leaves = self.listing.partitions, self.listing.leaves
        for sk in skipped:  # a directory whose only files were left out (links, bad sidecars) is handed on too
            d = sk.path.rpartition("/")[0]
            if d in parts:
                by_dir.setdefault(d, [])
        for d in sorted(by_dir, key=lambda d: (parts[d].start_ms, d)):
            sink(d, parts[d], leaves.get(d), by_dir[d], skipped)

    def _finish_window(self) -> None:
        cut = self.cut
        FILE = ENTRY_FILE
        for i in self.matched:
            if i.type != FILE:
                continue
            path = i.path
            if path.endswith(VALID_LENGTH_SUFFIX):
                self._sidecar(path[cut:])
            else:
                self._file(path[cut:], i.size or 0, (i.mtime_ns or 0) // 1_000_000,
                           by_span=self.spans and COMPACTED_MARK in path)
        # A sidecar's own mtime may lie outside the window. Few matches: probe
        # their sidecar names; many: one pass over every listed name is cheaper.
        if len(self.listing.files) > SIDECAR_PROBE_LIMIT:
            for batch in self.batches:
                for i in batch:
                    if i.path.endswith(VALID_LENGTH_SUFFIX) and i.type == FILE:
                        self._sidecar(i.path[cut:])
        else:
            probes = []
            for f in self.listing.files:
                d, _, name = f.path.rpartition("/")
                probes.append(f"{d}/{VALID_LENGTH_PREFIX}{name}{VALID_LENGTH_SUFFIX}" if d
                              else f"{VALID_LENGTH_PREFIX}{name}{VALID_LENGTH_SUFFIX}")
            for rel, info in zip(probes, self.storage.stat_many(probes)):
                if info is not None and not info.is_dir:
                    self._sidecar(rel)
        self.batches.clear()


def _ns_bounds(w: TimeWindow) -> tuple[int, int]:
    # mtime_ns compared against whole-ms bounds: [start ms, end ms + 999_999 ns]
    # keeps "mtime in ms lies in [start, end]" exact after truncation to ms.
    return w.start_ms * 1_000_000, w.end_ms * 1_000_000 + 999_999


def _ms(info: Entry) -> int | None:
    return info.mtime_ns // 1_000_000 if info.mtime_ns is not None else None


def _hint(col: _Collector) -> tuple[int, int] | None:
    return (col.lo_ns, col.hi_ns) if col.windowed else None  # the store may drop files outside the window


def _get(storage: Storage, rel: str, recursive: bool, col: _Collector) -> list[Entry]:
    """One listing; links and undecodable names go to the report, never to the files."""
    infos, unlisted = storage.list_infos(rel, recursive, _hint(col))
    return _noted(col, infos, unlisted)


def _noted(col: _Collector, infos: list[Entry], unlisted: list[Unlisted]) -> list[Entry]:
    links = getattr(infos, "links", None)
    if links is None:
        col.link_paths = None  # this store does not say: ask it (Storage.links) at the end
    elif links and col.link_paths is not None:
        col.link_paths.update(p[col.cut :] for p in links)
    if unlisted:
        col.listing.skipped.extend(Skipped(u.path, u.reason) for u in unlisted)
    return infos


def scan(
    storage: Storage,
    layout: Layout | None,
    *,
    window: TimeWindow | None = None,
    partitions: PartitionFilter | None = None,
    known_dirs: Mapping[str, int] | None = None,
    parallel: int | None = None,
    progress: Progress | None = None,
    lister: DirectoryLister | None = None,
    sink: LeafSink | None = None,
    spans: bool = False,
) -> Listing:
    """List the visible files of a table directory.

    Args:
        window: only files whose mtime (ms) lies in it; skipped files are
            reported only when they would have matched.
        partitions: only partition directories the filter accepts.
        known_dirs: partition dir -> mtime from an earlier scan; on stores with
            real directories, a leaf whose mtime is unchanged is not listed and
            is reported in ``Listing.unchanged``. A file rewritten in place does
            not touch its directory's mtime, so callers that must see rewrites
            pass None (a full scan).
        parallel: concurrent directory listings (default: 16 remote, 1 local).
        progress: called with (directories done, total or None).
        lister: runs the recursive directory listings (default: ``parallel``
            threads here); see :class:`DirectoryLister`.
        sink: stream the answer (needs a layout): each partition directory's
            files go to ``sink`` as soon as a listing holds them, instead of
            into ``Listing.files``, so memory holds one listing's files, not the
            table's (see :func:`_walk` for the order). A directory without
            files is only in ``leaves``.
        spans: the table holds compacted files: a window takes one by the mtime span its
            name carries, never by its own mtime (:func:`span_in_window`).
    """
    listing = Listing(started_ms=int(time.time() * 1000))
    t0 = time.perf_counter()
    remote = storage.capabilities.remote
    parallel = parallel if parallel is not None else (REMOTE_PARALLELISM if remote else LOCAL_PARALLELISM)
    col = _Collector(storage, layout, window, partitions, listing, spans)
    skip = known_dirs is not None and storage.capabilities.real_directories and layout is not None
    cands = None
    if layout is not None and partitions is not None and not skip:
        cands = candidate_dirs(layout, *partitions.time_range(layout))
    done: list[Any] = [0, None]  # [directories listed, how many there are (None: not known yet)]

    def rec(rel: str) -> list[Entry]:
        return _get(storage, rel, True, col)

    def many(rels: list[str]):
        """Recursive listings of ``rels``, in order, as the collector takes them."""
        if lister is None:
            yield from _map(rec, rels, parallel, progress, done)
            return
        for infos, unlisted in lister.list_many(storage, rels, _hint(col)):
            yield _noted(col, infos, unlisted)
            done[0] += 1
            if progress:
                progress(done[0], done[1])

    with gc_paused():
        if sink is not None:
            if layout is None:
                raise ValueError("a streaming scan needs a layout")
            listing.strategy = "walk"
            _walk(storage, layout, col, known_dirs if skip else None, parallel, many, done, sink)
        elif cands is not None:
            listing.strategy = "candidates"
            paths = [p.path for p in cands]
            done[1] = len(paths)
            for infos in many(paths):
                col.feed(infos)
            listing.listed_dirs = len(paths)
        elif layout is not None and (skip or partitions is not None):
            listing.strategy = "walk"
            _walk(storage, layout, col, known_dirs if skip else None, parallel, many, done)
        else:
            listing.strategy = "tree"
            _tree(storage, col, parallel, many, done, lister.spread if lister is not None else 0)
        col.finish()
    listing.seconds = time.perf_counter() - t0
    return listing


def _tree(storage: Storage, col: _Collector, parallel: int, many, done: list, spread: int = 0) -> None:
    """The root, then each visible top-level directory recursively, concurrently.

    With ``spread``, levels below the top are first listed flat until that
    many directories can be handed out. Their entries are exactly those the
    recursive listings would have returned (hidden directories included:
    below the top, the collector is what leaves them out), so the answer
    does not change, only how the work is split.
    """
    listing = col.listing
    DIR = ENTRY_DIR
    top = _get(storage, "", False, col)
    subdirs = [i.path[col.cut :] for i in top if i.type == DIR and not is_hidden_name(i.base_name)]
    col.feed([i for i in top if i.type != DIR or not is_hidden_name(i.base_name)])
    listing.listed_dirs = 1
    depth, max_depth = 1, (col.layout.depth if col.layout is not None else MAX_SPREAD_DEPTH)

    def flat(rel: str) -> list[Entry]:
        return _get(storage, rel, False, col)

    while 0 < len(subdirs) < spread and depth < max_depth:
        below: list[str] = []
        for infos in _map(flat, subdirs, parallel, None, [0, None]):
            col.feed(infos)
            below.extend(i.path[col.cut :] for i in infos if i.type == DIR)
        listing.listed_dirs += len(subdirs)
        subdirs, depth = below, depth + 1
    done[1] = len(subdirs)
    for infos in many(subdirs):
        col.feed(infos)
    listing.listed_dirs += len(subdirs)


def _walk(storage: Storage, layout: Layout, col: _Collector, known: Mapping[str, int] | None,
          parallel: int, many, done: list, sink: LeafSink | None = None) -> None:
    """List intermediate levels, then only the leaves that need it, concurrently.

    With a ``sink``, each listing's files are handed to it as soon as it is
    fed. Where directories are real (local disks, HDFS) each leaf is listed on
    its own, oldest partition first; on an object store, where every listing
    is a request, each parent of leaves (a day of hours) is listed whole, and
    a one-level layout's leaves one by one, in name order
    (:class:`~tributary_read.read.backlog.ListingCap` takes any order).
    """
    listing = col.listing
    cut = col.cut
    DIR = ENTRY_DIR

    def flat(rel: str) -> list[Entry]:
        return _get(storage, rel, False, col)

    level = [""]
    by_parent = sink is not None and not col.real_dirs and layout.depth > 1
    for _ in range(layout.depth - 1):
        nxt: list[str] = []
        for infos in _map(flat, level, parallel, None, [0, None]):
            listing.listed_dirs += 1
            for i in infos:
                rel = i.path[cut:]
                if i.type == DIR:
                    if not is_hidden_name(i.base_name):
                        nxt.append(rel)
                else:
                    col.feed([i])  # a file above partition depth: reported as skipped
        level = nxt
    if sink is not None and by_parent:
        done[1] = len(level)
        for infos in many(level):
            listing.listed_dirs += 1
            col.feed(infos)
            col.flush(sink)
        return
    to_list: list[str] = []
    for infos in _map(flat, level, parallel, None, [0, None]):
        listing.listed_dirs += 1
        for i in infos:
            rel = i.path[cut:]
            if i.type != DIR:
                col.feed([i])
                continue
            if is_hidden_name(i.base_name):
                continue
            part = col._dir(rel)
            if part is None:
                continue  # outside the requested partitions
            if isinstance(part, Skipped):
                to_list.append(rel)  # list it so its files are reported
                continue
            mtime = _ms(i) if col.real_dirs else None
            listing.leaves[rel] = mtime
            if known is not None and mtime is not None and known.get(rel) == mtime:
                listing.unchanged.add(rel)
            else:
                to_list.append(rel)
    done[1] = len(to_list)
    if sink is not None:
        parts = listing.partitions
        to_list.sort(key=lambda r: (parts[r].start_ms, r) if r in parts else (-(1 << 62), r))
    for infos in many(to_list):
        listing.listed_dirs += 1
        col.feed(infos)
        if sink is not None:
            col.flush(sink)
