"""Reading exactly a FileSet's files with Spark, with the layout's partition columns.

:func:`read_files` hands Spark the explicit list of file URIs, never a
directory: a file written into a listed directory after the FileSet was
resolved is not read, and a ``*`` or ``[`` in a file name is escaped so that
Hadoop's globbing matches that one file only (Spark globs every path it is
given; turning globbing off makes it read some files twice).

Before Spark reads, every file's size is checked against the FileSet's
(:mod:`tributary_read.read.sizes`): a file truncated or rewritten since it was
committed or listed stops the read, never reaches Spark as fewer records.

Files with a valid length (Flink's ``.valid-length`` sidecars), and byte ranges
of files that grew after delivery (``offset``), are read on the executors through trib's storage layer (:mod:`tributary_read.spark.valid_length`)
and parsed with the same schema; both reads carry their file path, so one set
of partition-column expressions (:mod:`tributary_read.spark.columns`) serves
both, and the result is one union of two DataFrames, whatever the number of
files or partitions.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Mapping

from tributary_read.errors import InvalidInputError, UnreadableInputError
from tributary_read.spark import require_pyspark
from tributary_read.spark.columns import partition_columns
from tributary_read.spark.read_format import ReadFormat, for_data_format, for_format, for_hive_table, quote

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from tributary_read.read.fileset import FileSet, ResolvedFile

#: The column that carries each row's file path from the reads to the partition columns.
PATH_COLUMN = "__trib_file_path"
#: ``options`` keys that are trib's, not the DataFrameReader's.
FORMAT_OPTION = "format"
STORAGE_PREFIX = "storage."
#: Hadoop's glob characters (org.apache.hadoop.fs.GlobPattern); a backslash makes each literal.
_GLOB = re.compile(r"([\\{}\[\]*?])")


def read_files(spark: SparkSession, fileset: FileSet, *, schema: StructType | str | None = None,
               hive_table: str | None = None, metastore: Any = None,
               options: Mapping[str, str] | None = None) -> DataFrame:
    """A DataFrame of exactly ``fileset``'s files: data columns, then one column per partition key.

    Args:
        schema: the data columns (a StructType or DDL string); else the Hive
            table's, else inferred by Spark from the files (text: ``value``).
        hive_table: ``db.table`` whose SerDe, delimiter, columns and partition
            keys say how to read the files; its keys must be the layout's.
        metastore: where ``hive_table`` lives: ``spark`` (this session's
            catalog, the default), ``hs2://HOST:PORT``, or an open Metastore.
        options: DataFrameReader options (``sep``, ``mode``, ...), plus trib's
            ``format`` (``text``/``csv``/``jsonl``/``parquet``: the format of a
            plain directory's files) and ``storage.KEY`` (storage options for
            the executors that read valid-length files, e.g.
            ``storage.endpoint_url``; the executors' environment fills the rest).

    An empty FileSet gives an empty DataFrame with the same columns, when the
    schema is known (given, from Hive, or text); without one there is nothing
    to infer it from, which is an error rather than a DataFrame without columns.
    """
    require_pyspark()
    from pyspark.sql import functions as F

    from tributary_read.read.sizes import check_sizes
    from tributary_read.spark.ship import ship_to_executors

    opts = {str(k): str(v) for k, v in (options or {}).items()}
    named_format = opts.pop(FORMAT_OPTION, None)
    storage_options = {k[len(STORAGE_PREFIX):]: opts.pop(k) for k in list(opts) if k.startswith(STORAGE_PREFIX)}
    # valid-length files are read by trib's code on the executors (whole files by Spark's readers)
    ship_to_executors(spark, tasks=any(f.valid_length is not None for f in fileset.files))
    fmt = _read_format(spark, fileset, named_format, hive_table, metastore)
    reader_options = {**fmt.options, **opts}
    keys = _partition_keys(fileset, fmt)
    data_schema = _as_struct(spark, schema if schema is not None else fmt.schema)

    plain = [f for f in fileset.files if f.valid_length is None]
    capped = [f for f in fileset.files if f.valid_length is not None]
    for f in fileset.files:
        if ":" in f.path:
            raise InvalidInputError(f"{fileset.uri(f)}: Hadoop cannot read a file name with ':'")
        if f.path.rpartition("/")[2][:1] in (".", "_"):
            # Spark reads such an explicit path as no rows, silently (a committed file still under its
            # staged name, on a store trib could not rename in).
            raise UnreadableInputError(
                f"{fileset.uri(f)}: Spark reads a file whose name starts with '.' or '_' as empty; finish the "
                "table's renames with write access (`trib recover ROOT --app-id ID`) and run again")
    if capped and not fmt.line_based:
        raise InvalidInputError(
            f"{fileset.uri(capped[0])} has a valid length of {capped[0].valid_length} bytes, but "
            f"{fmt.spark_format} files cannot be read up to a length: only whole files of line formats can")
    # a file truncated or rewritten since it was committed or listed: stop here, not half-read by Spark
    check_sizes(fileset, options=storage_options)
    skip = _header_lines(fmt, reader_options, bool(plain))

    frames = []
    if plain:
        reader = spark.read.format(fmt.spark_format).options(**reader_options)
        if data_schema is not None:
            reader = reader.schema(data_schema)
        df = reader.load([_glob_escape(fileset.hadoop_uri(f)) for f in plain])
        if data_schema is None:
            data_schema = df.schema
        frames.append(df.select(*_cols(data_schema), F.col("_metadata.file_path").alias(PATH_COLUMN)))
    if capped:
        lines = _capped_lines(spark, fileset, capped, storage_options, skip)
        if schema is None and fmt.schema is None:  # inferred: the valid-length lines may add columns
            data_schema = _merge(data_schema, _infer(spark, fmt, reader_options, lines), fileset)
            frames = [f.select(*_cols(data_schema, f.columns), PATH_COLUMN) for f in frames]
        frames.append(_parse_lines(fmt, reader_options, lines, data_schema))
    if not frames:
        if data_schema is None:
            raise InvalidInputError(
                f"nothing to read in {fileset.root or 'the file set'} and no schema to give the empty result "
                "its columns: pass schema= or hive_table= (or read text)")
        from pyspark.sql.types import StringType, StructField, StructType

        frames.append(spark.createDataFrame(
            [], StructType([*data_schema.fields, StructField(PATH_COLUMN, StringType())])))

    _check_collisions(data_schema, keys)
    df = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
    parts = []
    if keys:
        for col, (name, hive_type) in zip(partition_columns(fileset.layout, PATH_COLUMN), keys):
            parts.append((col if hive_type in (None, "string") else col.cast(hive_type)).alias(name))
    return df.select(*_cols(data_schema), *parts)


# -- what to read ------------------------------------------------------------------------
def _read_format(spark, fileset: FileSet, named: str | None, hive_table: str | None, metastore) -> ReadFormat:
    where = fileset.root or "the file set"
    if hive_table is not None:
        if named is not None:
            raise InvalidInputError(f"options format={named!r} and hive_table={hive_table!r}: the format comes "
                                    "from the Hive table, drop one")
        fmt = for_hive_table(_hive_info(spark, hive_table, metastore), f"Hive table {hive_table}")
        if fileset.format is not None and fileset.format.spec.line_based != fmt.line_based:
            raise InvalidInputError(
                f"{where} holds {fileset.format.format} files but Hive table {hive_table} reads "
                f"{fmt.spark_format}: bind the read to a table of the same kind of files")
        return fmt
    if named is not None:
        fmt = for_format(named, where)
        if fileset.format is not None and for_data_format(fileset.format, where).spark_format != fmt.spark_format:
            raise InvalidInputError(f"{where} is a trib table of {fileset.format.format} files; "
                                    f"options format={named!r} disagrees (drop it)")
        return fmt
    if fileset.format is None:
        raise InvalidInputError(
            f"{where} is a plain directory: its files' format is unknown; pass options={{'format': "
            "'text'|'csv'|'jsonl'|'parquet'} or hive_table=")
    return for_data_format(fileset.format, where)


def _hive_info(spark, hive_table: str, metastore):
    from tributary_read.hive.metastore import Metastore, open_metastore
    from tributary_read.hive.model import TableName

    name = TableName.parse(hive_table)
    if isinstance(metastore, Metastore):
        return metastore.table_info(name)
    # A spark URI: this session's catalog, whatever else the URI says.
    with open_metastore(metastore or "spark", spark=spark) as m:
        return m.table_info(name)


def _partition_keys(fileset: FileSet, fmt: ReadFormat) -> list[tuple[str, str | None]]:
    """(column name, Hive type or None) per partition key; the Hive table's keys must be the layout's."""
    layout = fileset.layout
    ours = list(layout.keys) if layout is not None else []
    if fmt.partition_keys is None:
        return [(k, None) for k in ours]
    theirs = list(fmt.partition_keys)
    if [k.lower() for k in theirs] != [k.lower() for k in ours]:
        have = f"layout {layout.directory!r} -> {layout.partition!r}" if layout is not None else "no layout"
        raise InvalidInputError(
            f"{fmt.source} is partitioned by ({', '.join(theirs) or 'nothing'}) but {fileset.root or 'the file set'} "
            f"has {have}: the partition keys must be the same")
    return [(k, fmt.partition_types.get(k)) for k in theirs]


def _header_lines(fmt: ReadFormat, reader_options: dict, has_plain: bool) -> int:
    """Lines to skip per valid-length file; sets the reader's ``header`` for the whole files."""
    header = fmt.header_lines
    if str(reader_options.get("header", "")).lower() == "true":
        header = max(header, 1)
    if header and (fmt.spark_format != "csv" or header > 1) and has_plain:
        raise InvalidInputError(
            f"{fmt.source or 'the read'} skips {header} header line(s) per file; Spark skips one, and only in csv")
    if header:
        reader_options["header"] = "true"
    return header


def _connect_ddl(spark, schema: str):
    """A DDL string parsed by a Spark Connect server: its parser alone (an empty DataFrame's schema would
    take a second round trip)."""
    parse = getattr(spark, "_parse_ddl", None)
    return parse(schema) if parse is not None else spark.createDataFrame([], schema).schema


def _as_struct(spark, schema) -> StructType | None:
    if schema is None:
        return None
    from pyspark.sql.types import StructType

    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, str):
        from tributary_read.spark import is_connect

        try:  # Spark's DDL parser: this process's JVM, or the Spark Connect server's (one round trip)
            parsed = _connect_ddl(spark, schema) if is_connect(spark) else StructType.fromDDL(schema)
        except Exception as e:  # noqa: BLE001 - Spark's parse error, one line
            first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
            raise InvalidInputError(f"bad schema {schema!r}: {first[:200]}") from None
        if isinstance(parsed, StructType):
            return parsed
    raise InvalidInputError(f"schema must be a StructType or a DDL string like 'id bigint, msg string', "
                            f"not {schema!r}")


