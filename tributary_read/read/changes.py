"""The files that hold the records a range of commits added: what a version range or a
commit-time window delivers, exactly once, across ``trib expire`` and ``trib compact``.

A record is new data in the commit that first added its file. ``expire`` takes
records out of the table: they are delivered by no later read. ``compact``
(a ``replace`` commit) only moves records into a compacted file, so:

* a replace commit adds no new data: a range that holds it delivers none of
  its files for it (Delta's ``dataChange=false``, Iceberg's ``replace``);
* a range whose new files were compacted since delivers the compacted file when
  it holds every one of that file's sources (each source names its original
  commit), and the originals otherwise: a compacted file cannot be split, and
  a reader behind the compaction (a consumer, a backfill) must get exactly the
  records of its range. The originals stay on storage for such readers until
  ``trib clean`` may delete them (docs/compaction.md); a range that needs one it
  already deleted is refused (:class:`CompactedAwayError`, exit 3), never
  answered with different records.

``restate`` (``[output] mode = "restate"``) recomputes whole partitions, and their
records may change. Its files are not new data for a reader of appended records
(they would double every record of the partition) and not a no-op either (they
correct it): a range that holds one is refused (:func:`refuse_restated`) unless
its reader recomputes partitions itself (a restate job): then the restate's files
are delivered in place of the files of its partitions the range added, and the
restated directories are collected for that reader (an emptied partition has no
file to deliver, and is still changed). A range before it still gets the records
it added, from where the restate set the old files aside.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Mapping

from tributary_read.errors import CompactedAwayError, RestatedInputError
from tributary_read.read.listing import Skipped
from tributary_read.read.partition_filter import PartitionFilter
from tributary_read.table.manifest import KIND_DATA, OP_REPLACE, OP_RESTATE, Commit, FileEntry
from tributary_read.table.renames import locations
from tributary_read.table.restate_swap import in_staging


def refuse_restated(where: str, version: int | None, directories) -> RestatedInputError:
    """The one refusal of a restate to a reader of appended records: it would read those partitions twice."""
    from tributary_read.table.restatement import named

    directories = sorted(directories)
    at = f"version {version} restates" if version is not None else "restated"
    knowingly = "read their new files as new rows knowingly"
    return RestatedInputError(
        f"{where}: {at} {len(directories)} partition(s) ({named(directories)}): their records were recomputed, so reading "
        "the new files as new data would read those partitions twice; read this table from a job whose output "
        f"mode is restate, or {knowingly}", restated=knowingly)


class _Walk:
    """What the commits of a range (then those after it) did to the files the range added.

    ``restated``: collect the directories a restate in the range recomputed, and deliver its files (None:
    refuse such a range)."""

    def __init__(self, restated: set[str] | None = None, where: str = "the table") -> None:
        self.restated, self.where = restated, where
        self.added: dict[str, tuple[FileEntry, int]] = {}  # original path -> (entry, its version)
        self.expired: dict[str, int | None] = {}  # path -> the expire commit (None: a later one, unknown)
        self.holder: dict[str, str] = {}  # original path -> the newest compacted file holding its records
        self.outputs: dict[str, tuple[FileEntry, int | None]] = {}  # live compacted file -> (entry, version)
        self.dead: dict[str, int | None] = {}  # compacted file -> the expire commit that removed it
        self.aside: dict[str, str] = {}  # original path -> the staging directory a later restate set it aside in
        self.end = 0

    def follow(self, c: Commit, in_range: bool) -> None:
        if c.operation == OP_RESTATE:
            if in_range:  # the partitions' new files replace what the range added there
                if self.restated is None:
                    raise refuse_restated(self.where, c.version, (r.directory for r in c.restated))
                self.restated.update(r.directory for r in c.restated)
                for e in c.removed:
                    self.added.pop(e.path, None)
                for e in c.files:
                    self.added[e.path] = (e, c.version)
                    self.holder.pop(e.path, None)
                return
            staging = {r.directory: r.staging for r in c.restated if not r.moved}  # a moved one leaves them
            for e in c.removed:
                d = e.path.rpartition("/")[0]
                if e.path in self.added and d in staging:
                    self.aside[e.path] = in_staging(staging[d], e.path)
            return
        if c.operation == OP_REPLACE:
            for o in c.files:
                self.outputs[o.path] = (o, c.version)
                for s in o.sources:
                    self.holder[s.path] = o.path
            for r in c.removed:  # an earlier compacted file, compacted again: its sources moved on
                self.outputs.pop(r.path, None)
            return
        for e in c.files:
            if in_range:
                self.added[e.path] = (e, c.version)
                self.holder.pop(e.path, None)
            self.expired.pop(e.path, None)  # added again after its removal: live
        for e in c.removed:
            if e.path in self.outputs:
                self.outputs.pop(e.path)
                self.dead[e.path] = c.version
            elif e.path in self.added and e.path not in self.holder:
                self.expired[e.path] = c.version

    def settle_by_state(self, live: Mapping[str, FileEntry], removed: Mapping | None = None) -> None:
        """After the range, from the latest state instead of the commits (many followed)."""
        index = {s.path: f.path for f in live.values() for s in f.sources}
        for p in self.added:
            if p in self.expired or p in live:
                continue
            gone = (removed or {}).get(p)
            if gone is not None and gone.restated:
                self.aside[p] = in_staging(gone.restated, p)
                continue
            o = index.get(p)
            if o is None:
                self.holder.pop(p, None)
                self.expired[p] = None
            else:
                self.holder[p] = o
                known = self.outputs.get(o)
                self.outputs[o] = (live[o], known[1] if known else None)


def range_entries(log, commits: Iterable[Commit], complete: bool, pfilter: PartitionFilter | None,
                  storage=None, restated: set[str] | None = None
                  ) -> tuple[list[tuple[FileEntry, int | None]], tuple[Skipped, ...]]:
    """(entry, version) pairs that hold the records ``commits`` added, and what was left out and why.

    ``complete``: the commits run to the latest version. Otherwise the commits
    after them decide too (a later expire or compaction), read one by one when
    few follow and from the latest state when many do. ``storage`` checks that
    originals a partly covered compaction needs are still there. ``restated``: a
    set that collects the directories restates in the range recomputed, whose files
    are then delivered (None: a range holding a restate is refused).
    """
    w = _Walk(restated, log.storage.uri)
    for c in commits:
        w.end = c.version
        w.follow(c, True)
    if not complete and w.added:
        latest = log.latest_version(start=w.end) if w.end else log.latest_version()
        if latest - w.end <= log.checkpoint_interval:
            for c in log.commits(w.end, latest):
                w.follow(c, False)
        else:
            state = log.state()
            w.settle_by_state(state.files, state.removed)
    entries: list[tuple[FileEntry, int | None]] = []
    skipped: list[Skipped] = []
    partial: list[tuple[FileEntry, int, str]] = []
    delivered: set[str] = set()
    for p, (e, v) in w.added.items():
        o = w.holder.get(p)
        if p in w.aside:
            if pfilter is None or pfilter.matches(e.partition):
                entries.append((_set_aside(storage, e, w.aside[p]), v))
            continue
        if p in w.expired or o in w.dead:
            gone = w.expired[p] if p in w.expired else w.dead[o]  # type: ignore[index]
            if e.kind == KIND_DATA and (pfilter is None or pfilter.matches(e.partition)):
                skipped.append(Skipped(p, "removed by trib expire" + (f" at version {gone}" if gone else
                                                                      " (a later version)"), e.size))
        elif o is None:
            entries.append((e, v))
        elif _covers(w.added, w.outputs[o][0]):
            if o not in delivered:
                delivered.add(o)
                out = w.outputs[o][0]
                entries.append((out, max(s.version for s in out.sources)))
        else:
            partial.append((e, v, o))
    if partial:
        entries.extend(_originals(storage, partial, w.outputs, pfilter))
    skipped.sort(key=lambda s: s.path)
    return entries, tuple(skipped)


def _set_aside(storage, e: FileEntry, aside: str) -> FileEntry:
    """``e``, where a later restate left its bytes: set aside in the staging directory after the swap, in
    place before it. Gone under both names (``trib clean``): refused, never answered without its records."""
    if storage is None:
        return replace(e, path=aside, staged=None)
    where, there = storage.stat_many([aside, e.path])
    if where is not None:
        return replace(e, path=aside, staged=None)
    if there is not None:
        return e
    raise RestatedInputError(f"{e.path} was set aside by a later restatement and trib clean has deleted it: "
                             "read a range that includes the restatement, from a job whose output mode is restate")


def _covers(added: Mapping[str, tuple[FileEntry, int]], out: FileEntry) -> bool:
    """Whether the range added every original the compacted file holds (each in its own commit)."""
    return all(s.path in added and added[s.path][1] == s.version for s in out.sources)


def _originals(storage, partial, outputs, pfilter) -> list[tuple[FileEntry, int]]:
    """The originals of partly covered compactions, where they are now (set aside, most likely)."""
    wanted = [(e, v, o) for e, v, o in partial if pfilter is None or pfilter.matches(e.partition)]
    if storage is None or not wanted:
        return [(e, v) for e, v, _ in wanted]
    names = [locations(e) for e, _, _ in wanted]
    found = iter(storage.stat_many([n for ns in names for n in ns]))
    out_entries = []
    for (e, v, o), ns in zip(wanted, names):
        where = [n for n, info in zip(ns, [next(found) for _ in ns]) if info is not None]
        if not where:
            out, at = outputs[o]
            versions = sorted({s.version for s in out.sources})
            raise CompactedAwayError(
                f"{e.path} was compacted into {o}" + (f" at version {at}" if at else "") +
                f" together with files of versions {versions[0]}..{versions[-1]}, and trib clean has "
                "deleted it: this read covers only part of that compaction. Read a range that covers "
                "all of its versions, or keep replaced files longer (compact.retention)")
        out_entries.append((replace(e, path=where[0], staged=None), v))
    return out_entries
