"""A consumer's persisted values: its committed state, its pending plan, an ack.

Kept apart from :mod:`tributary_read.consumer` (the planning and committing
logic) because these are the file formats under ``_tributary/consumers/``:
decoding is strict and validates every field, as commits are, so a tampered
plan can never hand a reader a path outside ROOT (``ResolvedFile.from_json``
goes through ``safe_relpath``).
"""

from __future__ import annotations

import shlex

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from tributary_read.choice import Choice
from tributary_read.errors import InvalidInputError
from tributary_read.read.ledger import check_ledger, file_count
from tributary_read.read.listing import Skipped
from tributary_read.table.config import Tracking
from tributary_read.table.log import META_DIR
from tributary_read.table.docstore import header
from tributary_read.read.fileset import Conflict, FileSet, HeldPartition, LateFile, ResolvedFile
from tributary_read.read.tracking import Untracked
from tributary_read.read.window import DAY_MS

CONSUMERS_DIR = f"{META_DIR}/consumers"
DEFAULT_LOOKBACK_MS = 7 * DAY_MS
#: Listing (and ``both``) consumers leave a file modified within this long for a later run: it may be
#: mid-write (a Parquet file without its footer, a line cut short). A minute covers writers that
#: flush at least once a minute and delays an hourly run by at most that (docs/reading.md).
DEFAULT_MIN_AGE_MS = 60_000
#: States (and their plans) kept after an ack; older ones are deleted.
KEEP_STATES = 3
#: A consumer tracks its table's files the way a table can (:class:`Tracking`):
#: by version, by a ledger of listings, or both.
CONSUMER_MODES = tuple(Tracking)
#: Listing consumers list every directory this often, even those whose mtime is
#: unchanged: a directory mtime set back (``touch -r``, ``rsync -a``) hides a new
#: file from the mtime skip, and an in-place rewrite never changes it (docs/reading.md).
DEFAULT_FULL_SCAN_EVERY_MS = DAY_MS
#: One plan delivers at most this many files (``--max-files``; 0 = no cap), oldest partitions first, the
#: rest left pending as its ``backlog``: a new consumer delivers all history by default, and a first plan
#: over millions of files would otherwise hold them all in memory and in one plan file (docs/reading.md).
DEFAULT_MAX_FILES = 100_000



def max_files_of(value: int | str | None) -> int | None:
    """A file cap as given (an integer, or ``off``/``0`` for none); None stays None (the default)."""
    if value is None:
        return None
    text = value.strip().lower() if isinstance(value, str) else None
    if text in ("off", "none"):
        return 0
    if isinstance(value, bool) or not ((isinstance(value, int) and value >= 0) or (text or "").isdigit()):
        raise InvalidInputError(f"the file cap must be a number of files, or off (0) for no cap, not {value!r}",
                                max_files="the file cap")
    return int(value)


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
_PLAN_ID = re.compile(r"^([0-9]{1,20})-([0-9a-f]{12})$")


def _owner(v) -> Mapping[str, str] | None:
    if v is None:
        return None
    if not (isinstance(v, dict) and all(isinstance(v.get(k), str) for k in ("job", "output"))):
        raise ValueError("owner must be an object with a job and an output")
    return {"job": v["job"], "output": v["output"]}


def is_index(ledger: Mapping) -> bool:
    """Whether a state's ``ledger`` is a segmented ledger's index (entries name segments, not files)."""
    return isinstance(ledger, dict) and bool(ledger) and all(
        isinstance(e, dict) and "seg" in e and "files" not in e for e in ledger.values())


def reset_command(table: str, name: str, target: str, state_dir: str | None = None) -> str:
    """The exact ``trib consumer reset`` line a message suggests: a reset names its target and ``--execute``."""
    if state_dir:
        return f"trib consumer reset {shlex.quote(table)} {shlex.quote(name)} --{target} " \
               f"--state-dir {shlex.quote(state_dir)} --execute"
    return f"trib consumer reset {shlex.quote(table)} {shlex.quote(name)} --{target} --execute"


def replay_command(table: str, name: str, partitions: str | list[str], state_dir: str | None = None,
                   redeliver: bool = False) -> str:
    """The exact ``trib consumer replay`` line a message suggests: every partition it names at once (comma-separated)."""
    t, n = shlex.quote(table), shlex.quote(name)
    p = shlex.quote(partitions if isinstance(partitions, str) else ",".join(partitions))
    if state_dir:
        d = shlex.quote(state_dir)
        if redeliver:  # its preview: it counts what delivering the partitions again repeats
            return f"trib consumer replay {t} {n} --partition {p} --state-dir {d} --redeliver"
        return f"trib consumer replay {t} {n} --partition {p} --state-dir {d} --execute"
    if redeliver:
        return f"trib consumer replay {t} {n} --partition {p} --redeliver"
    return f"trib consumer replay {t} {n} --partition {p} --execute"


