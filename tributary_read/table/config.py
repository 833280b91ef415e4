"""A table: a root directory whose properties live in ``ROOT/_tributary/table.json``.

Keeping the properties inside the table means every later command needs only
ROOT: no external catalog to drift out of sync with the data.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping

from tributary_read.choice import Choice
from tributary_read.errors import InvalidInputError, ManifestCorruptError, NoSuchTableError, TableExistsError
from tributary_read.io.formats import DataFormat, check_format, default_compression
from tributary_read.table.layout import Layout
from tributary_read.table.log import DEFAULT_LOG_RETENTION_MS, META_DIR, ManifestLog
from tributary_read.table.manifest import FORMAT, FORMAT_VERSION, Placement, load_document
from tributary_read.table.placement import PINNED, check_placement, read_pinned
from tributary_read.io.storage import Storage, open_storage

PROPERTIES = f"{META_DIR}/table.json"


class Protocol(Choice):
    """How a writer makes a file visible: under its final name at once (``direct``), or
    written under a hidden staged name and renamed after the commit (``rename``)."""

    DIRECT = "direct"
    RENAME = "rename"

    @property
    def meaning(self) -> str:
        """What a reader of the directories (Hive, Spark) sees under this protocol: ``trib table show``."""
        if self is Protocol.RENAME:
            return "files stay hidden until their commit (directory readers never see uncommitted bytes)"
        return ("files appear under their final names before their commit: a killed writer's files are visible "
                "to directory readers (Hive, Spark) until `trib clean`; `trib table set --protocol rename` "
                "hides them")


#: What a new table is created with unless told otherwise: ``rename``, on every store.
#: A file written under its final name is visible to every directory reader (Hive,
#: Spark on a mounted table, Trino, Athena) from its first byte, and a writer killed
#: before its commit leaves it there, counted next to the rerun's copy, until ``trib
#: clean``. Hidden names keep uncommitted bytes out of every such reader, whether or
#: not it knows trib. On local disk and HDFS the rename is one metadata operation;
#: on S3 it is a server-side copy per file at each commit (run concurrently), paid
#: for the same guarantee. ``direct`` is the explicit, faster choice for a table
#: only trib's own readers read. A table created before this default keeps what its
#: table.json says (no key: ``direct``, see :meth:`TableConfig.from_json`).
DEFAULT_PROTOCOL = Protocol.RENAME


class Tracking(Choice):
    """How a table's files are found: its manifest log, a listing of its directory, or
    both (trib-written files by the manifest, files other tools write by listing)."""

    MANIFEST = "manifest"
    LISTING = "listing"
    BOTH = "both"


#: What a table is created with unless told otherwise: the safe choice, as a table
#: made before its feed starts (an empty directory) is the usual raw table. ``manifest``
#: is the explicit, faster choice for a table only trib writes.
DEFAULT_TRACKING = Tracking.BOTH

#: The largest size a roll limit may name (1 PiB).
MAX_SIZE = 1 << 50


def parse_size(v: Any) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        if not 0 <= v <= MAX_SIZE:
            raise InvalidInputError(f"bad size {v!r}: 0 (no limit) up to 1 PiB")
        return v
    s = str(v).strip().upper().removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    try:
        f = float(s.rstrip("KMG")) * mult
    except ValueError:
        raise InvalidInputError(f"bad size {v!r} (e.g. 128M, 1G)") from None
    # float() also accepts inf, nan and 1e30: a roll size must be a byte count a file can reach.
    if not 0 <= f <= MAX_SIZE:
        raise InvalidInputError(f"bad size {v!r}: 0 (no limit) up to 1 PiB (e.g. 128M, 1G)")
    return int(f)


#: A run of ``trib ingest`` fails, committing nothing more, once more than this share of its
#: records cannot be placed (1%): a typo in the time field dead-letters every record, and
#: that must not exit 0 with the source's offsets committed past them.
DEFAULT_MAX_BAD_FRACTION = 0.01
#: A source whose last line has no newline is taken as complete once it has not changed
#: for this long (5 minutes): a daily export's last record is never left behind, and a
#: line a producer is still writing is never cut.
DEFAULT_FINAL_AFTER_MS = 300_000


def parse_fraction(v: Any, what: str = "fraction") -> float:
    """A share from 0 to 1, written ``0.01`` or ``1%``: the one reader of bad-record limits."""
    if isinstance(v, bool):
        raise InvalidInputError(f"bad {what} {v!r}: a number from 0 to 1, or a percentage (e.g. 0.01, 1%)")
    text = str(v).strip()
    percent = text.endswith("%")
    try:
        f = float(text[:-1] if percent else text) / (100 if percent else 1)
    except ValueError:
        raise InvalidInputError(f"bad {what} {text!r}: a number from 0 to 1, or a percentage "
                                f"(e.g. 0.01, 1%)") from None
    if not 0 <= f <= 1:  # also refuses nan and inf
        raise InvalidInputError(f"bad {what} {text!r}: it must be from 0 to 1 (0% to 100%)")
    return f


@dataclass(frozen=True)
class RollPolicy:
    """When an open file is closed: whichever limit is reached first (0 = no limit)."""

    max_bytes: int = 128 << 20
    max_records: int = 0
    inactivity_s: float = 60.0

    def __post_init__(self):
        if self.max_bytes < 0 or self.max_records < 0 or self.inactivity_s < 0:
            raise InvalidInputError("roll limits must be >= 0")


@dataclass(frozen=True)
class CompactSettings:
    """How ``trib compact`` merges small files (table.json's ``compact``; docs/compaction.md).

    ``period_ms`` 0 means the layout's period (an hourly layout: 1h): files are merged only
    with files modified in the same period, so an mtime window aligned to it takes a
    compacted file whole or not at all. ``retention_ms``: how long ``trib clean`` keeps the
    files a compaction replaced, for readers behind it.
    """

    min_age_ms: int = 86_400_000
    target_size: int = 128 << 20
    min_files: int = 5
    period_ms: int = 0
    retention_ms: int = 7 * 86_400_000

    #: key as written (table.json, ``trib table set --compact KEY=VALUE``) -> field, and how to read it.
    KEYS = {"min_age": ("min_age_ms", "duration"), "target_size": ("target_size", "size"),
            "min_files": ("min_files", "count"), "period": ("period_ms", "duration"),
            "retention": ("retention_ms", "duration")}

    def __post_init__(self):
        for name in ("min_age_ms", "target_size", "min_files", "period_ms", "retention_ms"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise InvalidInputError(f"compact {name} must be a whole number >= 0, not {v!r:.40}")
        if self.min_files < 2 or self.target_size < 1:
            raise InvalidInputError("compact min_files must be at least 2 and target_size positive")
        if self.retention_ms >= 30 * 86_400_000:
            raise InvalidInputError("compact retention must be shorter than 30 days, the time a table "
                                    "remembers replaced files")

    def with_values(self, values: Mapping[str, Any]) -> CompactSettings:
        """These settings with ``values`` (``min_age=1d``, ``target_size=256M``, …) applied; bad input names the key."""
        from tributary_read.timespec import parse_duration_ms

        changes: dict[str, int] = {}
        for key, raw in values.items():
            if key not in self.KEYS:
                raise InvalidInputError(f"unknown compact setting {key!r}; use {', '.join(self.KEYS)}")
            name, kind = self.KEYS[key]
            if kind == "duration":
                changes[name] = parse_duration_ms(raw, f"compact {key}")
            elif kind == "size":
                changes[name] = parse_size(raw)
            else:
                try:
                    changes[name] = int(str(raw))
                except ValueError:
                    raise InvalidInputError(f"bad compact {key} {raw!r}: a whole number") from None
        return replace(self, **changes)

    def to_json(self) -> dict:
        return {k: getattr(self, name) for k, (name, _) in self.KEYS.items()}

    @classmethod
    def from_json(cls, d: Any) -> CompactSettings:
        if not isinstance(d, Mapping) or set(d) - set(cls.KEYS):
            raise InvalidInputError(f"compact must be an object of {', '.join(cls.KEYS)}, not {d!r:.60}")
        return cls(**{cls.KEYS[k][0]: v for k, v in d.items()})


@dataclass(frozen=True)
class TableConfig:
    """Table properties, as stored in table.json."""

    layout: Layout
    format: str = "jsonl"
    #: Empty: the format's default (:func:`~tributary_read.io.formats.default_compression`),
    #: snappy for Parquet and none for text. A stored table.json always names its own.
    compression: str = ""
    #: How writers make files visible (:class:`Protocol`); None (a config not yet
    #: stored) becomes :data:`DEFAULT_PROTOCOL` when the table is created.
    protocol: Protocol | None = None
    roll: RollPolicy = field(default_factory=RollPolicy)
    checkpoint_interval: int = 100
    #: Hive partition-commit settings, consumed by tributary_read.hive.
    partition_commit: Mapping[str, Any] = field(default_factory=dict, hash=False)
    created_ms: int = 0
    #: Commit files older than this and below the newest checkpoint are removed by
    #: ``trib clean`` (Delta's logRetentionDuration); consumers further behind must reset.
    log_retention_ms: int = DEFAULT_LOG_RETENTION_MS
    #: See :class:`Tracking` and :mod:`tributary_read.tracking`. A new table tracks
    #: ``both`` (:data:`DEFAULT_TRACKING`) whatever its directory holds now: files
    #: other tools drop in later are then delivered, never left behind. Absent in
    #: older table.json files, which only trib wrote to: ``manifest``.
    tracking: Tracking = DEFAULT_TRACKING
    #: ``trib ingest``'s bad-record limit for this table (see DEFAULT_MAX_BAD_FRACTION).
    max_bad_fraction: float = DEFAULT_MAX_BAD_FRACTION
    #: ``trib ingest``'s wait before an unterminated last line is final (DEFAULT_FINAL_AFTER_MS).
    final_after_ms: int = DEFAULT_FINAL_AFTER_MS
    compact: CompactSettings = field(default_factory=CompactSettings)

    def __post_init__(self):
        if not self.compression:
            object.__setattr__(self, "compression", default_compression(self.format))
        check_format(self.format, self.compression)
        # Stored as members (a str subclass: table.json and comparisons are unchanged).
        if self.protocol is not None:
            object.__setattr__(self, "protocol", Protocol.parse(self.protocol, "protocol"))
        if isinstance(self.checkpoint_interval, bool) or not isinstance(self.checkpoint_interval, int) \
                or self.checkpoint_interval < 1:
            raise InvalidInputError("checkpoint interval must be a whole number >= 1")
        if not isinstance(self.partition_commit, Mapping):  # read by hive/commit.py; a string broke every sync
            raise InvalidInputError(f"partition_commit must be an object, not {self.partition_commit!r:.40}")
        if not isinstance(self.tracking, str):
            raise InvalidInputError(f"unknown tracking {self.tracking!r}; choose {', '.join(Tracking.values())}")
        object.__setattr__(self, "tracking", Tracking.parse(self.tracking, "tracking"))
        if isinstance(self.log_retention_ms, bool) or not isinstance(self.log_retention_ms, int) \
                or self.log_retention_ms < 0:
            raise InvalidInputError("log retention must be a whole number of milliseconds >= 0")
        object.__setattr__(self, "max_bad_fraction", parse_fraction(self.max_bad_fraction, "max bad fraction"))
        if isinstance(self.final_after_ms, bool) or not isinstance(self.final_after_ms, int) \
                or self.final_after_ms < 0:
            raise InvalidInputError("final-after must be a whole number of milliseconds >= 0")

    @property
    def data_format(self) -> DataFormat:
        return DataFormat(self.format, self.compression)

    @property
    def placement(self) -> Placement:
        """The settings that never change: what every commit records and every read checks
        (:mod:`tributary_read.table.placement`)."""
        lay = self.layout
        return Placement(lay.directory, lay.partition, lay.timezone, self.format, self.compression)

    def to_json(self) -> dict:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "kind": "table",
            "layout": self.layout.to_dict(),
            "file_format": self.format,
            "compression": self.compression,
            "protocol": self.protocol,
            "roll": asdict(self.roll),
            "checkpoint_interval": self.checkpoint_interval,
            "partition_commit": dict(self.partition_commit),
            "created_ms": self.created_ms,
            "tracking": self.tracking,
            "log_retention_ms": self.log_retention_ms,
            "max_bad_fraction": self.max_bad_fraction,
            "final_after_ms": self.final_after_ms,
            "compact": self.compact.to_json(),
        }

    @classmethod
    def from_json(cls, data: bytes, where: str) -> TableConfig:
        d = load_document(data, where)
        unknown = sorted(set(d) - KEYS) or (sorted(set(d["layout"]) - LAYOUT_KEYS)
                                            if isinstance(d.get("layout"), Mapping) else [])
        if unknown:
            name = unknown[0] if unknown[0] in d else f"layout.{unknown[0]}"
            raise ManifestCorruptError(
                f"unknown key {name!r} in table properties {where}: a misspelt setting would silently fall back "
                "to its default, so it is refused. Remove it (settings change with trib table set); a key a newer "
                "trib wrote: upgrade trib")
        try:
            lay = d["layout"]
            return cls(
                layout=Layout(lay["directory"], lay["partition"], lay.get("timezone", "UTC")),
                format=d["file_format"],
                compression=d.get("compression", "none"),
                # The key is always written; a table.json without it predates protocols,
                # when every writer wrote final names: it keeps meaning ``direct``.
                protocol=Protocol.parse(d.get("protocol", Protocol.DIRECT), "protocol"),
                roll=_roll(d.get("roll", {})),
                checkpoint_interval=int(d.get("checkpoint_interval", 100)),
                partition_commit=d.get("partition_commit", {}),
                created_ms=int(d.get("created_ms", 0)),
                tracking=d.get("tracking", "manifest"),
                log_retention_ms=d.get("log_retention_ms", DEFAULT_LOG_RETENTION_MS),
                # Absent in tables made before ingest had limits: today's defaults apply.
                max_bad_fraction=d.get("max_bad_fraction", DEFAULT_MAX_BAD_FRACTION),
                final_after_ms=d.get("final_after_ms", DEFAULT_FINAL_AFTER_MS),
                compact=CompactSettings.from_json(d.get("compact", {})),
            )
        except (KeyError, TypeError, ValueError, InvalidInputError) as e:
            raise ManifestCorruptError(f"corrupt table properties {where}: {e}") from None


#: Every key a table.json may hold (what :meth:`TableConfig.to_json` writes, now or in any earlier trib).
KEYS = frozenset({"format", "format_version", "kind", "layout", "file_format", "compression", "protocol", "roll",
                  "checkpoint_interval", "partition_commit", "created_ms", "tracking", "log_retention_ms",
                  "max_bad_fraction", "final_after_ms", "compact"})
LAYOUT_KEYS = frozenset({"directory", "partition", "timezone"})


def _roll(d: Any) -> RollPolicy:
    """table.json's ``roll``: its three keys, numbers, and nothing else (a typo is corruption, never a default)."""
    if not isinstance(d, Mapping) or set(d) - {"max_bytes", "max_records", "inactivity_s"}:
        raise InvalidInputError(f"roll must be an object of max_bytes, max_records, inactivity_s, not {d!r:.60}")
    for k, v in d.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InvalidInputError(f"roll.{k} must be a number, not {v!r:.40}")
    return RollPolicy(**d)


class Table:
    """An opened table: storage, properties and manifest log."""

    def __init__(self, storage: Storage, config: TableConfig):
        self.storage = storage
        self.config = config
        self.log = ManifestLog(storage, config.checkpoint_interval, config.placement, storage.uri_for(PROPERTIES))

    @property
    def uri(self) -> str:
        return self.storage.uri

    @property
    def layout(self) -> Layout:
        return self.config.layout

    @classmethod
    def create(cls, root: str, config: TableConfig, options: Mapping[str, str] | None = None) -> Table:
        """Create the table's metadata; the directory may already hold foreign data."""
        config.layout.check_one_to_one()  # before storage is touched: a refused create leaves nothing
        storage = open_storage(root, options)
        config = replace(config, created_ms=config.created_ms or int(time.time() * 1000),
                         protocol=config.protocol or DEFAULT_PROTOCOL)
        data = json.dumps(config.to_json(), indent=2, sort_keys=True).encode()
        if storage.exists(PROPERTIES):
            raise TableExistsError(f"a trib table already exists at {storage.uri}")
        if not storage.create_if_absent(PROPERTIES, data):
            raise TableExistsError(f"a trib table already exists at {storage.uri}")
        return cls(storage, config)

    @classmethod
    def load(cls, root: str, options: Mapping[str, str] | None = None) -> Table:
        storage = open_storage(root, options)
        try:
            data = storage.read(PROPERTIES)
        except FileNotFoundError:
            raise NoSuchTableError(
                f"no trib table at {storage.uri} (create one with: trib table create)"
            ) from None
        config = TableConfig.from_json(data, storage.uri_for(PROPERTIES))
        # Before any command uses the layout: one that reads no commit (a listing, a DDL) is refused too.
        pinned = read_pinned(storage)
        check_placement(config.placement, pinned, (), storage.uri_for(PINNED), storage.uri_for(PROPERTIES))
        table = cls(storage, config)
        table.log.pinned = pinned is not None
        return table

    def protocol_for(self, override: Protocol | str | None = None) -> Protocol:
        """The protocol a writer of this table uses: ``override`` (``--protocol``), else the table's.

        The one answer for ``trib ingest``, the Spark writer and the ETL's output:
        a second copy of this rule would let one front end write final names into
        a table whose readers rely on hidden ones. Each commit records the protocol
        it was written with, so readers never depend on which one was chosen.
        """
        return Protocol.parse(override or self.config.protocol or DEFAULT_PROTOCOL, "protocol")

    def set_tracking(self, tracking: str) -> Table:
        """Change how the table's files are tracked (``trib table set --tracking``)."""
        return self.set(tracking=tracking)

    def set_protocol(self, protocol: str) -> Table:
        """Change the protocol later writers use (``trib table set --protocol``): the migration
        of a table created before ``rename`` was the default.

        Safe at any moment: each commit records its own protocol and, under
        ``rename``, each file's staged name, so commits made before the change
        (and a writer still running with the old protocol) read as they were written.
        """
        return self.set(protocol=protocol)

    def set(self, *, tracking: str | None = None, max_bad_fraction: float | str | None = None,
            final_after_ms: int | None = None, protocol: str | None = None,
            compact: Mapping[str, Any] | None = None) -> Table:
        """Change the properties that may change after create (``trib table set``).

        Only these: how files are found, how later writers make them visible and
        ingest's defaults, never where files are or what a committed version
        means. table.json is replaced whole (:meth:`Storage.replace`), so a
        reader sees the old properties or the new ones (or, on HDFS, none for a
        moment, and retries).
        """
        changes: dict[str, Any] = {}
        if tracking is not None:
            changes["tracking"] = Tracking.parse(tracking, "tracking")
        if max_bad_fraction is not None:
            changes["max_bad_fraction"] = parse_fraction(max_bad_fraction, "max bad fraction")
        if final_after_ms is not None:
            changes["final_after_ms"] = final_after_ms
        if protocol is not None:
            changes["protocol"] = Protocol.parse(protocol, "protocol")
        if compact:
            changes["compact"] = self.config.compact.with_values(compact)
        config = replace(self.config, **changes)
        if config == self.config:
            return self
        self.storage.replace(PROPERTIES, json.dumps(config.to_json(), indent=2, sort_keys=True).encode())
        table = type(self)(self.storage, config)
        table.log.pinned = self.log.pinned  # the placement is not a setting set changes
        return table


# -- trib.toml ------------------------------------------------------------------
def load_config(path: str | None = None) -> dict:
    """Read trib.toml: ``[storage]`` defaults and ``[tables.NAME]`` aliases.

    Looked up at ``path``, else $TRIB_CONFIG, else ./trib.toml; absent is fine.
    """
    path = path or os.environ.get("TRIB_CONFIG") or "trib.toml"
    if not os.path.exists(path):
        if path != "trib.toml":
            raise InvalidInputError(f"config file {path} does not exist")
        return {}
    # Imported here: tomllib compiles its regular expressions on import, and most runs have no trib.toml.
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - 3.10
        import tomli as tomllib
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise InvalidInputError(f"cannot read {path}: {e}") from None


def resolve_table(name: str, config: Mapping | None = None) -> tuple[str, dict[str, str]]:
    """Map a ROOT or an alias from trib.toml to (root URI, storage options)."""
    config = config or {}
    options = {k: str(v) for k, v in config.get("storage", {}).items()}
    alias = config.get("tables", {}).get(name)
    if alias is None:
        return name, options
    if "root" not in alias:
        raise InvalidInputError(f"table alias {name!r} in trib.toml has no root")
    options.update({k: str(v) for k, v in alias.get("storage", {}).items()})
    return alias["root"], options
