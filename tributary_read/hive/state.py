"""What a partition sync remembers per Hive table: locations and file fingerprints.

SHOW PARTITIONS carries no locations, and a DESCRIBE costs ~100-250 ms per
partition through HiveServer2. So trib remembers, per Hive table, the location
it set and a fingerprint of each partition's files in numbered state files
(see :class:`StateStore`); only partitions it has never seen are described.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from tributary_read.errors import CommitConflictError, ManifestCorruptError
from tributary_read.table.log import META_DIR
from tributary_read.table.manifest import FORMAT, FORMAT_VERSION, load_document
from tributary_read.io.storage import Storage, open_storage
from tributary_read.table.docstore import DocumentSeries, DocumentStore
from tributary_read.table.config import Table
from tributary_read.hive.model import TableName

STATE_DIR = f"{META_DIR}/hive"
#: State versions kept after a save; older ones are deleted.
KEEP_STATES = 3


@dataclass(frozen=True)
class Fingerprint:
    """The visible files of a partition directory: count, bytes, newest mtime."""

    files: int
    bytes: int
    mtime_ms: int


@dataclass(frozen=True)
class Known:
    """What trib knows about one partition: its location and, once synced, its files."""

    location: str
    fingerprint: Fingerprint | None = None

    def to_json(self) -> list:
        fp = self.fingerprint
        return [self.location] + ([fp.files, fp.bytes, fp.mtime_ms] if fp else [None, None, None])

    @classmethod
    def from_json(cls, v) -> Known:
        loc, files, size, mtime = v
        if not isinstance(loc, str):
            raise ValueError("location must be a string")
        fp = Fingerprint(int(files), int(size), int(mtime)) if files is not None else None
        return cls(loc, fp)


@dataclass(frozen=True)
class SyncState:
    version: int
    hive_table: str
    metastore: str
    table_location: str | None
    root: str
    synced_ms: int
    partitions: Mapping[str, Known] = field(default_factory=dict, hash=False)

    def to_json(self) -> dict:
        return {"format": FORMAT, "format_version": FORMAT_VERSION, "kind": "hive-sync",
                "version": self.version, "hive_table": self.hive_table, "metastore": self.metastore,
                "table_location": self.table_location, "root": self.root, "synced_ms": self.synced_ms,
                "partitions": {k: v.to_json() for k, v in sorted(self.partitions.items())}}

    @classmethod
    def from_json(cls, data: bytes, where: str) -> SyncState:
        d = load_document(data, where)
        try:
            if d.get("kind") != "hive-sync":
                raise ValueError(f"kind is {d.get('kind')!r}")
            return cls(int(d["version"]), d["hive_table"], d["metastore"], d.get("table_location"), d["root"],
                       int(d["synced_ms"]), {k: Known.from_json(v) for k, v in d["partitions"].items()})
        except (KeyError, TypeError, ValueError) as e:
            raise ManifestCorruptError(f"corrupt sync state {where}: {e}") from None


class StateStore:
    """Numbered sync states, each created with the table's create-if-absent commit primitive.

    Numbered files rather than one overwritten file: creation is atomic on every
    store trib supports (an overwrite is not, on local disk or HDFS), and two
    concurrent syncs of one Hive table cannot silently overwrite each other's view.
    """

    def __init__(self, storage: Storage, directory: str):
        self.storage = storage
        self.directory = directory
        self._docs = DocumentStore(storage, DocumentSeries(directory, "state-"))

    @classmethod
    def for_table(cls, table: Table, hive: TableName, state_dir: str | None = None,
                  options: Mapping[str, str] | None = None) -> StateStore:
        if state_dir:
            return cls(open_storage(state_dir, options), f"{hive.db}.{hive.name}")
        return cls(table.storage, f"{STATE_DIR}/{hive.db}.{hive.name}")

    def versions(self) -> list[int]:
        return self._docs.numbers()

    def latest(self) -> SyncState | None:
        v = self._docs.latest()
        if not v:
            return None
        data = self._docs.read_bytes(v)
        if data is None:  # pruned by a concurrent sync: its successor exists
            return self.latest()
        return SyncState.from_json(data, self._docs.uri(v))

    def save(self, state: SyncState) -> None:
        if not self._docs.create(state.version, state.to_json()):
            raise CommitConflictError(
                f"another sync of {state.hive_table} saved state version {state.version} meanwhile; "
                "the partition DDL already applied is idempotent: rerun to plan from its view")
        self._docs.prune(KEEP_STATES, state.version)
