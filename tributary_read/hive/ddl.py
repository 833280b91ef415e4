"""The Hive table a trib table should have, from the table's own properties (``trib hive create-table``).

Format, SerDe, delimiter, partition columns and location all come from the trib table; only the data
columns are the caller's: given (``--columns``), an ETL job's SQL output (:func:`hive_columns`, from
the columns a commit records), or inferred from committed files (Parquet footers, or a sample of JSON
records). An existing table is compared, never altered: the differences are the
answer, since an ALTER on a shared warehouse table is a decision for a person.

Compressed text needs no table property: Hadoop picks the codec from each file's extension
(``.gz``, ``.zst``), and Parquet carries its codec per column chunk.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Mapping

from tributary_read.errors import InvalidInputError
from tributary_read.hive.model import HiveTable, TableName
from tributary_read.hive.sql import COLUMN_TYPE, column_defs, render, sql_string, storage_clause
from tributary_read.io.formats import FORMATS
from tributary_read.io.location import same_location

#: trib format -> (SerDe, input format substring a matching table has), from the one format table.
STORAGE: dict[str, tuple[str, str]] = {name: (f.hive_serde, f.hive_input_format) for name, f in FORMATS.items()}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_TYPE = COLUMN_TYPE
SAMPLE_FILES = 20
SAMPLE_RECORDS = 2000
#: What Hive's DDL stores for a table without a delimiter of its own: the SerDe's default format "1".
DEFAULT_SERDE_PARAMS = {"serialization.format": "1"}
#: What ``CREATE EXTERNAL TABLE`` is in the metastore: this table type, and this table parameter.
EXTERNAL_TABLE_TYPE = "EXTERNAL_TABLE"
EXTERNAL_PARAMS = {"EXTERNAL": "TRUE"}
#: A type word (not a STRUCT field name, which a ``:`` follows) as Hive stores it: lower case.
_TYPE_WORD = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\b(?!\s*:)")


@dataclass(frozen=True)
class HiveStorage:
    """How the table's files are read: what a ``ROW FORMAT ... STORED AS`` clause sets in the metastore."""

    serde: str
    serde_params: Mapping[str, str]
    input_format: str
    output_format: str


@dataclass(frozen=True)
class ColumnDifference:
    """One data column where a Hive table and the output differ (types lower case, as Hive stores them).

    ``expected``: the output's type (None: the output has no such column); ``found``: the table's
    (None: the table has no such column); ``moved``: both have it with this type, at another position.
    """

    column: str
    expected: str | None
    found: str | None
    moved: bool = False

    def describe(self, table: TableName | str) -> str:
        if self.moved:
            return f"Hive table {table} has the output's columns in another order (from column {self.column})"
        want, have = str(self.expected).upper(), str(self.found).upper()
        if self.found is None:
            return f"Hive table {table} has no column {self.column} ({want} in the output)"
        if self.expected is None:
            return f"Hive table {table} has a column {self.column} ({have}) the output does not have"
        return f"column {self.column} is {have} in Hive table {table}, {want} in the output"