def _cols(schema: StructType, available=None) -> list:
    from pyspark.sql import functions as F

    if available is None:
        return [F.col(quote(f.name)) for f in schema.fields]
    have = set(available)
    return [F.col(quote(f.name)) if f.name in have else F.lit(None).cast(f.dataType).alias(f.name)
            for f in schema.fields]


def _check_collisions(schema: StructType, keys) -> None:
    names = {f.name.lower() for f in schema.fields}
    clash = [k for k, _ in keys if k.lower() in names]
    if clash:
        raise InvalidInputError(
            f"data column {clash[0]!r} has the name of a partition key: pass a schema= without it "
            "(the partition value comes from the file's directory)")


def _glob_escape(uri: str) -> str:
    return _GLOB.sub(r"\\\1", uri)


# -- valid-length files ----------------------------------------------------------------
def _capped_lines(spark, fileset: FileSet, files: list[ResolvedFile], storage_options, skip: int):
    """A DataFrame ``(value, PATH_COLUMN)`` of the lines of ``files`` within their valid lengths."""
    from tributary_read.spark.valid_length import partition_lines

    items = [(f.path, f.valid_length, fileset.hadoop_uri(f), f.offset or 0) for f in files]
    root = fileset.root
    from tributary_read.spark import is_connect

    if is_connect(spark):  # no RDDs over Spark Connect: the same lines through an Arrow task, one file per task
        from tributary_read.spark.valid_length import ArrowLines

        paths = spark.createDataFrame(items, "rel string, length long, path string, offset long")
        return paths.repartition(len(items)).mapInArrow(ArrowLines(root, dict(storage_options), skip, PATH_COLUMN),
                                                        f"value string, {quote(PATH_COLUMN)} string")
    sc = spark.sparkContext
    rdd = sc.parallelize(items, max(1, min(len(items), sc.defaultParallelism))).mapPartitions(
        lambda part: partition_lines(root, storage_options, skip, part))
    return spark.createDataFrame(rdd, f"value string, {quote(PATH_COLUMN)} string")


