"""``trib iceberg sync ROOT --consumer NAME``: register a landing zone's Parquet files in Iceberg, each once.

A landing zone is a directory other tools write Parquet files into (hour directories ``yyyy_MM_dd/HH``,
or any layout the read side parses); no trib log says which of its files are complete, or new. A durable
consumer (:mod:`tributary_read.read.consumer`) answers that, as it does for every reader: its plan is
the next batch of files (the minimum age, growth and changed-file rules, late files in old partitions),
each with the partition values its layout gave it and the size it had when planned. This module only
registers what a plan delivers:

* one Iceberg snapshot per plan, its files added by a fast append (:mod:`~tributary_read.iceberg.appends`),
  its summary naming the plan (``trib.plan``) and the consumer (``trib.landing``, ``trib.consumer``:
  :mod:`~tributary_read.iceberg.summary`);
* the plan acked only after that snapshot committed.

Exactly once across crashes: a run killed after the snapshot and before the ack finds the pending plan's
id in the consumer's newest snapshot and acks it, adding nothing; a run killed before the snapshot gets
the same plan again (a consumer's plan stays the same until acked) and adds it. Two runs at once get the
same plan: the catalog commit is conditional on the table's head, so of two snapshots built on it one
lands, and the other run reads it back and acks. The consumer's state is read after the Iceberg table,
so a plan another run acked meanwhile is never taken for one still to register.

Each file is checked before anything is committed: it still has the size and time its plan recorded (a
file rewritten, or still being written, is never registered with a size it no longer has), its footer
reads as Parquet, and its columns fit the table's schema. A file that fails is refused in one line;
nothing is committed and the plan stays pending. Record counts and column statistics come from the
footers: the files have no trib manifest.
"""

from __future__ import annotations

from tributary_read.iceberg import deps  # noqa: F401 - first: names the extra when pyiceberg is missing

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Mapping

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table as IcebergTable
from pyiceberg.table.snapshots import Snapshot

from tributary_read.errors import (ChangedFileError, CommitConflictError, ConsumerStateCorruptError, InvalidInputError,
                                   PartitionsHeldError, SchemaChangeError, StalePlanError, UnreadableInputError)
from tributary_read.faults import crash_point
from tributary_read.iceberg import appends
from tributary_read.iceberg import schema as shape
from tributary_read.iceberg import summary as marks
from tributary_read.iceberg.catalog import answering, check_name, check_uri, default_catalog_uri, open_catalog
from tributary_read.iceberg.mirror import FOOTER_THREADS, MAX_CONFLICTS, create, load
from tributary_read.read.consumer import AckResult, Consumer, Plan
from tributary_read.read.consumer_tracking import plan_layout
from tributary_read.read.fileset import ResolvedFile
from tributary_read.read.resolve import Source
from tributary_read.read.selection import ReadRequest, select

#: Plans one run registers at most (each is progress; the next run goes on).
MAX_PLANS = 1000


@dataclass
class LandingResult:
    """What one landing sync did: each plan it took, registered now or found registered by an earlier run."""

    root: str
    consumer: str
    iceberg_table: str
    catalog: str
    plans: list[dict] = field(default_factory=list)
    #: Files the last plan left for a later run: modified within the minimum age.
    deferred: int = 0
    min_age_ms: int = 0
    #: The partitions the last acked plan held back (a delivered file changed), and the exit-17 error that
    #: names them, raised by the caller once it reported the run.
    held: tuple = ()
    held_error: PartitionsHeldError | None = None

    @property
    def files(self) -> int:
        return sum(p["files"] for p in self.plans if p["registered"] == "now")

    def to_json(self) -> dict:
        return {"root": self.root, "consumer": self.consumer, "iceberg_table": self.iceberg_table,
                "catalog": self.catalog, "plans": self.plans, "files": self.files, "deferred": self.deferred,
                "held": [h.to_json() for h in self.held]}


def sync_landing(source: Source, consumer: str, name: str, catalog_uri: str | None = None, *,
                 state_dir: str | None = None, options: Mapping[str, str] | None = None,
                 min_age_ms: int | None = None, lookback_ms: int | None = None) -> LandingResult:
    """Register every file ``consumer`` delivers from ``source`` into Iceberg table ``name``, plan by plan, each once.

    Each plan is the consumer's (:func:`~tributary_read.read.selection.select`). The consumer belongs to this
    Iceberg table from its first ack (its owner: a second Iceberg table fed from it would split the landing
    zone's files between the two, so it is refused)."""
    if source.table is not None:
        raise InvalidInputError(f"{source.uri} is a trib table: mirror its commits with trib iceberg sync "
                                f"{source.uri} --table {name} (without a consumer)", consumer="a consumer")
    check_name(name)
    uri = check_uri(catalog_uri or default_catalog_uri())
    with answering(uri):  # a catalog that stops answering: one line, and the plan stays pending
        return _sync_landing(source, consumer, name, uri, state_dir, options, min_age_ms, lookback_ms)


