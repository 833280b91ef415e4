"""Sync a table's partition directories into a Hive table: plan everything, then apply.

A sync lists the layout's directories, reads the table's partitions once, and
builds a :class:`SyncPlan`: ``add`` (directory without partition), ``relocate``
(partition pointing elsewhere), ``drop`` (partition whose directory is gone,
only when asked), ``refresh`` (files changed since the last sync) and
``skipped`` (directories that do not parse, partitions trib does not manage).
Nothing is executed until the whole plan exists, so a listing error aborts
before any DDL, and safety limits judge the plan as a whole.

SHOW PARTITIONS carries no locations, so trib remembers what it set
(:mod:`tributary_read.hive.state`); only partitions it has never seen are described.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Callable, Mapping

from tributary_read.errors import InvalidInputError, StorageError, TributaryError
from tributary_read.table.layout import PartitionMapper
from tributary_read.read.listing import Listing, scan
from tributary_read.io.storage import Storage
from tributary_read.table.config import Table
from tributary_read.hive.metastore import Metastore
from tributary_read.hive.model import HivePartition, TableName
from tributary_read.io.location import check_location, same_location
from tributary_read.hive.state import Fingerprint, Known, StateStore, SyncState


# -- the plan ------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanEntry:
    partition: str
    values: Mapping[str, str] = field(hash=False)
    directory: str | None = None
    location: str | None = None
    previous: str | None = None
    reason: str | None = None
    files: int | None = None
    bytes: int | None = None

    def to_json(self) -> dict:
        d = {"partition": self.partition, "values": dict(self.values), "directory": self.directory,
             "location": self.location, "previous": self.previous, "reason": self.reason,
             "files": self.files, "bytes": self.bytes}
        return {k: v for k, v in d.items() if v is not None}


@dataclass(frozen=True)
class Skip:
    """A directory or partition the sync leaves alone, and why."""

    kind: str  # "directory" or "partition"
    name: str
    reason: str
    files: int = 0

    def to_json(self) -> dict:
        d = {self.kind: self.name, "reason": self.reason}
        if self.files:
            d["files"] = self.files
        return d


@dataclass(frozen=True)
class SyncOptions:
    drop: bool = False
    batch_size: int | None = None
    max_drop_fraction: float = 0.1
    force: bool = False
    check_locations: bool = False
    refresh: bool = True
    #: locations are rendered as BASE/DIR (default: the table's storage URI), e.g. s3a://…
    location_base: str | None = None

    def __post_init__(self):
        if not 0 <= self.max_drop_fraction <= 1:
            raise InvalidInputError("the largest fraction to drop must be between 0 and 1",
                                    max_drop_fraction="the largest fraction to drop")
        if self.batch_size is not None and self.batch_size < 1:
            raise InvalidInputError("the batch size must be >= 1", batch_size="the batch size")
        if self.location_base is not None:
            check_location(self.location_base)


@dataclass(frozen=True)
class SyncPlan:
    hive_table: str
    metastore: str
    engine: str
    add: tuple[PlanEntry, ...] = ()
    relocate: tuple[PlanEntry, ...] = ()
    drop: tuple[PlanEntry, ...] = ()
    refresh: tuple[PlanEntry, ...] = ()
    skipped: tuple[Skip, ...] = ()
    directories: int = 0
    partitions: int = 0  # the table's partitions that the layout manages
    described: int = 0
    notes: tuple[str, ...] = ()
    refused: str | None = None
    table_location: str | None = None
    #: the state to save once the plan is applied (not part of the printed plan)
    next_state: Mapping[str, Known] = field(default_factory=dict, hash=False, repr=False)
    previous_state: SyncState | None = field(default=None, hash=False, repr=False)

    @property
    def empty(self) -> bool:
        return not (self.add or self.relocate or self.drop or self.refresh)

    def summary(self) -> dict:
        return {"add": len(self.add), "relocate": len(self.relocate), "drop": len(self.drop),
                "refresh": len(self.refresh), "skipped": len(self.skipped), "directories": self.directories,
                "partitions": self.partitions, "described": self.described}

    def to_json(self) -> dict:
        return {"hive_table": self.hive_table, "metastore": self.metastore, "engine": self.engine,
                "add": [e.to_json() for e in self.add], "relocate": [e.to_json() for e in self.relocate],
                "drop": [e.to_json() for e in self.drop], "refresh": [e.to_json() for e in self.refresh],
                "skipped": [s.to_json() for s in self.skipped], "summary": self.summary(),
                "notes": list(self.notes), "refused": self.refused}


def location_for(storage: Storage, directory: str, base: str | None = None) -> str:
    return f"{base.rstrip('/')}/{directory}" if base else storage.uri_for(directory)


@dataclass(frozen=True)
class Locator:
    """Each partition's Hive location, from where its live files are in the trib state: a partition a restate
    moved (tributary_read/table/restate_swap.py) lies in a directory of its own, and its layout directory
    still holds the old files. Every sync, mount and re-create asks this, never the layout alone."""

    storage: Storage
    base: str | None = None
    #: partition directory -> the directory a moved restate left its files in
    moved: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, table: Table, base: str | None = None) -> Locator:
        """The table's locator; the state is read only on a table that ever restated (one marker look)."""
        from tributary_read.table.log import RESTATED_MARKER
        from tributary_read.table.restate_swap import partition_dir

        if not table.storage.exists(RESTATED_MARKER):
            return cls(table.storage, base)
        state = table.log.state()
        return cls(table.storage, base, {d: partition_dir(state, d) for d in state.locations})

    def __call__(self, directory: str) -> str:
        """Partition ``directory``'s location as Hive should have it."""
        return location_for(self.storage, self.moved.get(directory, directory), self.base)


