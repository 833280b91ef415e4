"""The Hive metastore as trib sees it: value objects, engine dialects, one interface.

Two backends implement :class:`Metastore`: HiveServer2 through pyhive
(:mod:`.hs2`, any HS2: Hive or Spark Thrift Server) and a SparkSession's catalog
(:mod:`.spark_catalog`). Both speak SQL rendered from the templates in ``sql/``;
what differs between engines (how stats are refreshed, batch limits, error
markers) lives in :data:`DIALECTS`, not in if-chains.

Everything rendered into SQL passes a strict check first: identifiers and
partition values must match a small character set, strings are quoted and
escaped, so a directory name can never become SQL.
"""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence
from urllib.parse import parse_qsl, unquote, urlparse

from tributary_read.errors import InvalidInputError, MetastoreError, NoSuchHiveTableError

#: Where the SQL templates live: the repository's ``sql/``, installed as the
#: package ``tributary_read.sql`` (see pyproject.toml).
SQL_DIR = Path(str(resources.files("tributary_read.sql")))

_IDENT = re.compile(r"^[A-Za-z0-9_]{1,128}$")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
#: Partition values trib renders: what a layout can produce (digits plus template literals).
_VALUE = re.compile(r"^[A-Za-z0-9_.+\-]{1,128}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_STATS = re.compile(r"^\s*(\d+)\s+bytes(?:,\s*(\d+)\s+rows)?")


# -- value objects ---------------------------------------------------------------
@dataclass(frozen=True)
class TableName:
    """``db.table``: both parts checked, rendered with backticks."""

    db: str
    name: str

    @classmethod
    def parse(cls, text: str, default_db: str = "default") -> TableName:
        db, sep, name = (text or "").strip().rpartition(".")
        db = db if sep else default_db
        if not _IDENT.fullmatch(db or "") or not _IDENT.fullmatch(name):
            raise InvalidInputError(f"bad Hive table name {text!r} (expected db.table, letters/digits/_)")
        return cls(db.lower(), name.lower())

    @property
    def sql(self) -> str:
        return f"`{self.db}`.`{self.name}`"

    def __str__(self) -> str:
        return f"{self.db}.{self.name}"


@dataclass(frozen=True)
class PartitionStats:
    """Statistics as the engine reports them.

    ``size_bytes``/``num_rows`` are what the engine's planner uses (Spark keeps
    its own copy, ``spark.sql.statistics.*``, ahead of Hive's); ``num_files``/
    ``total_size`` are Hive's own partition parameters.
    """

    size_bytes: int | None = None
    num_rows: int | None = None
    num_files: int | None = None
    total_size: int | None = None


@dataclass(frozen=True)
class HivePartition:
    values: Mapping[str, str] = field(hash=False)
    location: str | None = None
    stats: PartitionStats | None = None
    params: Mapping[str, str] = field(default_factory=dict, hash=False)

    @property
    def spec(self) -> str:
        """``dt=2024010100``: the partition's name, as SHOW PARTITIONS prints it."""
        return "/".join(f"{k}={v}" for k, v in self.values.items())


@dataclass(frozen=True)
class HiveTable:
    name: TableName
    location: str | None
    partition_keys: tuple[str, ...]
    columns: tuple[tuple[str, str], ...]
    input_format: str | None = None
    serde: str | None = None
    provider: str | None = None
    table_type: str | None = None  # EXTERNAL or MANAGED
    created: str | None = None

    @property
    def external(self) -> bool:
        return (self.table_type or "").upper().startswith("EXTERNAL")

    def to_json(self) -> dict:
        return {"table": str(self.name), "location": self.location, "partition_keys": list(self.partition_keys),
                "columns": [list(c) for c in self.columns], "input_format": self.input_format,
                "serde": self.serde, "provider": self.provider, "table_type": self.table_type}


# -- dialects ----------------------------------------------------------------------
@dataclass(frozen=True)
class Dialect:
    """What one engine does differently. Add an engine by adding a row to DIALECTS."""

    name: str
    #: template that refreshes one partition's statistics
    refresh: str
    #: most partitions one ADD/DROP statement may carry
    max_batch: int
    #: session setting sizing the engine's own metastore calls per statement
    batch_conf: str | None
    #: whether ``refresh`` rewrites Hive's numFiles/totalSize partition parameters
    refresh_sets_hive_params: bool
    #: substrings of an error that mean "no such table"
    not_found: tuple[str, ...]


DIALECTS: dict[str, Dialect] = {
    # Spark's ALTER path copies the old numFiles/totalSize back, so the metastore
    # keeps them; ANALYZE ... NOSCAN updates Spark's own size, which its planner
    # prefers, and drops a row count that no longer holds.
    "spark": Dialect("spark", "analyze_partition_noscan", 5000, "spark.sql.addPartitionInBatch.size", False,
                     ("TABLE_OR_VIEW_NOT_FOUND", "Table or view not found", "NoSuchTableException")),
    # Hive can answer count(*) from numRows, so a refresh recounts rows.
    "hive": Dialect("hive", "analyze_partition", 1000, None, True,
                    ("Table not found", "[Error 10001]", "NoSuchObjectException")),
}

#: statements longer than this are split even below the batch size
MAX_STATEMENT_CHARS = 1_000_000
DEFAULT_BATCH_SIZE = 1000

#: template -> separator of its ``{items}`` (rendered from ``NAME.item.sql``)
_ITEM_JOIN = {"add_partitions": " ", "drop_partitions": ", "}


@lru_cache(maxsize=None)
def load_template(name: str) -> str:
    """A template's text without its ``--`` comment lines."""
    path = SQL_DIR / f"{name}.sql"
    try:
        text = path.read_text()
    except OSError as e:
        raise MetastoreError(f"SQL template {path} is missing ({e.strerror})") from None
    return "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("--")).strip()


def render(name: str, **parts: str) -> str:
    """Fill a template; every part must already be checked and quoted."""
    return load_template(name).format(**parts)


def template_names() -> list[str]:
    return sorted(p.name[:-4] for p in SQL_DIR.glob("*.sql"))


# -- validation and quoting ------------------------------------------------------
def sql_string(text: str) -> str:
    """A single-quoted SQL string literal, as both Hive's and Spark's lexers read it."""
    if not isinstance(text, str) or _CONTROL.search(text):
        raise InvalidInputError(f"refusing to render {text!r}: control characters")
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def check_values(keys: Sequence[str], values: Mapping[str, str]) -> dict[str, str]:
    """Values for exactly ``keys``, each matching the strict value pattern."""
    if [k.lower() for k in values] != [k.lower() for k in keys]:
        raise InvalidInputError(f"partition {dict(values)} does not have the keys {list(keys)}")
    out = {}
    for k, v in zip(keys, values.values()):
        if not _KEY.fullmatch(k) or not isinstance(v, str) or not _VALUE.fullmatch(v):
            raise InvalidInputError(f"refusing to render partition value {k}={v!r}")
        out[k] = v
    return out


def render_spec(keys: Sequence[str], values: Mapping[str, str]) -> str:
    vals = check_values(keys, values)
    return ", ".join(f"`{k}`={sql_string(v)}" for k, v in vals.items())


def check_location(location: str) -> str:
    u = urlparse(location or "")
    if not u.scheme or len(u.scheme) < 2 or _CONTROL.search(location):
        raise InvalidInputError(f"partition location must be a URI with a scheme: {location!r}")
    return location


def same_location(a: str | None, b: str | None) -> bool:
    """Equal up to how Hadoop spells them (``file:/x`` == ``file:///x``, trailing slash)."""
    if a is None or b is None:
        return False
    return a == b or _norm_location(a) == _norm_location(b)


def _norm_location(loc: str) -> tuple[str, str, str]:
    u = urlparse(loc.strip())
    path = unquote(u.path).rstrip("/") or "/"
    if u.scheme in ("", "file"):
        return ("file", "", path)
    return (u.scheme.lower(), u.netloc.lower(), path)


def parse_partition_name(name: str) -> dict[str, str]:
    """``dt=2024010100/hr=01`` (Hive-escaped) -> values."""
    out = {}
    for part in name.split("/"):
        k, sep, v = part.partition("=")
        if not sep:
            raise MetastoreError(f"unexpected partition name {name!r}")
        out[unquote(k)] = unquote(v)
    return out


# -- DESCRIBE FORMATTED ----------------------------------------------------------
_ALIASES = {
    "location": "location", "type": "table_type", "table type": "table_type", "provider": "provider",
    "serde library": "serde", "inputformat": "input_format", "outputformat": "output_format",
    "created time": "created", "createtime": "created", "partition statistics": "statistics",
    "statistics": "statistics", "partition parameters": "params", "table parameters": "params",
    "partition values": "values", "partition value": "values",
}


@dataclass
class Described:
    columns: list[tuple[str, str]] = field(default_factory=list)
    partition_keys: list[str] = field(default_factory=list)
    info: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)


