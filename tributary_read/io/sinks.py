"""Writing a data file: a line stream or Parquet row groups, encoded off the caller's thread.

Kept apart from :mod:`tributary_read.io.formats` (what the formats are), which
every reader imports: only writers pay pyarrow's import.
"""

from __future__ import annotations

import os
import threading
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from tributary_read.errors import InvalidInputError, SchemaConflictError
from tributary_read.io.formats import COMPRESSIONS
from tributary_read.io.parquet_schema import EXACT, RowColumns, has_empty_struct


class LineSink:
    """Buffered newline-delimited records into a (possibly compressed) stream."""

    FLUSH_BYTES = 1 << 20

    def __init__(self, raw, compression: str):
        self.raw = raw
        codec = COMPRESSIONS[compression][1]
        self.out = _Gzip(raw) if codec == "gzip" else pa.CompressedOutputStream(raw, codec) if codec else raw
        self._buf: list[bytes] = []
        self._buffered = 0
        self.uncompressed = 0
        # bytes_written is asked after every record: keep its parts at hand. Only
        # _drain writes to ``raw``, so its position is re-read there, not per record.
        self._raw_pos = raw.tell()
        self._ratio = 4 if self.out is not raw else 1
        self._crc = 0  # of the bytes written to ``raw`` (uncompressed files: stored_crc)
        self.max_bytes = 0  # the size that rolls this file (0: none): what :meth:`append` reports
        self._full_at = 1 << 62  # bytes_written >= max_bytes exactly when _buffered >= this (set by _drain)
        #: Once closed, the bytes handed to the store (None where unknown): a completed upload or a
        #: closed local file holds exactly these, so the commit need not ask the store (a HEAD on S3).
        self.size: int | None = None

    def limit(self, max_bytes: int) -> LineSink:
        """Have :meth:`append` say when :attr:`bytes_written` reaches ``max_bytes`` (0: never)."""
        self.max_bytes = max_bytes
        self._set_full_at()
        return self

    def _set_full_at(self) -> None:
        # raw_pos + buffered // ratio >= max  <=>  buffered >= (max - raw_pos) * ratio (integers, ratio > 0):
        # the writer's size test, per record, as one comparison; raw_pos changes only in _drain.
        self._full_at = (self.max_bytes - self._raw_pos) * self._ratio if self.max_bytes else 1 << 62

    def append(self, line: bytes) -> bool:
        """:meth:`write_line`, and whether :attr:`bytes_written` reached :attr:`max_bytes` with it (the
        writer's per-record path: one call instead of a write and a size query)."""
        self._buf += (line, b"\n")
        buffered = self._buffered = self._buffered + len(line) + 1
        if buffered >= self.FLUSH_BYTES:
            self._drain()
            buffered = 0
        return buffered >= self._full_at

    def write_line(self, line: bytes) -> None:
        self.append(line)

    def write_lines(self, lines: list[bytes]) -> None:
        """:meth:`write_line` each of ``lines``, in one step."""
        block = b"\n".join(lines)
        self._buf += (block, b"\n")
        self._buffered += len(block) + 1
        if self._buffered >= self.FLUSH_BYTES:
            self._drain()

    def write_row(self, row) -> None:  # a parsed record: not meaningful for text
        raise InvalidInputError("text formats take raw lines")

    @property
    def stored_crc(self) -> int | None:
        """The CRC-32 of every byte handed to the file so far, when this sink encodes them itself (gzip, or
        none); None under an Arrow codec. A reader of the closed file that finds the same CRC has its lines."""
        if isinstance(self.out, _Gzip):
            return self.out.crc
        return self._crc if self.out is self.raw else None

    def _drain(self) -> None:
        if self._buf:
            block = b"".join(self._buf)
            if self.out is self.raw:
                self._crc = zlib.crc32(block, self._crc)
            self.out.write(block)
            self._raw_pos = self.raw.tell()
            self.uncompressed += self._buffered
            self._buf.clear()
            self._buffered = 0
            self._set_full_at()

    @property
    def bytes_written(self) -> int:
        """Approximate on-disk size, for size-based rolling."""
        return self._raw_pos + self._buffered // self._ratio

    def close(self) -> None:
        self._drain()
        if self.out is not self.raw:
            self.out.close()  # gzip's last block; an Arrow codec's stream closes ``raw`` too (size stays None)
        if not self.raw.closed:
            self.size = self.raw.tell()
            self.raw.close()