def skip_command(table: str, name: str, path: str, state_dir: str | None = None) -> str:
    """The exact ``trib consumer skip`` line a message suggests."""
    t, n, p = shlex.quote(table), shlex.quote(name), shlex.quote(path)
    if state_dir:
        return f"trib consumer skip {t} {n} {p} --state-dir {shlex.quote(state_dir)} --execute"
    return f"trib consumer skip {t} {n} {p} --execute"


# -- value objects --------------------------------------------------------------
class Start(Choice):
    """Where a consumer's first plan starts (:class:`InitialPosition`)."""

    EARLIEST = "earliest"
    LATEST = "latest"
    TIME = "time"


@dataclass(frozen=True)
class InitialPosition:
    """What a new consumer's first plan takes as already delivered: nothing (``earliest``, the default),
    everything that exists (``latest``), or the partitions that ended before an instant (``TIME``).

    The default delivers what exists, as Spark's file source, Auto Loader and
    Flink's FileSource do; ``latest`` is Kafka's ``auto.offset.reset=latest``,
    the choice users get burned by when it is a default, so here it is asked for.
    """

    start: Start = Start.EARLIEST
    time_ms: int | None = None

    @classmethod
    def of(cls, value: InitialPosition | str | int | None, tz=None) -> InitialPosition | None:
        """``earliest``, ``latest`` or an instant (:func:`tributary_read.timespec.parse_instant`); None stays None.

        ``tz``: the table's zone (or zones), named in the refusal of a time without an offset.
        """
        if value is None or isinstance(value, InitialPosition):
            return value
        text = str(value).strip().lower() if isinstance(value, str) else None
        if text in (Start.EARLIEST, Start.LATEST):
            return cls(Start(text))
        from tributary_read.timespec import parse_instant

        try:
            return cls(Start.TIME, parse_instant(value, tz, what="initial position"))
        except InvalidInputError as e:
            raise InvalidInputError(f"{e} (or earliest, latest)", initial_position="initial position") from None

    def takes(self, end_ms: int) -> bool:
        """Whether a partition ending at ``end_ms`` (exclusive) counts as delivered before the first plan."""
        return self.start is Start.LATEST or (self.start is Start.TIME and end_ms <= (self.time_ms or 0))

    def to_json(self) -> str | int:
        return self.time_ms if self.start is Start.TIME and self.time_ms is not None else str(self.start)

    @classmethod
    def from_json(cls, v: Any) -> InitialPosition | None:
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (str, int)):
            raise ValueError(f"bad initial position {v!r}")
        if isinstance(v, int):
            return cls(Start.TIME, v)
        if v == Start.TIME:
            raise ValueError("an initial position time needs its instant")
        return cls(Start(v))

    def __str__(self) -> str:
        if self.start is Start.TIME and self.time_ms is not None:
            from tributary_read.timespec import iso

            return iso(self.time_ms)
        return str(self.start)