def parse_describe(rows: Sequence[Sequence]) -> Described:
    """Parse DESCRIBE FORMATTED output from Spark (``Key``/value) or Hive (``Key:``/padded).

    Only the first value of each key after the detailed header counts: a
    partition's own Location comes before the table's.
    """
    d = Described()
    section = "columns"
    last_key = None
    for row in rows:
        a, b, c = (("" if x is None else str(x)).strip() for x in (list(row) + ["", ""])[:3])
        if a.startswith("#"):
            head = a.lower()
            if "detailed" in head:
                section = "detail"
            elif "partition information" in head:
                section = "partition_keys"
            elif "storage information" in head or "statistics" in head:
                section = "other" if section == "detail" else section
            continue
        if not a and not b:
            continue
        if section == "columns" and a:
            d.columns.append((a, b))
        elif section == "partition_keys" and a:
            d.partition_keys.append(a)
        elif section in ("detail", "other"):
            if not a and b and last_key == "params":  # Hive: one row per parameter
                d.params.setdefault(b, c)
                continue
            key = _ALIASES.get(a.rstrip(":").strip().lower())
            last_key = key
            if key == "params" and b:
                d.params.update(parse_bracket_map(b))
            elif key and key not in d.info and (section == "detail" or key in ("serde", "input_format",
                                                                                "output_format")):
                d.info[key] = b
    keys = {k.lower() for k in d.partition_keys}
    d.columns = [c for c in d.columns if c[0].lower() not in keys]
    return d


