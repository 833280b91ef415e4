"""Listing a very large table on the Spark cluster: executors list, the driver collects.

The driver plans the listing exactly as a local one does
(:func:`tributary_read.read.listing.scan`: a partition range's candidate
directories, the leaves of a walk, or the top levels of a tree), then hands
the recursive listings of those directories to executors. Each executor opens
the same storage (:func:`~tributary_read.io.storage.open_storage` on the table
URI with the driver's storage options) and calls the same primitive
(``Storage.list_infos``); the raw entries come back and go through the same
collector on the driver. So visibility, layouts, ``.valid-length`` sidecars,
symbolic links and undecodable names are decided in one place, and the
:class:`~tributary_read.read.fileset.FileSet` equals the local one: only the
wall-clock ``seconds`` of its stats differ (and ``listed_dirs`` when a tree
was split deeper to spread it over the cluster).

A window listing filters on the executors: the store leaves out files outside
the window (``list_infos``'s hint) and only files travel back, so a listing of
10^7 entries for an hour's matches ships the matches. See docs/scale.md.

Listing only reads, so a failed task is simply run again by Spark (and a
speculative duplicate is harmless: ``collect`` keeps one attempt's result per
task). A failure that outlasts Spark's retries is one StorageError here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping

from tributary_read.errors import InvalidInputError, StorageError
from tributary_read.spark.failure import cause
from tributary_read.spark.ship import ship_to_executors
from tributary_read.io.storage import ENTRY_FILE, Storage, Unlisted, open_storage, resolve_options
from tributary_read.read.fileset import FileSet
from tributary_read.read.listing import Listed
from tributary_read.read.partition_filter import PartitionFilter
from tributary_read.read.window import TimeWindow
from tributary_read.table.layout import Layout

#: Tasks per core of the cluster (``defaultParallelism``): several, so that one
#: slow directory (a hot partition, a throttled prefix) does not hold a core idle.
TASKS_PER_CORE = 4
#: Concurrent listings inside one executor task on a remote store (each is a
#: network round trip); local disks list one directory at a time.
TASK_PARALLELISM = 8


@dataclass(frozen=True)
class SparkLister:
    """A :class:`~tributary_read.read.listing.DirectoryLister` that lists on Spark executors.

    Args:
        spark: the SparkSession.
        options: storage options the executors open the store with; default:
            the driver's own (explicit options plus the environment's, see
            ``resolve_options``), since executors on a cluster do not share the
            driver's environment. They travel with the tasks, as Spark's own
            ``spark.hadoop.fs.s3a.*`` keys do.
        tasks: Spark tasks per listing (default: TASKS_PER_CORE per core).
    """

    spark: Any
    options: Mapping[str, str]
    tasks: int | None = None

    @property
    def _parallelism(self) -> int:
        return max(1, int(self.spark.sparkContext.defaultParallelism))

    @property
    def spread(self) -> int:
        return self.tasks or self._parallelism * TASKS_PER_CORE

    def list_many(self, storage: Storage, rels: list[str],
                  mtime_ns: tuple[int, int] | None) -> Iterable[Listed]:
        if not rels:
            return []
        if storage.capabilities.hadoop_scheme is None:
            raise InvalidInputError(f"{storage.uri} lives in this process only: Spark executors cannot list it")
        ship_to_executors(self.spark)  # the listing tasks are trib's code (idempotent per SparkContext)
        sc = self.spark.sparkContext
        slices = min(len(rels), self.spread)
        job = functools.partial(_list_task, storage.uri, dict(self.options), storage.root, mtime_ns)
        try:
            rows = sc.parallelize(rels, slices).mapPartitions(job).collect()
        except Exception as e:  # noqa: BLE001 - py4j wraps the executor's exception in a Java one
            raise StorageError(f"cannot list {storage.uri} on Spark executors: {cause(e)}") from None
        if len(rows) != len(rels):  # never expected: a result per directory, in order
            raise StorageError(f"listing {storage.uri} on Spark executors returned {len(rows)} results "
                               f"for {len(rels)} directories")
        prefix = storage.root.rstrip("/") + "/"
        return (_unpack(row, prefix) for row in rows)


def spark_lister(spark, options: Mapping[str, str] | None = None, tasks: int | None = None) -> SparkLister:
    """The lister ``resolve(..., lister=...)`` and ``read_incremental(..., lister="spark")`` use."""
    from tributary_read.spark import require_pyspark

    require_pyspark()
    if tasks is not None and tasks < 1:
        raise InvalidInputError("tasks must be >= 1", tasks="tasks")
    return SparkLister(spark, resolve_options(options), tasks)


def list_on_executors(spark, source, *, window: TimeWindow | None = None,
                      partitions: PartitionFilter | str | None = None, options: Mapping[str, str] | None = None,
                      layout: Layout | None = None, tasks: int | None = None) -> FileSet:
    """The files whose mtime lies in ``window`` (all when None), listed on Spark executors.

    Equal to ``resolve(source, mode="mtime", window=..., partitions=...)`` (a
    raw listing: every visible file, whatever the table's tracking), bar the
    stats' timings. ``layout`` describes a plain directory, as for ``resolve``.
    """
    from tributary_read.read.resolve import Source, mtime_files

    src = Source.of(source, options, layout)
    pf = PartitionFilter.parse(partitions, src.layout) if isinstance(partitions, str) else partitions
    return mtime_files(src, window, pf, lister=spark_lister(spark, options, tasks))


# -- on the executors ------------------------------------------------------------
#: One storage per (URI, options) per Python worker: Spark reuses workers across
#: tasks, and an S3 client is worth keeping.
_OPENED: dict[tuple, Storage] = {}


def _open(uri: str, options: Mapping[str, str]) -> Storage:
    key = (uri, tuple(sorted(options.items())))
    st = _OPENED.get(key)
    if st is None:
        st = _OPENED[key] = open_storage(uri, options)
    return st


def _list_task(uri: str, options: Mapping[str, str], root: str, mtime_ns: tuple[int, int] | None,
               rels: Iterator[str]) -> Iterator[tuple]:
    """One Spark task: the recursive listing of each of its directories, packed, in order."""
    st = _open(uri, options)
    if st.root != root:  # the same URI must name the same place here, or every path would be wrong
        raise StorageError(f"{uri} opens as {st.root} on this executor, not {root} as on the driver")
    rels = list(rels)

    cut = len(root.rstrip("/")) + 1

    def one(rel: str) -> tuple:
        return _pack(*st.list_infos(rel, True, mtime_ns), cut=cut, windowed=mtime_ns is not None)

    if st.capabilities.remote and len(rels) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(TASK_PARALLELISM, len(rels))) as pool:
            yield from pool.map(one, rels)
    else:
        for rel in rels:
            yield one(rel)


def _pack(infos, unlisted: list[Unlisted], *, cut: int, windowed: bool) -> tuple:
    """Plain tuples (cheap to pickle), none of pyarrow's types, paths without the root (its length is ``cut``).

    Every entry path is ``root/rel`` (the listing's contract), so the root
    need not travel once per entry: a third to half of the bytes. A window's
    collector looks at files only (directories have no use there), so a
    windowed listing ships its files and its count of what it looked at.
    """
    seen = getattr(infos, "seen", len(infos))
    links = getattr(infos, "links", None)
    FILE = ENTRY_FILE
    if windowed:
        rows = [(i.path[cut:], FILE, i.size, i.mtime_ns) for i in infos if i.type == FILE]
    else:
        rows = [(i.path[cut:], int(i.type), i.size, i.mtime_ns) for i in infos]
    return rows, seen, None if links is None else list(links), [(u.path, u.reason, u.is_dir) for u in unlisted]


# -- back on the driver -----------------------------------------------------------
class _Shipped(list):
    """Entries as they came back, with the store's ``seen`` and ``links`` (None: the store did not say)."""

    seen = 0
    links = None


def _unpack(row: tuple, prefix: str) -> Listed:
    from tributary_read.io.localwalk import LocalEntry

    rows, seen, links, unlisted = row
    new = tuple.__new__
    out = _Shipped([new(LocalEntry, (prefix + p, t, size, m)) for p, t, size, m in rows])
    out.seen = seen
    out.links = links
    return out, [Unlisted(*u) for u in unlisted]