def _records(fmt: ReadFormat, reader_options: Mapping[str, str], lines):
    """Lines that hold records: Spark's csv and json readers skip blank lines (and csv comments)."""
    from pyspark.sql import functions as F

    if fmt.spark_format == "text":
        return lines
    kept = lines.where(F.col("value").rlike("[^\\x00-\\x20]"))
    comment = reader_options.get("comment") if fmt.spark_format == "csv" else None
    return kept.where(~F.col("value").startswith(comment)) if comment else kept


def _parse_lines(fmt: ReadFormat, reader_options: Mapping[str, str], lines, schema: StructType):
    from pyspark.sql import functions as F

    if fmt.spark_format == "text":
        return lines.select(F.col("value").alias(schema.fields[0].name), PATH_COLUMN)
    # None, not {}: Spark Connect sends an empty dict as map() of VOID, which from_json/from_csv refuse
    opts = {k: v for k, v in reader_options.items() if k != "header"} or None
    rows = _records(fmt, reader_options, lines)
    if fmt.spark_format == "json":
        record = F.from_json("value", schema, opts)
    else:
        ddl = ", ".join(f"{quote(f.name)} {f.dataType.simpleString()}" for f in schema.fields)
        record = F.from_csv(F.col("value"), ddl, opts)
    return rows.select(record.alias("__trib_record"), PATH_COLUMN).select(
        *[F.col(f"__trib_record.{quote(f.name)}").alias(f.name) for f in schema.fields], PATH_COLUMN)


