"""``trib iceberg sync``: bring an Iceberg table up to a trib table's latest version, one snapshot per commit.

Nothing is rewritten: each trib commit's files are registered as Iceberg DataFiles built from the
manifest (path, size, record count, partition values) plus the column statistics of their Parquet
footers. Each trib commit becomes one Iceberg snapshot, in version order:

* an append (ingest, an ETL run) is a fast append of its files;
* a replace (``trib compact``) and a restate (a restated partition) are one snapshot that deletes the
  files they remove and adds the files they add, so no reader sees both or neither: Iceberg's ``replace``
  for a compaction (the records unchanged), ``overwrite`` for a restate;
* an expiry deletes its files.

Appends are written by :mod:`tributary_read.iceberg.appends` from pyiceberg's lower-level pieces, several
to one catalog commit, with manifests merged and the history bounded, so a commit costs the same at a
million files as at a hundred; the rarer commits above go through pyiceberg's transaction.

Each snapshot's summary names the trib version it registers (:mod:`tributary_read.iceberg.summary`), so
the Iceberg table alone says where a rerun resumes. pyiceberg's own retry of a failed catalog commit is
turned off for the mirror's tables: it would re-apply a commit on top of a concurrent mirror's copy of the
same commit. A conflict is read back instead, and the run goes on from what the catalog then holds.
"""

from __future__ import annotations

from tributary_read.iceberg import deps  # noqa: F401 - first: names the extra when pyiceberg is missing

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.exceptions import (CommitFailedException, NoSuchIcebergTableError, NoSuchPropertyException,
                                  NoSuchTableError as NoSuchIcebergTable, TableAlreadyExistsError)
from pyiceberg.table import Table as IcebergTable, TableProperties
from pyiceberg.table.name_mapping import create_mapping_from_schema
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update import RemoveSnapshotsUpdate
from pyiceberg.table.update.snapshot import _FastAppendFiles, _OverwriteFiles

from tributary_read.errors import CommitConflictError, InvalidInputError, LogRetentionError
from tributary_read.faults import crash_point
from tributary_read.iceberg import appends
from tributary_read.iceberg import partition_by as partition_by_text
from tributary_read.iceberg import schema as shape
from tributary_read.iceberg import summary as marks
from tributary_read.iceberg.catalog import answering, check_name, check_uri, default_catalog_uri, open_catalog
from tributary_read.table.config import Table
from tributary_read.table.log import commit_path
from tributary_read.table.manifest import KIND_DATA, OP_APPEND, OP_EXPIRE, OP_REPLACE, Commit, FileEntry
from tributary_read.table.renames import finish_renames, locations

#: Table properties the mirror sets on the tables it creates. No retry: see the module docstring.
#: ``gc.enabled = false``: the data files are trib's, and trib's ``expire`` and ``clean`` delete them; Iceberg's
#: own maintenance (Spark's ``expire_snapshots``, ``remove_orphan_files``, ``DROP TABLE ... PURGE``) refuses
#: to delete data files of such a table, as it does for a table made by Iceberg's ``snapshot`` procedure.
GC_ENABLED = "gc.enabled"
#: Settings the mirror holds its tables to: set at creation, and set back by every sync if changed.
ENFORCED = {TableProperties.COMMIT_NUM_RETRIES: "0", GC_ENABLED: "false"}
PROPERTIES = {**ENFORCED, "format-version": "2",
              # Each commit writes a new metadata file; keep Iceberg's default 100 of them, not every one.
              TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED: "true"}
#: How many concurrent mirrors' commits one run reads back before it gives up (each is progress).
MAX_CONFLICTS = 100
#: Footers read at once: each is a small ranged read, mostly latency on remote stores.
FOOTER_THREADS = 8


@dataclass
class SyncResult:
    """What one ``trib iceberg sync`` did: the versions it registered, as snapshots."""

    table: str
    iceberg_table: str
    catalog: str
    start_version: int
    version: int
    snapshots: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"table": self.table, "iceberg_table": self.iceberg_table, "catalog": self.catalog,
                "start_version": self.start_version, "version": self.version, "snapshots": self.snapshots}


def sync(table: Table, name: str, catalog_uri: str | None = None, partition_by: str | None = None) -> SyncResult:
    """Register every trib commit after the Iceberg table's position, in order; create the table on first use.

    ``partition_by`` (``hour(ts)``, ``day(ts)``; :mod:`tributary_read.iceberg.partition_by`) is the transform a
    new table is partitioned by besides the layout's keys. An existing table keeps the spec it was created
    with: None follows it; another transform is refused (one line, nothing registered)."""
    shape.check_parquet(table)
    check_name(name)
    asked = partition_by_text.parse(partition_by)
    partition_by_text.check_layout(asked, table.layout)
    uri = check_uri(catalog_uri or default_catalog_uri())
    with answering(uri):
        return _sync(table, name, uri, asked)


