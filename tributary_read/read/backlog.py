"""A capped consumer plan: at most N files, oldest first, the rest left pending as its backlog.

A new consumer delivers all history by default (``--initial-position
earliest``), so a first plan over years of partitions can hold millions of
files: gigabytes of memory and a plan file as large. A cap bounds one plan the
way Spark's ``maxFilesPerTrigger`` bounds a micro-batch, but by whole units the
consumer's state can record exactly:

* a listing plan takes whole partitions, oldest partition time first, and at
  least one (a partition is never split: its ledger entry or seal covers the
  whole directory, so half a partition could not be told from the other half
  next run). A partition left out is left exactly as the state had it, except
  that its directory is marked to be listed again, so the next plan sees what
  this one saw and delivers it. The planner decides as the scan streams
  (:class:`ListingCap`), in whatever order it lists, so what it holds is
  bounded by the cap.
* a manifest plan takes a prefix of the commits (a version range), at least
  one commit, so the state's version moves only to the last commit taken.

The backlog a plan reports (files, bytes, oldest partition left) is what the
listing or the log showed beyond the cap: no file is read to count it.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any, Mapping

from tributary_read.errors import LogRetentionError
from tributary_read.read.fileset import FileSet, ResolvedFile

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.table.layout import Layout
    from tributary_read.table.config import Table

NONE_LEFT: Mapping[str, Any] = {"files": 0, "bytes": 0, "partitions": 0, "oldest_partition": None}


def _dir(path: str) -> str:
    return path.rpartition("/")[0]


def backlog(left: list[ResolvedFile], layout: Layout | None) -> dict[str, Any]:
    """The files ``left`` for later runs, as a plan reports them."""
    if not left:
        return dict(NONE_LEFT)
    dirs = {_dir(f.path) for f in left}

    def start(d: str) -> tuple:
        p = layout.try_parse(d) if layout is not None else None
        return (p.start_ms if p is not None else 1 << 62, d)

    return {"files": len(left), "bytes": sum(f.readable_bytes for f in left), "partitions": len(dirs),
            "oldest_partition": min(dirs, key=start)}


def merged(a: Mapping | None, b: Mapping | None, layout: Layout | None) -> Mapping | None:
    """Two parts' backlogs (a ``both`` plan) as one."""
    if a is None or b is None:
        return a or b
    firsts = [x for x in (a["oldest_partition"], b["oldest_partition"]) if x is not None]

    def start(d: str) -> tuple:
        p = layout.try_parse(d) if layout is not None else None
        return (p.start_ms if p is not None else 1 << 62, d)

    return {"files": a["files"] + b["files"], "bytes": a["bytes"] + b["bytes"],
            "partitions": a["partitions"] + b["partitions"],
            "oldest_partition": min(firsts, key=start) if firsts else None}


class _Newest:
    """A heap entry ordering ``(start, directory)`` keys newest first (heapq is a min-heap)."""

    __slots__ = ("key",)

    def __init__(self, key: tuple[int, str]):
        self.key = key

    def __lt__(self, other: _Newest) -> bool:
        return self.key > other.key


class ListingCap:
    """A listing plan's cap, decided as a streaming scan hands over one directory at a time.

    The plan must be what sorting every directory with new files by partition
    time and taking them while they fit (the first always) gives; the scan may
    hand them over in any order (an object store lists a day at a time). So the
    cap keeps the directories admitted so far, and when one older than some of
    them overflows the cap, pushes out the newest until it fits again; a
    directory newer than the oldest one pushed out is left at once. A directory
    left costs its counts only, so a first plan over millions of files holds
    the cap's worth. Where the scan is oldest first (local disks, HDFS),
    nothing admitted is ever pushed out.
    """

    def __init__(self, max_files: int):
        self.max_files = max_files  # 0: no cap
        self.taken = 0
        self.kept: dict[str, tuple[int, int]] = {}  # admitted directory -> (files, bytes)
        self._heap: list[_Newest] = []
        #: The oldest directory left out: every directory newer than it is left too.
        self.boundary: tuple[int, str] | None = None
        self.left_files = self.left_bytes = self.left_partitions = 0

    def admit(self, d: str, start_ms: int, files: list[ResolvedFile]) -> list[str]:
        """Admit directory ``d`` and its new ``files``; return the directories left out by it (``d`` or others)."""
        n = len(files)
        if not n or self.max_files <= 0:
            self.taken += n
            return []
        key, size = (start_ms, d), sum(f.readable_bytes for f in files)
        if self.boundary is not None and key > self.boundary:
            self._leave(key, n, size)
            return [d]
        self.kept[d] = (n, size)
        self.taken += n
        heapq.heappush(self._heap, _Newest(key))
        out = []
        while self.taken > self.max_files and len(self.kept) > 1:
            newest = heapq.heappop(self._heap).key
            m, b = self.kept.pop(newest[1])
            self.taken -= m
            self._leave(newest, m, b)
            out.append(newest[1])
        return out

    def _leave(self, key: tuple[int, str], n: int, size: int) -> None:
        self.left_files += n
        self.left_bytes += size
        self.left_partitions += 1
        if self.boundary is None or key < self.boundary:
            self.boundary = key

    def backlog(self) -> dict[str, Any]:
        return {"files": self.left_files, "bytes": self.left_bytes, "partitions": self.left_partitions,
                "oldest_partition": self.boundary[1] if self.boundary else None}


def cap_manifest(table: Table, since: int, fs: FileSet, max_files: int) -> tuple[FileSet, dict[str, Any]]:
    """``fs`` (the files of the commits after ``since``) cut to a prefix of commits within ``max_files``.

    A log whose early commits retention removed cannot be cut by commit, so
    its plan is not capped (its backlog is then none: it delivers it all).
    """
    until = fs.plan["until_version"]
    if max_files <= 0 or len(fs.files) <= max_files or until <= since + 1:
        return fs, dict(NONE_LEFT)
    from tributary_read.read.resolve import manifest_files

    total, cut = 0, since
    try:
        for c in table.log.commits(since, until):
            if cut > since and total + len(c.files) > max_files:
                break
            total += len(c.files)
            cut = c.version
    except LogRetentionError:
        return fs, dict(NONE_LEFT)
    if cut >= until:
        return fs, dict(NONE_LEFT)
    capped = manifest_files(table, since, cut, restated=set())
    kept = {f.path for f in capped.files}
    return capped, {**backlog([f for f in fs.files if f.path not in kept], table.layout),
                    "until_version": until}
