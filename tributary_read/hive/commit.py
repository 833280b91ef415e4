"""Partition commit after a writer commit (Flink's partition-commit idea).

Per table, in ``table.json``'s ``partition_commit``, one or both policies:

* ``metastore``: mount the partitions a commit touched, right after the
  commit, with :func:`mount_commit` (the ETL's Hive step): missing ones are
  added at their directory, existing ones (late data) get their statistics
  refreshed and are moved back to their directory if they point elsewhere.
* ``success-file``: write an empty ``_SUCCESS`` into a partition once its end
  time plus a delay has passed on the chosen clock: ``processing`` (wall
  clock) or ``event`` (a watermark). A commit may carry its writer's event-time
  watermark (``meta["event_watermark_ms"]``: the Kafka ingest's minimum over its
  partitions, Flink's partition-time trigger); without one, the watermark is the
  start of the newest partition that received data (a lower bound of the
  newest event time).

On the ``event`` clock the metastore policy waits for the watermark too: a
partition is mounted once the watermark passes its end plus the delay (until
then it is *pending*, remembered in the mark), and mounted or refreshed again
at once whenever late records land in it. On the ``processing`` clock it mounts
right after each commit.

They run from ``trib ingest`` (through its ``on_commit`` hook) and from
``trib partitions commit``. Both are idempotent. Which partitions were already
marked is remembered as one time, ``through_ms`` (every partition of the log
ending at or before it is done), in ``_tributary/partition-commit/mark.json``; a
commit into an older partition is handled on the spot. The same file records
``mounted_version``: every commit up to it had its partitions mounted, so a
pass mounts only the partitions of later commits that no run mounted (a
failed or killed ingest, another writer). That file is a hint: if it is lost,
the next pass re-checks the whole log and writes nothing twice.
"""

from __future__ import annotations

import json
import posixpath
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from tributary_read.errors import (
    CommitConflictError,
    InvalidInputError,
    ManifestCorruptError,
    TributaryError,
)
from tributary_read.table.layout import PartitionDir
from tributary_read.table.log import META_DIR
from tributary_read.table.manifest import EVENT_WATERMARK, FORMAT, FORMAT_VERSION, KIND_DATA, Commit, load_document
from tributary_read.table.config import PROPERTIES, Table
from tributary_read.hive.metastore import Metastore, open_metastore
from tributary_read.hive.model import TableName
from tributary_read.hive.uri import MetastoreURI
from tributary_read.hive.state import Known, StateStore, SyncState
from tributary_read.hive.sync import Locator

POLICIES = ("metastore", "success-file")
CLOCKS = ("processing", "event")
#: A hint (how far the log has been checked); lost, it only costs one re-check of the whole log.
MARK = f"{META_DIR}/partition-commit/mark.json"
#: Where the hint lived before it moved into a directory of its own; removed at the next write.
LEGACY_MARK = f"{META_DIR}/partition-commit.json"


#: Seconds a partition committer keeps an unused metastore connection before opening a new one.
IDLE_RECONNECT_S = 30.0


