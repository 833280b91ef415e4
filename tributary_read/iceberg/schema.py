"""A trib table's shape in Iceberg terms: its schema, its partition spec, and each file's partition record.

The partition values come from trib's manifest, never from a path or a column statistic: every
:class:`~tributary_read.table.manifest.FileEntry` records the values its layout gave it
(``{"dt": "2020062401"}``), and that is the one answer. A landing zone's file (other tools wrote it;
no manifest) has the values its consumer's layout gave it, in the plan's
:class:`~tributary_read.read.fileset.ResolvedFile`, and its record count from its Parquet footer. A layout's keys (``dt``, or ``dt`` and ``hr``)
become string columns of the Iceberg schema with an identity partition on each, so a reader fills
every row's ``dt`` from the file's partition record (the Iceberg rule for a column a data file does
not hold), exactly as Hive fills it from the directory. trib's Parquet files hold only the data
columns; Iceberg finds them by name (the table's default name mapping), as they carry no field ids.

With a transform (``hour(ts)``, ``day(ts)``: :mod:`tributary_read.iceberg.partition_by`, which says why the
identity fields stay and where the transform's value comes from), the spec is the identity fields, then the
transform's field. The spec is fixed when the mirror creates the table: a sync that asks for another one
is refused, as Iceberg readers of the snapshots already registered read them under the old one.
"""

from __future__ import annotations

from tributary_read.iceberg import deps  # noqa: F401 - first: names the extra when pyiceberg is missing