def _sync(table: Table, name: str, uri: str, asked: partition_by_text.PartitionBy | None) -> SyncResult:
    catalog = open_catalog(uri)
    ident = marks.identity(table)
    target = table.log.latest_version()
    ice = load(catalog, name, ident)
    part = shape.Partitioning(table.layout, _spec(ice, table, name, asked) if ice is not None else asked)
    start = _position(ice, ident, name)
    result = SyncResult(table.uri, name, uri, start, start)
    conflicts = 0
    while result.version < target:
        try:
            ice = _mirror(table, catalog, name, ice, ident, part, result, target)
        except CommitFailedException:
            conflicts += 1
            if conflicts > MAX_CONFLICTS:
                raise CommitConflictError(f"Iceberg table {name}: {MAX_CONFLICTS} catalog commits lost to concurrent "
                                          "mirrors in one run; run trib iceberg sync again") from None
            ice = load(catalog, name, ident)
            result.version = _position(ice, ident, name)  # another mirror registered it: go on from there
    ice = load(catalog, name, ident)
    crash_point("iceberg-read-back")
    done = _position(ice, ident, name)
    if done < target:  # cannot happen unless a commit vanished: never report a mirror that is not there
        raise CommitConflictError(f"Iceberg table {name} reads back version {done}, not {target}: run trib iceberg "
                                  "sync again")
    result.version = done
    return result


def _reveal(table: Table, files: list[FileEntry]) -> None:
    """Finish the renames of ``files`` (those no later commit removed: the rename protocol: a writer killed
    between its commit and its renames, or a restate not yet swapped in, leaves them under hidden names),
    before Iceberg is told their final names, as every trib reader does before it hands out a path. Files a
    later commit removed are left alone by the caller: their bytes may be set aside or deleted, and no
    current snapshot names them. (Which files are removed later is read from the commits being mirrored,
    not from the table's whole state, which costs as much as the table is large.)"""
    mine = [f for f in files if f.staged]
    if mine:
        finish_renames(table, mine)


def _spec(ice: IcebergTable, table: Table, name: str, asked: partition_by_text.PartitionBy | None):
    """The transform the existing Iceberg table was created with, refusing a sync that asks for another."""
    existing = shape.spec_partition_by(ice.spec(), ice.schema(), table.layout.keys, name)
    shape.check_spec(existing, asked, name)
    return existing


def load(catalog, name: str, ident: dict[str, str]) -> IcebergTable | None:
    """The Iceberg table ``name`` (None: not created yet), refused unless trib created it for ``ident``
    (a trib table, or a landing zone's consumer), with the settings the mirror enforces."""
    try:
        ice = catalog.load_table(name)
    except (NoSuchIcebergTableError, NoSuchPropertyException):  # a Hive catalog's table of another format
        raise InvalidInputError(f"{name} is a table of the metastore that is not an Iceberg table: mirror into "
                                "another NS.NAME") from None
    except NoSuchIcebergTable:
        return None
    marks.check_owner(ice.properties, ident, name)
    changed = {k: v for k, v in ENFORCED.items() if ice.properties.get(k) != v}
    if changed:  # set back if someone changed them (or a table made by an older trib lacks one)
        with ice.transaction() as tx:
            tx.set_properties(changed)
        ice = catalog.load_table(name)
    return ice


def _position(ice: IcebergTable | None, ident: dict[str, str], name: str) -> int:
    snap = ice.current_snapshot() if ice is not None else None
    if snap is None:
        return 0
    if snap.summary is None:  # a snapshot with no summary at all: not one of the mirror's
        return marks.position({}, ident, name, snap.snapshot_id)
    summary = {**snap.summary.additional_properties, "operation": str(snap.summary.operation.value)}
    return marks.position(summary, ident, name, snap.snapshot_id)


