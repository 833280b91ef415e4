"""Append snapshots built from pyiceberg's lower-level pieces, several to one catalog commit, at a flat cost.

pyiceberg 0.12's transaction deep-copies the whole table metadata about fifteen times per snapshot, and
its fast append lists every earlier manifest again in each new manifest list, so the cost of one
snapshot grew with every snapshot before it (0.14 s per commit over the first 100, 0.5 s at 300, on
one-file commits). A mirror's append needs none of that: this module writes the commit's manifest with
``write_manifest``, the new manifest list with ``write_manifest_list``, and hands the snapshot to the
catalog's own atomic ``commit_table``, guarded by :class:`AssertRefSnapshotId` (the ref still points at
the snapshot these were built on) and :class:`AssertTableUUID`. A concurrent mirror's commit makes the
catalog refuse it with ``CommitFailedException``, and what this run wrote is deleted again.

Three things keep each snapshot's cost flat as the table grows:

* **Manifests merged by tiers.** A manifest holds the files of a few commits. When :data:`MERGE_FANOUT`
  manifests of the same tier (their file count's power of the fan-out) are listed, they are rewritten as
  one of the next tier, their entries kept as ``EXISTING`` with their own snapshot and sequence numbers;
  a manifest that reached :data:`MANIFEST_TARGET_BYTES` (Iceberg's ``commit.manifest.target-size-bytes``
  default) or half of :data:`MERGE_MAX_FILES` entries is left alone, so no one sync rewrites more than that
  many entries. A manifest list names about a hundred manifests at a million files, and each file is
  rewritten at most log_fanout(MERGE_MAX_FILES) times over the table's life.
* **A bounded history.** Each commit expires the snapshots beyond the newest :data:`KEEP_PROPERTY` (a
  table property, :data:`DEFAULT_KEEP`; 0 keeps all, at a cost that grows again), in the same catalog
  commit, and then deletes the manifest lists and manifests only expired snapshots named. Branch and tag
  heads are never expired. The newest snapshot alone says where a mirror resumes, so no expiry can make a
  rerun register a file twice; readers can time-travel to the kept snapshots only.
* **Several snapshots per catalog commit.** A sync that is behind adds up to :data:`BATCH` snapshots, one
  per trib commit, each followed by its ``main`` ref update, in one ``commit_table``: the Iceberg REST
  and SQL catalogs apply a commit's updates in order, and the history is the same as one commit each.
"""

from __future__ import annotations

from tributary_read.iceberg import deps  # noqa: F401 - first: names the extra when pyiceberg is missing

import math
import uuid
from typing import Any, cast

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.avro.codecs import AvroCompressionCodec
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile, ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestFile, \
    write_manifest, write_manifest_list
from pyiceberg.table import Table as IcebergTable, TableProperties
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, SnapshotSummaryCollector, Summary, update_snapshot_summaries
from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, AssertTableUUID, RemoveSnapshotsUpdate, \
    SetSnapshotRefUpdate, TableRequirement, TableUpdate
from pyiceberg.table.update.snapshot import _new_manifest_file_name, _new_manifest_list_file_name

from tributary_read.errors import InvalidInputError

#: The table property that bounds the history: how many snapshots a mirror keeps (0: all).
KEEP_PROPERTY = "trib.snapshots-kept"
#: Enough for a reader that planned a scan a hundred commits ago to still find its manifests.
DEFAULT_KEEP = 100
#: Snapshots added by one catalog commit at most (a sync far behind commits in steps this size).
BATCH = 50
#: Manifests of one tier that are merged into one of the next tier.
MERGE_FANOUT = 10
#: A manifest this large is never merged again (Iceberg's default target size of a merged manifest).
MANIFEST_TARGET_BYTES = 8 * 1024 * 1024
#: A merge writes at most this many entries, and a manifest of half as many is not merged again. It bounds
#: the slowest sync (pyiceberg writes Avro in Python, about 0.25-0.5 ms an entry: a merge into one
#: 100,000-entry manifest took 52 s) and what an overwrite rewrites to drop one file from its manifest.
MERGE_MAX_FILES = 10_000


def kept(properties: dict[str, str], name: str) -> int:
    """The table's :data:`KEEP_PROPERTY`: a count of snapshots, 0 for all."""
    raw = properties.get(KEEP_PROPERTY, str(DEFAULT_KEEP))
    if not raw.isdigit():
        raise InvalidInputError(f"Iceberg table {name}: property {KEEP_PROPERTY} = {raw!r} is not a count of "
                                "snapshots; set it to a whole number (0 keeps every snapshot)")
    return int(raw)


def _files(m: ManifestFile) -> int:
    return (m.added_files_count or 0) + (m.existing_files_count or 0)


def _tier(m: ManifestFile) -> int:
    return int(math.log(max(_files(m), 1), MERGE_FANOUT))


