"""File formats the writer produces, held as data rather than if-chains.

Text formats (text, jsonl, csv) are newline-delimited records compressed as a
stream; Hadoop and Spark pick the codec from the extension. Parquet compresses
per column chunk. Snappy is offered for Parquet only: a raw snappy stream is
not the block framing Hadoop's SnappyCodec reads, so a ``.snappy`` text file
would be unreadable by the engines trib feeds.
"""

from __future__ import annotations

from dataclasses import dataclass

from tributary_read.errors import InvalidInputError


#: Hive SerDes trib writes for (``trib hive create-table``) and reads (a bound Hive table).
LAZY_SIMPLE_SERDE = "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"
OPEN_CSV_SERDE = "org.apache.hadoop.hive.serde2.OpenCSVSerde"
#: Hive's JSON SerDe (hive-hcatalog-core): on Hive's classpath, not in the pyspark wheel.
JSON_SERDE = "org.apache.hive.hcatalog.data.JsonSerDe"
#: Every JSON SerDe whose tables are JSON lines Spark's json reader reads.
JSON_SERDES = (JSON_SERDE, "org.apache.hadoop.hive.serde2.JsonSerDe", "org.openx.data.jsonserde.JsonSerDe")
PARQUET_SERDE = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
#: What Hive's ``STORED AS X`` sets: (input format, output format) classes. The DDL names the short form;
#: a table created through the metastore's Thrift API (no SQL, no Hive to expand it) names the classes.
HIVE_STORED_AS: dict[str, tuple[str, str]] = {
    "TEXTFILE": ("org.apache.hadoop.mapred.TextInputFormat",
                 "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat"),
    "PARQUET": ("org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
                "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"),
}


@dataclass(frozen=True)
class FormatSpec:
    """Everything trib knows about one format: the one table the writer, Hive DDL and Spark reads derive from."""

    name: str
    extension: str
    compressions: tuple[str, ...]
    line_based: bool
    #: Hive's STORED AS clause, used by the Hive integration.
    hive_stored_as: str
    #: Spark's DataFrameReader format for the files.
    spark_format: str
    #: The SerDe of the Hive table trib creates for it.
    hive_serde: str
    #: A substring of the input format class a matching Hive table has.
    hive_input_format: str
    #: A new table's compression when none is given: Parquet's is snappy, as Spark's and Hive's
    #: writers default to; text stays plain (Hadoop reads no raw snappy stream, see above).
    default_compression: str = "none"
    #: How the Hive table names its row format: ``delimited`` (``ROW FORMAT DELIMITED``, the SerDe's
    #: field delimiter a table setting), ``serde`` (``ROW FORMAT SERDE``), or ``implied`` (the SerDe
    #: ``STORED AS`` implies, e.g. PARQUET's).
    hive_row_format: str = "serde"

    @property
    def hive_classes(self) -> tuple[str, str]:
        """(input format, output format) classes of the Hive table: what its ``STORED AS`` sets."""
        return HIVE_STORED_AS[self.hive_stored_as]


FORMATS: dict[str, FormatSpec] = {
    "text": FormatSpec("text", "txt", ("none", "gzip", "zstd"), True, "TEXTFILE", "text", LAZY_SIMPLE_SERDE,
                       "TextInputFormat", hive_row_format="delimited"),
    "jsonl": FormatSpec("jsonl", "jsonl", ("none", "gzip", "zstd"), True, "TEXTFILE", "json", JSON_SERDE,
                        "TextInputFormat"),
    "csv": FormatSpec("csv", "csv", ("none", "gzip", "zstd"), True, "TEXTFILE", "csv", OPEN_CSV_SERDE,
                      "TextInputFormat"),
    "parquet": FormatSpec("parquet", "parquet", ("none", "gzip", "zstd", "snappy"), False, "PARQUET", "parquet",
                          PARQUET_SERDE, "Parquet", default_compression="snappy", hive_row_format="implied"),
}
#: Formats trib reads but never writes (a plain directory's ``format=``, a Hive or Spark table's): Spark's name.
READ_ONLY_FORMATS = {"json": "json", "orc": "orc"}

@dataclass(frozen=True)
class DataFormat:
    """A table's data format and compression (table.json's ``file_format`` and ``compression``).

    What an engine needs to read a table's files, carried on every
    :class:`~tributary_read.read.fileset.FileSet` resolved from a trib table.
    """

    format: str
    compression: str = "none"

    @property
    def spec(self) -> FormatSpec:
        return check_format(self.format, self.compression)

    def to_json(self) -> dict:
        return {"format": self.format, "compression": self.compression}


#: compression -> (suffix for text files, pyarrow codec name)
COMPRESSIONS: dict[str, tuple[str, str | None]] = {
    "none": ("", None),
    "gzip": (".gz", "gzip"),
    "zstd": (".zst", "zstd"),
    "snappy": ("", "snappy"),
}


def default_compression(fmt: str) -> str:
    """The compression a new table of ``fmt`` gets when none is given (snappy for Parquet, else none)."""
    return check_format(fmt, "none").default_compression


def check_format(fmt: str, compression: str) -> FormatSpec:
    spec = FORMATS.get(fmt)
    if spec is None:
        raise InvalidInputError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if compression not in spec.compressions:
        raise InvalidInputError(
            f"compression {compression!r} is not available for {fmt}; choose one of {', '.join(spec.compressions)}"
        )
    return spec


def file_suffix(fmt: str, compression: str) -> str:
    spec = check_format(fmt, compression)
    if spec.line_based:
        return f".{spec.extension}{COMPRESSIONS[compression][0]}"
    return f".{spec.extension}"
