"""The read contract: the exact files a run reads, and what a consumer reports beside them.

:class:`FileSet` is what every way of reading returns (``resolve``, a durable
consumer's plan) and what engines consume. It carries everything a caller needs
to open the files: the source URI, the table's data format, and full URIs per
file, so that no caller reopens storage to build paths. Late files and conflicts
are typed records, encoded exactly as the dicts they replace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple

from tributary_read.choice import Choice
from tributary_read.errors import InvalidInputError
from tributary_read.io.storage import safe_relpath

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.io.formats import DataFormat
    from tributary_read.io.storage import Storage
    from tributary_read.read.listing import Skipped
    from tributary_read.read.tracking import Untracked
    from tributary_read.table.config import Table
    from tributary_read.table.layout import Layout


class ReadMode(Choice):
    """How ``resolve`` chooses files (see :mod:`tributary_read.read.resolve`)."""

    AUTO = "auto"
    MANIFEST = "manifest"
    MTIME = "mtime"
    BOTH = "both"


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _partition(d: Mapping) -> dict[str, str]:
    part = d.get("partition") or {}
    if not isinstance(part, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in part.items()):
        raise ValueError("partition must map strings to strings")
    return part


@dataclass(frozen=True)
class ResolvedFile:
    path: str
    size: int
    partition: Mapping[str, str] = field(hash=False)
    mtime_ms: int | None = None
    records: int | None = None
    version: int | None = None
    valid_length: int | None = None
    #: A file that grew after it was delivered: only bytes ``[offset, valid_length)`` are this read's
    #: (tributary_read.read.growth); a reader that ignores it reads delivered bytes again.
    offset: int | None = None

    @property
    def readable_bytes(self) -> int:
        return (self.size if self.valid_length is None else self.valid_length) - (self.offset or 0)

    def to_json(self) -> dict:
        d: dict[str, Any] = {"path": self.path, "size": self.size, "mtime_ms": self.mtime_ms,
                             "partition": dict(self.partition)}
        for k in ("records", "version", "valid_length", "offset"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        return d

    @classmethod
    def from_json(cls, d: Mapping) -> ResolvedFile:
        """Decode a stored file (a consumer plan), as strictly as a commit entry.

        A plan file is read back and handed to engines, so a tampered one must
        not smuggle in ``../../etc/passwd`` or an absolute path: the path goes
        through :func:`safe_relpath` (InvalidInputError, a ValueError, which the
        consumer reports as a corrupt plan).
        """
        part = _partition(d)
        size = d["size"]
        opt = [d.get(k) for k in ("mtime_ms", "records", "version", "valid_length", "offset")]
        if not _is_int(size) or size < 0 or not all(x is None or _is_int(x) for x in opt):
            raise ValueError("size, mtime_ms, records, version, valid_length and offset must be integers")
        if opt[4] is not None and (opt[3] is None or not 0 <= opt[4] <= opt[3]):
            raise ValueError("an offset needs a valid length at or after it")
        return cls(safe_relpath(d["path"]), size, part, *opt)


class Fingerprint(NamedTuple):
    """What a listing consumer remembers of a delivered file; a change means it was rewritten."""

    size: int
    mtime_ms: int
    valid_length: int | None = None

    def to_json(self) -> dict:
        return {"size": self.size, "mtime_ms": self.mtime_ms, "valid_length": self.valid_length}

    @classmethod
    def from_json(cls, d: Mapping) -> Fingerprint:
        fp = cls(d["size"], d["mtime_ms"], d.get("valid_length"))
        if not (_is_int(fp.size) and _is_int(fp.mtime_ms) and (fp.valid_length is None or _is_int(fp.valid_length))):
            raise ValueError("size, mtime_ms and valid_length must be integers")
        return fp


@dataclass(frozen=True)
class LateFile:
    """A file a listing consumer does not deliver: it arrived in a partition past the lookback horizon.

    Reported once, never silently dropped: the partition's files were sealed
    into a digest, so a late arrival is noticed but cannot be delivered as
    new. ``path`` ends with ``/`` when a whole partition changed and emptied.
    Not handed to engines, so the path is reported as found, not sanitised.
    """

    path: str
    size: int
    mtime_ms: int | None
    partition: Mapping[str, str] = field(hash=False)
    reason: str
    valid_length: int | None = None

    def to_json(self) -> dict:
        d: dict[str, Any] = {"path": self.path, "size": self.size, "mtime_ms": self.mtime_ms,
                             "partition": dict(self.partition), "reason": self.reason}
        if self.valid_length is not None:
            d["valid_length"] = self.valid_length
        return d

    @classmethod
    def from_json(cls, d: Mapping) -> LateFile:
        late = cls(d["path"], d["size"], d.get("mtime_ms"), _partition(d), d["reason"], d.get("valid_length"))
        if not isinstance(late.path, str) or not isinstance(late.reason, str) or not _is_int(late.size) \
                or not all(x is None or _is_int(x) for x in (late.mtime_ms, late.valid_length)):
            raise ValueError("a late file needs a string path and reason and integer size and times")
        return late


@dataclass(frozen=True)
class Conflict:
    """A delivered file that changed since beyond a growth (shrank, rewritten, a Parquet file grew).

    Planned only when the caller acknowledged such changes (``allow_changed``;
    else the partition is held back, :class:`HeldPartition`): reported once, not redelivered. ``reason`` says how it changed.
    """

    path: str
    partition: Mapping[str, str] = field(hash=False)
    delivered: Fingerprint
    now: Fingerprint
    reason: str = "changed after it was delivered"

    def to_json(self) -> dict:
        return {"path": self.path, "partition": dict(self.partition), "delivered": self.delivered.to_json(),
                "now": self.now.to_json(), "reason": self.reason}

    @classmethod
    def from_json(cls, d: Mapping) -> Conflict:
        c = cls(d["path"], _partition(d), Fingerprint.from_json(d["delivered"]), Fingerprint.from_json(d["now"]),
                d["reason"])
        if not isinstance(c.path, str) or not isinstance(c.reason, str):
            raise ValueError("a conflict needs a string path and reason")
        return c


@dataclass(frozen=True)
class HeldPartition:
    """A partition a listing consumer holds back: a file it delivered there was removed or changed.

    Nothing of the partition is delivered (its new files wait too) and its ledger
    stays as it was, so every plan reports it again until ``trib consumer replay``
    resolves it; the rest of the plan is delivered. ``changes`` names the files
    and what happened to each. ``exact``: the consumer kept the partition's files,
    so replaying it without redelivery is exact; False for a partition an older
    trib sealed into a digest only, where which files are new cannot be told.
    """

    path: str
    partition: Mapping[str, str] = field(hash=False)
    changes: tuple[str, ...]
    exact: bool = True

    def to_json(self) -> dict:
        return {"path": self.path, "partition": dict(self.partition), "changes": list(self.changes),
                "exact": self.exact}

    @classmethod
    def from_json(cls, d: Mapping) -> HeldPartition:
        h = cls(d["path"], _partition(d), tuple(d.get("changes") or ()), bool(d.get("exact", True)))
        if not isinstance(h.path, str) or not all(isinstance(c, str) for c in h.changes):
            raise ValueError("a held partition needs a string path and changes")
        return h


@dataclass(frozen=True)
class FileSet:
    """The resolved files plus how they were chosen (mode and window/plan).

    ``root`` is the source URI, as a user passes it back to trib
    (``file:///abs/root``, ``s3://bucket/prefix``); every file path is relative
    to it and :meth:`uri` joins the two. ``hadoop_root`` is the same place as
    Spark and Hive spell it (``file:/abs/root``, ``s3a://bucket/prefix``), None
    where they cannot reach it (an in-memory store). ``format`` is the table's
    data format, None for a plain directory (whose files may be anything).
    Build these with :func:`origin`, once, from the storage that was listed.
    """

    mode: str
    files: tuple[ResolvedFile, ...]
    plan: Mapping[str, Any] = field(default_factory=dict, hash=False)
    root: str = ""
    #: Files that look like data but are not returned, each with the reason.
    skipped: tuple[Skipped, ...] = ()
    stats: Mapping[str, Any] = field(default_factory=dict, hash=False)
    #: Data the table holds that this answer leaves out (see tributary_read.tracking).
    untracked: Untracked | None = None
    format: DataFormat | None = None
    hadoop_root: str | None = None
    #: The source's layout (the table's, or the one given for a plain directory),
    #: from which engines derive partition columns; None when unknown.
    layout: Layout | None = field(default=None, compare=False)

    @property
    def source(self) -> str:
        """The table or directory URI the files were resolved from."""
        return self.root

    def uri(self, f: ResolvedFile | str) -> str:
        """Full URI of one file (a :class:`ResolvedFile` or a root-relative path), as trib spells it.

        ``s3://`` for S3, which boto3 and pyarrow read; :meth:`hadoop_uri` for Spark and Hive.
        """
        return f"{self.root}/{safe_relpath(f if isinstance(f, str) else f.path)}"

    def hadoop_uri(self, f: ResolvedFile | str) -> str:
        """Full URI of one file as Spark and Hive want it (``s3a://`` for S3)."""
        if self.hadoop_root is None:
            raise InvalidInputError(f"{self.root} lives in this process only: Spark and Hive cannot read it")
        return f"{self.hadoop_root.rstrip('/')}/{safe_relpath(f if isinstance(f, str) else f.path)}"

    def uris(self, storage=None) -> list[str]:
        """Full URIs of every file. ``storage`` is ignored (kept for older callers)."""
        return [self.uri(f) for f in self.files]

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
        if self.untracked is not None:
            d["untracked"] = self.untracked.to_json()
        if self.format is not None:
            d["format"] = self.format.to_json()
        return d


def origin(storage: Storage, table: Table | None = None, layout: Layout | None = None) -> dict[str, Any]:
    """The :class:`FileSet` fields that say where its files live and what they hold.

    ``root``, ``hadoop_root``, ``format`` and ``layout``, read once from the
    storage that was listed and the table's properties (``layout``: a plain
    directory's, which only the caller knows), so that a FileSet's consumers
    (the CLI, Spark) never open storage again to spell a path.
    """
    hadoop = storage.hadoop_uri() if storage.capabilities.hadoop_scheme is not None else None
    return {"root": storage.uri, "hadoop_root": hadoop,
            "format": table.config.data_format if table is not None else None,
            "layout": table.layout if table is not None else layout}