@dataclass(frozen=True)
class TableDefinition:
    """The one answer to "what is this Hive table": the DDL (:meth:`ddl`, for SQL backends) and the
    metastore's own fields (:attr:`storage`, :attr:`parameters`, :meth:`to_json`, for the Thrift API)
    are both derived here from the format table, so the two ways of creating it cannot drift."""

    name: TableName
    columns: tuple[tuple[str, str], ...]
    partition_keys: tuple[str, ...]
    location: str
    format: str
    delimiter: str = "\t"

    @property
    def serde(self) -> str:
        return STORAGE[self.format][0]

    @property
    def properties(self) -> dict[str, str]:
        """The table properties trib sets (the DDL's TBLPROPERTIES)."""
        return {"tributary.format": self.format}

    @property
    def parameters(self) -> dict[str, str]:
        """The table's parameters in the metastore: :attr:`properties` plus what EXTERNAL sets."""
        return {**EXTERNAL_PARAMS, **self.properties}

    @property
    def storage(self) -> HiveStorage:
        """The SerDe, its parameters and the input/output formats the DDL's storage clause sets."""
        spec = FORMATS[self.format]
        if spec.hive_row_format == "delimited":  # Hive sets both from FIELDS TERMINATED BY
            params = {"serialization.format": self.delimiter, "field.delim": self.delimiter}
        else:
            params = dict(DEFAULT_SERDE_PARAMS)
        return HiveStorage(spec.hive_serde, params, *spec.hive_classes)

    def metastore_columns(self) -> tuple[tuple[str, str], ...]:
        """The data columns as the metastore stores them from the DDL: names and type words lower case,
        no blanks (``DECIMAL(10, 2)`` -> ``decimal(10,2)``; a STRUCT's field names keep their case)."""
        return tuple((c.lower(), _TYPE_WORD.sub(lambda m: m.group(1).lower(), "".join(t.split())))
                     for c, t in self.columns)

    def ddl(self) -> str:
        spec = FORMATS[self.format]
        storage = storage_clause(spec.hive_stored_as,
                                 delimiter=self.delimiter if spec.hive_row_format == "delimited" else None,
                                 serde=self.serde if spec.hive_row_format == "serde" else None)
        return render("create_table", table=self.name.sql, columns=column_defs(self.columns),
                      partitions=column_defs([(k, "STRING") for k in self.partition_keys]),
                      storage=storage, location=sql_string(self.location),
                      properties=", ".join(f"{sql_string(k)}={sql_string(v)}" for k, v in self.properties.items()))

    def to_json(self) -> dict:
        """The table as the metastore API creates it (``thrift://``): every field a DESCRIBE shows."""
        s = self.storage
        return {"table": str(self.name), "table_type": EXTERNAL_TABLE_TYPE,
                "columns": [list(c) for c in self.metastore_columns()],
                "partition_keys": [[k.lower(), "string"] for k in self.partition_keys],
                "location": self.location, "serde": s.serde, "serde_params": dict(s.serde_params),
                "input_format": s.input_format, "output_format": s.output_format, "parameters": self.parameters}

    def column_differences(self, found: HiveTable) -> tuple[ColumnDifference, ...]:
        """How ``found``'s data columns differ from these, column by column (names and types compared as
        Hive stores them: lower case, no blanks); empty when they match, in the same order.

        The one comparison of columns: :meth:`differences` reports it, and an ETL run refuses to commit
        on it (a Parquet file whose column type is not the table's fails every Hive query)."""
        want = [(c.lower(), t.lower().replace(" ", "")) for c, t in self.columns]
        have = [(c.lower(), t.lower().replace(" ", "")) for c, t in found.columns]
        if want == have:
            return ()
        w, h = dict(want), dict(have)
        out = [ColumnDifference(c, t, h.get(c)) for c, t in want if h.get(c) != t]
        out += [ColumnDifference(c, None, t) for c, t in have if c not in w]
        if not out:  # the same columns in another order: a text table reads them by position
            out = [next(ColumnDifference(a[0], a[1], a[1], moved=True) for a, b in zip(want, have) if a != b)]
        return tuple(out)

    def differences(self, found: HiveTable) -> list[str]:
        """What differs from ``found``, as "what: expected X, found Y"; empty when it matches."""
        out = []

        def diff(what, expected, actual):
            if expected != actual:
                out.append(f"{what}: expected {expected}, found {actual}")
        if self.column_differences(found):
            out.append(f"columns: expected {[(c.lower(), t.lower().replace(' ', '')) for c, t in self.columns]}, "
                       f"found {[(c.lower(), t.lower().replace(' ', '')) for c, t in found.columns]}")
        diff("partition keys", list(self.partition_keys), list(found.partition_keys))
        if not found.location or not same_location(self.location, found.location):
            out.append(f"location: expected {self.location}, found {found.location}")
        diff("SerDe", self.serde, found.serde)
        fmt_marker = STORAGE[self.format][1]
        if fmt_marker.lower() not in (found.input_format or "").lower():
            out.append(f"input format: expected a {fmt_marker}, found {found.input_format}")
        if self.format == "text":
            delim = found.serde_params.get("field.delim", found.serde_params.get("serialization.format"))
            diff("field delimiter", repr(self.delimiter), repr(delim))
        if not found.external:
            out.append(f"table type: expected EXTERNAL, found {found.table_type}")
        return out


