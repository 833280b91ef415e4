"""File formats the writer produces, held as data rather than if-chains.

Text formats (text, jsonl, csv) are newline-delimited records compressed as a
stream; Hadoop and Spark pick the codec from the extension. Parquet compresses
per column chunk. Snappy is offered for Parquet only: a raw snappy stream is
not the block framing Hadoop's SnappyCodec reads, so a ``.snappy`` text file
would be unreadable by the engines trib feeds.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import InvalidInputError


@dataclass(frozen=True)
class FormatSpec:
    name: str
    extension: str
    compressions: tuple[str, ...]
    line_based: bool
    #: Hive's STORED AS clause, used by the Hive integration.
    hive_stored_as: str


FORMATS: dict[str, FormatSpec] = {
    "text": FormatSpec("text", "txt", ("none", "gzip", "zstd"), True, "TEXTFILE"),
    "jsonl": FormatSpec("jsonl", "jsonl", ("none", "gzip", "zstd"), True, "TEXTFILE"),
    "csv": FormatSpec("csv", "csv", ("none", "gzip", "zstd"), True, "TEXTFILE"),
    "parquet": FormatSpec("parquet", "parquet", ("none", "gzip", "zstd", "snappy"), False, "PARQUET"),
}

#: compression -> (suffix for text files, pyarrow codec name)
COMPRESSIONS: dict[str, tuple[str, str | None]] = {
    "none": ("", None),
    "gzip": (".gz", "gzip"),
    "zstd": (".zst", "zstd"),
    "snappy": ("", "snappy"),
}


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


class LineSink:
    """Buffered newline-delimited records into a (possibly compressed) stream."""

    FLUSH_BYTES = 1 << 20

    def __init__(self, raw, compression: str):
        self.raw = raw
        codec = COMPRESSIONS[compression][1]
        self.out = pa.CompressedOutputStream(raw, codec) if codec else raw
        self._buf: list[bytes] = []
        self._buffered = 0
        self.uncompressed = 0
        # bytes_written is asked after every record: keep its parts at hand. Only
        # _drain writes to ``raw``, so its position is re-read there, not per record.
        self._raw_pos = raw.tell()
        self._ratio = 4 if self.out is not raw else 1

    def write_line(self, line: bytes) -> None:
        self._buf += (line, b"\n")
        self._buffered += len(line) + 1
        if self._buffered >= self.FLUSH_BYTES:
            self._drain()

    def write_row(self, row) -> None:  # a parsed record: not meaningful for text
        raise InvalidInputError("text formats take raw lines")

    def _drain(self) -> None:
        if self._buf:
            self.out.write(b"".join(self._buf))
            self._raw_pos = self.raw.tell()
            self.uncompressed += self._buffered
            self._buf.clear()
            self._buffered = 0

    @property
    def bytes_written(self) -> int:
        """Approximate on-disk size, for size-based rolling."""
        return self._raw_pos + self._buffered // self._ratio

    def close(self) -> None:
        self._drain()
        self.out.close()
        if not self.raw.closed:
            self.raw.close()


class ParquetSink:
    """Rows buffered into row groups; the schema is fixed by the first batch.

    Arrow batches are held until a whole row group is pending: a writer that
    routes each incoming batch across 24 hourly files would otherwise emit one
    tiny row group per batch and file (slower to write and to scan).
    """

    ROW_GROUP = 65_536
    #: Flush earlier when wide rows make a row group's worth of buffer this big.
    MAX_PENDING_BYTES = 16 << 20

    def __init__(self, raw, compression: str):
        self.raw = raw
        self.codec = COMPRESSIONS[compression][1] or "none"
        self.writer: pq.ParquetWriter | None = None
        self._rows: list[dict] = []
        self._pending: list[tuple[pa.Table, pa.Array | None]] = []
        self._pending_rows = 0
        self._pending_bytes = 0

    def write_line(self, line: bytes) -> None:
        self._rows.append({"value": line.decode("utf-8", "replace")})
        if len(self._rows) >= self.ROW_GROUP:
            self._drain()

    def write_row(self, row: dict) -> None:
        self._rows.append(row)
        if len(self._rows) >= self.ROW_GROUP:
            self._drain()

    def write_table(self, table: pa.Table, indices: pa.Array | None = None) -> None:
        """Append ``table``, or only its rows at ``indices`` (taken lazily, at flush)."""
        self._drain()
        self._add(table, indices)

    def _add(self, table: pa.Table, indices: pa.Array | None = None) -> None:
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.raw, table.schema, compression=self.codec)
        elif table.schema != self.writer.schema:
            try:
                table = table.cast(self.writer.schema)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as e:
                raise InvalidInputError(f"record schema changed within a file: {e}") from None
        rows = table.num_rows if indices is None else len(indices)
        self._pending.append((table, indices))
        self._pending_rows += rows
        self._pending_bytes += table.nbytes * rows // max(1, table.num_rows)
        if self._pending_rows >= self.ROW_GROUP or self._pending_bytes >= self.MAX_PENDING_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            parts = [t if i is None else t.take(i) for t, i in self._pending]
            table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
            self._pending.clear()
            self._pending_rows = self._pending_bytes = 0
            self.writer.write_table(table, row_group_size=self.ROW_GROUP)

    def _drain(self) -> None:
        if self._rows:
            schema = self.writer.schema if self.writer else None
            try:
                table = pa.Table.from_pylist(self._rows, schema=schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as e:
                raise InvalidInputError(f"records do not fit the file's schema: {e}") from None
            self._rows.clear()
            self._add(table)

    @property
    def bytes_written(self) -> int:
        # Buffered Arrow bytes count too, so size-based rolling is not late by a row group.
        return self.raw.tell() + self._pending_bytes

    def close(self) -> None:
        self._drain()
        self._flush()
        if self.writer is not None:
            self.writer.close()
        if not self.raw.closed:
            self.raw.close()


def open_sink(raw, fmt: str, compression: str):
    return ParquetSink(raw, compression) if fmt == "parquet" else LineSink(raw, compression)