@dataclass(frozen=True)
class CommitPolicy:
    """A table's partition-commit settings (``table.json`` → ``partition_commit``)."""

    policies: tuple[str, ...] = ()
    hive_table: str | None = None
    metastore: str | None = None
    delay_ms: int = 0
    clock: str = "processing"
    success_file: str = "_SUCCESS"
    batch_size: int | None = None
    location_base: str | None = None

    def __post_init__(self):
        bad = [p for p in self.policies if p not in POLICIES]
        if bad:
            raise InvalidInputError(f"unknown partition-commit policy {bad[0]!r}; choose {', '.join(POLICIES)}")
        if self.clock not in CLOCKS:
            raise InvalidInputError(f"unknown clock {self.clock!r}; choose {', '.join(CLOCKS)}")
        if self.delay_ms < 0:
            raise InvalidInputError("the delay must be >= 0", delay="the delay")
        if "metastore" in self.policies and not (self.hive_table and self.metastore):
            raise InvalidInputError("policy metastore needs a Hive table and a metastore",
                                    hive_table="a Hive table", metastore="a metastore")
        if self.hive_table:
            TableName.parse(self.hive_table)
        if self.metastore:
            MetastoreURI.parse(self.metastore)  # a password in it is refused here, before table.json has it
        name = self.success_file
        # Hidden (``_``/``.``) so no engine reads the marker as data.
        if not name or "/" in name or name in (".", "..") or name[0] not in "_.":
            raise InvalidInputError(f"success file {name!r} must be a plain name starting with '_' or '.'")

    @property
    def enabled(self) -> bool:
        return bool(self.policies)

    def to_json(self) -> dict:
        d: dict[str, Any] = {"policies": list(self.policies), "delay_ms": self.delay_ms, "clock": self.clock,
                             "success_file": self.success_file}
        for k in ("hive_table", "metastore", "batch_size", "location_base"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        return d

    @classmethod
    def from_json(cls, d: Mapping | None) -> CommitPolicy:
        try:
            if d is not None and not isinstance(d, Mapping):
                raise TypeError(f"an object, not {d!r:.40}")
            d = dict(d or {})
            return cls(tuple(d.get("policies", ())), d.get("hive_table"), d.get("metastore"),
                       int(d.get("delay_ms", 0)), d.get("clock", "processing"), d.get("success_file", "_SUCCESS"),
                       d.get("batch_size"), d.get("location_base"))
        except (TypeError, ValueError) as e:  # InvalidInputError too: table.json is not the user's argument here
            raise ManifestCorruptError(f"corrupt partition_commit settings in table.json: {e}") from None


def save_policy(table: Table, policy: CommitPolicy) -> Table:
    """Rewrite ``table.json`` with ``policy``; readers see the old file or the new one.

    Commits made while the metastore policy was off, or mounted into another
    Hive table or under another location base, are not mounted where the new
    policy says: the mark's ``mounted_version`` is forgotten, so the next pass
    reads the whole log.
    """
    try:
        old = CommitPolicy.from_json(table.config.partition_commit)
    except ManifestCorruptError:  # e.g. a password stored by an older trib: the new policy replaces it
        old = CommitPolicy()
    config = replace(table.config, partition_commit=policy.to_json())
    data = json.dumps(config.to_json(), indent=2, sort_keys=True).encode()
    table.storage.replace(PROPERTIES, data)
    if ("metastore" in policy.policies and "metastore" not in old.policies
            or (old.hive_table, old.location_base) != (policy.hive_table, policy.location_base)):
        _forget_mounted(table)
    return Table(table.storage, config)


def _forget_mounted(table: Table) -> None:
    try:
        d = load_document(table.storage.read(MARK), table.storage.uri_for(MARK))
    except (FileNotFoundError, ManifestCorruptError):
        return  # no hint (or a torn one, which reads as none): nothing to forget
    if d.pop("mounted_version", None) is not None:
        table.storage.write(MARK, json.dumps(d).encode())


# -- the committer -------------------------------------------------------------------
@dataclass
class _Mark:
    through_ms: int = 0
    watermark_ms: int = 0
    #: every commit up to this version had its partitions mounted or made pending (None: unknown, check the whole log)
    mounted_version: int | None = None
    #: partition directories committed but not due on the event clock: mounted once the watermark passes them
    pending: tuple[str, ...] = ()


def commit_watermark(commit: Commit | None) -> int | None:
    """The event-time watermark a commit's writer recorded, if any."""
    meta = commit.transaction.meta if commit is not None and commit.transaction is not None else {}
    w = meta.get(EVENT_WATERMARK)
    return w if isinstance(w, int) and not isinstance(w, bool) else None


def read_mark(table: Table) -> _Mark:
    """The committer's hint (:data:`MARK`); an empty one when lost or torn (the next pass re-checks the log)."""
    try:
        d = load_document(table.storage.read(MARK), table.storage.uri_for(MARK))
        mounted = d.get("mounted_version")
        pending = d.get("pending", [])
        if not isinstance(pending, list) or not all(isinstance(x, str) for x in pending):
            raise ValueError("pending must be a list of directories")
        return _Mark(int(d.get("through_ms", 0)), int(d.get("watermark_ms", 0)),
                     None if mounted is None else int(mounted), tuple(pending))
    except (FileNotFoundError, ManifestCorruptError, TypeError, ValueError):
        return _Mark()


def log_watermark(log, version: int, partitions: Callable[[], Mapping[str, PartitionDir]]) -> int:
    """The event-time watermark the log gives at ``version``: the newest commit's writer watermark, else
    the start of the newest partition holding data (``partitions``: the log's, computed only then)."""
    if not version:
        return 0
    given = commit_watermark(log.read_commit(version))
    if given is None:
        given = max((p.start_ms for p in partitions().values()), default=0)
    return given


def is_due(policy: CommitPolicy, p: PartitionDir, clock_ms: int) -> bool:
    """A partition is complete once its end plus the policy's delay has passed on the policy's clock."""
    return p.end_ms + policy.delay_ms <= clock_ms


class PartitionCommitter:
    """Applies a table's policy to each commit, and to what became due when closed.

    Metastore errors do not interrupt the writer: the data commit already
    landed. The first error is kept, the metastore policy stops for the run, and
    :meth:`close` reports it so the caller exits non-zero and says how to catch up.
    """

    def __init__(self, table: Table, policy: CommitPolicy | None = None, *, metastore: Metastore | None = None,
                 now_ms: Callable[[], int] | None = None, metastore_factory: Callable[[str], Metastore] | None = None):
        self.table = table
        self.policy = policy or CommitPolicy.from_json(table.config.partition_commit)
        self.now_ms = now_ms or (lambda: int(time.time() * 1000))
        self._ms = metastore
        self._own_ms = metastore is None
        self._used = 0.0  # time.monotonic() of the metastore's last use
        self._factory = metastore_factory or open_metastore
        self._mounted: set[int] = set()  # versions whose partitions this run mounted
        self._pending: dict[str, PartitionDir] = {}
        self._to_mount: dict[str, PartitionDir] | None = None  # event clock: pending mounts (loaded from the mark)
        self._watermark = 0
        self.added: list[str] = []
        self.refreshed: list[str] = []
        self.relocated: list[str] = []
        self.success_files: list[str] = []
        self.locations: dict[str, str] = {}
        self.error: TributaryError | None = None

    @property
    def hive(self) -> TableName:
        return TableName.parse(self.policy.hive_table or "")

    def _metastore(self) -> Metastore:
        """The connection, reopened when idle longer than :data:`IDLE_RECONNECT_S` (one this run opened).

        A follow-mode ingest mounts a partition an hour for days: a connection that old may have been
        dropped by the server's or a load balancer's idle timeout, and it holds a Kerberos session set
        up with a ticket long expired. A fresh one authenticates again (with the renewed ticket).
        """
        now = time.monotonic()
        if self._ms is not None and self._own_ms and now - self._used > IDLE_RECONNECT_S:
            self._ms.close()
            self._ms = None
        if self._ms is None:
            self._ms = self._factory(self.policy.metastore)
        self._used = now
        return self._ms

    # -- per commit ------------------------------------------------------------------
    def partitions_of(self, files) -> dict[str, PartitionDir]:
        return partitions_of_files(self.table, files)

    @property
    def _event(self) -> bool:
        return self.policy.clock == "event"

    def on_commit(self, commit: Commit) -> None:
        touched = self.partitions_of(commit.files)
        given = commit_watermark(commit)
        if given is not None:
            self._watermark = max(self._watermark, given)
        elif touched:
            self._watermark = max(self._watermark, max(p.start_ms for p in touched.values()))
        if "metastore" in self.policy.policies and self.error is None:
            try:
                if self._event:
                    self._mount_due(touched)
                elif touched:
                    self.mount(touched)
                self._mounted.add(commit.version)
            except TributaryError as e:
                self.error = e
        if touched and "success-file" in self.policy.policies:
            self._pending.update(touched)
            for d in self._mark_due(self._pending, self._clock(self._watermark)):
                del self._pending[d]

    def _due(self, p: PartitionDir, clock_ms: int) -> bool:
        return is_due(self.policy, p, clock_ms)

    def _pending_mounts(self, mark: _Mark | None = None) -> dict[str, PartitionDir]:
        """Event clock: the partitions waiting for the watermark, starting from what the mark
        (``mark``, else read once) says earlier runs left pending."""
        if self._to_mount is None:
            self._to_mount = self.partitions_of_dirs((mark or self._read_mark()).pending)
        return self._to_mount

    def _mount_due(self, touched: Mapping[str, PartitionDir], dry_run: bool = False,
                   mark: _Mark | None = None) -> None:
        """Event clock: mount what the watermark has passed (late data into an old partition at
        once); keep the rest pending, with what earlier runs left pending."""
        waiting = self._pending_mounts(mark)
        waiting.update(touched)
        due = {d: p for d, p in waiting.items() if self._due(p, self._watermark)}
        self.mount(due, dry_run)
        if not dry_run:
            for d in due:
                del waiting[d]

    def partitions_of_dirs(self, dirs) -> dict[str, PartitionDir]:
        parsed = {d: self.table.layout.try_parse(d) for d in dirs}
        return {d: p for d, p in parsed.items() if p is not None}

    def mount(self, parts: Mapping[str, PartitionDir], dry_run: bool = False) -> Mounted:
        """Mount ``parts`` through :func:`mount_commit`, the one owner of what a commit changes in Hive."""
        if not parts:
            return Mounted()  # nothing to look up: no metastore connection
        base = self.policy.location_base
        m = mount_commit(self.table, self._metastore(), self.hive, parts, batch_size=self.policy.batch_size,
                         location_base=base, dry_run=dry_run)
        self.added.extend(m.added)
        self.refreshed.extend(m.refreshed)
        self.relocated.extend(m.relocated)
        if not dry_run:
            placed = {s.lower() for s in m.added + m.relocated}
            where = Locator.of(self.table, base)
            for d, p in parts.items():
                if p.spec.lower() in placed:
                    self.locations[p.spec.lower()] = where(d)
        return m

    def _unmounted(self, mark: _Mark, version: int, files: Callable[[], Any],
                   all_partitions: bool) -> dict[str, PartitionDir]:
        """The partitions of the commits up to ``version`` that no run is known to have mounted.

        Without the hint (lost or never written) every commit of the log is
        read, except those this run mounted; with ``--all``, or when log
        retention removed a commit it would need, every partition of the log.
        """
        if all_partitions:
            return self.partitions_of(files())
        since = mark.mounted_version
        if since is None or since > version:
            since = 0
        todo: list = []
        for v in range(since + 1, version + 1):
            if v in self._mounted:
                continue
            c = self.table.log.read_commit(v)
            if c is None:
                return self.partitions_of(files())
            todo.extend(c.files)
        return self.partitions_of(todo)

    def _clock(self, watermark_ms: int) -> int:
        return self.now_ms() if self.policy.clock == "processing" else watermark_ms

    def _mark_due(self, parts: Mapping[str, PartitionDir], clock_ms: int, dry_run: bool = False) -> list[str]:
        """Write the success file into each due partition; returns the due directories."""
        due = sorted(d for d, p in parts.items() if self._due(p, clock_ms))
        for d in due:
            rel = f"{d}/{self.policy.success_file}"
            if dry_run:
                if not self.table.storage.exists(rel):
                    self.success_files.append(d)
            elif self.table.storage.create_if_absent(rel, b""):
                self.success_files.append(d)
        return due

    # -- whole-log passes ------------------------------------------------------------
    def _read_mark(self) -> _Mark:
        return read_mark(self.table)

    def _write_mark(self, mark: _Mark) -> None:
        doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "kind": "partition-commit",
               "through_ms": mark.through_ms, "watermark_ms": mark.watermark_ms}
        if mark.mounted_version is not None:
            doc["mounted_version"] = mark.mounted_version
        if mark.pending:
            doc["pending"] = list(mark.pending)
        self.table.storage.write(MARK, json.dumps(doc).encode())
        if self.table.storage.exists(LEGACY_MARK):
            self.table.storage.delete(LEGACY_MARK)

    def catch_up(self, *, all_partitions: bool = False, dry_run: bool = False) -> dict:
        """Apply the policies to the partitions of the log not handled yet (each partition once)."""
        log = self.table.log
        version = log.latest_version()
        state: list = []

        def files():
            if not state:
                state.append(list(log.state(version).files.values()))
            return state[0]

        parts_of_log: list = []

        def log_parts() -> dict[str, PartitionDir]:
            if not parts_of_log:
                parts_of_log.append(self.partitions_of(files()))
            return parts_of_log[0]

        mark = self._read_mark()
        read = replace(mark)
        if self._event:
            given = log_watermark(log, version, log_parts)
            self._watermark = mark.watermark_ms = max(mark.watermark_ms, self._watermark, given)
        if "metastore" in self.policy.policies and self.error is None:
            try:
                todo = self._unmounted(mark, version, files, all_partitions)
                if self._event:
                    self._mount_due(todo, dry_run, mark)
                    mark.pending = tuple(sorted(self._pending_mounts(mark)))
                else:  # what an event-clock run left pending (the clock was changed since) is due now
                    self.mount({**self.partitions_of_dirs(mark.pending), **todo}, dry_run)
                    mark.pending = ()
                mark.mounted_version = version
            except TributaryError as e:
                self.error = e
        if "success-file" in self.policy.policies:
            parts = log_parts()
            newest = max((p.start_ms for p in parts.values()), default=0)
            mark.watermark_ms = max(mark.watermark_ms, self._watermark, 0 if self._event else newest)
            clock = self._clock(mark.watermark_ms)
            limit = clock - self.policy.delay_ms
            lo = -(2**62) if all_partitions else mark.through_ms
            self._mark_due({d: p for d, p in parts.items() if lo < p.end_ms <= limit}, clock, dry_run)
            for d in self._mark_due(self._pending, clock, dry_run):
                del self._pending[d]
            mark.through_ms = max(mark.through_ms, limit)
        if not dry_run and ("success-file" in self.policy.policies or mark != read):
            self._write_mark(mark)
        return {"watermark_ms": mark.watermark_ms or None, "through_ms": mark.through_ms or None}

    def close(self, *, catch_up: bool = True, all_partitions: bool = False, dry_run: bool = False) -> dict:
        """Finish the run: commit what became due, remember mounted locations, release the metastore."""
        extra: dict = {}
        try:
            if catch_up:
                extra = self.catch_up(all_partitions=all_partitions, dry_run=dry_run)
            if self.locations and self.error is None and not dry_run:
                self._remember_locations()
        except TributaryError as e:
            self.error = self.error or e
        finally:
            if self._own_ms and self._ms is not None:
                self._ms.close()
        return self.summary(extra)

    def summary(self, extra: Mapping | None = None) -> dict:
        return {"policies": list(self.policy.policies), "added": self.added, "refreshed": self.refreshed,
                "relocated": self.relocated, "success_files": self.success_files, **(extra or {}),
                "error": str(self.error) if self.error else None}

    def _remember_locations(self) -> None:
        """Tell the sync state where these partitions are, so a sync need not DESCRIBE them."""
        store = StateStore.for_table(self.table, self.hive)
        for _ in range(5):
            prev = store.latest()
            parts = dict(prev.partitions) if prev else {}
            for spec, loc in self.locations.items():
                if spec not in parts or parts[spec].location != loc:
                    parts[spec] = Known(loc)  # no fingerprint: the next sync refreshes its stats
            table_location = prev.table_location if prev else self._metastore().table_info(self.hive).location
            state = SyncState((prev.version if prev else 0) + 1, str(self.hive), self._metastore().address,
                              table_location, self.table.uri, int(time.time() * 1000), parts)
            try:
                store.save(state)
                return
            except CommitConflictError:
                continue  # a concurrent sync or committer: merge into its state