def parse_columns(text: str) -> tuple[tuple[str, str], ...]:
    """``a STRING, b DECIMAL(10,2), c STRUCT<x:INT,y:STRING>``: commas inside (), <> do not split."""
    cols, depth, cur = [], 0, []
    for ch in text or "":
        if ch in "(<":
            depth += 1
        elif ch in ")>":
            depth -= 1
        if ch == "," and depth == 0:
            cols.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    cols.append("".join(cur))
    out = []
    for col in (c.strip() for c in cols):
        name, _, typ = col.partition(" ")
        name, typ = name.strip("`"), typ.strip()
        if not _NAME.fullmatch(name) or not typ or not _TYPE.fullmatch(typ) or depth:
            raise InvalidInputError(f"bad column {col!r} in the columns (expected NAME TYPE, e.g. 'a STRING, b BIGINT')",
                                    columns="the columns")
        out.append((name, typ.upper()))
    if len({c.lower() for c, _ in out}) != len(out):
        raise InvalidInputError("the columns name a column twice", columns="the columns")
    return tuple(out)


# -- inference from committed files ---------------------------------------------------------
def _arrow_hive_type(t) -> str:
    import pyarrow as pa

    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_int8(t) or pa.types.is_uint8(t):
        return "TINYINT"
    if pa.types.is_int16(t) or pa.types.is_uint16(t):
        return "SMALLINT"
    if pa.types.is_int32(t):
        return "INT"
    if pa.types.is_integer(t):
        return "BIGINT"
    if pa.types.is_float32(t):
        return "FLOAT"
    if pa.types.is_floating(t):
        return "DOUBLE"
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "STRING"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "BINARY"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP"
    if pa.types.is_date(t):
        return "DATE"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"ARRAY<{_arrow_hive_type(t.value_type)}>"
    if pa.types.is_map(t):
        return f"MAP<{_arrow_hive_type(t.key_type)},{_arrow_hive_type(t.item_type)}>"
    if pa.types.is_struct(t):
        return "STRUCT<" + ",".join(f"{f.name}:{_arrow_hive_type(f.type)}" for f in t) + ">"
    raise InvalidInputError(f"no Hive type for Parquet column type {t}: give the columns", columns="the columns")


def _json_type(v, where: str) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "BOOLEAN"
    if isinstance(v, int):
        return "BIGINT"
    if isinstance(v, float):
        return "DOUBLE"
    if isinstance(v, str):
        return "STRING"
    if isinstance(v, list):
        inner = {t for t in (_json_type(x, where) for x in v) if t}
        return f"ARRAY<{_merge(inner, where)}>" if inner else None
    if isinstance(v, dict):
        return "STRUCT<" + ",".join(f"{k}:{_json_type(x, where) or 'STRING'}" for k, x in v.items()) + ">"
    return None


def _merge(types: set[str], where: str) -> str:
    if types == {"BIGINT", "DOUBLE"}:
        return "DOUBLE"
    if len(types) > 1:
        raise InvalidInputError(f"{where} holds {' and '.join(sorted(types))} values: give the columns",
                                columns="the columns")
    return next(iter(types))