def fingerprints(listing: Listing) -> dict[str, Fingerprint]:
    """Per partition directory, its visible files (empty directories included)."""
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for f in listing.files:
        a = acc[f.directory]
        a[0] += 1
        a[1] += f.size
        a[2] = max(a[2], f.mtime_ms)
    out = {d: Fingerprint(*acc[d]) if d in acc else Fingerprint(0, 0, 0) for d in listing.partitions}
    return out


def _skipped_dirs(listing: Listing) -> list[Skip]:
    by_dir: dict[tuple[str, str], int] = Counter()
    for s in listing.skipped:
        by_dir[(s.path.rpartition("/")[0] or ".", s.reason)] += 1
    return [Skip("directory", d, r, n) for (d, r), n in sorted(by_dir.items())]


def plan_sync(table: Table, ms: Metastore, hive: TableName, options: SyncOptions = SyncOptions(),
              store: StateStore | None = None, timings: dict | None = None) -> SyncPlan:
    """Build the whole plan; reads only (listing, metastore, state)."""
    timings = timings if timings is not None else {}
    layout = table.layout
    mapper = PartitionMapper(layout)
    t0 = time.perf_counter()
    info = ms.table_info(hive)
    keys = [k.lower() for k in layout.keys]
    if list(info.partition_keys) != keys:
        raise InvalidInputError(f"Hive table {hive} is partitioned by ({', '.join(info.partition_keys) or 'nothing'})"
                                f" but the layout makes ({', '.join(keys)})")
    timings["table_info_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    listing = scan(table.storage, layout)  # any listing error raises here, before any DDL
    dirs = dict(listing.partitions)
    fps = fingerprints(listing)
    where = Locator.of(table, options.location_base)
    for d in where.moved:  # a moved partition whose old files `trib clean` removed is there all the same
        if d not in dirs and (p := layout.try_parse(d)) is not None:
            dirs[d], fps[d] = p, Fingerprint(0, 0, 0)
    by_spec: dict[str, str] = {}
    skipped = _skipped_dirs(listing)
    for d, p in sorted(dirs.items()):
        spec = p.spec.lower()
        if spec in by_spec:
            skipped.append(Skip("directory", d, f"same partition {p.spec} as {by_spec[spec]}"))
            continue
        by_spec[spec] = d
    timings["list_s"] = time.perf_counter() - t0

    notes: list[str] = []
    t0 = time.perf_counter()
    state = store.latest() if store is not None else None
    if state is not None and (state.hive_table != str(hive) or
                              (info.location and state.table_location
                               and not same_location(state.table_location, info.location))):
        notes.append(f"ignored sync state v{state.version}: it was made for {state.hive_table} at "
                     f"{state.table_location}")
        state = None
    known: dict[str, Known] = dict(state.partitions) if state else {}
    timings["state_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    parts = ms.list_partitions(hive, with_locations=ms.lists_locations)
    timings["list_partitions_s"] = time.perf_counter() - t0

    base = options.location_base
    managed: dict[str, tuple[HivePartition, str]] = {}  # spec -> (partition, directory)
    for p in parts:
        # A listed directory with this very name needs no inverse parse (the common case).
        d = by_spec.get(p.spec.lower())
        if d is None or list(dirs[d].values.values()) != list(p.values.values()):
            d = mapper.directory(p.values)
        if d is None:
            skipped.append(Skip("partition", p.spec, "values do not match the layout's partition spec "
                                f"{layout.partition!r}; left alone"))
        else:
            managed[p.spec.lower()] = (p, d)

    # Locations: from the listing call, else remembered, else one DESCRIBE each (once).
    t0 = time.perf_counter()
    described = 0
    current: dict[str, HivePartition] = {}
    for spec, (p, d) in managed.items():
        if ms.lists_locations:
            current[spec] = p
        elif spec in known and not options.check_locations and (  # a run's sync may have moved it since
                d not in where.moved or same_location(known[spec].location, where(d))):
            current[spec] = HivePartition(p.values, known[spec].location)
        else:
            described += 1
            current[spec] = ms.describe_partition(hive, p.values) or p
    timings["describe_s"] = time.perf_counter() - t0

    add, relocate, drop, refresh = [], [], [], []
    next_state: dict[str, Known] = {}
    for spec, d in sorted(by_spec.items(), key=lambda x: x[1]):
        fp, target = fps[d], where(d)
        pd = dirs[d]
        if spec not in managed:
            add.append(PlanEntry(pd.spec, pd.values, d, target, files=fp.files, bytes=fp.bytes))
            next_state[spec] = Known(target, fp)
            continue
        cur = current[spec]
        if cur.location is None:
            skipped.append(Skip("partition", pd.spec, "the metastore reports no location; left alone"))
            continue
        if not same_location(cur.location, target):
            relocate.append(PlanEntry(pd.spec, pd.values, d, target, previous=cur.location))
            if options.refresh:
                refresh.append(PlanEntry(pd.spec, pd.values, d, target, reason="relocated",
                                         files=fp.files, bytes=fp.bytes))
            next_state[spec] = Known(target, fp if options.refresh else None)
            continue
        reason = _refresh_reason(known.get(spec), cur, fp, ms.lists_locations)
        if reason and options.refresh:
            refresh.append(PlanEntry(pd.spec, pd.values, d, target, reason=reason, files=fp.files, bytes=fp.bytes))
        old = known.get(spec)
        next_state[spec] = Known(target, fp if (options.refresh or not reason) else (old.fingerprint if old else None))

    for spec, (p, d) in sorted(managed.items(), key=lambda x: x[1][1]):
        if spec in by_spec:
            continue
        loc = current[spec].location
        expected = where(d)
        if loc is not None and not same_location(loc, expected):
            skipped.append(Skip("partition", p.spec, f"points at {loc}, not at its layout directory; left alone"))
            next_state[spec] = known.get(spec) or Known(loc)
        elif not options.drop:
            skipped.append(Skip("partition", p.spec, f"directory {d} is gone (pass --drop to drop it)"))
            if loc is not None:
                next_state[spec] = known.get(spec) or Known(loc)
        else:
            drop.append(PlanEntry(p.spec, p.values, d, loc, reason=f"directory {d} is gone"))

    refused = None
    limit = options.max_drop_fraction * len(managed)
    if options.force:
        pass
    elif len(drop) > limit:
        refused = (f"refusing to drop {len(drop)} of {len(managed)} partitions of {hive} "
                   f"(more than --max-drop-fraction {options.max_drop_fraction:g}); a partial or failed "
                   "listing looks like this. Check the directories, then rerun with --force")
    elif len([e for e in relocate if e.directory not in where.moved]) > limit:  # a restate's move is intended
        # Most often the same files spelled differently (hdfs://nameservice vs hdfs://host:8020).
        refused = (f"refusing to relocate {len(relocate)} of {len(managed)} partitions of {hive}: e.g. "
                   f"{relocate[0].previous} -> {relocate[0].location}. If only the file system's name differs, "
                   "pass --location-base; if the move is intended, rerun with --force")
    elif drop and not info.external:
        refused = (f"refusing to drop partitions of {hive}: it is a {info.table_type or 'MANAGED'} table, "
                   "whose partition drops delete files. Make it EXTERNAL, or rerun with --force")
    return SyncPlan(str(hive), ms.address, ms.dialect.name, tuple(add), tuple(relocate), tuple(drop),
                    tuple(refresh), tuple(skipped), len(by_spec), len(managed), described, tuple(notes), refused,
                    info.location, next_state, state)


def _refresh_reason(known: Known | None, cur: HivePartition, fp: Fingerprint, listed: bool) -> str | None:
    if known is not None and known.fingerprint is not None:
        return None if known.fingerprint == fp else "files changed since the last sync"
    if known is not None and not listed:
        return "files unknown since the partition was committed"
    stats = cur.stats
    if stats is None or stats.size_bytes is None:
        return "no statistics"
    if stats.size_bytes != fp.bytes:
        return f"statistics say {stats.size_bytes} bytes, files hold {fp.bytes}"
    return None


# -- applying -----------------------------------------------------------------------------
@dataclass(frozen=True)
class SyncResult:
    plan: SyncPlan
    applied: bool
    statements: int = 0
    state_version: int | None = None
    timings: Mapping[str, float] = field(default_factory=dict, hash=False)

    def to_json(self) -> dict:
        return {**self.plan.to_json(), "applied": self.applied, "statements": self.statements,
                "state_version": self.state_version,
                "timings": {k: round(v, 4) for k, v in self.timings.items()}}


def apply_sync(plan: SyncPlan, table: Table, ms: Metastore, hive: TableName, options: SyncOptions,
               store: StateStore | None, timings: dict | None = None,
               after_step: Callable[[str], None] | None = None) -> SyncResult:
    """Execute a plan: add, relocate, refresh, then drop; save the state even after a failure.

    ``after_step(name)`` runs after each of ``add``, ``relocate``, ``refresh``
    and ``drop``: the ETL's crash point between the add and refresh batches.
    """
    after_step = after_step or (lambda _step: None)
    timings = timings if timings is not None else {}
    next_state = dict(plan.next_state)
    prev = dict(plan.previous_state.partitions) if plan.previous_state else {}
    pending_refresh = {e.partition.lower() for e in plan.refresh}
    pending_relocate = {e.partition.lower() for e in plan.relocate}
    pending_add = {e.partition.lower() for e in plan.add}
    statements = 0
    try:
        t0 = time.perf_counter()
        statements += ms.add_partitions(hive, [(e.values, e.location) for e in plan.add], options.batch_size)
        pending_add.clear()
        timings["add_s"] = time.perf_counter() - t0
        after_step("add")
        t0 = time.perf_counter()
        for e in plan.relocate:
            statements += ms.set_locations(hive, [(e.values, e.location)])
            pending_relocate.discard(e.partition.lower())
        timings["relocate_s"] = time.perf_counter() - t0
        after_step("relocate")
        t0 = time.perf_counter()
        for e in plan.refresh:
            statements += ms.refresh_stats(hive, [e.values])
            pending_refresh.discard(e.partition.lower())
        timings["refresh_s"] = time.perf_counter() - t0
        after_step("refresh")
        t0 = time.perf_counter()
        statements += ms.drop_partitions(hive, [e.values for e in plan.drop], options.batch_size)
        for e in plan.drop:
            next_state.pop(e.partition.lower(), None)
        timings["drop_s"] = time.perf_counter() - t0
        after_step("drop")
    except TributaryError:
        # Record only what is certain: unfinished steps fall back to the old view.
        for spec in pending_add:
            next_state.pop(spec, None)
        for spec in pending_relocate | pending_refresh:
            if spec in prev:
                next_state[spec] = prev[spec]
            else:
                next_state.pop(spec, None)
        try:
            _save(plan, table, ms, store, next_state)
        except TributaryError:
            pass  # the DDL failure is the error to report; the next sync re-describes
        raise
    t0 = time.perf_counter()
    version = _save(plan, table, ms, store, next_state)
    timings["save_state_s"] = time.perf_counter() - t0
    return SyncResult(plan, True, statements, version, timings)


def _save(plan: SyncPlan, table: Table, ms: Metastore, store: StateStore | None,
          partitions: Mapping[str, Known]) -> int | None:
    if store is None:
        return None
    prev = plan.previous_state
    version = (prev.version if prev else (store.versions() or [0])[-1]) + 1
    state = SyncState(version, plan.hive_table, ms.address, plan.table_location, table.uri,
                      int(time.time() * 1000), partitions)
    store.save(state)
    return version


def sync(table: Table, ms: Metastore, hive: TableName | str, options: SyncOptions = SyncOptions(), *,
         dry_run: bool = False, state_dir: str | None = None,
         storage_options: Mapping[str, str] | None = None,
         after_step: Callable[[str], None] | None = None) -> SyncResult:
    """Plan, and unless ``dry_run`` or refused, apply. A refused plan is returned unapplied.

    ``after_step``: see :func:`apply_sync`.
    """
    hive = hive if isinstance(hive, TableName) else TableName.parse(hive)
    store = StateStore.for_table(table, hive, state_dir, storage_options)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    plan = plan_sync(table, ms, hive, options, store, timings)
    timings["plan_s"] = time.perf_counter() - t0
    if dry_run or plan.refused:
        return SyncResult(plan, False, 0, None, timings)
    if plan.empty and plan.previous_state is not None and dict(plan.previous_state.partitions) == plan.next_state:
        return SyncResult(plan, True, 0, plan.previous_state.version, timings)
    try:
        return apply_sync(plan, table, ms, hive, options, store, timings, after_step)
    except StorageError as e:
        raise StorageError(f"partitions applied, but the sync state could not be saved: {e}") from e