def _full(m: ManifestFile) -> bool:
    """A manifest no merge takes again: large in bytes or in entries."""
    return m.manifest_length >= MANIFEST_TARGET_BYTES or 2 * _files(m) >= MERGE_MAX_FILES


def _group(manifests: list[ManifestFile]) -> list[ManifestFile]:
    """The manifests of one tier that merge: the smallest first, as many as fit in :data:`MERGE_MAX_FILES`."""
    take: list[ManifestFile] = []
    total = 0
    for m in sorted(manifests, key=_files):
        if take and total + _files(m) > MERGE_MAX_FILES:
            break
        take.append(m)
        total += _files(m)
    return take


class Appender:
    """Append snapshots for one Iceberg table, built in memory and committed together by :meth:`commit`."""

    def __init__(self, ice: IcebergTable, keep: int):
        self.ice = ice
        self.keep = keep
        self.metadata = ice.metadata
        self.io: FileIO = ice.io
        self.base = self.metadata.current_snapshot()
        self.compression = cast(AvroCompressionCodec, self.metadata.properties.get(
            TableProperties.WRITE_AVRO_COMPRESSION, TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT))
        self.updates: list[TableUpdate] = []
        self.snapshots: list[Snapshot] = []
        self.written: list[str] = []
        self.manifests: list[ManifestFile] | None = None  # the head's manifest list, read once per batch
        self.sequence = self.metadata.next_sequence_number() - 1  # v2: the last one; v1 has none
        self.commit_uuid = uuid.uuid4()
        self.files = 0

    def __len__(self) -> int:
        return len(self.snapshots)

    def _new_path(self, name: str) -> str:
        path = self.ice.location_provider().new_metadata_location(name)
        self.written.append(path)
        return path

    def _head(self) -> Snapshot | None:
        return self.snapshots[-1] if self.snapshots else self.base

    def append(self, files: list[DataFile], properties: dict[str, str]) -> Snapshot:
        """One append snapshot of ``files`` on top of the previous one, with ``properties`` in its summary."""
        md = self.metadata
        head = self._head()
        if self.manifests is None:
            self.manifests = head.manifests(self.io) if head is not None else []
        snapshot_id = md.new_snapshot_id()
        while any(s.snapshot_id == snapshot_id for s in self.snapshots):
            snapshot_id = md.new_snapshot_id()
        self.sequence += 1
        spec, schema = md.spec(), md.schema()
        new: list[ManifestFile] = []
        if files:
            with write_manifest(md.format_version, spec, schema, self.io.new_output(self._new_path(
                    _new_manifest_file_name(self.files, self.commit_uuid))), snapshot_id, self.compression) as w:
                for df in files:
                    w.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id,
                                                  sequence_number=None, file_sequence_number=None, data_file=df))
            self.files += 1
            new.append(w.to_manifest_file())
        manifests = new + self._merge(self.manifests, snapshot_id, spec.spec_id)
        path = self._new_path(_new_manifest_list_file_name(snapshot_id, 0, self.commit_uuid))
        with write_manifest_list(md.format_version, self.io.new_output(path), snapshot_id,
                                 head.snapshot_id if head is not None else None, self.sequence,
                                 self.compression) as lw:
            lw.add_manifests(manifests)
        # What the list writer stored: the new manifests with this snapshot's sequence number.
        self.manifests = [_assigned(m, self.sequence) for m in manifests]
        ssc = SnapshotSummaryCollector()
        for df in files:
            ssc.add_file(df, schema=schema, partition_spec=spec)
        summary = update_snapshot_summaries(Summary(operation=Operation.APPEND, **ssc.build(), **properties),
                                            previous_summary=head.summary if head is not None else None)
        fields: dict[str, Any] = {"snapshot_id": snapshot_id, "sequence_number": self.sequence, "manifest_list": path,
                                  "parent_snapshot_id": head.snapshot_id if head is not None else None,
                                  "summary": summary, "schema_id": md.current_schema_id}
        snap = Snapshot(**fields)
        self.snapshots.append(snap)
        ref: dict[str, Any] = {"ref_name": MAIN_BRANCH, "type": SnapshotRefType.BRANCH, "snapshot_id": snapshot_id}
        self.updates += [AddSnapshotUpdate(snapshot=snap), SetSnapshotRefUpdate(**ref)]
        return snap

    def _merge(self, manifests: list[ManifestFile], snapshot_id: int, spec_id: int) -> list[ManifestFile]:
        """``manifests`` with each tier of :data:`MERGE_FANOUT` small manifests rewritten as one."""
        while True:
            tiers: dict[int, list[ManifestFile]] = {}
            for m in manifests:
                if m.content == ManifestContent.DATA and m.partition_spec_id == spec_id and not _full(m):
                    tiers.setdefault(_tier(m), []).append(m)
            ready = [_group(group) for _, group in sorted(tiers.items()) if len(group) >= MERGE_FANOUT]
            ready = [group for group in ready if len(group) > 1]
            if not ready:
                return manifests
            group = ready[0]
            md = self.metadata
            with write_manifest(md.format_version, md.spec(), md.schema(), self.io.new_output(self._new_path(
                    _new_manifest_file_name(self.files, self.commit_uuid))), snapshot_id, self.compression) as w:
                for m in group:
                    for entry in m.fetch_manifest_entry(self.io, discard_deleted=True):
                        w.existing(entry)
            self.files += 1
            gone = {m.manifest_path for m in group}
            manifests = [w.to_manifest_file()] + [m for m in manifests if m.manifest_path not in gone]

    def _expired(self) -> list[Snapshot]:
        """The oldest snapshots beyond :attr:`keep` once this batch lands, never a branch or tag head."""
        have = self.metadata.snapshots
        extra = len(have) + len(self.snapshots) - self.keep
        if self.keep <= 0 or extra <= 0:
            return []
        heads = other_heads(self.metadata)
        old = sorted((s for s in have if s.snapshot_id not in heads), key=lambda s: (s.sequence_number or 0,
                                                                                     s.timestamp_ms))
        return old[:extra]

    def commit(self) -> IcebergTable:
        """The batch as one catalog commit; raises CommitFailedException (having deleted what it wrote) when
        the table's ``main`` moved since the batch was built on it."""
        if not self.snapshots:
            return self.ice
        expired = self._expired()
        updates = list(self.updates)
        if expired:
            remove: dict[str, Any] = {"snapshot_ids": [s.snapshot_id for s in expired]}
            updates.append(RemoveSnapshotsUpdate(**remove))
        head: dict[str, Any] = {"ref": MAIN_BRANCH, "snapshot_id": self.base.snapshot_id if self.base else None}
        requirements: tuple[TableRequirement, ...] = (AssertTableUUID(uuid=self.metadata.table_uuid),
                                                      AssertRefSnapshotId(**head))
        try:
            self.ice._do_commit(tuple(updates), requirements)  # the catalog's atomic commit, old metadata pruned
        except CommitFailedException:
            _delete(self.io, self.written)
            raise
        if expired:
            collect(self.ice, expired, self.written)
        return self.ice