def infer_columns(table) -> tuple[tuple[str, str], ...]:
    """Columns from the table's files: Parquet footers (unified), or a sample of JSON records.

    The files are the committed ones, else, for a table that tracks files other tools write
    (``both``, ``listing``), the newest of those by path (the layout's directories sort by time):
    a table made over a directory Flume fills has no commit of its own.
    """
    from tributary_read.read.resolve import manifest_files, mtime_files
    from tributary_read.read.tracking import foreign

    fmt = table.config.format
    if fmt not in ("parquet", "jsonl"):
        raise InvalidInputError(f"a {fmt} table's columns cannot be inferred: give the columns ('a STRING, ...')",
                                columns="the columns")
    files = list(manifest_files(table).files[:SAMPLE_FILES]) if table.config.tracking != "listing" else []
    if not files and table.config.tracking != "manifest":
        files = foreign(mtime_files(table, foreign_only=True).files)[-SAMPLE_FILES:]
    if not files:
        raise InvalidInputError(f"{table.uri} has no files to infer columns from: give the columns",
                                columns="the columns")
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        schemas = [pq.read_schema(pa.BufferReader(table.storage.read(f.path))) for f in files]
        merged = pa.unify_schemas(schemas)
        return tuple((f.name, _arrow_hive_type(f.type)) for f in merged
                     if f.name not in table.config.layout.keys)
    seen: dict[str, set[str]] = {}
    n = 0
    for f in files:
        for line in _lines(table.storage.read(f.path), f.path):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                raise InvalidInputError(f"{f.path} holds a line that is not JSON: give the columns",
                                        columns="the columns") from None
            if not isinstance(rec, dict):
                raise InvalidInputError(f"{f.path} holds a JSON {type(rec).__name__}, not an object")
            for k, v in rec.items():
                t = _json_type(v, f"field {k!r}")
                s = seen.setdefault(k, set())
                if t:
                    s.add(t)
            n += 1
            if n >= SAMPLE_RECORDS:
                break
        if n >= SAMPLE_RECORDS:
            break
    return tuple((k, _merge(t, f"field {k!r}") if t else "STRING") for k, t in seen.items()
                 if k not in table.config.layout.keys)


def _lines(data: bytes, path: str):
    if path.endswith((".gz", ".zst")):
        import pyarrow as pa

        data = pa.CompressedInputStream(pa.BufferReader(data), "gzip" if path.endswith(".gz") else "zstd").read()
    return data.decode("utf-8", "replace").splitlines()


def hive_columns(columns, keys=()) -> tuple[tuple[str, str], ...]:
    """Hive columns from (name, Spark SQL type[, nullable]) as a commit records them (``simpleString``).

    Spark's type names are Hive's (``bigint``, ``decimal(10,2)``, ``struct<a:int>``) but for
    ``timestamp_ntz``, Hive's TIMESTAMP. A layout key among them is left out: Hive reads it from the
    partition, as for inferred columns.
    """
    out = []
    lowered = {k.lower() for k in keys}
    for c in columns:
        name, typ = c[0], str(c[1]).replace("timestamp_ntz", "timestamp")
        if name.lower() in lowered:
            continue
        if not _NAME.fullmatch(name) or not _TYPE.fullmatch(typ):
            raise InvalidInputError(f"the output column {name!r} ({typ}) has no Hive column form: rename or cast "
                                    "it in the SQL")
        out.append((name, typ.upper()))
    return tuple(out)


def definition_for(table, name: TableName, columns=None, delimiter: str = "\t") -> TableDefinition:
    """The table for trib table ``table``; ``columns``: a column list string, (name, Spark type, ...)
    pairs from a query (:func:`hive_columns`), or None (inferred from committed files)."""
    fmt = table.config.format
    if fmt not in STORAGE:
        raise InvalidInputError(f"no Hive storage for trib format {fmt!r}")
    if isinstance(columns, str):
        cols = parse_columns(columns)
    elif columns:
        cols = hive_columns(columns, table.config.layout.keys)
    else:
        cols = infer_columns(table)
    keys = tuple(table.config.layout.keys)
    clash = [c for c, _ in cols if c.lower() in {k.lower() for k in keys}]
    if clash:
        raise InvalidInputError(f"column {clash[0]!r} is also a partition key of the layout")
    if len(delimiter) != 1:
        raise InvalidInputError(f"the delimiter must be one character, not {delimiter!r}")
    return TableDefinition(name, cols, keys, table.storage.hadoop_uri(), fmt, delimiter)