def _infer(spark, fmt: ReadFormat, reader_options: Mapping[str, str], lines) -> StructType:
    """The schema Spark infers from the valid-length lines alone."""
    if fmt.spark_format == "text":
        from pyspark.sql.types import StringType, StructField, StructType

        return StructType([StructField("value", StringType())])
    if str(reader_options.get("header", "")).lower() == "true":
        raise InvalidInputError("csv files with a header line and a valid length need schema= "
                                "(column names cannot be taken from a header that is skipped)")
    from tributary_read.spark import is_connect

    if is_connect(spark):  # Spark's readers infer from an RDD of lines only, which Spark Connect has not
        raise InvalidInputError("inferring the columns of files read up to a valid length needs a classic driver "
                                "(Spark Connect cannot): give the input a schema, or run with a classic driver")
    values = _records(fmt, reader_options, lines).select("value").rdd.map(lambda r: r[0])
    reader = spark.read.options(**reader_options)
    return (reader.json(values) if fmt.spark_format == "json" else reader.csv(values)).schema


def _merge(plain: StructType | None, capped: StructType, fileset: FileSet) -> StructType:
    """The columns of both reads; a column typed differently by each needs an explicit schema."""
    if plain is None:
        return capped
    from pyspark.sql.types import StructType

    fields = list(plain.fields)
    index = {f.name: f for f in fields}
    for f in capped.fields:
        mine = index.get(f.name)
        if mine is None:
            fields.append(f)
        elif mine.dataType != f.dataType:
            raise InvalidInputError(
                f"column {f.name!r} of {fileset.root or 'the file set'} is {mine.dataType.simpleString()} in whole "
                f"files but {f.dataType.simpleString()} in valid-length files: pass schema=")
    return StructType(fields)