def parse_bracket_map(text: str) -> dict[str, str]:
    """``[a=1, b=2]`` or ``{a=1, b=2}`` -> dict (Spark's rendering of a Map)."""
    body = text.strip()
    if body[:1] in "[{" and body[-1:] in "]}":
        body = body[1:-1]
    out = {}
    for item in body.split(", "):
        k, sep, v = item.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def stats_from(info: Mapping[str, str], params: Mapping[str, str]) -> PartitionStats:
    def num(v):
        try:
            return int(v)
        except (TypeError, ValueError):
            return None

    m = _STATS.match(info.get("statistics", ""))
    size = int(m.group(1)) if m else num(params.get("totalSize"))
    rows = (int(m.group(2)) if m.group(2) else None) if m else num(params.get("numRows"))
    return PartitionStats(size, rows if rows is None or rows >= 0 else None,
                          num(params.get("numFiles")), num(params.get("totalSize")))


# -- the interface -------------------------------------------------------------------
PartitionSpec = Mapping[str, str]


class Metastore(abc.ABC):
    """Partition metadata of Hive tables, batched where the engine allows.

    Attributes:
        dialect: the engine's row in DIALECTS.
        lists_locations: ``list_partitions(with_locations=True)`` costs one call
            (else one DESCRIBE per partition, and callers should remember locations).
        sets_hive_stats: ``refresh_stats`` leaves Hive's numFiles/totalSize exact.
    """

    dialect: Dialect
    lists_locations: bool = False

    @property
    def sets_hive_stats(self) -> bool:
        return self.dialect.refresh_sets_hive_params

    @property
    @abc.abstractmethod
    def address(self) -> str:
        """Where this metastore is, for messages and the sync state (``hs2://h:p``, ``spark``)."""

    @abc.abstractmethod
    def table_info(self, table: TableName) -> HiveTable: ...

    @abc.abstractmethod
    def list_partitions(self, table: TableName, with_locations: bool = False) -> list[HivePartition]: ...

    @abc.abstractmethod
    def describe_partition(self, table: TableName, values: PartitionSpec) -> HivePartition | None: ...

    @abc.abstractmethod
    def add_partitions(self, table: TableName, parts: Sequence[tuple[PartitionSpec, str]],
                       batch_size: int | None = None) -> int:
        """Add (IF NOT EXISTS) partitions at explicit locations; returns statements run."""

    @abc.abstractmethod
    def drop_partitions(self, table: TableName, values: Sequence[PartitionSpec],
                        batch_size: int | None = None) -> int: ...

    @abc.abstractmethod
    def set_locations(self, table: TableName, parts: Sequence[tuple[PartitionSpec, str]]) -> int: ...

    @abc.abstractmethod
    def refresh_stats(self, table: TableName, values: Sequence[PartitionSpec]) -> int: ...

    def close(self) -> None:
        """Release connections; the object is unusable afterwards."""

    def __enter__(self) -> Metastore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SqlMetastore(Metastore):
    """Every operation as SQL over ``_run``; a backend supplies the transport."""

    def __init__(self, dialect: Dialect):
        self.dialect = dialect
        self._keys: dict[TableName, tuple[str, ...]] = {}
        self._batch_conf: int | None = None
        self.statements = 0

    @abc.abstractmethod
    def _execute(self, sql: str) -> list[tuple]:
        """Run one statement and return its rows; raise the driver's own errors."""

    def _error(self, e: Exception) -> str:
        """One line saying what the engine reported."""
        return (str(e).strip().splitlines() or [type(e).__name__])[0][:400]

    def _run(self, sql: str, table: TableName | None = None) -> list[tuple]:
        self.statements += 1
        try:
            return self._execute(sql)
        except MetastoreError:
            raise
        except Exception as e:  # noqa: BLE001 - every driver error becomes one MetastoreError
            msg = self._error(e)
            if table is not None and any(m in str(e) for m in self.dialect.not_found):
                raise NoSuchHiveTableError(f"Hive table {table} does not exist ({self.address})") from e
            raise MetastoreError(f"{self.address}: {msg} (while running: {sql[:160]})") from e

    # -- reads -----------------------------------------------------------------
    def table_info(self, table: TableName) -> HiveTable:
        d = parse_describe(self._run(render("describe_table", table=table.sql), table))
        info = HiveTable(table, d.info.get("location"), tuple(k.lower() for k in d.partition_keys),
                         tuple(d.columns), d.info.get("input_format"), d.info.get("serde"),
                         d.info.get("provider"), _table_type(d.info.get("table_type")), d.info.get("created"))
        self._keys[table] = info.partition_keys
        return info

    def _keys_of(self, table: TableName) -> tuple[str, ...]:
        if table not in self._keys:
            self.table_info(table)
        return self._keys[table]

    def list_partitions(self, table: TableName, with_locations: bool = False) -> list[HivePartition]:
        rows = self._run(render("show_partitions", table=table.sql), table)
        parts = [HivePartition(parse_partition_name(r[0])) for r in rows]
        if with_locations:
            parts = [self.describe_partition(table, p.values) or p for p in parts]
        return parts

    def describe_partition(self, table: TableName, values: PartitionSpec) -> HivePartition | None:
        spec = render_spec(self._keys_of(table), values)
        try:
            rows = self._run(render("describe_partition", table=table.sql, spec=spec), table)
        except NoSuchHiveTableError:
            raise
        except MetastoreError as e:
            if "PARTITIONS_NOT_FOUND" in str(e) or "Partition not found" in str(e) \
                    or "NoSuchPartitionException" in str(e):
                return None
            raise
        d = parse_describe(rows)
        return HivePartition(dict(values), d.info.get("location"), stats_from(d.info, d.params), d.params)

    # -- writes ----------------------------------------------------------------
    def _batches(self, items: list[str], batch_size: int | None) -> Iterator[list[str]]:
        size = max(1, min(batch_size or DEFAULT_BATCH_SIZE, self.dialect.max_batch))
        batch: list[str] = []
        chars = 0
        for it in items:
            if batch and (len(batch) >= size or chars + len(it) > MAX_STATEMENT_CHARS):
                yield batch
                batch, chars = [], 0
            batch.append(it)
            chars += len(it) + 2
        if batch:
            yield batch

    def _configure_batch(self, n: int) -> None:
        """Let the engine pass a whole statement to the metastore in one call."""
        if self.dialect.batch_conf and n > 0 and self._batch_conf != n:
            self._run(render("set_conf", key=self.dialect.batch_conf, value=str(int(n))))
            self._batch_conf = n

    def add_partitions(self, table, parts, batch_size=None) -> int:
        keys = self._keys_of(table)
        items = [render("add_partitions.item", spec=render_spec(keys, v), location=sql_string(check_location(loc)))
                 for v, loc in parts]
        n = 0
        for batch in self._batches(items, batch_size):
            self._configure_batch(len(batch))
            self._run(render("add_partitions", table=table.sql, items=_ITEM_JOIN["add_partitions"].join(batch)),
                      table)
            n += 1
        return n

    def drop_partitions(self, table, values, batch_size=None) -> int:
        keys = self._keys_of(table)
        items = [render("drop_partitions.item", spec=render_spec(keys, v)) for v in values]
        n = 0
        for batch in self._batches(items, batch_size):
            self._run(render("drop_partitions", table=table.sql, items=_ITEM_JOIN["drop_partitions"].join(batch)),
                      table)
            n += 1
        return n

    def set_locations(self, table, parts) -> int:
        keys = self._keys_of(table)
        for v, loc in parts:
            self._run(render("set_location", table=table.sql, spec=render_spec(keys, v),
                             location=sql_string(check_location(loc))), table)
        return len(parts)

    def refresh_stats(self, table, values) -> int:
        keys = self._keys_of(table)
        for v in values:
            self._run(render(self.dialect.refresh, table=table.sql, spec=render_spec(keys, v)), table)
        return len(values)