#: The zlib level of every gzip line file trib writes: gzip's own default. Arrow's gzip codec compresses
#: at level 9 and takes no level in its streams: about twice the CPU for 3% smaller files, which made a
#: line table's gzip the largest cost of an ingest. The benchmarks' raw baselines read it from here.
GZIP_LEVEL = 6


class _Gzip:
    """A gzip stream at :data:`GZIP_LEVEL`. zlib releases the GIL while it compresses, as Arrow does."""

    GZIP = 16 + zlib.MAX_WBITS

    def __init__(self, raw, level: int = GZIP_LEVEL):
        self.raw = raw
        self._z = zlib.compressobj(level, zlib.DEFLATED, self.GZIP)
        self.crc = 0  # of the compressed bytes written to ``raw``

    def write(self, data: bytes) -> None:
        out = self._z.compress(data)
        self.crc = zlib.crc32(out, self.crc)
        self.raw.write(out)

    def close(self) -> None:
        out = self._z.flush()
        self.crc = zlib.crc32(out, self.crc)
        self.raw.write(out)


class RowGroupEncoder:
    """Encodes full row groups off the caller's thread, for every open Parquet file.

    pyarrow cannot add rows to an open row group, so a row group is encoded only
    once it is complete; this lets the caller route (or parse) the next records
    meanwhile. Encoding and compression release the GIL. A file has at most one
    row group in flight (ordered writes without a lock), and ``max_queued``
    bounds the memory held by row groups waiting for a thread.
    """

    def __init__(self, threads: int = 2, max_queued: int = 4):
        self._pool = ThreadPoolExecutor(max(1, threads), "trib-encode")
        self._slots = threading.BoundedSemaphore(max(1, threads) + max_queued)

    def submit(self, fn) -> Future:
        self._slots.acquire()
        try:
            fut = self._pool.submit(fn)
        except BaseException:
            self._slots.release()
            raise
        fut.add_done_callback(lambda _: self._slots.release())
        return fut


@dataclass(frozen=True)
class GatheredSlice:
    """Rows ``start``..``start + count`` of a batch being reordered in the background.

    A batch whose rows go to many partitions is gathered once, sorted by
    partition (one ``take``, cheaper than one per partition), on the encoder's
    threads; each file keeps only its slice of the result.
    """

    gathered: Future  # -> pa.Table
    start: int
    count: int

    def __len__(self) -> int:
        return self.count

    def rows(self) -> pa.Table:
        return self.gathered.result().slice(self.start, self.count)


_ENCODER: RowGroupEncoder | None = None
_ENCODER_LOCK = threading.Lock()


def _forget_encoder() -> None:  # a forked child has none of the parent's threads
    global _ENCODER, _ENCODER_LOCK
    _ENCODER, _ENCODER_LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_encoder)


def shared_encoder() -> RowGroupEncoder:
    """One process-wide encoder (like pyarrow's own CPU pool): writers come and go, threads stay."""
    global _ENCODER
    with _ENCODER_LOCK:
        if _ENCODER is None:
            _ENCODER = RowGroupEncoder(max(2, os.cpu_count() or 2))
        return _ENCODER