def _sync_landing(source: Source, consumer: str, name: str, uri: str, state_dir: str | None,
                  options: Mapping[str, str] | None, min_age_ms: int | None, lookback_ms: int | None) -> LandingResult:
    catalog = open_catalog(uri)
    ident = marks.landing_identity(source.uri, consumer)
    request = ReadRequest(consumer=consumer, state_dir=state_dir, min_age_ms=min_age_ms, lookback_ms=lookback_ms,
                          owner={"job": "trib iceberg sync", "output": f"Iceberg table {name} in {uri}"})
    result = LandingResult(source.uri, consumer, name, uri)
    load(catalog, name, ident)  # another's Iceberg table is refused before the consumer plans anything
    started = int(time.time() * 1000)
    conflicts = 0
    for _ in range(MAX_PLANS):
        chosen = select(source, request, options=options)
        plan, c = chosen.plan, chosen.consumer
        assert plan is not None and c is not None  # a consumer's request: its plan
        crash_point("iceberg-consumer-planned")
        try:
            _register(c, catalog, name, ident, plan, result)
        except CommitFailedException:  # a concurrent run's snapshot landed first: read it back, plan again
            conflicts += 1
            if conflicts > MAX_CONFLICTS:
                raise CommitConflictError(f"Iceberg table {name}: {MAX_CONFLICTS} catalog commits lost to concurrent "
                                          "syncs in one run; run trib iceberg sync again") from None
            continue
        result.deferred, result.min_age_ms = plan.deferred, plan.min_age_ms
        left = (plan.stats.get("backlog") or {}).get("files")
        if not plan.files or not (left or plan.created_ms < started):
            break  # a plan made now and leaving nothing behind: the landing zone is registered
    return result


def _register(consumer: Consumer, catalog, name: str, ident: dict[str, str], plan: Plan,
              result: LandingResult) -> None:
    """One plan as one snapshot, then its ack; raises CommitFailedException when another run's commit
    moved the table's head first (nothing of this run's snapshot landed then)."""
    skipped = set(consumer.skipped(plan))  # ``trib consumer skip``: delivered, never registered
    files = [f for f in plan.files if f.path not in skipped]
    record = {"plan_id": plan.plan_id, "files": len(files), "records": 0, "bytes": sum(f.size for f in files),
              "snapshot_id": None, "registered": "now"}
    ice = load(catalog, name, ident) if files else None
    state = consumer.current()  # read after the table: see the module docstring
    if (state.version if state else 0) != plan.base_version:
        return  # another run acked it meanwhile (it registered it first): the next plan
    last = _last_plan(ice, ident)
    if last is not None and last[0] == plan.plan_id:  # killed after its snapshot, before its ack
        added = last[1].summary.additional_properties.get("added-records", "0") if last[1].summary else "0"
        record.update(registered="before", snapshot_id=last[1].snapshot_id, records=int(added))
    elif files:
        _check_order(consumer, name, plan, last)
        ice = _commit(consumer, catalog, result.catalog, name, ident, ice, plan, files, record)
    try:
        ack = consumer.ack(plan.plan_id)
    except StalePlanError:  # another run saw it registered, acked it, and went on: acked all the same
        if consumer.acked(plan.plan_id) is not True:
            raise
        now = consumer.current()
        assert now is not None  # a plan was acked: a state exists
        ack = AckResult(now, plan.plan_id, True)  # its held partitions are the later state's business
    if files:
        result.plans.append(record)
    result.held = ack.held
    result.held_error = consumer.held_error(ack.held, plan.plan_id) if ack.held else None


def _last_plan(ice: IcebergTable | None, ident: dict[str, str]) -> tuple[str, Snapshot] | None:
    """The plan id (and snapshot) of the newest snapshot on ``main`` that this consumer committed."""
    snap = ice.current_snapshot() if ice is not None else None
    seen: set[int] = set()
    while snap is not None and snap.snapshot_id not in seen:
        seen.add(snap.snapshot_id)
        props = snap.summary.additional_properties if snap.summary is not None else {}
        if all(props.get(k) == v for k, v in ident.items()) and marks.PLAN in props:
            return props[marks.PLAN], snap
        snap = ice.snapshot_by_id(snap.parent_snapshot_id) if ice is not None and snap.parent_snapshot_id else None
    return None


def _base(plan_id: str) -> int:
    return int(plan_id.split("-", 1)[0]) if plan_id.split("-", 1)[0].isdigit() else -1


def _check_order(consumer: Consumer, name: str, plan: Plan, last: tuple[str, Snapshot] | None) -> None:
    """Refuse a plan when the table's newest snapshot of this consumer registered a plan the consumer never
    acked (the plan was dropped after its snapshot committed, or the consumer was reset): the files it
    delivers again would be registered twice."""
    if last is None or (_base(last[0]) < plan.base_version and consumer.acked(last[0]) is not False):
        return
    raise ConsumerStateCorruptError(
        f"Iceberg table {name} registered plan {last[0]} of consumer {consumer.name!r}, which the consumer does not "
        f"show acked (its pending plan is {plan.plan_id}): its files would be registered twice; register the "
        "landing zone into a new Iceberg table with a new consumer")


