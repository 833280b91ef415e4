"""Compaction's rewrite engine: small committed files of one partition, merged into one staged file.

Compaction replaces files that readers already return, so the rewrite's one duty
is that the replacement holds exactly the same records: none dropped, none
doubled. Why each rule below exists:

* **The output is always staged** (``.part-….inprogress``), whatever the table's
  protocol. Until the replace commit lands and the file is renamed, a directory
  reader (Hive, Spark on a mounted partition) sees the inputs only, never the
  inputs *and* their copy. After the commit :func:`~tributary_read.table.renames.roll_forward`
  renames it like any rename-protocol file; a crash before leaves a hidden
  file whose name ``trib clean`` recognises as an orphan.
* **Only the committed bytes are read.** A committed file's valid length is its
  entry's ``size``: manifest readers never apply a ``.valid-length`` sidecar to
  a committed file (sidecars cap files found by listing), they return the
  committed file whole at its committed size. Reads are bounded by that size,
  and a file whose size on storage differs is not the file the commit describes
  (``trib verify`` reports it as resized): it is refused before anything is
  written, since copying either length would change what readers get.
* **Records are counted three times**: each input against its commit's
  ``records`` (a commit is the truth; a file that disagrees is refused), what
  is written against what was read, and the closed output read back from
  storage against what was written (a Parquet footer's row count; a line file's
  bytes against the CRC-32 of those written, or, under a codec trib does not
  run itself, its lines decoded and counted). An output that fails any check is
  deleted, never returned.
* **Line formats** (text, jsonl, csv) are copied as decoded bytes, recompressed
  with the table's codec; a record is a line, as the writer counts them (one
  ``write_line`` per record). An input whose last line has no newline gets one,
  so it is never glued to the next file's first line.
* **csv has no header line**: trib's writers write none (ingest copies source
  lines, the Spark writer encodes each row with ``to_csv``), and trib's readers
  take every line as a record (docs/spark.md). So every line is copied, the
  first of each file too; the per-input count against ``records`` would refuse
  a file whose first line was not counted as a record.
* **Parquet** row groups are read with pyarrow and re-batched into the writer's
  row groups (:class:`~tributary_read.io.sinks.ParquetSink`). The output's
  schema is the union of its inputs' (what Spark's ``mergeSchema`` makes of
  the whole table, so the table's merged schema does not change): no column is
  dropped, a column missing from some inputs is null there, a widened type
  (int in one file, double in another) is cast with a safe cast, which refuses
  a value the wider type cannot hold exactly. Types no lossless merge exists for
  refuse the group (SchemaConflictError) before anything is written.
* A failure at any point (a full disk, a lost connection, a count that does
  not match) deletes the partial output, best effort, and raises a
  TributaryError; the inputs are only ever read.
"""

from __future__ import annotations

import posixpath
import zlib
from dataclasses import dataclass
from typing import Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from tributary_read.errors import InvalidInputError, SchemaConflictError, StorageError, VerificationError
from tributary_read.faults import crash_point
from tributary_read.io.formats import COMPRESSIONS, file_suffix
from tributary_read.io.sinks import LineSink, ParquetSink, conform, open_sink, shared_encoder
from tributary_read.io.storage import Storage
from tributary_read.table.config import Table
from tributary_read.table.maintenance import size_problem
from tributary_read.table.manifest import KIND_DATA, FileEntry
from tributary_read.table.names import WRITTEN_NAME, compacted_name
from tributary_read.table.renames import finish_renames
from tributary_read.write.names import staged_name

#: Bytes read or decoded at a time.
CHUNK = 1 << 20
#: Text-file name endings -> the codec to decode them with (as Hadoop picks it: by extension).
_CODEC_OF_SUFFIX = {suffix: codec for suffix, codec in COMPRESSIONS.values() if suffix}
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError)


@dataclass(frozen=True)
class Rewritten:
    """The staged output of one group, ready to commit in place of ``inputs``.

    ``entry.path`` is the visible name it gets after the commit, ``entry.staged``
    the hidden name it has now; ``records_read`` is what the inputs held (equal
    to ``entry.records``, or no Rewritten would exist).
    """

    entry: FileEntry
    inputs: tuple[FileEntry, ...]
    records_read: int

    @property
    def bytes_read(self) -> int:
        return sum(e.size for e in self.inputs)