class ParquetSink:
    """One Parquet file: rows and Arrow slices buffered into 65,536-row groups.

    The file's schema covers every field it was given (docs/parquet.md): JSON
    rows are checked on arrival by :class:`RowColumns`, Arrow tables are unified
    with the schema so far. Until the first row group is written the schema may
    still widen; after that ``write_row``/``write_table`` return False for input
    that needs a wider one, and the writer rolls to a new file.

    Arrow input split across partitions arrives as a GatheredSlice (or batch
    plus row indices), resolved only when the row group is encoded. Encoding
    runs on the shared encoder's threads, as soon as a row group is full and at
    the close, so the caller's thread only routes (or parses) records.
    """

    ROW_GROUP = 65_536
    #: Flush earlier when wide rows make a row group's worth of buffer this big.
    MAX_PENDING_BYTES = 16 << 20

    def __init__(self, raw, compression: str, encoder: RowGroupEncoder | None = None):
        self.raw = raw
        self.codec = COMPRESSIONS[compression][1] or "none"
        self.encoder = encoder
        self.writer: pq.ParquetWriter | None = None  # set once the first row group is handed to encoding
        self.schema: pa.Schema | None = None  # the file's schema so far (fixed once ``writer`` is set)
        self.size: int | None = None  # once closed: see LineSink.size
        self.columns = RowColumns()
        self._rows: list[dict] = []
        #: (table, None) whole; (table, indices) rows to take; (None, GatheredSlice)
        self._pending: list[tuple[pa.Table | None, pa.Array | GatheredSlice | None]] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self._inflight: Future | None = None
        self._inflight_bytes = 0
        self._tell = 0  # raw.tell() after the last encoded row group

    def seed(self, previous: "ParquetSink") -> None:
        """Start with the columns of the file this one replaces (a schema roll), so
        later records that lack the new field do not roll again."""
        self.columns = RowColumns(previous.columns.types)
        self.schema = previous.schema

    def write_line(self, line: bytes) -> bool:
        return self.write_row({"value": line.decode("utf-8", "replace")})

    def write_row(self, row: dict) -> bool:
        """Buffer one JSON record; SchemaConflictError if it fits no column, False
        if it needs a column this file can no longer add."""
        # Hot path: a field whose value has the column's Python type needs no
        # further thought (an integer only while a double could also hold it).
        fast, known = self.columns.fast, self.columns.types
        for k, v in row.items():
            t = type(v)
            want = fast.get(k)
            if t is want or (t is int and want is float):  # 5 in a double column is 5.0
                if t is int and not -EXACT <= v <= EXACT:
                    break
            elif v is not None or k not in known:
                break
        else:
            self._append_row(row)
            return True
        if not self.columns.admit(row, can_widen=self.writer is None):
            return False
        self._append_row(row)
        return True

    def _append_row(self, row: dict) -> None:
        self._rows.append(row)
        if len(self._rows) >= self.ROW_GROUP:
            self._drain()

    def has_empty_struct(self) -> bool:
        return any(has_empty_struct(t) for t in self.columns.types.values())

    def append_parsed(self, table: pa.Table, changed: dict) -> None:
        """Append rows whose columns :meth:`RowColumns.admit_types` admitted (``changed``: its widening)."""
        if self._rows:
            self._drain()
        if changed or self.schema is None:
            self.columns.widen(changed)
            self.schema = self.columns.arrow_schema()
        self._pending.append((table, None))
        self._pending_rows += table.num_rows
        self._pending_bytes += table.nbytes
        if self._pending_rows >= self.ROW_GROUP or self._pending_bytes >= self.MAX_PENDING_BYTES:
            self._flush(background=True)

    def write_table(self, table: pa.Table, indices: pa.Array | GatheredSlice | None = None,
                    nbytes: int | None = None) -> bool:
        """Append ``table``, or only its rows at ``indices`` (gathered at encode time),
        or a GatheredSlice of it.

        ``nbytes``: the Arrow size of the rows appended, if the caller knows it.
        False if ``table`` needs a schema this file can no longer take.
        """
        if self._rows:
            self._drain()
        rows = table.num_rows if indices is None else len(indices)
        if nbytes is None:
            nbytes = table.nbytes * rows // max(1, table.num_rows)
        return self._add(table, indices, rows, nbytes)

    def _add(self, table: pa.Table, indices, rows: int, nbytes: int) -> bool:
        schema = table.schema
        if self.schema is None:
            self.schema = schema
        elif schema is not self.schema and not schema.equals(self.schema):
            try:
                unified = pa.unify_schemas([self.schema, schema], promote_options="permissive")
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
                raise InvalidInputError(f"record schema changed within a file: {e}") from None
            if not unified.equals(self.schema):
                if self.writer is not None:
                    return False
                self.schema = unified
        # A slice's source batch is not kept: the gathered copy holds its rows.
        self._pending.append((None, indices) if isinstance(indices, GatheredSlice) else (table, indices))
        self._pending_rows += rows
        self._pending_bytes += nbytes
        if self._pending_rows >= self.ROW_GROUP or self._pending_bytes >= self.MAX_PENDING_BYTES:
            self._flush(background=True)
        return True

    def _drain(self) -> None:
        if self._rows:
            table = self.columns.to_table(self._rows)
            self._rows = []
            if not self._add(table, None, table.num_rows, table.nbytes):  # pragma: no cover - admit() forbids it
                raise AssertionError("rows admitted to a file do not fit its schema")

    def _flush(self, background: bool) -> None:
        if not self._pending:
            return
        parts, schema, nbytes = self._pending, self.schema, self._pending_bytes
        self._pending = []
        self._pending_rows = self._pending_bytes = 0
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.raw, schema, compression=self.codec)
        self._wait()  # one row group in flight per file: they land in order
        if background and self.encoder is not None:
            self._inflight_bytes = nbytes
            self._inflight = self.encoder.submit(lambda: self._encode(parts, schema))
        else:
            self._encode(parts, schema)

    def _encode(self, parts: list, schema: pa.Schema) -> None:
        try:
            tables = [conform(t if i is None else t.take(i) if t is not None else i.rows(), schema)
                      for t, i in parts]
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
            raise InvalidInputError(f"a batch does not convert to its file's schema: {e}") from None
        table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        assert self.writer is not None  # _flush opened it before handing the parts over
        self.writer.write_table(table, row_group_size=self.ROW_GROUP)
        self._tell = self.raw.tell()
        self._inflight_bytes = 0

    def _wait(self) -> None:
        fut = self._inflight
        if fut is not None:
            try:
                fut.result()
            finally:
                # Interrupted while waiting (a second SIGINT): the encode still runs,
                # so the next wait (abort's close) must wait for it again.
                if fut.done():
                    self._inflight = None

    @property
    def bytes_written(self) -> int:
        # Buffered and in-flight Arrow bytes count too, so size-based rolling is not late by a row group.
        return self._tell + self._inflight_bytes + self._pending_bytes

    def close(self) -> None:
        try:
            try:
                self._drain()
                # On the encoder's threads, which are sized to the CPUs: a commit
                # closes many files at once, on more threads (for uploads).
                self._flush(background=True)
            finally:
                self._wait()  # never close the stream under a row group still encoding
            if self.writer is not None:
                self.writer.close()
            if not self.raw.closed:
                self.size = self.raw.tell()  # the footer included: see LineSink.size
        finally:
            if not self.raw.closed:
                self.raw.close()