def _commit(consumer: Consumer, catalog, uri: str, name: str, ident: dict[str, str], ice: IcebergTable | None,
            plan: Plan, files: list[ResolvedFile], record: dict) -> IcebergTable:
    """The plan's files as one append snapshot; the table created, or its schema widened, first if needed."""
    layout = plan_layout(plan)
    keys = layout.keys
    footers = _footers(consumer, plan, files)
    storage = consumer.source.storage
    sets = shape.column_sets(files, footers)
    for f, cols in sets:
        try:
            shape.check_foreign(cols, keys, storage.uri_for(f.path))
        except InvalidInputError as e:
            raise InvalidInputError(f"{e}; or leave the file unregistered: {consumer.skip_command(f.path)}") from None
    head = ice.metadata.current_snapshot_id if ice is not None else None  # the head the plan was checked on
    if ice is None:
        ice = create(catalog, name, ident, *shape.initial_schema(sets[0][1] if sets else pa.schema([]), keys))
    if any(shape.new_columns(ice.metadata.schema(), cols) for _, cols in sets):
        with ice.transaction() as tx:  # its own catalog commit: an optional column, harmless alone
            with tx.update_schema() as update:
                for _, cols in sets:
                    update.union_by_name(cols)
        ice = load(catalog, name, ident)
        assert ice is not None
    if ice.metadata.current_snapshot_id != head:  # a concurrent run's table or snapshot: check the plan again
        raise CommitFailedException(f"Iceberg table {name} moved on while this run prepared plan {plan.plan_id}")
    metadata = ice.metadata
    for f, cols in sets:
        try:
            shape.check_compatible(metadata.schema(), cols, storage.uri_for(f.path), metadata.format_version)
        except SchemaChangeError as e:
            raise SchemaChangeError(f"{e}; or leave the file unregistered: {consumer.skip_command(f.path)}") from None
    where = f"plan {plan.plan_id} of consumer {consumer.name}"
    part = shape.Partitioning(layout)
    data = [shape.data_file(metadata, storage.uri_for(f.path), f, part, where, footer)
            for f, footer in zip(files, footers)]
    batch = appends.Appender(ice, appends.kept(ice.properties, name))
    snap = batch.append(data, {**ident, marks.PLAN: plan.plan_id})
    crash_point("iceberg-consumer-prepared")
    with answering(uri, committing=f"plan {plan.plan_id}"):  # it may have landed: the rerun finds it by plan id
        ice = batch.commit()
    crash_point("iceberg-consumer-committed")
    record.update(snapshot_id=snap.snapshot_id, records=sum(d.record_count for d in data))
    return ice


def _footers(consumer: Consumer, plan: Plan, files: list[ResolvedFile]) -> list:
    """Each file's Parquet footer, read between two checks that it is still the file its plan delivered."""
    _check_unchanged(consumer, plan, files)
    storage = consumer.source.storage

    def one(f: ResolvedFile):
        try:
            with storage.open_input(f.path) as handle:
                return pq.read_metadata(handle)
        except Exception as e:  # noqa: BLE001 - any reader error: not Parquet it can read
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise UnreadableInputError(
                f"planned file {f.path} of {consumer.source.uri} is not readable Parquet ({type(e).__name__}: "
                f"{first}); plan {plan.plan_id} stays pending, nothing is registered: replace the file, or leave "
                f"it unregistered: {consumer.skip_command(f.path)}") from None

    with ThreadPoolExecutor(max(1, min(FOOTER_THREADS, len(files)))) as pool:
        footers = list(pool.map(one, files))
    _check_unchanged(consumer, plan, files)
    return footers


def _check_unchanged(consumer: Consumer, plan: Plan, files: list[ResolvedFile]) -> None:
    """Refuse a planned file whose size or time is no longer the one its plan recorded: its bytes are not
    the ones delivered (rewritten, or still being written), and Iceberg would be told a wrong size."""
    for f in files:
        if f.offset is not None or (f.valid_length is not None and f.valid_length != f.size):
            raise ChangedFileError(f"planned file {f.path} of {consumer.source.uri} is a byte range (it grew after "
                                   "it was delivered): a Parquet file is registered whole; drop the plan: "
                                   f"{consumer.reset_command('discard-plan')}")
    for f, info in zip(files, consumer.source.storage.stat_many([f.path for f in files])):
        if info is None:
            raise UnreadableInputError(
                f"planned file {f.path} of {consumer.source.uri} is gone; plan {plan.plan_id} stays pending, nothing "
                f"is registered: restore it, or leave it unregistered: {consumer.skip_command(f.path)}")
        if info.size != f.size or (f.mtime_ms is not None and info.mtime_ms != f.mtime_ms):
            raise ChangedFileError(
                f"planned file {f.path} of {consumer.source.uri} changed since plan {plan.plan_id} was made (size "
                f"{f.size}, now {info.size}; modified {f.mtime_ms}, now {info.mtime_ms}): it is never registered "
                "with bytes the plan did not deliver; if its writer was still writing, give a larger minimum age; "
                f"drop the plan and the next one takes the file as it is now: {consumer.reset_command('discard-plan')}")
