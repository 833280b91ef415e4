"""Which output partitions a restate run recomputes, and which input partitions each one needs.

A restate job (``[output] mode = "restate"``) recomputes an output partition from its complete
input whenever new input touches it. That is exact only if an output partition's records can
come from a known set of input partitions: the input must be laid out by event time (a trib
table, whose writers route each record by its time, or a plain directory whose ``layout`` the
job declares), and the SQL must keep each record's time in the output's time column. Then an
output partition P (``[start, end)`` in the output's zone) is fed exactly by the input
partitions whose ``[start, end)`` intersects P's, whatever the two layouts' periods and zones
(an hourly input in UTC feeds a daily output in Europe/Berlin: 24 or 25 hours a day, two of
them split across days are read by both days).

The mapping is computed by stepping through real partition boundaries (each partition's
``end`` is the next one's ``start``), never by dividing periods, so DST days and months of
any length hold. The rows the SQL writes are checked against it at run time
(:func:`check_rows`): a row outside the partitions the run restates means the input or the
SQL does not keep event time, and the run commits nothing.
"""

from __future__ import annotations

import uuid

from typing import Iterable, Mapping

from tributary_read.errors import InvalidInputError, StorageError
from tributary_read.table.layout import Layout, PartitionDir
from tributary_read.table.log import META_DIR
from tributary_read.table.manifest import FileEntry, RestateInput, Restatement

#: Partitions a single run may restate: beyond this a run is a backfill, and says so.
MAX_PARTITIONS = 10_000


def covering(layout: Layout, start_ms: int, end_ms: int) -> list[PartitionDir]:
    """The partitions of ``layout`` whose span intersects ``[start_ms, end_ms)``, in time order."""
    out: list[PartitionDir] = []
    t = start_ms
    while t < end_ms:
        p = layout.for_time(t)
        out.append(p)
        if len(out) > MAX_PARTITIONS:
            raise InvalidInputError(f"more than {MAX_PARTITIONS} partitions of {layout.directory!r} lie between "
                                    f"{start_ms} and {end_ms} ms: restate a shorter interval at a time")
        t = p.end_ms
    return out


def affected(output: Layout, touched: Iterable[PartitionDir]) -> dict[str, PartitionDir]:
    """The output partitions (by directory) that input partitions ``touched`` (those with new data) feed."""
    return _covering_all(output, touched)


def needed(input_layout: Layout, outputs: Iterable[PartitionDir]) -> dict[str, PartitionDir]:
    """The input partitions (by directory) that the complete input of ``outputs`` consists of."""
    return _covering_all(input_layout, outputs)


def _covering_all(layout: Layout, spans: Iterable[PartitionDir]) -> dict[str, PartitionDir]:
    out: dict[str, PartitionDir] = {}
    for s in spans:
        for p in covering(layout, s.start_ms, s.end_ms):
            out.setdefault(p.path, p)
    return dict(sorted(out.items(), key=lambda kv: kv[1].start_ms))


def check_rows(produced: Iterable[str], restated: Iterable[str]) -> None:
    """Refuse a write whose rows landed in partitions the run does not restate (nothing is committed).

    Such a row means the input's partitions do not hold records by event time, or the SQL moves a
    record's time: recomputing only the partitions new input touched would then leave that other
    partition half old, half new.
    """
    stray = sorted(set(produced) - set(restated))
    if stray:
        raise InvalidInputError(
            f"the SQL wrote rows into {named(stray)}, which no input partition this run read feeds: "
            "a restate job needs inputs laid out by event time and an output time column that keeps it; "
            "nothing was committed")


def named(directories: list[str], shown: int = 3) -> str:
    """Partition directories as a refusal names them: the first few, then how many more."""
    more = f" and {len(directories) - shown} more" if len(directories) > shown else ""
    return ", ".join(directories[:shown]) + more


def restatements(storage, run_id: str, partitions: Mapping[str, PartitionDir], files: Iterable[FileEntry],
                 causes: Mapping[str, tuple[RestateInput, ...]] | None = None, by: str | None = None
                 ) -> tuple[Restatement, ...]:
    """One :class:`Restatement` per partition the run restates, with the records its new files hold (the
    commit counts the records before, on the state it lands on) and, from ``causes`` (directory -> its
    inputs), what caused it (None: not recorded).

    A partition the recompute left without rows still gets a staging directory (its marker only): the
    swap then empties it, where leaving it alone would keep records its input no longer has.
    """
    from tributary_read.table.restate_swap import logical_dir, moves, prepare, staging_dir

    files = list(files)
    check_rows({logical_dir(f.path) for f in files}, partitions)
    after: dict[str, int] = {}
    for f in files:
        d = logical_dir(f.path)
        after[d] = after.get(d, 0) + f.records
    out = []
    moved = moves(storage, by)
    for d, p in partitions.items():
        staging = staging_dir(d, run_id)
        if d not in after:
            storage.sync_many([prepare(storage, staging)])
        out.append(Restatement(dict(p.values), d, staging, 0, after.get(d, 0),
                               None if causes is None else tuple(causes.get(d, ())), moved))
    return tuple(out)


def check_storage(storage, by: str | None = None) -> None:
    """Refuse a restate where directory readers could not see a restated partition whole, before any work.

    A store that cannot swap directories at all (S3, HDFS) moves a restated partition instead
    (:func:`~tributary_read.table.restate_swap.moves`; a job keeps it exact for Hive only, which
    :func:`tributary_read.etl.restate.check` demands). On a local table the file system is asked by
    swapping once (``_tributary/.swap-probe-…``): NFS and some FUSE mounts refuse
    ``RENAME_EXCHANGE``, which found only at the swap would leave a committed restate not swapped in.
    """
    from tributary_read.table.restate_swap import moves

    why = ("restating partitions needs a file system that swaps two directories in one step (a local Linux "
           "file system such as ext4, xfs, btrfs or tmpfs); on this store a directory reader could see a restated "
           "partition's old and new files together")
    if by == "move":
        return
    if not storage.capabilities.exchange_directories:
        if by == "swap":
            raise InvalidInputError(f"{storage.uri}: {why}: drop restate_by = \"swap\" (a restate then moves the "
                                    "partition, for Hive) or put the output on a local file system")
        return
    if (type(storage), storage.uri) in _SWAPS:  # asked once per process: a run asks at its check and at its write
        return
    probe = f"{META_DIR}/.swap-probe-{uuid.uuid4().hex[:12]}"
    a, b = f"{probe}/a", f"{probe}/b"
    try:
        storage.makedirs(a)
        storage.makedirs(b)
        storage.exchange_dirs(a, b)
    except StorageError as e:
        raise InvalidInputError(f"{storage.uri}: {why} (the file system refused: {e})") from None
    finally:
        for d in (a, b, probe):
            storage.remove_empty_dir(d)
    _SWAPS.add((type(storage), storage.uri))


#: The (storage class, table root) pairs whose file system swapped two directories when asked
#: (:func:`check_storage`).
_SWAPS: set[tuple[type, str]] = set()