def _table_type(text: str | None) -> str | None:
    if not text:
        return None
    t = text.upper()
    return "EXTERNAL" if t.startswith("EXTERNAL") else "MANAGED" if t.startswith("MANAGED") else t


# -- opening ---------------------------------------------------------------------------
def _open_hs2(uri: str, options: Mapping) -> Metastore:
    from tributary_read.hive.hs2 import Hs2Metastore

    return Hs2Metastore.from_uri(uri, **options)


def _open_spark(uri: str, options: Mapping) -> Metastore:
    from tributary_read.hive.spark_catalog import SparkCatalogMetastore

    return SparkCatalogMetastore.from_uri(uri, **options)


#: URI scheme -> backend. ``hs2://host:port[/db]?auth=...`` or ``spark[?conf.KEY=VALUE...]``.
BACKENDS: dict[str, Callable[[str, Mapping], Metastore]] = {
    "hs2": _open_hs2,
    "hive2": _open_hs2,
    "spark": _open_spark,
}


def open_metastore(uri: str, **options) -> Metastore:
    """Open a metastore by URI; see docs/hive.md for the options each backend takes."""
    scheme = (uri or "").split(":", 1)[0].split("?", 1)[0].lower()
    factory = BACKENDS.get(scheme)
    if factory is None:
        raise InvalidInputError(f"unknown metastore {uri!r}: use hs2://HOST:PORT or spark")
    return factory(uri, options)


def query_options(uri: str) -> dict[str, str]:
    """The ``?k=v&...`` options of a metastore URI (values URL-decoded)."""
    return dict(parse_qsl(urlparse(uri).query, keep_blank_values=True))