def group(entries: Sequence[FileEntry], *, target_size: int, min_files: int) -> list[tuple[FileEntry, ...]]:
    """The groups of one partition's data files worth merging, each to become one file of at most ``target_size``.

    Files keep the order given (commit order), so a merged file holds its
    records in the order they were committed. A file already at or over
    ``target_size`` is left as it is (rewriting it gains nothing) and does not
    break the group around it; a group of one file is no merge and is dropped.
    Fewer than ``min_files`` candidates: nothing is worth a commit.
    """
    if isinstance(target_size, bool) or not isinstance(target_size, int) or target_size < 1:
        raise InvalidInputError(f"the target size must be a positive number of bytes, not {target_size!r}",
                                target_size="the target size")
    if isinstance(min_files, bool) or not isinstance(min_files, int) or min_files < 0:
        raise InvalidInputError(f"the minimum file count must be a number of files, not {min_files!r}",
                                min_files="the minimum file count")
    data = [e for e in entries if e.kind == KIND_DATA]
    _one_partition(data)
    candidates = [e for e in data if e.size < target_size]
    if len(candidates) < min_files:
        return []
    groups: list[tuple[FileEntry, ...]] = []
    current: list[FileEntry] = []
    size = 0
    for e in candidates:
        if current and size + e.size > target_size:
            groups.append(tuple(current))
            current, size = [], 0
        current.append(e)
        size += e.size
    if current:
        groups.append(tuple(current))
    return [g for g in groups if len(g) >= 2]


def _one_partition(entries: Sequence[FileEntry]) -> None:
    """Refuse files of several partitions, or one file twice: either would misplace or double records."""
    seen: set[str] = set()
    for e in entries:
        if e.path in seen:
            raise InvalidInputError(f"{e.path} is listed twice: its records would be written twice")
        seen.add(e.path)
    if entries:
        first = entries[0]
        where = posixpath.dirname(first.path)
        for e in entries[1:]:
            if posixpath.dirname(e.path) != where or dict(e.partition) != dict(first.partition):
                raise InvalidInputError(f"files of one partition only: {first.path} and {e.path} are in different "
                                        "partitions")


def output_names(table: Table, inputs: Sequence[FileEntry], *, writer_id: str, seq: int,
                 span: tuple[int, int] | None = None) -> tuple[str, str]:
    """(final, staged) name of the output :func:`rewrite` makes for these arguments: a caller that
    lost track of a rewrite (an executor that failed) finds its leftover by name."""
    cfg = table.config
    directory = posixpath.dirname(inputs[0].path)
    ok_seq = isinstance(seq, int) and not isinstance(seq, bool) and 0 < seq < 1_000_000
    name = f"part-{writer_id}-{seq:06d}{file_suffix(cfg.format, cfg.compression)}" if ok_seq else ""
    if not WRITTEN_NAME.match(name):
        raise InvalidInputError(f"writer id {writer_id!r} and sequence {seq!r} make no name trib's writers give "
                                "(writer id yyyyMMddHHmmss-<8 hex>, sequence 1..999999): `trib clean` could never "
                                "remove the output if it were orphaned")
    if span is not None:  # the inputs' mtimes, which mtime readers go by (table/names.py)
        name = compacted_name(name, *span)
    path = posixpath.join(directory, name) if directory else name
    return path, staged_name(path)


def rewrite(table: Table, group: Sequence[FileEntry], *, writer_id: str, seq: int = 1,
            verify: bool = True, span: tuple[int, int] | None = None) -> Rewritten:
    """Write the records of ``group`` (committed data files of one partition) into one staged file.

    The output is named like the writer's files, ``part-<writer_id>-<seq>``, in
    the inputs' directory, and stays hidden until the caller commits
    ``Rewritten.entry`` and renames it (roll_forward). ``writer_id`` has the
    writer's shape (:func:`~tributary_read.write.writer.new_writer_id`) so that
    ``trib clean`` recognises an orphaned output; ``seq`` tells apart the
    outputs of one compaction. ``verify``: read the closed output back and
    count its records (a Parquet footer; a line file decoded whole). ``span``: the
    inputs' mtime span, which the output's name then carries.

    Raises VerificationError when an input does not match its commit (missing,
    resized, another record count, undecodable), SchemaConflictError when
    Parquet inputs have no lossless common schema, StorageError when the store
    fails (a full disk: ENOSPC); the partial output is deleted first.
    """
    inputs = tuple(group)
    if not inputs:
        raise InvalidInputError("nothing to rewrite: the group is empty")
    for e in inputs:
        if e.kind != KIND_DATA:
            raise InvalidInputError(f"{e.path} is a {e.kind} file, not data: only data files are compacted")
    _one_partition(inputs)
    cfg = table.config
    path, staged = output_names(table, inputs, writer_id=writer_id, seq=seq, span=span)
    st = table.storage
    if any(i is not None for i in st.stat_many([path, staged])):
        raise InvalidInputError(f"{st.uri}/{path} (or its staged name) exists already: pick another writer id "
                                "or sequence number; nothing was written")
    where = _locate(table, inputs)
    schema, files = _parquet_schema(st, inputs, where) if cfg.format == "parquet" else (None, [])
    out = _Output(st, staged, cfg.format, cfg.compression)
    try:
        if schema is not None:
            read, written = _copy_parquet(st, inputs, where, files, schema, out)
        else:
            read, written = _copy_lines(st, inputs, where, out)
        out.close()
        if read != written:  # pragma: no cover - a bug in the copy, never a property of the data
            raise VerificationError(f"rewrite of {len(inputs)} files into {st.uri}/{staged} read {read} records "
                                    f"but wrote {written}: nothing to commit")
        size = out.finish()
        if verify:
            _check_output(st, staged, path, size, written, schema,
                          out.sink.stored_crc if isinstance(out.sink, LineSink) else None)
    except BaseException:
        out.discard()
        raise
    crash_point("compact.after_rewrite")  # the output closed and durable, hidden, not committed
    entry = FileEntry(path, size, written, dict(inputs[0].partition), staged, KIND_DATA)
    return Rewritten(entry, inputs, read)


