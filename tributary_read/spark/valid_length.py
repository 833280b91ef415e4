"""Reading files only up to their valid length, on Spark's executors.

Flink's BucketingSink may leave bytes past a checkpoint in a file and record
the valid length in a ``_NAME.valid-length`` sidecar (seed 001): a reader must
never see those bytes. Spark's file sources cannot cap a file, so these files
are read here, through trib's own storage layer, on the executors: the first
``valid_length`` bytes, decompressed by the file's extension as Hadoop would,
split into lines as Hadoop's LineReader splits them (``\\n``, ``\\r\\n``, ``\\r``).

A file that grew after it was delivered is read here too, as a byte range
``[offset, valid_length)`` (tributary_read.read.growth): the plan put the
range's start after a line break, or at a new gzip member, so the range is
decoded alone; a compressed range must then be whole members, never a
member still being written.

Nothing here imports pyspark: Spark pickles :func:`partition_lines` by
reference and each executor's Python imports this module.
"""

from __future__ import annotations

import zlib
from typing import Iterable, Iterator, Mapping

from tributary_read.errors import InvalidInputError, StorageError
from tributary_read.io.formats import COMPRESSIONS

_READ_CHUNK = 8 << 20


def read_prefix(storage, rel: str, length: int, offset: int = 0) -> bytes:
    """Bytes ``[offset, length)`` of ``rel``; a shorter file was cut since it was resolved: an error."""
    chunks: list[bytes] = []
    got = offset
    f = storage.open_input(rel)
    try:
        if offset:
            f.seek(offset)
        while got < length:
            chunk = f.read(min(_READ_CHUNK, length - got))
            if not chunk:
                break
            chunks.append(bytes(chunk))
            got += len(chunk)
    finally:
        f.close()
    if got < length:
        raise StorageError(f"{storage.uri}/{rel} holds {got} bytes, fewer than its valid length {length}: "
                           "it was truncated after it was resolved")
    return b"".join(chunks)


def _gunzip(data: bytes, whole: bool = False) -> bytes:
    """Every gzip member in ``data``; a member cut at the valid length yields what it holds so far.

    A writer that flushes at each checkpoint (what makes a valid length
    meaningful for a compressed stream) leaves whole deflate blocks before the
    cut, which zlib decodes without the member's trailer. ``whole``: a range
    of a grown file, whose last member may be one still being written: a cut
    one is an error, not a short answer.
    """
    out: list[bytes] = []
    while data:
        d = zlib.decompressobj(wbits=31)
        try:
            out.append(d.decompress(data))
        except zlib.error as e:
            raise InvalidInputError(f"gzip data is corrupt before its valid length: {e}") from None
        if not d.eof:
            if whole:
                raise InvalidInputError("the range of a grown gzip file ends inside a member (one still being "
                                        "written?): it cannot be read exactly; plan it again later")
            break
        data = d.unused_data
    return b"".join(out)


def _unzstd(data: bytes, name: str) -> bytes:
    import pyarrow as pa

    try:
        return pa.CompressedInputStream(pa.BufferReader(data), "zstd").read()
    except (OSError, pa.ArrowException) as e:
        # pyarrow cannot hand out what a cut frame decodes to, and a partial
        # answer would be silently short: refuse instead.
        raise InvalidInputError(
            f"{name}: its valid length cuts a zstd frame ({e}); only whole zstd frames can be read "
            "up to a valid length") from None


def decode(data: bytes, name: str, whole: bool = False) -> bytes:
    """Decompress by extension, as Hadoop's codec factory does (``.gz``, ``.zst``); ``whole``: see :func:`_gunzip`."""
    if name.endswith(COMPRESSIONS["gzip"][0]):
        return _gunzip(data, whole)
    if name.endswith(COMPRESSIONS["zstd"][0]):
        return _unzstd(data, name)
    return data


def capped_lines(storage, rel: str, length: int, *, skip_lines: int = 0, offset: int = 0) -> list[str]:
    """The lines of ``rel`` in bytes ``[offset, length)``, decoded as UTF-8 (bad bytes replaced, as Spark does).

    A range from an offset is what a file gained (its header lines, if any, were delivered before).
    """
    lines = decode(read_prefix(storage, rel, length, offset), rel, whole=offset > 0).splitlines()
    return [line.decode("utf-8", "replace") for line in lines[0 if offset else skip_lines:]]


def partition_lines(root: str, storage_options: Mapping[str, str], skip_lines: int,
                    items: Iterable[tuple[str, int, str, int]]) -> Iterator[tuple[str, str]]:
    """``(line, path)`` for every line of a partition's files ``(rel, valid_length, path, offset)``.

    Runs on an executor: the storage is opened once per partition, with the
    options the driver passed plus the executor's own environment.
    """
    from tributary_read.io.storage import open_storage

    storage = open_storage(root, storage_options)
    for rel, length, path, offset in items:
        for line in capped_lines(storage, rel, length, skip_lines=skip_lines, offset=offset):
            yield line, path


class ArrowLines:
    """:func:`partition_lines` as a ``mapInArrow`` task (Spark Connect has no RDDs): rows ``(rel, length,
    path, offset)`` in, record batches ``(value, path)`` out. A plain picklable object, like the write task."""

    BATCH = 8192

    def __init__(self, root: str, storage_options: Mapping[str, str], skip_lines: int, path_column: str):
        self.root, self.storage_options, self.skip_lines = root, dict(storage_options), skip_lines
        self.names = ["value", path_column]

    def __call__(self, batches: Iterable) -> Iterator:
        import pyarrow as pa

        items = [(r["rel"], r["length"], r["path"], r["offset"]) for b in batches for r in b.to_pylist()]
        values: list[str] = []
        paths: list[str] = []
        for line, path in partition_lines(self.root, self.storage_options, self.skip_lines, items):
            values.append(line)
            paths.append(path)
            if len(values) >= self.BATCH:
                yield pa.RecordBatch.from_arrays([pa.array(values, pa.string()), pa.array(paths, pa.string())],
                                                 self.names)
                values, paths = [], []
        if values:
            yield pa.RecordBatch.from_arrays([pa.array(values, pa.string()), pa.array(paths, pa.string())],
                                             self.names)
