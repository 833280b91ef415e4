"""Resolve the exact set of files a run should read.

This module answers "which files" and nothing else, returning a typed
:class:`FileSet` that the CLI prints and engines consume. The ways to ask:

* ``manifest``: the files of commits in a version range or a commit-time window;
* ``mtime``: the files whose modification time lies in a closed window [start, end]
  (seed 002's semantics), optionally pruned to a partition range;
* ``both``: a trib table holding files other tools write: trib-written files by
  the manifest, the others by mtime (:mod:`tributary_read.tracking`);
* ``auto``: what the table's ``tracking`` says (manifest, mtime of the files other
  tools write, or both), mtime for a plain directory. An answer that leaves out
  data the table holds says so in ``untracked``; on a manifest-tracked table it
  fails instead (``UntrackedDataError``, exit 13) unless ``allow_untracked``.

Durable consumers (:mod:`tributary_read.consumer`) build on the same pieces.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from tributary_read.errors import InvalidInputError, LogRetentionError, NoSuchTableError, RestatedInputError
from tributary_read.table.layout import Layout, default_partition
from tributary_read.read.listing import DirectoryLister, Progress, Skipped, gc_paused, scan
from tributary_read.read.partition_filter import PartitionFilter
from tributary_read.read.visibility import is_visible
from tributary_read.read.changes import range_entries
from tributary_read.table.manifest import KIND_DATA, Commit
from tributary_read.io.storage import Storage, open_storage
from tributary_read.table.config import Table, Tracking
from tributary_read.table.log import COMPACTED_MARKER, RESTATED_MARKER
from tributary_read.table.restate_swap import logical_path
from tributary_read.table.renames import REPLACED_DIR, finish_renames
from tributary_read.read.tracking import check_untracked, foreign, refuse_unmatched, refuse_untracked, written
from tributary_read.read.window import TimeWindow
from tributary_read.read.fileset import FileSet, ReadMode, ResolvedFile, origin

#: How far out of step with each other the writers of a log written before
#: commit times rose (``monotonic_since``) are assumed to be, where commits that
#: log retention removed cannot be read to find out.
MAX_CLOCK_SKEW_MS = 5 * 60 * 1000


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
        directory by other tools is read by listing when the table's
        ``tracking`` says so (:mod:`tributary_read.tracking`).
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
                    f"{table.layout.partition!r} ({table.layout.timezone}); drop the layout, partition and "
                    "timezone arguments", layout="the layout, partition and timezone arguments")
            return cls(table.storage, table.layout, table)
        storage = open_storage(root, options)
        # Where directories are real, a missing one is a wrong path, not an empty
        # table; on object stores a prefix exists only through its keys.
        if storage.capabilities.real_directories:
            info = storage.root_info()
            if info is None or not info.is_dir:
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
        partition = default_partition(directory)
    return Layout(directory, partition, timezone)


#: What ``auto`` reads a trib table with, by its tracking (tributary_read.tracking).
AUTO_MODES = {Tracking.MANIFEST: ReadMode.MANIFEST, Tracking.LISTING: ReadMode.MTIME,
              Tracking.BOTH: ReadMode.BOTH}


def choose_mode(source: Source, mode: ReadMode | str) -> ReadMode:
    mode = ReadMode.parse(mode, "mode")
    if mode is ReadMode.AUTO:
        if source.table is None:
            return ReadMode.MTIME
        return AUTO_MODES[source.table.config.tracking] if source.has_log() else ReadMode.MTIME
    if mode in (ReadMode.MANIFEST, ReadMode.BOTH) and source.table is None:
        raise InvalidInputError(f"mode {mode} needs a trib table; {source.uri} has no manifest log", mode="mode")
    return mode


def resolve(
    source: Source | Table | str,
    *,
    mode: ReadMode | str = ReadMode.AUTO,
    since_version: int = 0,
    until_version: int | None = None,
    window: TimeWindow | None = None,
    partitions: PartitionFilter | str | None = None,
    options: Mapping[str, str] | None = None,
    layout: Layout | None = None,
    parallel: int | None = None,
    progress: Progress | None = None,
    lister: DirectoryLister | None = None,
    allow_untracked: bool = False,
    restated: set[str] | None = None,
) -> FileSet:
    """The exact file set for one run (see the module docstring for the modes).

    ``lister`` runs the directory listings of the mtime part elsewhere (on
    Spark executors: :func:`tributary_read.spark.listing.spark_lister`); the
    answer is the same. ``allow_untracked``: a manifest-tracked table's answer
    that leaves out files other tools wrote in its scope is returned with
    ``untracked`` set instead of failing (reports, and runs that opted out);
    it then skips the listing of the whole scope that a run which can fail
    pays (:func:`tributary_read.read.tracking.check_untracked`). ``restated``: see :func:`manifest_files`.
    """
    src = Source.of(source, options, layout)
    pf = PartitionFilter.parse(partitions, src.layout) if isinstance(partitions, str) else partitions
    asked, mode = mode, choose_mode(src, mode)
    if mode in (ReadMode.MANIFEST, ReadMode.BOTH):
        table = src.table
        assert table is not None  # choose_mode refuses these modes without a table
        if window is not None:
            if since_version or until_version is not None:
                raise InvalidInputError("give a version range or a time window, not both")
            fs = manifest_window(table, window, pf, restated)
        elif mode is ReadMode.BOTH and (since_version or until_version is not None):
            raise InvalidInputError("since and until versions need mode manifest (files other tools write "
                                    "have no versions)", versions="since and until versions", mode="mode")
        else:
            fs = manifest_files(table, since_version, until_version, pf, restated)
        if mode is ReadMode.MANIFEST:
            versions = None if window is not None else (since_version, fs.plan["until_version"])
            untracked = check_untracked(src.table, fs.files, tracking="manifest", asked=asked, partitions=pf,
                                        window=window, versions=versions, allow=allow_untracked)
            return replace(fs, untracked=refuse_untracked(src.table, untracked, allow=allow_untracked))
        listed = mtime_files(src, window, pf, parallel=parallel, progress=progress, foreign_only=True,
                             lister=lister)
        return both_files(fs, listed)
    if since_version or until_version is not None:
        raise InvalidInputError("since and until versions need mode manifest",
                                versions="since and until versions", mode="mode")
    # An explicit mode mtime is seed 002's raw window: every visible file.
    by_tracking = src.table is not None and asked != ReadMode.MTIME
    fs = mtime_files(src, window, pf, parallel=parallel, progress=progress, foreign_only=by_tracking,
                     lister=lister)
    if by_tracking:
        fs = replace(fs, untracked=check_untracked(src.table, fs.files, tracking="listing", asked=asked))
    return fs


def both_files(manifest: FileSet, listed: FileSet) -> FileSet:
    """A ``both`` table's answer: trib-written files from the manifest, the others from the listing.

    The listing part holds no trib-named file, and the manifest part keeps only
    trib-named ones, so the two are disjoint by construction (tributary_read.tracking).
    """
    files = sorted((*written(manifest.files), *listed.files), key=lambda f: f.path)
    plan = {**listed.plan, **manifest.plan, "tracking": "both"}
    return replace(manifest, mode="both", files=tuple(files), plan=plan, skipped=listed.skipped,
                   stats=listed.stats, untracked=None)


def _entry_files(commits_or_entries, pfilter: PartitionFilter | None, table: Table | None = None) -> list[ResolvedFile]:
    out = []
    picked = []
    for e, v in commits_or_entries:
        # set aside by a compaction or a restate: still data
        if e.kind != KIND_DATA or not is_visible(logical_path(e.path.removeprefix(REPLACED_DIR + "/"))):
            continue
        if pfilter is not None and not pfilter.matches(e.partition):
            continue
        picked.append((e, v))
    where = finish_renames(table, [e for e, _ in picked]) if table is not None else {}
    for e, v in picked:
        out.append(ResolvedFile(where.get(e.path, e.path), e.size, e.partition, records=e.records, version=v))
    out.sort(key=lambda f: f.path)
    return out


def manifest_files(table: Table, since_version: int = 0, until_version: int | None = None,
                   partitions: PartitionFilter | None = None, restated: set[str] | None = None) -> FileSet:
    """Files of commits with ``since_version < version <= until_version``.

    The full range reads one checkpoint plus its tail; a range up to the latest
    version reads only its own commit files, which keeps "the newest hour" cheap
    on long logs. A range that ends earlier also reads the latest state, to leave
    out files a later ``trib expire`` removed. ``restated``: collect the partitions restates in the range
    recomputed (in the answer's ``stats["restated"]``) and deliver their files; None refuses such a range
    (:mod:`tributary_read.read.changes`).
    """
    if since_version < 0 or (until_version is not None and until_version < since_version):
        raise InvalidInputError("version range must satisfy 0 <= since <= until")
    log = table.log
    latest = log.latest_version()
    until = latest if until_version is None else min(until_version, latest)
    skipped: tuple[Skipped, ...] = ()
    if since_version >= until:
        entries: list = []
    elif since_version == 0 and until == latest:
        state = log.state()
        until = state.version
        entries = [(e, None) for e in state.files.values()]
    else:
        entries, skipped = range_entries(log, log.commits(since_version, until), until >= latest, partitions,
                                         table.storage, restated)
    plan: dict[str, Any] = {"since_version": since_version, "until_version": until}
    if partitions is not None:
        plan["partitions"] = str(partitions)
    return FileSet("manifest", tuple(_entry_files(entries, partitions, table)), plan, skipped=skipped,
                   stats=_restated(restated), **origin(table.storage, table))


def _restated(restated: set[str] | None) -> dict[str, Any]:
    """An answer's ``stats`` naming the partitions restates in its range recomputed (none: no key)."""
    return {"restated": sorted(restated)} if restated else {}


def partition_files(table: Table, version: int, directories) -> list[ResolvedFile]:
    """The files of partition ``directories`` in ``table`` as of ``version``: every record they held then.

    What a restate recomputes a partition from (tributary_read/read/complete.py): the state, not a range of
    commits, so a file compacted or restated since it was delivered is read as what replaced it, once.
    """
    from tributary_read.table.restate_swap import logical_dir

    wanted = set(directories)
    state = table.log.state(version)
    entries = [(e, None) for e in state.files.values() if logical_dir(e.path) in wanted]
    return _entry_files(entries, None, table)


def manifest_window(table: Table, window: TimeWindow, partitions: PartitionFilter | None = None,
                    restated: set[str] | None = None) -> FileSet:
    """Files of commits whose commit time lies in ``window`` (both ends inclusive).

    Commit times rise strictly over the run the newest commit names
    (``monotonic_since``, :func:`tributary_read.table.log.commit_time`), so
    there a binary search finds the first version in the window and the scan
    stops at the first past it, whatever the writers' clocks: O(log n) + the
    window's own commits. Commits older than that run were stamped by a trib
    that did not make times rise, and a writer's skewed clock may have put
    any of them anywhere: they are all read. The latest state is read too (to
    leave out files ``trib expire`` removed) when the window has files.
    """
    log = table.log
    latest = log.latest_version()

    def commit(v: int) -> Commit:
        c = log.read_commit(v)
        if c is None:
            from tributary_read.errors import ManifestCorruptError

            raise ManifestCorruptError(f"commit {v} is missing from {table.uri} (log has a gap)")
        return c

    oldest = max(log.oldest_version(), 1) if latest else 1
    since = (commit(latest).monotonic_since or latest) if latest else 1
    if oldest > 1:
        _check_retained(table, commit(oldest), oldest, since, window)
    lo, hi = max(since, oldest), latest + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if commit(mid).timestamp_ms < window.start_ms:
            lo = mid + 1
        else:
            hi = mid
    versions: list[int] = []

    def in_window():
        for c in log.commits(oldest - 1, since - 1) if oldest < since else ():
            if c.timestamp_ms in window:  # stamped by an older trib: anywhere
                versions.append(c.version)
                yield c
        for c in log.commits(lo - 1, latest) if lo <= latest else ():
            if c.timestamp_ms > window.end_ms:
                return
            versions.append(c.version)
            yield c

    # Expire commits outside the window count too: the latest state decides.
    entries, skipped = range_entries(log, in_window(), False, partitions, table.storage, restated)
    plan: dict[str, Any] = {"window": window.to_json(),
                            "versions": [versions[0], versions[-1]] if versions else None,
                            "commits": len(versions)}
    if partitions is not None:
        plan["partitions"] = str(partitions)
    return FileSet("manifest", tuple(_entry_files(entries, partitions, table)), plan, skipped=skipped,
                   stats=_restated(restated), **origin(table.storage, table))


def _check_retained(table: Table, first: Commit, oldest: int, since: int, window: TimeWindow) -> None:
    """Refuse a window that commits removed by log retention may fall in.

    Where times rise from version 1 on, every removed commit is older than the
    oldest retained one. Where an older trib stamped the first commits, their
    times are not known; they are assumed within :data:`MAX_CLOCK_SKEW_MS` of
    the oldest retained one, as before times rose (docs/manifest.md).
    """
    if since <= 1:
        doubt = window.start_ms < first.timestamp_ms
    else:
        doubt = first.timestamp_ms >= window.start_ms - MAX_CLOCK_SKEW_MS
    if doubt:
        raise LogRetentionError(
            f"log retention removed the commits of {table.uri} before version {oldest}, which may fall in "
            "the window; use a later window or read the whole state")


def mtime_files(source: Source | Table | str, window: TimeWindow | None = None,
                partitions: PartitionFilter | None = None, *, parallel: int | None = None,
                progress: Progress | None = None, foreign_only: bool = False,
                lister: DirectoryLister | None = None) -> FileSet:
    """Visible files whose mtime (ms) lies in ``window``, both ends inclusive.

    ``foreign_only``: leave out files named like trib's writers name theirs (a
    trib table's listing part; see tributary_read.tracking).

    An mtime is when the bytes were last written, not when the file became
    visible: a rename keeps it, ``rsync -t`` and S3 multipart uploads backdate
    it. Such a file can appear after the window its mtime belongs to was read;
    consumers (:mod:`tributary_read.consumer`) deliver those too.
    """
    src = Source.of(source)
    if window is not None and src.table is not None and src.storage.exists(RESTATED_MARKER):
        # A restated partition's new files carry fresh mtimes and every record of the partition.
        raise RestatedInputError(f"{src.uri} has restated partitions: a window of mtimes would read each of their "
                                 "records again; read this table from a job whose output mode is restate")
    with gc_paused():
        spans = window is not None and src.table is not None and src.storage.exists(COMPACTED_MARKER)
        listing = scan(src.storage, src.layout, window=window, partitions=partitions,
                       parallel=parallel, progress=progress, lister=lister, spans=spans)
        if src.table is None and src.layout is not None:  # a table's layout is its own, not an argument
            refuse_unmatched(listing, src.layout, src.uri, src.storage)
        parts = listing.partitions
        files = [
            ResolvedFile(f.path, f.size, parts[f.directory].values if f.directory else {},
                         mtime_ms=f.mtime_ms, valid_length=f.valid_length)
            for f in listing.files
        ]
        if foreign_only:
            files = foreign(files)
        files.sort(key=lambda f: f.path)
    plan = {"window": window.to_json() if window is not None else None,
            "partitions": str(partitions) if partitions is not None else None}
    skipped = tuple(sorted(listing.skipped, key=lambda s: s.path))
    return FileSet("mtime", tuple(files), plan, skipped=skipped, stats=listing.stats(),
                   **origin(src.storage, src.table, src.layout))