def _locate(table: Table, inputs: Sequence[FileEntry]) -> list[str]:
    """Where each input's committed bytes are now, checked against its commit's size.

    A rename-protocol file whose commit landed but whose rename did not is
    rolled forward first, as every reader does (or read at its staged name on
    a store that refuses the rename).
    """
    st = table.storage
    left = finish_renames(table, inputs)
    where = [left.get(e.path, e.path) for e in inputs]
    problems = []
    for e, rel, info in zip(inputs, where, st.stat_many(where)):
        wrong = size_problem(rel, e.size, info)  # verify's own comparison
        if wrong is not None:
            problems.append(f"{rel} is missing" if wrong.problem == "missing"
                            else f"{rel} holds {wrong.actual_size} bytes, its commit says {e.size}")
    if problems:
        raise VerificationError(f"committed files of {st.uri} do not match the log ({'; '.join(problems)}): "
                                "nothing was rewritten; run `trib verify`")
    return where


class _Output:
    """The staged output file: its sink, and its removal when the rewrite fails."""

    def __init__(self, storage: Storage, staged: str, fmt: str, compression: str):
        self.storage, self.staged = storage, staged
        raw = storage.open_output(staged)
        self.sink: LineSink | ParquetSink = open_sink(raw, fmt, compression,
                                                      shared_encoder() if fmt == "parquet" else None)
        self.closed = False

    def error(self, e: Exception) -> StorageError:
        return self.storage._wrap("cannot write", self.staged, e)

    def close(self) -> None:
        self.closed = True  # a failed close is not retried: discard() only removes the file
        try:
            self.sink.close()
        except (OSError, pa.ArrowException) as e:  # the last bytes or the upload failed (ENOSPC, EFBIG)
            raise self.error(e) from e

    def finish(self) -> int:
        """Make the closed file durable (as a commit needs) and return its size."""
        st = self.storage
        try:
            st.sync(self.staged)
        except OSError as e:
            raise st._wrap("cannot sync", self.staged, e) from e
        info = st.info(self.staged)
        if info is None:
            raise StorageError(f"{st.uri}/{self.staged} is gone right after it was written: nothing to commit")
        return info.size

    def discard(self) -> None:
        """Best effort: the file was never committed, so deleting it is always safe; a leftover is an orphan."""
        if not self.closed:
            try:
                self.sink.close()
            except Exception:  # noqa: BLE001 - the file is being discarded anyway
                pass
        try:
            self.storage.delete(self.staged)
        except Exception:  # noqa: BLE001 - a hidden orphan that `trib clean` removes
            pass


def _read_committed(st: Storage, rel: str, size: int) -> bytes:
    """The first ``size`` bytes of ``rel``: exactly its committed bytes, or VerificationError."""
    f = st.open_input(rel)
    chunks: list[bytes] = []
    got = 0
    try:
        while got < size:
            b = f.read(min(CHUNK * 8, size - got))
            if not b:
                break
            chunks.append(bytes(b))
            got += len(b)
        more = bool(f.read(1))
    except (OSError, pa.ArrowException) as e:
        raise st._wrap("cannot read", rel, e) from e
    finally:
        f.close()
    if got != size or more:
        raise VerificationError(f"{st.uri}/{rel} changed while it was read ({'more' if more else got} bytes, its "
                                f"commit says {size}): nothing was rewritten; run `trib verify`")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