def create_table(ms, defn: TableDefinition, *, dry_run: bool = False) -> Mapping:
    """Create ``defn`` if absent; report whether an existing table matches. Never alters one.

    ``ddl`` is always the table as SQL; where the metastore creates it through its own API
    (``thrift://``: no SQL runs), ``through`` says so and ``ddl`` is the equivalent, not what ran;
    ``definition`` is the table as that API takes it (see docs/hive.md).
    """
    from tributary_read.errors import HiveTableConflictError, NoSuchHiveTableError

    ddl = defn.ddl()
    if not ms.database_exists(defn.name.db):
        from tributary_read.hive.sql import create_database

        raise InvalidInputError(f"database {defn.name.db} does not exist ({ms.address}): create it first: "
                                f"{create_database(defn.name.db)};")
    how = {"through": "sql" if ms.creates_with_sql else "metastore api", "metastore": ms.address, "ddl": ddl,
           "ddl_is_equivalent": not ms.creates_with_sql, "definition": defn.to_json()}
    try:
        found = ms.table_info(defn.name)
    except NoSuchHiveTableError:
        found = None
    if found is not None:
        diffs = defn.differences(found)
        if diffs:
            raise HiveTableConflictError(f"Hive table {defn.name} exists and differs (left unchanged): "
                                         + "; ".join(diffs))
        return {"table": str(defn.name), "created": False, "exists": True, **how, "differences": []}
    if not dry_run:
        ms.create_table(defn)
    return {"table": str(defn.name), "created": not dry_run, "exists": False, **how, "differences": [],
            "dry_run": dry_run}


@dataclass(frozen=True)
class TableCheck:
    """Whether a Hive table fits ``definition``: its database and itself exist, and what differs."""

    definition: TableDefinition | None
    name: TableName
    database_exists: bool
    table_exists: bool
    differences: tuple[str, ...] = ()
    #: The data columns' part of :attr:`differences`, column by column (what a run refuses on).
    column_differences: tuple[ColumnDifference, ...] = ()
    #: Whether the table found is EXTERNAL (None: no table found); a DROP TABLE of a managed one deletes files.
    external: bool | None = None
    #: The table as the metastore answered (None: not found).
    found: HiveTable | None = field(default=None, compare=False, repr=False)

    def compared(self, defn: TableDefinition) -> TableCheck:
        """This check with ``defn`` and how the table found differs from it (no second lookup)."""
        if self.found is None:
            return replace(self, definition=defn)
        return replace(self, definition=defn, differences=tuple(defn.differences(self.found)),
                       column_differences=defn.column_differences(self.found))

    @property
    def missing(self) -> str | None:
        """"database X" or "table X" when one is missing, else None."""
        if not self.database_exists:
            return f"database {self.name.db}"
        return None if self.table_exists else f"table {self.name}"

    def statements(self) -> list[str]:
        """What to run, in order, for a missing database and table (the DDL ends each, no ``;``)."""
        from tributary_read.hive.sql import create_database

        out = [] if self.database_exists else [create_database(self.name.db)]
        if not self.table_exists and self.definition is not None:
            out.append(self.definition.ddl())
        return out

    def to_json(self) -> dict:
        return {"table": str(self.name), "database_exists": self.database_exists,
                "table_exists": self.table_exists, "missing": self.missing, "differences": list(self.differences),
                "ddl": [s + ";" for s in self.statements()]}


def check_table(ms, name: TableName, defn: TableDefinition | None = None) -> TableCheck:
    """Look ``name`` up in ``ms``: its database, itself, and (with ``defn``) how it differs from it."""
    from tributary_read.errors import NoSuchHiveTableError

    if not ms.database_exists(name.db):
        return TableCheck(defn, name, False, False)
    try:
        found = ms.table_info(name)
    except NoSuchHiveTableError:
        return TableCheck(defn, name, True, False)
    check = TableCheck(None, name, True, True, external=found.external, found=found)
    return check if defn is None else check.compared(defn)