def conform(table: pa.Table, schema: pa.Schema, where: str | None = None) -> pa.Table:
    """``table`` with exactly ``schema``'s columns: absent ones null, widened ones cast.

    The cast is safe: a value the wider type cannot hold exactly fails it instead of
    changing. ``where`` names the file for that error (SchemaConflictError); without it
    pyarrow's own error propagates (the writer's encoder reports it with its record).
    """
    if table.schema.equals(schema):
        return table
    cols = []
    for field in schema:
        i = table.schema.get_field_index(field.name)
        if i < 0:
            cols.append(pa.nulls(table.num_rows, field.type))
            continue
        col = table.column(i)
        try:
            cols.append(col if col.type == field.type else col.cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
            if where is None:
                raise
            raise SchemaConflictError(f"{where}: column {field.name!r} ({col.type}) cannot become {field.type} "
                                      f"without loss, so it cannot be merged with the others: "
                                      f"{str(e).splitlines()[0]}") from None
    return pa.Table.from_arrays(cols, schema=schema)


def open_sink(raw, fmt: str, compression: str, encoder: RowGroupEncoder | None = None):
    """The sink of ``fmt`` over ``raw``. A sink that fails to open closes ``raw`` here, for every caller: a
    stream left to its destructor uploads (S3) holding the GIL, the whole process waiting on the store."""
    try:
        return ParquetSink(raw, compression, encoder) if fmt == "parquet" else LineSink(raw, compression)
    except BaseException:
        raw.close()
        raise