@dataclass(frozen=True)
class ConsumerState:
    """One committed consumer state (``state-<version>.json``)."""

    consumer: str
    version: int
    table: str
    mode: Tracking | None = None
    lookback_ms: int = DEFAULT_LOOKBACK_MS
    layout: Mapping[str, str] | None = field(default=None, hash=False)
    manifest_version: int = 0
    ledger: Mapping[str, Mapping] = field(default_factory=dict, hash=False)
    sealed: Mapping[str, Mapping] = field(default_factory=dict, hash=False)
    plan_id: str | None = None
    note: str | None = None
    created_ms: int = 0
    updated_ms: int = 0
    delivered_files: int = 0
    delivered_bytes: int = 0
    full_scan_every_ms: int = DEFAULT_FULL_SCAN_EVERY_MS  # 0 = never periodic
    last_full_scan_ms: int = 0  # the plan clock of the last acked full listing
    #: The job and output this consumer serves ({"job", "output"}; ETL inputs record it at their first ack):
    #: a second job writing elsewhere is refused instead of splitting the input with the first.
    owner: Mapping[str, str] | None = field(default=None, hash=False)
    #: What the first plan took as delivered; None: created before initial positions existed, when a
    #: first plan took partitions older than the lookback as delivered (its baseline, kept).
    initial_position: InitialPosition | None = None
    #: The partitions the last acked plan held back (a delivered file removed or rewritten): reported
    #: again by every plan until ``trib consumer replay`` resolves them. Absent in older states.
    held: tuple[HeldPartition, ...] = ()

    def to_json(self) -> dict:
        return {**header("consumer_state"),
                "consumer": self.consumer, "version": self.version, "table": self.table,
                "mode": self.mode, "lookback_ms": self.lookback_ms, "layout": self.layout,
                "manifest_version": self.manifest_version, "plan_id": self.plan_id, "note": self.note,
                "created_ms": self.created_ms, "updated_ms": self.updated_ms,
                "delivered_files": self.delivered_files, "delivered_bytes": self.delivered_bytes,
                "full_scan_every_ms": self.full_scan_every_ms, "last_full_scan_ms": self.last_full_scan_ms,
                "owner": self.owner,
                "initial_position": self.initial_position.to_json() if self.initial_position else None,
                "held": [h.to_json() for h in self.held], "ledger": self.ledger, "sealed": self.sealed}

    @classmethod
    def from_json(cls, d: Mapping) -> ConsumerState:
        if d.get("kind") != "consumer_state":
            raise ValueError("not a consumer state")
        if not all(isinstance(d.get(k), str) for k in ("consumer", "table")) or not all(
                isinstance(d.get(k, 0), int) and not isinstance(d.get(k, 0), bool)
                for k in ("version", "lookback_ms", "manifest_version", "created_ms", "updated_ms")):
            raise ValueError("consumer and table must be strings, versions and times integers")
        if not isinstance(d.get("ledger") or {}, dict) or not isinstance(d.get("sealed") or {}, dict):
            raise ValueError("ledger and sealed must be objects")
        if d.get("mode") not in (None, *CONSUMER_MODES):
            raise ValueError(f"unknown mode {d.get('mode')!r}")
        mode = None if d.get("mode") is None else Tracking(d["mode"])
        st = cls(d["consumer"], int(d["version"]), d["table"], mode, int(d["lookback_ms"]),
                 d.get("layout"), int(d.get("manifest_version", 0)), d.get("ledger") or {},
                 d.get("sealed") or {}, d.get("plan_id"), d.get("note"), int(d.get("created_ms", 0)),
                 int(d.get("updated_ms", 0)), int(d.get("delivered_files", 0)),
                 int(d.get("delivered_bytes", 0)),
                 int(d.get("full_scan_every_ms", DEFAULT_FULL_SCAN_EVERY_MS)), int(d.get("last_full_scan_ms", 0)),
                 owner=_owner(d.get("owner")),
                 initial_position=InitialPosition.from_json(d.get("initial_position")),
                 held=tuple(HeldPartition.from_json(h) for h in d.get("held") or ()))
        # A segmented ledger's index (tributary_read.read.ledger_store) is checked as the consumer loads it.
        check_ledger({} if is_index(st.ledger) else st.ledger, st.sealed)
        return st

    def summary(self) -> dict:
        d = {k: v for k, v in self.to_json().items()
             if k not in ("format", "format_version", "kind", "ledger", "sealed")}
        if self.mode in ("listing", "both"):
            d["ledger_directories"] = len(self.ledger)
            d["ledger_files"] = file_count(self.ledger)
            d["sealed_directories"] = len(self.sealed)
        return d