# -- line formats ----------------------------------------------------------------------------------
def _codec(rel: str) -> str | None:
    for suffix, codec in _CODEC_OF_SUFFIX.items():
        if rel.endswith(suffix):
            return codec
    return None


def _decoded(st: Storage, rel: str, data: bytes, name: str | None = None) -> Iterator[bytes]:
    """``data`` (the bytes of line file ``rel``) decompressed by the extension of ``name`` (default ``rel``;
    a staged name ends in ``.inprogress``), in chunks."""
    codec = _codec(name or rel)
    try:
        stream = pa.CompressedInputStream(pa.BufferReader(data), codec) if codec else pa.BufferReader(data)
        while True:
            chunk = stream.read(CHUNK)
            if not chunk:
                return
            yield bytes(chunk)
    except (OSError, pa.ArrowException) as e:  # truncated or corrupt: not the bytes that were committed
        raise VerificationError(f"{st.uri}/{rel} cannot be decoded as {codec or 'plain text'}: "
                                f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None


def _copy_lines(st: Storage, inputs: Sequence[FileEntry], where: Sequence[str], out: _Output) -> tuple[int, int]:
    """Every line of every input into ``out``; returns (records read, records written).

    A chunk is handed to the sink up to its last newline as one ``write_line``
    (which adds that newline back): byte for byte the lines, one call per
    chunk instead of per line. The bytes after it wait for the next chunk; at
    the end of an input they are its last line, which had no newline and gets
    one here.
    """
    sink = out.sink
    read = written = 0
    for e, rel in zip(inputs, where):
        lines = 0
        carry: list[bytes] = []
        for chunk in _decoded(st, rel, _read_committed(st, rel, e.size)):
            cut = chunk.rfind(b"\n")
            if cut < 0:
                carry.append(chunk)
                continue
            head = b"".join([*carry, chunk[:cut]]) if carry else chunk[:cut]
            carry = [chunk[cut + 1:]] if cut + 1 < len(chunk) else []
            n = head.count(b"\n") + 1
            try:
                sink.write_line(head)
            except (OSError, pa.ArrowException) as err:
                raise out.error(err) from err
            lines += n
            written += n
        if carry:  # a last line without a newline: a record of its own, ended here
            try:
                sink.write_line(b"".join(carry))
            except (OSError, pa.ArrowException) as err:
                raise out.error(err) from err
            lines += 1
            written += 1
        if lines != e.records:
            raise VerificationError(f"{st.uri}/{rel} holds {lines} lines, its commit says {e.records} records "
                                    "(records spanning lines, or not the committed file): nothing was rewritten")
        read += lines
    return read, written


# -- Parquet ------------------------------------------------------------------------------------------
def _parquet_schema(st: Storage, inputs: Sequence[FileEntry], where: Sequence[str]
                    ) -> tuple[pa.Schema, list[pq.ParquetFile]]:
    """The inputs' merged schema, from their footers, before any output exists; also checks their row counts.

    Each input is read once, exactly its committed bytes, and kept open for the copy: a group
    holds at most the target size, and a second read of 720 footers was most of a compaction's
    own cost (benchmarks/bench_compact.py).
    """
    schemas = []
    files = []
    for e, rel in zip(inputs, where):
        data = _read_committed(st, rel, e.size)
        try:
            pf = pq.ParquetFile(pa.BufferReader(data))
            schema, rows = pf.schema_arrow, pf.metadata.num_rows
        except (OSError, pa.ArrowException) as err:
            raise VerificationError(f"{st.uri}/{rel} is not a readable Parquet file: "
                                    f"{str(err).splitlines()[0] if str(err) else type(err).__name__}") from None
        files.append(pf)
        if rows != e.records:
            raise VerificationError(f"{st.uri}/{rel} holds {rows} rows, its commit says {e.records} records: "
                                    "nothing was rewritten; run `trib verify`")
        schemas.append(schema)
    return merged_schema(schemas, where), files


def merged_schema(schemas: Sequence[pa.Schema], names: Sequence[str] = ()) -> pa.Schema:
    """One schema that holds every row of files with ``schemas``, in first-seen column order.

    pyarrow's permissive unification (the one :class:`ParquetSink` uses within
    a file) gives the types; nullability is then loosened wherever the inputs
    disagree, since a column one file lacks is null in that file's rows.
    """
    try:
        merged = pa.unify_schemas(list(schemas), promote_options="permissive")
    except _ARROW_ERRORS as e:
        which = f" ({', '.join(names)})" if names else ""
        raise SchemaConflictError(f"the Parquet files{which} have no common schema, so they cannot be merged into "
                                  f"one file: {str(e).splitlines()[0]}") from None
    fields = []
    for field in merged:
        same = all(field.name in s.names and s.field(field.name).equals(field) for s in schemas)
        fields.append(field if same else pa.field(field.name, _loosen(field.type), True, field.metadata))
    # Schema-level metadata may describe the columns (Spark's and pandas' keys do): kept only when every
    # input carries the same, else the first file's would misdescribe a file holding the others' columns.
    meta = schemas[0].metadata if all(s.metadata == schemas[0].metadata for s in schemas) else None
    return pa.schema(fields, meta)


def _loosen(t: pa.DataType) -> pa.DataType:
    """``t`` with every nested field nullable (the fields one input lacks are null in its rows)."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _loosen(f.type), True, f.metadata) for f in t])
    if pa.types.is_large_list(t):
        return pa.large_list(pa.field(t.value_field.name, _loosen(t.value_type), True))
    if pa.types.is_list(t):
        return pa.list_(pa.field(t.value_field.name, _loosen(t.value_type), True))
    return t


def _copy_parquet(st: Storage, inputs: Sequence[FileEntry], where: Sequence[str], files: Sequence[pq.ParquetFile],
                  schema: pa.Schema, out: _Output) -> tuple[int, int]:
    """Every row group of every input into ``out`` (re-batched into the sink's row groups)."""
    sink = out.sink
    assert isinstance(sink, ParquetSink)  # the table's format is Parquet
    read = written = 0
    for e, rel, pf in zip(inputs, where, files):
        try:
            groups: Iterator[pa.Table] = (pf.read_row_group(i) for i in range(pf.num_row_groups))
            rows = 0
            for t in groups:
                t = conform(t, schema, f"{st.uri}/{rel}")
                try:
                    sink.write_table(t)
                except (OSError, pa.ArrowException) as err:
                    raise out.error(err) from err
                rows += t.num_rows
                written += t.num_rows
        except (OSError, pa.ArrowException) as err:  # reading the input, not writing (wrapped above)
            raise VerificationError(f"{st.uri}/{rel} cannot be read as Parquet: "
                                    f"{str(err).splitlines()[0] if str(err) else type(err).__name__}") from None
        if rows != e.records:
            raise VerificationError(f"{st.uri}/{rel} yielded {rows} rows, its commit says {e.records} records: "
                                    "nothing was rewritten")
        read += rows
    if not written:  # no rows at all: still a valid Parquet file, with the schema
        try:
            sink.write_table(schema.empty_table())
        except (OSError, pa.ArrowException) as err:
            raise out.error(err) from err
    return read, written


# -- reading the output back ----------------------------------------------------------------------------
def _check_output(st: Storage, staged: str, path: str, size: int, records: int,
                  schema: pa.Schema | None, crc: int | None = None) -> None:
    """Count the records of the closed output as a reader will find them; a store that lost or changed bytes
    fails here instead of in the commit's readers.

    ``crc``: the CRC-32 of the bytes the line sink handed to the store. The bytes read back with that CRC
    are the ones written, which hold exactly the lines counted on their way in: the same fact as decoding
    the output again and counting its lines, for a read of the compressed bytes only."""
    if schema is not None:
        f = st.open_input(staged)
        try:
            pf = pq.ParquetFile(f)
            got, names = pf.metadata.num_rows, pf.schema_arrow.names
        except (OSError, pa.ArrowException) as e:
            raise StorageError(f"{st.uri}/{staged} does not read back as Parquet: {e}") from None
        finally:
            f.close()
        if got != records or names != schema.names:
            raise StorageError(f"{st.uri}/{staged} reads back with {got} rows and columns {names}; "
                               f"{records} rows and {schema.names} were written: nothing to commit")
        return
    try:
        data = _read_committed(st, staged, size)
    except VerificationError as e:
        raise StorageError(str(e)) from None
    if crc is not None:
        if zlib.crc32(data) != crc:
            raise StorageError(f"{st.uri}/{staged} reads back with other bytes than were written (CRC-32 "
                               f"{zlib.crc32(data):08x}, written {crc:08x}): nothing to commit")
        return
    got, last = 0, b"\n"
    try:
        for chunk in _decoded(st, staged, data, path):
            got += chunk.count(b"\n")
            last = chunk[-1:]
    except VerificationError as e:
        raise StorageError(f"the output does not read back: {e}") from None
    if got != records or last != b"\n":
        raise StorageError(f"{st.uri}/{staged} reads back with {got} lines; {records} were written: "
                           "nothing to commit")
