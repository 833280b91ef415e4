"""How Spark reads a FileSet's files: a DataFrameReader format, its options, and the schema if known.

It comes from one of three places, in this order of authority:

* a Hive table the read is bound to: its SerDe and SerDe parameters
  (LazySimpleSerDe's ``field.delim`` and null format, OpenCSVSerde's
  characters, JsonSerDe, Parquet, ORC), its columns and its partition keys;
* the trib table's data format (``FileSet.format``);
* ``options["format"]`` for a plain directory, whose files may be anything.

No pyspark here: these are plain values, checked before Spark is asked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from tributary_read.errors import InvalidInputError
from tributary_read.hive.sql import quote_name
from tributary_read.io.formats import (FORMATS, JSON_SERDES, LAZY_SIMPLE_SERDE, OPEN_CSV_SERDE, READ_ONLY_FORMATS,
                                        DataFormat)

#: trib's (and a user's) name of a format -> Spark's DataFrameReader format.
SPARK_FORMATS = {**{name: f.spark_format for name, f in FORMATS.items()}, **READ_ONLY_FORMATS}
#: Spark formats whose files are lines (can be cut at a valid length and split on executors).
LINE_FORMATS = frozenset({f.spark_format for f in FORMATS.values() if f.line_based})

_JSON_SERDES = JSON_SERDES
_LAZY_SIMPLE = LAZY_SIMPLE_SERDE
_OPEN_CSV = OPEN_CSV_SERDE
_COMPLEX = re.compile(r"^\s*(array|map|struct|uniontype)\s*<", re.I)
_CHAR = re.compile(r"\b(?:var)?char\s*\(\s*\d+\s*\)", re.I)


@dataclass(frozen=True)
class ReadFormat:
    """What Spark needs to read the files; ``schema`` is a DDL string, None to let Spark infer it.

    ``partition_keys`` and ``partition_types`` come from a bound Hive table:
    the keys must equal the layout's, the types cast the derived values.
    """

    spark_format: str
    options: Mapping[str, str] = field(default_factory=dict, hash=False)
    schema: str | None = None
    source: str = ""  # where this came from, for messages
    partition_keys: tuple[str, ...] | None = None
    partition_types: Mapping[str, str] = field(default_factory=dict, hash=False)
    #: Lines to skip at the start of every file (a CSV header, skip.header.line.count).
    header_lines: int = 0

    @property
    def line_based(self) -> bool:
        return self.spark_format in LINE_FORMATS


def for_format(name: str, source: str) -> ReadFormat:
    """A trib format name (``text``, ``jsonl``, ``csv``, ``parquet``) or ``json``/``orc``."""
    spark_format = SPARK_FORMATS.get((name or "").lower())
    if spark_format is None:
        raise InvalidInputError(f"unknown format {name!r} for {source}; choose one of {', '.join(SPARK_FORMATS)}")
    if spark_format == "text":
        return ReadFormat("text", {}, "value string", source)
    if spark_format == "parquet":
        # trib's Parquet files may differ in columns (a field seen in one hour only):
        # without a schema, read the union of them all, not one file's footer.
        return ReadFormat("parquet", {"mergeSchema": "true"}, None, source)
    return ReadFormat(spark_format, {}, None, source)


def for_data_format(fmt: DataFormat, source: str) -> ReadFormat:
    if fmt.format not in FORMATS:
        raise InvalidInputError(f"{source} has unknown data format {fmt.format!r}")
    return for_format(fmt.format, source)


def _serde_char(value: str | None, default: str) -> str:
    """A delimiter as LazySimpleSerDe reads it: a number is a byte value (``1`` = ``\\x01``), else the first character."""
    if value is None or value == "":
        return default
    try:
        n = int(value)
    except ValueError:
        return value[0]
    if -128 <= n <= 127:
        return chr(n & 0xFF)
    return value[0]


def _spark_type(hive_type: str, column: str, source: str) -> str:
    """A Hive column type as Spark reads it: ``varchar(n)``/``char(n)`` are strings to a file source."""
    t = hive_type.strip()
    if not t:
        raise InvalidInputError(f"{source}: column {column!r} has no type")
    return _CHAR.sub("string", t)


quote = quote_name  # the one quoting module's rule (tributary_read.hive.sql)


def for_hive_table(info, source: str) -> ReadFormat:
    """The format, options and schema of a Hive table (a :class:`~tributary_read.hive.model.HiveTable`)."""
    serde = info.serde or ""
    input_format = (info.input_format or "").lower()
    provider = (info.provider or "hive").lower()
    params = dict(info.serde_params)
    schema = ", ".join(f"{quote(c)} {_spark_type(t, c, source)}" for c, t in info.columns) or None
    keys = tuple(info.partition_keys)
    types = {k: _spark_type(t, k, source) for k, t in info.partition_columns if t}
    header = _header_lines(info.properties, source)

    def made(fmt: str, options: Mapping[str, str]) -> ReadFormat:
        return ReadFormat(fmt, dict(options), schema, source, keys, types, header)

    if provider != "hive":  # a Spark data source table: its storage properties are reader options
        if provider not in SPARK_FORMATS:
            raise InvalidInputError(f"{source} is a {provider!r} data source table; trib reads "
                                    f"{', '.join(sorted(set(SPARK_FORMATS.values())))}")
        opts = {k: v for k, v in params.items() if k not in ("path", "serialization.format")}
        if provider == "csv" and str(opts.get("header", "")).lower() == "true":
            header = max(header, 1)
        return ReadFormat(SPARK_FORMATS[provider], opts, schema, source, keys, types, header)
    if serde in _JSON_SERDES:
        return made("json", {})
    if "parquet" in serde.lower() or "parquet" in input_format:
        return made("parquet", {})
    if "orc" in serde.lower() or "orc" in input_format:
        return made("orc", {})
    if serde == _OPEN_CSV:
        return made("csv", {"sep": _serde_char(params.get("separatorChar"), ","),
                            "quote": _serde_char(params.get("quoteChar"), '"'),
                            "escape": _serde_char(params.get("escapeChar"), "\\")})
    if serde == _LAZY_SIMPLE and "textinputformat" in input_format:
        complex_cols = [c for c, t in info.columns if _COMPLEX.match(t)]
        if complex_cols:
            raise InvalidInputError(
                f"{source}: delimited text column {complex_cols[0]!r} has a complex type; trib reads "
                "delimited text tables of primitive columns (use JSON or Parquet for nested data)")
        delim = _serde_char(params.get("field.delim", params.get("serialization.format")), "\x01")
        # Hive splits on the delimiter and knows no quotes: quoting off, "\N" is NULL.
        return made("csv", {"sep": delim, "quote": "", "nullValue": params.get("serialization.null.format", "\\N")})
    raise InvalidInputError(
        f"{source} uses SerDe {serde or '?'} with input format {info.input_format or '?'}; trib reads "
        "LazySimpleSerDe text, OpenCSVSerde, JsonSerDe, Parquet and ORC tables")


def _header_lines(properties: Mapping[str, str], source: str) -> int:
    raw = properties.get("skip.header.line.count")
    if raw is None:
        return 0
    try:
        n = int(str(raw).strip())
    except ValueError:
        raise InvalidInputError(f"{source}: skip.header.line.count is {raw!r}, not a number") from None
    return max(n, 0)