def _mirror(table: Table, catalog, name: str, ice: IcebergTable | None, ident: dict[str, str],
            part: shape.Partitioning, result: SyncResult, target: int) -> IcebergTable:
    """Register the commits after ``result.version`` up to ``target``; raises CommitFailedException when a
    concurrent mirror committed first (nothing of this run's pending snapshots landed then).

    Appends are batched (:mod:`tributary_read.iceberg.appends`); a commit that changes the schema, replaces
    or deletes files first commits the batch, then goes through pyiceberg's own snapshot producers."""
    commits = list(_commits(table, result.version, target))
    removed_at: dict[str, int] = {}  # path -> the last version that removed it, for _reveal
    for c in commits:
        for f in c.removed:
            removed_at[f.path] = c.version
    batch: appends.Appender | None = None
    pending: list[dict] = []

    def flush() -> None:
        nonlocal ice, batch
        if batch is None or not len(batch):
            return
        crash_point("iceberg-prepared")
        with answering(result.catalog, committing=_versions(pending[0]["version"], pending[-1]["version"])):
            ice = batch.commit()
        crash_point("iceberg-committed")
        result.version = pending[-1]["version"]
        result.snapshots += pending
        pending.clear()
        batch = None

    for commit in commits:
        crash_point("iceberg-listed")
        added = [f for f in commit.files if f.kind == KIND_DATA]
        _reveal(table, [f for f in added if removed_at.get(f.path, 0) <= commit.version])
        footers = _footers(table, added)
        sets = shape.column_sets(added, footers)  # each distinct column set once, for every check below
        if ice is None:
            schema, spec = shape.initial_schema(sets[0][1] if sets else pa.schema([]), part.keys, part.by)
            log_uri = table.storage.uri_for(commit_path(commit.version))
            for f, footer in zip(added, footers):  # a file the spec refuses: refused before the table is made
                part.record(f, log_uri, table.storage.uri_for(f.path), footer)
            ice = create(catalog, name, ident, schema, spec, lambda made: _spec(made, table, name, part.by))
        record = {"version": commit.version, "operation": commit.operation, "added": len(added),
                  "removed": sum(f.kind == KIND_DATA for f in commit.removed)}
        if record["removed"] or commit.operation == OP_EXPIRE or _widens(ice, sets):
            flush()
            assert ice is not None
            with answering(result.catalog, committing=_versions(commit.version, commit.version)):
                ice = _commit(table, ice, ident, part, commit, added, footers, sets)
            result.version = commit.version
            result.snapshots.append(record)
            continue
        if batch is None:
            keep = appends.kept(ice.properties, name)
            batch = appends.Appender(ice, keep)
        metadata = ice.metadata
        _check_columns(table, metadata, sets)
        batch.append(_data_files(table, metadata, part, commit, added, footers), _props(ident, commit))
        pending.append(record)
        if len(batch) >= min(appends.BATCH, batch.keep or appends.BATCH):
            flush()
    flush()
    assert ice is not None or result.version == target
    return ice  # type: ignore[return-value]


def _versions(first: int, last: int) -> str:
    return f"version {first}" if first == last else f"versions {first}-{last}"


def _widens(ice: IcebergTable, sets: list[tuple[FileEntry, pa.Schema]]) -> bool:
    """Whether a file of the commit has a column the Iceberg schema lacks (a schema update goes first)."""
    schema = ice.metadata.schema()
    return any(shape.new_columns(schema, cols) for _, cols in sets)


def _check_columns(table: Table, metadata, sets: list[tuple[FileEntry, pa.Schema]]) -> None:
    """Refuse a file whose columns do not fit the Iceberg schema, each distinct footer schema checked once."""
    for f, cols in sets:
        shape.check_compatible(metadata.schema(), cols, table.storage.uri_for(f.path), metadata.format_version)


def _props(ident: dict[str, str], commit: Commit) -> dict[str, str]:
    return {**ident, marks.VERSION: str(commit.version), marks.OPERATION: commit.operation}


def _data_files(table: Table, metadata, part: shape.Partitioning, commit: Commit, added: list[FileEntry],
                footers: list):
    log_uri = table.storage.uri_for(commit_path(commit.version))
    return [shape.data_file(metadata, table.storage.uri_for(f.path), f, part, log_uri, footer)
            for f, footer in zip(added, footers)]


def _commits(table: Table, position: int, target: int):
    """The commits after ``position``, or, for a new mirror of a table whose first commits log retention
    removed, the state of its newest checkpoint as one append, then the commits after it."""
    oldest = table.log.oldest_version()
    if oldest > position + 1:
        if position:
            raise LogRetentionError(f"the Iceberg mirror is at version {position}, but the log of {table.uri} keeps "
                                    f"versions {oldest} on: mirror into a new Iceberg table")
        state = table.log.state(table.log.last_checkpoint())
        yield Commit(state.version, 0, tuple(state.files.values()), operation=OP_APPEND)
        position = state.version
    yield from table.log.commits(position, target)


def _footers(table: Table, files: list[FileEntry]) -> list:
    """Each file's Parquet footer, from wherever its bytes are now (final, staged, or set aside by a later
    compaction); None where none is left (``trib clean`` removed a file a later commit removed)."""
    def one(f: FileEntry):
        for rel in locations(f):
            if table.storage.file_exists(rel):  # a read error of a file that is there is an error, not a miss
                with table.storage.open_input(rel) as handle:
                    return pq.read_metadata(handle)
        return None

    if len(files) <= 1:
        return [one(f) for f in files]
    with ThreadPoolExecutor(min(FOOTER_THREADS, len(files))) as pool:
        return list(pool.map(one, files))


