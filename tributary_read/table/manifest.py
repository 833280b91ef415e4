"""Manifest value objects and their JSON encoding (see docs/manifest.md).

Decoding is strict: a commit file is either fully valid or a
:class:`ManifestCorruptError` naming the file, because a half-understood commit
would silently drop or duplicate data downstream.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from typing import Any, Mapping

from tributary_read.errors import InvalidInputError, ManifestCorruptError, UnsupportedFormatVersionError
from tributary_read.io.storage import safe_relpath
from tributary_read.table.restate_swap import logical_dir

FORMAT = "tributary-manifest"
FORMAT_VERSION = 1
#: The version of a replace commit, and of a checkpoint whose state holds compacted files.
#: A trib from before compaction reads only version 1, so it refuses such a table
#: ("upgrade trib") instead of reading the originals and their compacted copy both.
REPLACE_FORMAT_VERSION = 2
#: The version of a restate commit, and of a checkpoint that remembers files a restate removed. A trib
#: from before restatement would take a restate's files for new data, or miss that records changed.
RESTATE_FORMAT_VERSION = 3
#: Versions this build can read. Writers write FORMAT_VERSION, or the version of the operation where it applies.
READABLE_VERSIONS = frozenset({1, 2, 3})

KIND_DATA = "data"
#: 9999-12-31T23:59:59.999Z, the last instant Python's datetime can show.
MAX_TIMESTAMP_MS = 253_402_300_799_999
KIND_DEAD_LETTER = "dead_letter"
#: Where dead letters are written: data under trib's namespace (``table/log.py``'s META_DIR).
DEAD_LETTER_DIR = "_tributary/dead_letter"

OP_APPEND = "append"
#: Removes whole partitions' files from the state (``trib expire``). A reader
#: that does not know an operation refuses the commit, so an older trib fails
#: loudly on an expired table instead of returning removed files.
OP_EXPIRE = "expire"
#: Rewrites files without changing data (``trib compact``): adds compacted files, removes the
#: files they replace, records in = records out per partition. Readers of new data skip it:
#: its records were delivered when their original files were committed.
OP_REPLACE = "replace"
#: Recomputes whole partitions (``[output] mode = "restate"``): adds each restated partition's new
#: complete file set and removes every file it had, as one commit; unlike a replace, the records
#: may change (late data corrected an aggregate). Readers of new data must not take it for an
#: append, nor skip it like a compaction (tributary_read/read/changes.py).
OP_RESTATE = "restate"
OPERATIONS = (OP_APPEND, OP_EXPIRE, OP_REPLACE, OP_RESTATE)


@dataclass(frozen=True)
class SourceFile:
    """An originally committed file whose records a compacted file now holds.

    Flattened: a compacted file compacted again names the originals, not the
    intermediate file, so a reader maps any original to its current holder in
    one step. ``version`` is the commit that added the original (when its
    records became new data); ``mtime_ms`` its mtime when it was rewritten, which
    mtime readers go by (docs/compaction.md).
    """

    path: str
    version: int
    records: int
    mtime_ms: int | None = None

    def to_json(self) -> dict:
        d: dict[str, Any] = {"path": self.path, "version": self.version, "records": self.records}
        if self.mtime_ms is not None:
            d["mtime_ms"] = self.mtime_ms
        return d

    @classmethod
    def from_json(cls, d: Mapping) -> SourceFile:
        version, records, mtime = d["version"], d["records"], d.get("mtime_ms")
        if not _is_count(version) or version < 1 or not _is_count(records) \
                or not (mtime is None or _is_count(mtime)):
            raise ValueError("sources need a version >= 1 and non-negative records and mtime_ms")
        return cls(safe_relpath(d["path"]), version, records, mtime)


@dataclass(frozen=True)
class Restatement:
    """One partition a restate commit recomputed.

    The new files are written under ``staging``, a hidden sibling of the partition's
    ``directory`` (``base/2026_11_28/.06.r42`` beside ``base/2026_11_28/06``), and
    committed as ``directory/NAME`` with ``staged`` = ``staging/NAME``. After the
    commit the two directories swap in one step (table/restate_swap.py), so a directory
    reader lists the old partition or the new one, never both, never neither; ``staging``
    then holds the old files, set aside for readers behind the restate until ``trib clean``.

    ``inputs``: what caused the recompute, as its writer recorded it (an ETL job: per input that fed the
    partition new or changed files, :class:`RestateInput`), so that a reader of the commit (a rerun that
    finds it made) names the same causes as the run that made it. Optional and informational: None where
    the writer recorded none (a backfill, a trib from before it), and a reader that does not know the field
    still reads the same files (no format version of its own).

    ``moved``: the store cannot swap directories (S3, HDFS), so the new files are committed
    where they were written, ``staging/NAME``, and stay there; the Hive sync moves the
    partition's location to ``staging`` (table/restate_swap.py), and the old files stay in
    their directory as any removed file does until ``trib clean``.
    """

    partition: Mapping[str, str] = field(hash=False)
    directory: str
    staging: str
    records_before: int
    records_after: int
    inputs: tuple[RestateInput, ...] | None = None
    moved: bool = False

    def to_json(self) -> dict:
        d: dict[str, Any] = {"partition": dict(self.partition), "directory": self.directory,
                             "staging": self.staging, "records_before": self.records_before,
                             "records_after": self.records_after}
        if self.inputs is not None:
            d["inputs"] = [i.to_json() for i in self.inputs]
        if self.moved:
            d["moved"] = True
        return d

    @classmethod
    def from_json(cls, d: Mapping) -> Restatement:
        part = d["partition"]
        if not isinstance(part, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in part.items()):
            raise ValueError("restated.partition must map strings to strings")
        before, after = d["records_before"], d["records_after"]
        if not _is_count(before) or not _is_count(after):
            raise ValueError("restated records must be non-negative integers")
        inputs, moved = d.get("inputs"), d.get("moved", False)
        if not isinstance(moved, bool):
            raise ValueError("restated.moved must be a boolean")
        return cls(part, safe_relpath(d["directory"]), safe_relpath(d["staging"]), before, after,
                   None if inputs is None else tuple(RestateInput.from_json(i)
                                                     for i in _objects(inputs, "restated.inputs")), moved)


@dataclass(frozen=True)
class RestateInput:
    """One input that fed a restated partition something new: its name (an ETL job's view), the first
    few of its new or changed files (relative to the input's root: another table's names, never read as
    this table's files) and how many there were, and the input partitions its own restates recomputed."""

    view: str
    files: tuple[str, ...]
    files_total: int
    restated: tuple[str, ...] = ()

    def to_json(self) -> dict:
        d: dict[str, Any] = {"view": self.view, "files": list(self.files), "files_total": self.files_total}
        if self.restated:
            d["restated"] = list(self.restated)
        return d

    @classmethod
    def from_json(cls, d: Mapping) -> RestateInput:
        view, files, total, dirs = d["view"], d["files"], d["files_total"], d.get("restated", [])
        if not isinstance(view, str) or not _strings(files) or not _strings(dirs):
            raise ValueError("restated.inputs need a view and lists of strings")
        if not _is_count(total) or total < len(files):
            raise ValueError("restated.inputs files_total must count at least its files")
        return cls(view, tuple(files), total, tuple(dirs))


@dataclass(frozen=True)
class FileEntry:
    """A committed file.

    ``staged`` is set under the rename protocol: the hidden name the file had
    when the commit was made, which recovery renames to ``path``.
    """

    path: str
    size: int
    records: int
    partition: Mapping[str, str] = field(default_factory=dict, hash=False)
    staged: str | None = None
    kind: str = KIND_DATA
    #: A compacted file only: the original files whose records it holds (see :class:`SourceFile`).
    sources: tuple[SourceFile, ...] = field(default=(), hash=False)

    def to_json(self) -> dict:
        d: dict[str, Any] = {"path": self.path, "size": self.size, "records": self.records,
                             "partition": dict(self.partition)}
        if self.staged:
            d["staged"] = self.staged
        if self.kind != KIND_DATA:
            d["kind"] = self.kind
        if self.sources:
            d["sources"] = [s.to_json() for s in self.sources]
        return d

    @classmethod
    def from_json(cls, d: Mapping) -> FileEntry:
        part = d.get("partition", {})
        if not isinstance(part, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in part.items()
        ):
            raise ValueError("partition must map strings to strings")
        size, records = d["size"], d.get("records", 0)
        if not _is_count(size) or not _is_count(records):
            raise ValueError("size and records must be non-negative integers")
        staged = d.get("staged")
        kind = d.get("kind", KIND_DATA)
        if kind not in (KIND_DATA, KIND_DEAD_LETTER):
            raise ValueError(f"unknown file kind {kind!r}")
        sources = tuple(SourceFile.from_json(x) for x in _objects(d.get("sources", []), "sources"))
        if sources and sum(x.records for x in sources) != records:
            raise ValueError(f"compacted file {d['path']!r} holds {records} records, its sources "
                             f"{sum(x.records for x in sources)}")
        return cls(
            path=safe_relpath(d["path"]),
            size=size,
            records=records,
            partition=part,
            staged=safe_relpath(staged) if staged is not None else None,
            kind=kind,
            sources=sources,
        )


@dataclass(frozen=True)
class Placement:
    """A table's layout (directory and partition templates, zone) and data format, as committed."""

    directory: str
    partition: str
    timezone: str
    file_format: str
    compression: str

    def fields(self) -> dict[str, str]:
        """Each setting under its ``table.json`` key (``layout.timezone``, ``file_format``, …)."""
        return {"layout.directory": self.directory, "layout.partition": self.partition,
                "layout.timezone": self.timezone, "file_format": self.file_format,
                "compression": self.compression}

    def to_json(self) -> dict:
        """As a commit's or checkpoint's ``settings``: the shape and key names of ``table.json``."""
        return {"layout": {"directory": self.directory, "partition": self.partition, "timezone": self.timezone},
                "file_format": self.file_format, "compression": self.compression}

    @classmethod
    def from_json(cls, d: Any) -> Placement:
        """A recorded ``settings`` object; ValueError unless it holds these strings (others are ignored:
        a later trib may record more)."""
        if not isinstance(d, Mapping) or {"layout", "file_format", "compression"} - set(d) \
                or not isinstance(d["layout"], Mapping) \
                or {"directory", "partition", "timezone"} - set(d["layout"]):
            raise ValueError("settings must hold layout {directory, partition, timezone}, file_format, compression")
        lay = d["layout"]
        values = (lay["directory"], lay["partition"], lay["timezone"], d["file_format"], d["compression"])
        if not all(isinstance(v, str) for v in values):
            raise ValueError("settings values must be strings")
        return cls(*values)


#: The key of a commit's transaction meta that carries its writer's event-time watermark (epoch ms):
#: the event clock of the partition commit (hive/commit.py) waits for it.
EVENT_WATERMARK = "event_watermark_ms"


@dataclass(frozen=True)
class Transaction:
    """The source position committed together with the files.

    ``offsets`` maps a source name to the offset of the last record included;
    a writer resumes at ``offset + 1``. ``meta`` is opaque to trib's reader
    (the ingest stores byte positions there so a resume can seek).
    """

    app_id: str
    offsets: Mapping[str, int] = field(default_factory=dict, hash=False)
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def to_json(self) -> dict:
        d: dict[str, Any] = {"app_id": self.app_id, "offsets": dict(self.offsets)}
        if self.meta:
            d["meta"] = dict(self.meta)
        return d

    @classmethod
    def from_json(cls, d: Mapping) -> Transaction:
        app, offsets, meta = d["app_id"], d.get("offsets", {}), d.get("meta", {})
        if not isinstance(app, str) or not app:
            raise ValueError("transaction.app_id must be a non-empty string")
        if not isinstance(offsets, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
            for k, v in offsets.items()
        ):
            raise ValueError("transaction.offsets must map strings to integers")
        if not isinstance(meta, dict):
            raise ValueError("transaction.meta must be an object")
        return cls(app, offsets, meta)


@dataclass(frozen=True)
class Commit:
    """One log entry: the unit that becomes visible atomically."""

    version: int
    timestamp_ms: int
    files: tuple[FileEntry, ...]
    transaction: Transaction | None = None
    operation: str = "append"
    protocol: str = "direct"
    writer: str | None = None
    #: Unique per commit attempt (writer id + nonce). A committer whose reply was
    #: lost reads the slot back and recognises its own commit by this id.
    commit_id: str | None = None
    #: ``expire`` and ``replace``: the files this commit removes from the state.
    removed: tuple[FileEntry, ...] = ()
    #: Commit times strictly rise over versions ``monotonic_since .. version``:
    #: the writer stamped this commit after the previous one and inherited its
    #: run (docs/manifest.md, *Commit time*). None: a writer from before that
    #: rule, whose time may be anywhere.
    monotonic_since: int | None = None
    #: The table's layout and format the files were written with (table/placement.py).
    #: None: a writer from before commits recorded them.
    settings: Placement | None = None
    #: ``restate`` only: the partitions it recomputed (:class:`Restatement`).
    restated: tuple[Restatement, ...] = ()

    @property
    def records(self) -> int:
        return sum(f.records for f in self.files)

    @property
    def replaces(self) -> tuple[int, ...]:
        """``replace`` only: the versions whose files it replaced (their records' commits)."""
        return tuple(sorted({s.version for f in self.files for s in f.sources}))

    @property
    def new_data(self) -> tuple[FileEntry, ...]:
        """The files whose records are new in this commit: none for a replace (they were delivered before)."""
        return () if self.operation == OP_REPLACE else self.files

    def to_json(self) -> dict:
        d: dict[str, Any] = {
            "format": FORMAT,
            "format_version": {OP_REPLACE: REPLACE_FORMAT_VERSION,
                               OP_RESTATE: RESTATE_FORMAT_VERSION}.get(self.operation, FORMAT_VERSION),
            "version": self.version,
            "timestamp_ms": self.timestamp_ms,
            "operation": self.operation,
            "protocol": self.protocol,
            "files": [f.to_json() for f in self.files],
        }
        if self.transaction is not None:
            d["transaction"] = self.transaction.to_json()
        if self.writer:
            d["writer"] = self.writer
        if self.commit_id:
            d["commit_id"] = self.commit_id
        if self.operation in (OP_EXPIRE, OP_REPLACE, OP_RESTATE):
            d["removed"] = [f.to_json() for f in self.removed]
        if self.operation == OP_REPLACE:
            d["replaces"] = list(self.replaces)
        if self.operation == OP_RESTATE:
            d["restated"] = [r.to_json() for r in self.restated]
        if self.monotonic_since is not None:
            d["monotonic_since"] = self.monotonic_since
        if self.settings is not None:
            d["settings"] = self.settings.to_json()
        return d

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes, where: str, expect_version: int | None = None) -> Commit:
        d = load_document(data, where)
        try:
            files = tuple(FileEntry.from_json(f) for f in _objects(d["files"], "files"))
            txn = d.get("transaction")
            if txn is not None and not isinstance(txn, dict):
                raise ValueError("transaction must be an object")
            commit = cls(
                version=d["version"],
                timestamp_ms=d["timestamp_ms"],
                files=files,
                transaction=Transaction.from_json(txn) if txn is not None else None,
                operation=d.get("operation", "append"),
                protocol=d.get("protocol", "direct"),
                writer=d.get("writer"),
                commit_id=d.get("commit_id"),
                removed=tuple(FileEntry.from_json(f) for f in _objects(d.get("removed", []), "removed")),
                monotonic_since=d.get("monotonic_since"),
                settings=Placement.from_json(d["settings"]) if "settings" in d else None,
                restated=tuple(Restatement.from_json(r) for r in _objects(d.get("restated", []), "restated")),
            )
            if not _is_count(commit.version) or not _is_count(commit.timestamp_ms):
                raise ValueError("version and timestamp_ms must be non-negative integers")
            if commit.timestamp_ms > MAX_TIMESTAMP_MS:  # every reader prints or compares it as a date
                raise ValueError(f"timestamp_ms {commit.timestamp_ms} is past the year 9999")
            since = commit.monotonic_since
            if since is not None and not (_is_count(since) and 1 <= since <= commit.version):
                raise ValueError("monotonic_since must be a version from 1 to the commit's own")
            if commit.commit_id is not None and not isinstance(commit.commit_id, str):
                raise ValueError("commit_id must be a string")
            if commit.operation not in OPERATIONS:
                raise ValueError(f"unknown operation {commit.operation!r}")
            if commit.operation == OP_EXPIRE and (commit.files or commit.transaction is not None):
                raise ValueError("an expire commit adds no files and carries no transaction")
            if commit.operation == OP_APPEND and "removed" in d:
                raise ValueError("an append commit removes no files")
            if commit.operation == OP_REPLACE:
                check_replace(commit.files, commit.removed)
                if commit.transaction is not None:
                    raise ValueError("a replace commit carries no transaction")
            elif any(f.sources for f in commit.files):
                raise ValueError("only a replace commit adds compacted files")
            if commit.operation == OP_RESTATE:
                check_restate(commit.files, commit.removed, commit.restated)
            elif commit.restated:
                raise ValueError("only a restate commit restates partitions")
        except (KeyError, TypeError, ValueError, InvalidInputError) as e:
            raise ManifestCorruptError(f"corrupt commit {where}: {_reason(e)}") from None
        if expect_version is not None and commit.version != expect_version:
            raise ManifestCorruptError(
                f"corrupt commit {where}: says version {commit.version}, file name says {expect_version}"
            )
        return commit


def check_replace(added: tuple[FileEntry, ...], removed: tuple[FileEntry, ...]) -> None:
    """A replace changes no data: per partition, the records it adds equal those it removes,
    and every compacted file names the originals it holds. ValueError otherwise.

    Checked by the compactor before it commits and by every reader of the commit, so a
    replace that would lose or double records can neither land nor be read.
    """
    if not added or not removed:
        raise ValueError("a replace commit adds and removes files")
    if any(not f.sources for f in added):
        raise ValueError("every file a replace commit adds names its sources")
    count: dict[tuple, list[int]] = {}
    for sign, files in ((0, added), (1, removed)):
        for f in files:
            count.setdefault(tuple(sorted(f.partition.items())), [0, 0])[sign] += f.records
    for part, (out, into) in count.items():
        if out != into:
            where = "/".join(f"{k}={v}" for k, v in part) or "the table"
            raise ValueError(f"a replace commit must keep the records of {where}: it adds {out}, removes {into}")
    originals = [s.path for f in added for s in f.sources]
    if len(originals) != len(set(originals)):
        raise ValueError("a replace commit names an original file twice")
    held = {s.path for f in removed for s in f.sources} | {f.path for f in removed if not f.sources}
    if held != set(originals):
        raise ValueError("the files a replace commit adds must name exactly the originals of those it removes")


def check_restate(added: tuple[FileEntry, ...], removed: tuple[FileEntry, ...],
                  restated: tuple[Restatement, ...]) -> None:
    """A restate's files are exactly its partitions' before and after: every file it adds is staged in
    its partition's staging directory (a moved restate's lies there), every file it removes lies in its
    partition's directory (or in the directory an earlier moved restate left its files in), and each
    partition's record counts match its files. ValueError otherwise.

    Checked by the committer and by every reader, so a restate can neither leave a stray file of
    another partition in the table nor misreport what it changed (the run report and the readers
    downstream say "records before / after" from these counts).
    """
    if not restated:
        raise ValueError("a restate commit restates at least one partition")
    by_part: dict[tuple, Restatement] = {}
    for r in restated:
        key = tuple(sorted(r.partition.items()))
        if key in by_part:
            raise ValueError(f"a restate commit names partition {_spec(key)} twice")
        if posixpath.dirname(r.staging) != posixpath.dirname(r.directory) \
                or not posixpath.basename(r.staging).startswith("."):
            raise ValueError(f"restated {_spec(key)}: staging {r.staging} is not a hidden sibling of {r.directory}")
        by_part[key] = r
    counts = {key: [0, 0] for key in by_part}
    for sign, files in ((0, added), (1, removed)):
        for f in files:
            key = tuple(sorted(f.partition.items()))
            if key not in by_part:
                raise ValueError(f"{f.path} is not in a partition the restate commit restates")
            r = by_part[key]
            if f.kind != KIND_DATA or (sign == 0 and f.sources):  # it may remove a compacted file, not add one
                raise ValueError(f"a restate commit adds and removes only data files, not {f.path}")
            if sign == 0 and r.moved:
                if posixpath.dirname(f.path) != r.staging or f.staged is not None \
                        and posixpath.dirname(f.staged) != r.staging:
                    raise ValueError(f"{f.path} is not in {r.staging}, where {_spec(key)} moves")
            elif logical_dir(f.path) != r.directory or sign == 0 and posixpath.dirname(f.path) != r.directory:
                raise ValueError(f"{f.path} is not in {r.directory}, the directory of {_spec(key)}")
            elif sign == 0 and f.staged != posixpath.join(r.staging, posixpath.basename(f.path)):
                raise ValueError(f"{f.path} must be staged in {r.staging}")
            counts[key][sign] += f.records
    for key, r in by_part.items():
        if counts[key] != [r.records_after, r.records_before]:
            raise ValueError(f"restated {_spec(key)} says {r.records_before} -> {r.records_after} records, "
                             f"its files {counts[key][1]} -> {counts[key][0]}")


def _spec(key: tuple) -> str:
    return "/".join(f"{k}={v}" for k, v in key) or "the table"


def load_document(data: bytes, where: str) -> dict:
    """Parse a log/checkpoint/state JSON document and check its format header."""
    try:
        d = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # RecursionError: nesting too deep
        raise ManifestCorruptError(f"corrupt file {where}: not valid JSON ({_reason(e)})") from None
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise ManifestCorruptError(f"corrupt file {where}: not a {FORMAT} document")
    v = d.get("format_version")
    if v not in READABLE_VERSIONS:
        raise UnsupportedFormatVersionError(
            f"{where} has format_version {v!r}; this trib reads {sorted(READABLE_VERSIONS)}: upgrade trib"
        )
    return d


def _objects(x, what: str) -> list:
    if not isinstance(x, list) or not all(isinstance(i, dict) for i in x):
        raise ValueError(f"{what} must be an array of objects")
    return x


def _strings(x) -> bool:
    return isinstance(x, list) and all(isinstance(i, str) for i in x)


def _is_count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _reason(e: Exception) -> str:
    if isinstance(e, KeyError):
        return f"missing field {e.args[0]!r}"
    return str(e).splitlines()[0] if str(e) else type(e).__name__