def success_file(table: Table) -> str | None:
    """The name of the marker the table's partition commit writes into complete partitions, if it writes one."""
    policy = CommitPolicy.from_json(table.config.partition_commit)
    return policy.success_file if "success-file" in policy.policies else None


def unmark(table: Table, directories: Sequence[str]) -> list[str]:
    """Delete the partition commit's marker from ``directories`` (``trib expire`` removed their data).

    A marker says "this partition is complete": left in an expired partition it
    tells a downstream job to read a partition that holds nothing any more.
    """
    name = success_file(table)
    if name is None or not directories:
        return []
    paths = [f"{d}/{name}" for d in directories]
    here = [p for p, info in zip(paths, table.storage.stat_many(paths)) if info is not None]
    for p in here:
        table.storage.delete(p)
    return here


def committer_for(table: Table, **kwargs) -> PartitionCommitter | None:
    """The table's committer, or None when it has no partition-commit policy."""
    policy = CommitPolicy.from_json(table.config.partition_commit)
    return PartitionCommitter(table, policy, **kwargs) if policy.enabled else None


# -- mounting one commit's partitions (the ETL's Hive step) ----------------------------
#: A commit touching more partitions than this reads the metastore's partition list once
#: (one call, O(table)) rather than one lookup per partition (one call each).
LIST_ABOVE = 16