def create(catalog, name: str, ident: dict[str, str], schema, spec,
           fits: Callable[[IcebergTable], object] | None = None) -> IcebergTable:
    """A new Iceberg table for ``ident`` (a trib table, or a landing zone's consumer), with ``schema`` and
    ``spec`` (:func:`~tributary_read.iceberg.schema.initial_schema`). When a concurrent first run made it,
    that table is loaded, checked by ``fits`` (its spec), and used."""
    namespace = name.rsplit(".", 1)[0]
    catalog.create_namespace_if_not_exists(namespace)
    props = {**PROPERTIES, **ident,
             TableProperties.DEFAULT_NAME_MAPPING: create_mapping_from_schema(schema).model_dump_json()}
    try:
        return catalog.create_table(name, schema=schema, partition_spec=spec, properties=props)
    except TableAlreadyExistsError:  # a concurrent first mirror made it: it must be for this trib table
        ice = load(catalog, name, ident)
        assert ice is not None
        if fits is not None:
            fits(ice)  # made with another transform: refused, as any existing table
        return ice


def _commit(table: Table, ice: IcebergTable, ident: dict[str, str], part: shape.Partitioning, commit: Commit,
            added: list[FileEntry], footers: list, sets: list[tuple[FileEntry, pa.Schema]]) -> IcebergTable:
    """One trib commit that widens the schema, replaces or deletes files, as one Iceberg snapshot through
    pyiceberg's transaction (its schema's new columns in the same catalog commit). Its deep copies of the
    table metadata cost as much as the kept history is long, which :mod:`~tributary_read.iceberg.appends`
    bounds; appends, the frequent case, do not come here unless they add a column."""
    tx = ice.transaction()
    # The table's metadata as this snapshot sees it. The transaction's view is a deep copy of the whole
    # metadata, every snapshot included, at each access: taken only after a schema change was staged.
    metadata = ice.metadata
    for _, cols in sets:
        if shape.new_columns(metadata.schema(), cols):
            with tx.update_schema() as update:
                update.union_by_name(cols)
            metadata = tx.table_metadata
    _check_columns(table, metadata, sets)
    log_uri = table.storage.uri_for(commit_path(commit.version))
    adds = _data_files(table, metadata, part, commit, added, footers)
    dels = [shape.data_file(metadata, table.storage.uri_for(f.path), f, part, log_uri)
            for f in commit.removed if f.kind == KIND_DATA]
    props = _props(ident, commit)
    producer: _OverwriteFiles | _FastAppendFiles
    if dels and commit.operation == OP_REPLACE:  # a compaction: the same records in fewer files
        producer = _ReplaceFiles(operation=Operation.OVERWRITE, transaction=tx, io=ice.io, snapshot_properties=props)
    elif dels or commit.operation == OP_EXPIRE:
        op = Operation.DELETE if commit.operation == OP_EXPIRE else Operation.OVERWRITE
        producer = _OverwriteFiles(operation=op, transaction=tx, io=ice.io, snapshot_properties=props)
    else:
        producer = tx.update_snapshot(snapshot_properties=props).fast_append()
    with producer as p:
        for df in adds:
            p.append_data_file(df)
        for df in dels:
            p.delete_data_file(df)
    expired = _unreadable(ice) if dels else []
    if expired:
        remove: dict[str, Any] = {"snapshot_ids": [s.snapshot_id for s in expired]}  # (pydantic alias: mypy)
        tx._apply((RemoveSnapshotsUpdate(**remove),))
    crash_point("iceberg-prepared")
    ice = tx.commit_transaction()
    crash_point("iceberg-committed")
    if expired:
        appends.collect(ice, expired)
    return ice


def _unreadable(ice: IcebergTable) -> list:
    """The snapshots a commit that removes files leaves unreadable, expired with it: every one before it on
    ``main``. They name the files it removes, which trib moves aside (a compaction's originals go to
    ``_tributary/replaced``, a restated partition's old directory is swapped out) or ``trib clean`` deletes
    later (an expiry's); an Iceberg reader travelling back to one would fail on them. Heads of other
    branches and tags are kept, as the snapshot bound keeps them."""
    heads = appends.other_heads(ice.metadata)
    return [s for s in ice.metadata.snapshots if s.snapshot_id not in heads]


class _ReplaceFiles(_OverwriteFiles):
    """pyiceberg's overwrite, labelled ``replace``: files added and removed with the table's records unchanged
    (a ``trib compact``). Incremental Iceberg readers skip a ``replace`` snapshot, where an ``overwrite``
    stops Spark's streaming read of the table. pyiceberg 0.12 computes the totals of a summary for append,
    overwrite and delete only; the totals of a replace are an overwrite's, so the summary is built as one
    and relabelled."""

    def _summary(self, snapshot_properties=None) -> Summary:
        built = super()._summary(snapshot_properties or {})
        return Summary(operation=Operation.REPLACE, **built.additional_properties)