def other_heads(metadata) -> set[int]:
    """The snapshots other branches and tags point at: never expired by the mirror, whatever it expires."""
    return {ref.snapshot_id for name, ref in metadata.refs.items() if name != MAIN_BRANCH}


def collect(ice: IcebergTable, expired: list[Snapshot], written: list[str] | tuple[str, ...] = ()) -> None:
    """Delete the manifest lists and manifests that only ``expired`` snapshots named, once the catalog commit
    that removed them landed (a crash before leaves orphans, never a snapshot without its files); ``written``:
    what that commit wrote itself, never deleted here.

    A manifest stays listed from the snapshot that wrote it until a merge or a delete drops it, and never
    comes back, so what a kept snapshot names is what the oldest kept one on ``main`` names, plus what
    this batch wrote, plus the lists of kept snapshots off ``main`` (read apart; there are none unless a
    table was rolled back)."""
    io = ice.io
    gone = {s.snapshot_id for s in expired}
    by_id = {s.snapshot_id: s for s in ice.metadata.snapshots}
    chain, cur = set(), ice.metadata.current_snapshot()
    oldest = cur
    while cur is not None and cur.snapshot_id in by_id:
        chain.add(cur.snapshot_id)
        oldest = cur
        cur = by_id.get(cur.parent_snapshot_id) if cur.parent_snapshot_id is not None else None
    live: set[str] = set()
    for s in [oldest] + [s for s in by_id.values() if s.snapshot_id not in chain]:
        if s is not None:
            live.update(m.manifest_path for m in s.manifests(io))
    doomed: set[str] = set()
    for s in expired:
        doomed.add(s.manifest_list)
        doomed.update(m.manifest_path for m in s.manifests(io))
    doomed -= live
    doomed -= set(written)
    assert not gone & set(by_id)
    prefix = ice.metadata.location.rstrip("/") + "/metadata/"
    _delete(io, [p for p in doomed if p.startswith(prefix) and p.endswith(".avro")])


def _assigned(m: ManifestFile, sequence: int) -> ManifestFile:
    """``m`` as a manifest list read back would give it: sequence numbers it left unassigned set to ``sequence``."""
    from pyiceberg.manifest import UNASSIGNED_SEQ

    if m.sequence_number != UNASSIGNED_SEQ and m.min_sequence_number != UNASSIGNED_SEQ:
        return m
    from copy import copy

    out = copy(m)
    if out.sequence_number == UNASSIGNED_SEQ:
        out.sequence_number = sequence
    if out.min_sequence_number == UNASSIGNED_SEQ:
        out.min_sequence_number = sequence
    return out


def _delete(io: FileIO, paths) -> None:
    for p in paths:
        try:
            io.delete(p)
        except (FileNotFoundError, OSError):
            pass