@dataclass(frozen=True)
class Mounted:
    """What :func:`mount_commit` did: partitions by name, and the metastore requests it made."""

    added: tuple[str, ...] = ()
    refreshed: tuple[str, ...] = ()
    relocated: tuple[str, ...] = ()
    statements: int = 0


def mount_commit(table: Table, ms: Metastore, hive: TableName, parts: Mapping[str, PartitionDir], *,
                 batch_size: int | None = None, location_base: str | None = None,
                 after_step: Callable[[str], None] | None = None, dry_run: bool = False) -> Mounted:
    """Make Hive show exactly the partitions a commit touched, in O(partitions touched) calls.

    The commit knows which directories it wrote, so neither the table's
    directories nor the metastore's partition list are read (both grow with the
    table): each touched partition is looked up by its values. A missing one is
    added (IF NOT EXISTS, so a concurrent mount is harmless); one that exists
    received new files (late data), so its statistics are refreshed as a full
    sync would, and if it points away from its directory it is moved there (the
    commit's rows are in that directory: Hive would not show them). Its directory
    is where its live files are (:class:`~tributary_read.hive.sync.Locator`): a
    restate on a store that cannot swap directories (S3, HDFS) moves a partition
    into a new directory, and this is the ``SET LOCATION`` that shows it.
    Idempotent: a rerun after a crash mounts the same commit again.
    A commit touching more than :data:`LIST_ABOVE` partitions (a backfill, a
    catch-up) lists the partitions once instead, and describes only those that
    exist when the listing carries no locations.
    ``dry_run`` only describes, and says what it would do.
    """
    from tributary_read.io.location import same_location

    after_step = after_step or (lambda _step: None)
    listed = None
    if len(parts) > LIST_ABOVE:  # one listing beats a lookup each (a backfill: mostly new partitions)
        listed = {h.spec.lower(): h for h in ms.list_partitions(hive, with_locations=ms.lists_locations)}
    new, moved, existing = [], [], []
    where = Locator.of(table, location_base)  # a restate that moved a partition moves its location here
    for d, p in sorted(parts.items()):
        target = where(d)
        if listed is None:
            cur = ms.describe_partition(hive, p.values)
        else:
            cur = listed.get(p.spec.lower())
            if cur is not None and not ms.lists_locations:
                cur = ms.describe_partition(hive, p.values) or cur  # its location decides a move back
        if cur is None:
            new.append((p, target))
            continue
        if cur.location is not None and not same_location(cur.location, target):
            moved.append((p, target))
        existing.append(p)
    if dry_run:
        return Mounted(tuple(p.spec for p, _ in new), tuple(p.spec for p in existing),
                       tuple(p.spec for p, _ in moved), 0)
    statements = ms.add_partitions(hive, [(p.values, loc) for p, loc in new], batch_size) if new else 0
    after_step("add")
    if moved:
        statements += ms.set_locations(hive, [(p.values, loc) for p, loc in moved])
    if existing:
        statements += ms.refresh_stats(hive, [p.values for p in existing])
    after_step("refresh")
    return Mounted(tuple(p.spec for p, _ in new), tuple(p.spec for p in existing),
                   tuple(p.spec for p, _ in moved), statements)


def partitions_of_commit(table: Table, commit) -> dict[str, PartitionDir]:
    """The partitions ``commit`` changed: those its data files are in, and those a restate recomputed (one
    it left empty holds no file, and its statistics still change)."""
    out = partitions_of_files(table, commit.files)
    for r in commit.restated:
        out.setdefault(r.directory, table.layout.parse(r.directory))
    return out


def partitions_of_files(table: Table, files) -> dict[str, PartitionDir]:
    """The partition directories (parsed by the table's layout) that ``files``' data files are in (a moved
    restate's files by their partition's directory, not the one they lie in)."""
    from tributary_read.table.restate_swap import logical_dir

    out: dict[str, PartitionDir] = {}
    for f in files:
        if f.kind != KIND_DATA:
            continue
        d = logical_dir(f.path)
        if d not in out:
            p = table.layout.try_parse(d)
            if p is not None:
                out[d] = p
    return out