@dataclass(frozen=True)
class Plan:
    """The next batch of a consumer, persisted until acked (``plan-<base>.json``)."""

    plan_id: str
    consumer: str
    base_version: int
    mode: Tracking
    table: str
    created_ms: int
    files: tuple[ResolvedFile, ...]
    lookback_ms: int | None = None
    min_age_ms: int = 0
    conflicts: tuple[Conflict, ...] = ()
    beyond_horizon: tuple[LateFile, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    deferred: int = 0
    baseline: Mapping | None = field(default=None, hash=False)
    versions: tuple[int, int] | None = None  # manifest: (since, until]
    stats: Mapping = field(default_factory=dict, hash=False)
    #: What the ack applies to the base state; opaque outside this module.
    delta: Mapping = field(default_factory=dict, hash=False, repr=False)
    #: Partitions held back, the rest delivered (tributary_read.read.ledger); their ack exits 17.
    held: tuple[HeldPartition, ...] = ()

    @property
    def bytes(self) -> int:
        return sum(f.readable_bytes for f in self.files)

    def fileset(self, where: Mapping[str, Any] | None = None) -> FileSet:
        """The plan as the read contract.

        ``where``: :func:`~tributary_read.read.fileset.origin` of the consumer's
        source (its Hadoop URI and format, which a plan does not store).
        """
        plan: dict[str, Any] = {"consumer": self.consumer, "plan_id": self.plan_id,
                                "base_version": self.base_version, "tracking": self.mode,
                                "created_ms": self.created_ms}
        if self.mode in ("manifest", "both"):
            assert self.versions is not None  # a plan that tracks the manifest names its versions
            plan["since_version"], plan["until_version"] = self.versions
            if self.baseline is not None:  # a first plan at a time: the files it took as delivered
                plan["baseline"] = self.baseline
        if self.mode in ("listing", "both"):
            assert self.lookback_ms is not None  # a plan that tracks listings names its lookback
            plan.update({"lookback_ms": self.lookback_ms, "min_age_ms": self.min_age_ms,
                         "horizon_ms": self.created_ms - self.lookback_ms, "deferred": self.deferred,
                         "conflicts": [c.to_json() for c in self.conflicts],
                         "beyond_horizon": [b.to_json() for b in self.beyond_horizon],
                         "held": [h.to_json() for h in self.held],
                         "baseline": self.baseline, "full_scan": bool(self.delta.get("full_scan")),
                         "full_scan_every_ms": self.delta.get("full_scan_every_ms")})
        if "backlog" in self.stats:  # what a capped plan left for the next runs (tributary_read.read.backlog)
            plan["backlog"] = self.stats["backlog"]
        stats = {k: v for k, v in self.stats.items() if k not in ("untracked", "backlog")}
        untracked = self.stats.get("untracked")
        return FileSet("consumer", self.files, plan, skipped=self.skipped, stats=stats,
                       untracked=Untracked.from_json(untracked) if untracked else None,
                       **{"root": self.table, **(where or {})})

    def to_json(self) -> dict:
        return {**header("consumer_plan"),
                "plan_id": self.plan_id, "consumer": self.consumer, "base_version": self.base_version,
                "mode": self.mode, "table": self.table, "created_ms": self.created_ms,
                "lookback_ms": self.lookback_ms, "min_age_ms": self.min_age_ms,
                "files": [f.to_json() for f in self.files], "conflicts": [c.to_json() for c in self.conflicts],
                "beyond_horizon": [b.to_json() for b in self.beyond_horizon],
                "skipped": [s.to_json() for s in self.skipped],
                "deferred": self.deferred, "baseline": self.baseline,
                "versions": list(self.versions) if self.versions else None,
                "stats": dict(self.stats), "delta": dict(self.delta), "held": [h.to_json() for h in self.held]}

    @classmethod
    def from_json(cls, d: Mapping) -> Plan:
        if d.get("kind") != "consumer_plan":
            raise ValueError("not a consumer plan")
        if d.get("mode") not in CONSUMER_MODES or not isinstance(d.get("files"), list):
            raise ValueError(f"bad mode {d.get('mode')!r} or files")
        if not all(isinstance(d.get(k), str) for k in ("plan_id", "consumer", "table")):
            raise ValueError("plan_id, consumer and table must be strings")
        return cls(d["plan_id"], d["consumer"], int(d["base_version"]), Tracking(d["mode"]), d["table"],
                   int(d["created_ms"]), tuple(ResolvedFile.from_json(f) for f in d["files"]),
                   d.get("lookback_ms"), int(d.get("min_age_ms") or 0),
                   tuple(Conflict.from_json(c) for c in d.get("conflicts") or ()),
                   tuple(LateFile.from_json(b) for b in d.get("beyond_horizon") or ()),
                   tuple(Skipped(s["path"], s["reason"], s.get("size", 0), s.get("mtime_ms", 0))
                         for s in d.get("skipped") or ()),
                   int(d.get("deferred") or 0), d.get("baseline"),
                   tuple(d["versions"]) if d.get("versions") else None, d.get("stats") or {},
                   d.get("delta") or {}, tuple(HeldPartition.from_json(h) for h in d.get("held") or ()))


@dataclass(frozen=True)
class AckResult:
    state: ConsumerState
    plan_id: str
    already_acked: bool

    @property
    def held(self) -> tuple[HeldPartition, ...]:
        """The partitions the acked plan held back (the state it made records them)."""
        return self.state.held if self.state.plan_id == self.plan_id else ()

    def to_json(self) -> dict:
        return {"consumer": self.state.consumer, "plan_id": self.plan_id, "version": self.state.version,
                "already_acked": self.already_acked, "delivered_files": self.state.delivered_files,
                "held": [h.to_json() for h in self.held]}


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInputError(
            f"bad consumer name {name!r}: letters, digits, '_', '-', '.', starting with a letter or digit")
    return name
