"""``trib compact --spark``: each group rewritten by a Spark task, the one commit made by the driver.

A task runs the very rewrite the local engine runs
(:func:`tributary_read.write.rewrite.rewrite`: lines copied byte for byte,
Parquet row groups merged under the table's schema rules, the output read back),
so the engine changes where the work happens, never what a compacted file
holds. Each output is staged and hidden; nothing is visible or committed until
the driver's replace commit, which is the same as the local engine's.
"""

from __future__ import annotations

import functools
from typing import Any, Iterator, Mapping, Sequence

from tributary_read.errors import StorageError
from tributary_read.spark.failure import as_tributary, cause
from tributary_read.spark.ship import ship_to_executors
from tributary_read.table.config import Table
from tributary_read.table.manifest import FileEntry
from tributary_read.write.rewrite import Rewritten

#: One opened table per (URI, options) per Python worker: Spark reuses workers across tasks.
_OPENED: dict[tuple, Table] = {}


def rewrite_on_executors(spark, table: Table, groups: Sequence[tuple[int, Sequence[FileEntry], tuple[int, int]]],
                         *, writer_id: str, options: Mapping[str, str] | None = None) -> list[Rewritten]:
    """Rewrite ``groups`` ((seq, inputs, mtime span) each) on Spark executors, one task per group."""
    if not groups:
        return []
    if table.storage.capabilities.hadoop_scheme is None:
        raise StorageError(f"{table.uri} lives in this process only: Spark executors cannot rewrite it")
    ship_to_executors(spark)  # the tasks run trib's code, shipped to nodes that do not have it
    from tributary_read.io.storage import resolve_options

    job = functools.partial(_task, table.uri, resolve_options(options), writer_id)
    rows = [(seq, [f.to_json() for f in inputs], list(span)) for seq, inputs, span in groups]
    try:
        done = spark.sparkContext.parallelize(rows, len(rows)).mapPartitions(job).collect()
    except Exception as e:  # noqa: BLE001 - py4j wraps the executor's exception in a Java one
        found = as_tributary(e, f"compacting {table.uri} on Spark executors")
        if found is not None:
            raise found from None
        raise StorageError(f"compacting {table.uri} on Spark executors failed: {cause(e)}") from None
    by_seq = {seq: (FileEntry.from_json(entry), read) for seq, entry, read in done}
    return [Rewritten(by_seq[seq][0], tuple(inputs), by_seq[seq][1]) for seq, inputs, _ in groups]


def _task(uri: str, options: Mapping[str, str], writer_id: str, rows: Iterator[tuple]) -> Iterator[Any]:
    from tributary_read.write.rewrite import rewrite

    key = (uri, tuple(sorted(options.items())))
    table = _OPENED.get(key)
    if table is None:
        table = _OPENED[key] = Table.load(uri, options)
    for seq, inputs, span in rows:
        rw = rewrite(table, [FileEntry.from_json(d) for d in inputs], writer_id=writer_id, seq=seq,
                     span=(span[0], span[1]))
        yield seq, rw.entry.to_json(), rw.records_read