import pyarrow as pa
from pyiceberg.io.pyarrow import (
    UnsupportedPyArrowTypeException,
    _HasIds,
    _check_pyarrow_schema_compatible,
    _pyarrow_to_schema_without_ids,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
    visit_pyarrow,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.transforms import DayTransform, HourTransform, IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import NestedField, StringType, TimestampType, TimestamptzType

from typing import TYPE_CHECKING, Sequence, TypeVar

from tributary_read.errors import InvalidInputError, ManifestCorruptError, SchemaChangeError, VerificationError
from tributary_read.iceberg.partition_by import WORDS, Buckets, PartitionBy, check_type, footer_times
from tributary_read.table.config import Table
from tributary_read.table.layout import Layout
from tributary_read.table.manifest import FileEntry

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.read.fileset import ResolvedFile

F = TypeVar("F")

#: The first partition field id Iceberg assigns (its spec's convention).
FIRST_PARTITION_FIELD_ID = 1000
#: A transform's name in a ``PartitionBy`` -> its pyiceberg transform.
TRANSFORMS = {"hour": HourTransform, "day": DayTransform}


def check_parquet(table: Table) -> None:
    """Refuse (one line, nothing committed) a table that is not Parquet: Iceberg reads Parquet, Avro and
    ORC only, and a JSON-lines or text table would have to be rewritten, which a mirror never does."""
    if table.config.format != "parquet":
        raise InvalidInputError(
            f"{table.uri} is a {table.config.format} table: only Parquet tables mirror into Iceberg (files are "
            "registered, never rewritten); write a Parquet trib table from it with an ETL job, and mirror that")


def initial_schema(files: pa.Schema, keys: list[str], by: PartitionBy | None = None) -> tuple[Schema, PartitionSpec]:
    """The Iceberg schema of a new mirror (the first files' columns, then the partition keys as strings)
    and its spec: an identity partition on each key, in the layout's order, then ``by``'s transform."""
    _check_keys(files, keys, "the files")
    without_ids = _pyarrow_to_schema_without_ids(files)
    # Every column optional: a file written before a column appeared has no value for it.
    fields = [NestedField(-1, f.name, f.field_type, required=False, doc=f.doc) for f in without_ids.fields]
    fields += [NestedField(-1, k, StringType(), required=False,
                           doc="partition value trib recorded for the file") for k in keys]
    schema = assign_fresh_schema_ids(Schema(*fields))
    parts = [PartitionField(source_id=schema.find_field(k).field_id, field_id=FIRST_PARTITION_FIELD_ID + i,
                            transform=IdentityTransform(), name=k) for i, k in enumerate(keys)]
    if by is not None:
        if by.column not in files.names:
            raise InvalidInputError(f"the files have no column {by.column!r} for {WORDS} {by} (columns: "
                                    f"{', '.join(files.names)})", partition_by=WORDS)
        check_type(by.column, files.field(by.column).type)
        source = schema.find_field(by.column)
        assert isinstance(source.field_type, (TimestampType, TimestamptzType)), source  # pyiceberg's mapping
        parts.append(PartitionField(source_id=source.field_id, field_id=FIRST_PARTITION_FIELD_ID + len(keys),
                                    transform=TRANSFORMS[by.transform](), name=by.field_name))
    return schema, PartitionSpec(*parts)


def spec_partition_by(spec: PartitionSpec, schema: Schema, keys: list[str], name: str) -> PartitionBy | None:
    """The transform of an Iceberg table's spec the mirror made (None: identity on the keys only); any other
    spec (evolved by hand, another tool's) is refused: its partition records would not be the mirror's."""
    fields = list(spec.fields)
    names = [schema.find_column_name(f.source_id) for f in fields]
    ident = [n for f, n in zip(fields, names) if isinstance(f.transform, IdentityTransform)]
    by = None
    if len(fields) == len(keys) + 1 and isinstance(fields[-1].transform, (HourTransform, DayTransform)):
        by = PartitionBy("hour" if isinstance(fields[-1].transform, HourTransform) else "day", str(names[-1]))
    if ident != keys or len(fields) != len(keys) + (by is not None):
        shown = ", ".join(f"{f.transform}({n})" for f, n in zip(fields, names)) or "none"
        raise InvalidInputError(f"Iceberg table {name} is partitioned by {shown}, not by the layout's keys "
                                f"{', '.join(keys)} as trib iceberg sync makes it: mirror into a new Iceberg table")
    return by


def check_spec(existing: PartitionBy | None, asked: PartitionBy | None, name: str) -> None:
    """Refuse a sync that asks for a transform the existing Iceberg table was not created with: the spec is
    fixed at creation (evolving it would leave the registered files under the old one)."""
    if asked is not None and asked != existing:
        has = f"{existing}" if existing else "identity on the layout's keys only"
        raise InvalidInputError(f"Iceberg table {name} is partitioned by {has}, not {asked}: its partition spec "
                                f"is fixed when it is created; drop {WORDS}, or mirror into a new Iceberg table",
                                partition_by=WORDS)


def _check_keys(files: pa.Schema, keys: list[str], where: str) -> None:
    clash = [k for k in keys if k in files.names]
    if clash:
        raise InvalidInputError(f"{where}: a column {clash[0]!r}, which is also the table's partition key: "
                                "Hive and Iceberg would both take the partition's value; rename the column")


def check_foreign(files: pa.Schema, keys: list[str], where: str) -> None:
    """Refuse (one line, nothing committed) a file another tool wrote that Iceberg would read otherwise than
    its columns say: one with a partition key's column (the layout's value and the file's would disagree),
    a column of a type Iceberg has none for (nanosecond timestamps), or with Iceberg field ids of its own (a
    reader matches columns by those ids, not by the table's names)."""
    _check_keys(files, keys, where)
    try:
        _pyarrow_to_schema_without_ids(files)
    except UnsupportedPyArrowTypeException as e:  # e.g. timestamp[ns], which Iceberg v2 has no type for
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise InvalidInputError(f"{where}: {first}, which the Iceberg table cannot hold; rewrite the file with a "
                                "type Iceberg has (timestamps in microseconds: pyarrow's coerce_timestamps='us')"
                                ) from None
    if visit_pyarrow(files, _HasIds()):
        raise InvalidInputError(f"{where}: Iceberg field ids of its own (written for another Iceberg "
                                "table): readers would match its columns by those ids; rewrite it without them")


def new_columns(schema: Schema, files: pa.Schema) -> bool:
    """Whether ``files`` names a column the Iceberg schema lacks (a late field trib's writer added)."""
    names = {f.name for f in schema.fields}
    return any(n not in names for n in files.names)


def column_sets(files: Sequence[F], footers: Sequence) -> list[tuple[F, pa.Schema]]:
    """Each distinct column set among the files' footers (None: no footer), with the first file that has it."""
    seen: list[tuple[F, pa.Schema]] = []
    for f, footer in zip(files, footers):
        if footer is None:
            continue
        cols = footer.schema.to_arrow_schema()
        if not any(cols.equals(s) for _, s in seen):
            seen.append((f, cols))
    return seen


def check_compatible(schema: Schema, files: pa.Schema, where: str, format_version: int) -> None:
    """Refuse a file whose columns Iceberg could not read under ``schema`` (a changed type), as trib's
    own writers refuse it (SchemaChangeError); nothing of the commit is registered."""
    try:
        _check_pyarrow_schema_compatible(schema, files, format_version=format_version)  # type: ignore[arg-type]
    except ValueError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SchemaChangeError(f"{where}: its columns do not fit the Iceberg table's schema ({first}): a "
                                "column's type changed, which Iceberg readers cannot merge; mirror into a new "
                                "Iceberg table") from None


class Partitioning:
    """Each file's partition record under the table's spec: the layout keys' values from the manifest (a
    landing zone's file: its layout's), then the transform's value derived from them (:class:`~tributary_read.iceberg.partition_by.Buckets`)."""

    def __init__(self, layout: Layout, by: PartitionBy | None = None):
        self.keys = layout.keys
        self.by = by
        self.buckets = Buckets(by, layout) if by is not None else None

    def record(self, entry: FileEntry | ResolvedFile, where: str, uri: str, footer=None) -> Record:
        """The file's partition record, in the spec's order. With a transform and a ``footer``, the file's
        event times are checked to lie inside the transform's value (a removed file's record, or one whose
        bytes ``trib clean`` deleted, is not: no reader of a current snapshot reads it)."""
        missing = [k for k in self.keys if k not in entry.partition]
        if missing:
            raise ManifestCorruptError(f"{where}: committed file {entry.path} records no value for partition key "
                                       f"{missing[0]!r}")
        values = [entry.partition[k] for k in self.keys]
        if self.buckets is None:
            return Record(*values)
        assert self.by is not None
        value = self.buckets.value(entry.partition, where)
        if footer is not None:
            self.buckets.check(value, footer_times(footer, self.by.column, uri), uri)
        return Record(*values, value)


def data_file(metadata: TableMetadata, uri: str, entry: FileEntry | ResolvedFile, part: Partitioning, where: str,
              footer=None) -> DataFile:
    """The Iceberg DataFile of a committed file: its URI, size, record count and partition record from
    the manifest; column statistics from its Parquet ``footer`` when it was read (None: none).

    A landing zone's file records no count (``records`` None): its footer's is the count."""
    if entry.records is None and footer is None:
        raise VerificationError(f"{uri}: neither a record count nor a Parquet footer to register it with")
    stats: dict = {"record_count": entry.records if entry.records is not None else footer.num_rows}
    if footer is not None:
        if entry.records is not None and footer.num_rows != entry.records:  # not the bytes committed: never register
            raise VerificationError(f"{uri} holds {footer.num_rows} records, its commit says {entry.records}: "
                                    "run trib verify")
        schema = metadata.schema()
        stats = data_file_statistics_from_parquet_metadata(
            parquet_metadata=footer, stats_columns=compute_statistics_plan(schema, metadata.properties),
            parquet_column_mapping=parquet_path_to_id_mapping(schema)).to_serialized_dict()
    df = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=uri,
        file_format=FileFormat.PARQUET,
        partition=part.record(entry, where, uri, footer),
        file_size_in_bytes=entry.size,
        sort_order_id=None,
        equality_ids=None,
        key_metadata=None,
        **stats,
    )
    df.spec_id = metadata.default_spec_id  # not a field of the struct: from_args would drop it
    return df
