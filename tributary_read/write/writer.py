"""Partitioned, rolling file writer: one open file per partition per writer.

Files are written at their final name (``direct``) or under a hidden staged
name (``rename``); either way nothing is visible to manifest readers until
:meth:`TableWriter.commit` lands a manifest that lists them.
"""

from __future__ import annotations

import base64
import bisect
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa

from tributary_read.errors import BadRecordError, InvalidInputError
from tributary_read.faults import crash_point
from tributary_read.io.formats import file_suffix
from tributary_read.io.sinks import GatheredSlice, LineSink, ParquetSink, open_sink, shared_encoder
from tributary_read.table.layout import PartitionCache, PartitionDir
from tributary_read.table.manifest import DEAD_LETTER_DIR, KIND_DEAD_LETTER, Commit, FileEntry, Transaction
from tributary_read.table.config import Protocol, RollPolicy, Table
from tributary_read.table.renames import roll_forward
from tributary_read.table.timeunit import TimeUnit, epoch_ms
from tributary_read.write.names import new_writer_id, staged_name


@dataclass
class _OpenFile:
    path: str  # visible, final name
    write_path: str  # where bytes go now (== path for direct)
    sink: LineSink | ParquetSink
    partition: dict
    kind: str = "data"
    records: int = 0
    last_write: float = field(default_factory=time.monotonic)
    key: str = ""  # the partition directory: this file's key in TableWriter._open
    #: A line file's LineSink.append (limited to the roll size): write()'s per-record call; None for Parquet.
    append: Callable[[bytes], bool] | None = None


class TableWriter:
    """Writes records into a table's partitions and commits them atomically.

    Args:
        table: the target table.
        protocol: ``direct`` or ``rename``; defaults to the table's (:meth:`Table.protocol_for`).
        roll: overrides the table's roll policy.
        writer_id: part of every file name; unique per writer instance.
        close_threads: files closed concurrently at a commit (encode, upload); flush() syncs them together.
        restate_run: a restate's run id (``[output] mode = "restate"``): each file is written in its
            partition's staging directory for that run (table/restate_swap.py), whatever the protocol,
            and reaches its final name only with the whole partition, when the committed restate is swapped in;
            or, where the restate moves the partition (``restate_by``, :func:`~tributary_read.table.restate_swap.moves`),
            is committed there and stays.
    """

    def __init__(self, table: Table, protocol: Protocol | str | None = None, roll: RollPolicy | None = None,
                 writer_id: str | None = None, clock: Callable[[], float] = time.monotonic,
                 close_threads: int = 8, restate_run: str | None = None, restate_by: str | None = None):
        self.table = table
        self.restate_run, self.restate_by = restate_run, restate_by
        self._markers: dict[str, str] = {}  # restate: staging directory -> its marker, made with its first file
        self._markers_synced = 0
        self.storage = table.storage
        self.protocol = table.protocol_for(protocol)
        self.roll = roll or table.config.roll
        self.writer_id = writer_id or new_writer_id()
        self.clock = clock
        self._partition_of = PartitionCache(table.layout)
        self._suffix = file_suffix(table.config.format, table.config.compression)
        self._open: dict[str, _OpenFile] = {}
        # Hot-path memo for write(): UTC minute (ts_ms // 60_000) -> open file of its
        # partition. Only minutes that lie wholly in one partition are memoised, and
        # the memo is dropped whenever a file closes, so it never outlives a file.
        self._file_of_minute: dict[int, _OpenFile] = {}
        # write_table()'s memo: minute m -> partition of m * 60_000 (a pure function of m).
        self._part_of_minute: dict[int, PartitionDir] = {}
        self._closed: list[tuple[FileEntry, str]] = []  # (entry, where it was written)
        self._synced = 0  # how many of _closed flush() has made durable
        self._closing: list[_OpenFile] = []  # being closed; abort() deletes them if that fails
        self.close_threads = max(1, close_threads)
        self._seq = 0
        self._dead: _OpenFile | None = None
        self._last_idle_check = clock()

    # -- writing -----------------------------------------------------------
    def partition_for(self, ts_ms: int) -> PartitionDir:
        return self._partition_of(ts_ms)

    def write(self, record: bytes | dict, ts_ms: int) -> None:
        """Append one record (a line, or a row dict for Parquet) at event time ``ts_ms``.

        A time no partition can hold raises TimeOutOfRangeError (from the layout)
        before anything is written or opened, so the caller may dead-letter the
        record and go on. So does a Parquet row with a value its file's column
        cannot hold (SchemaConflictError; rules in docs/parquet.md).
        """
        # Per-record hot path: one memo lookup instead of partition + file lookups.
        f = self._file_of_minute.get(ts_ms // 60_000)
        if f is None:
            f = self._file_for(ts_ms)
        roll = self.roll
        try:
            if f.append is not None and record.__class__ is bytes:
                # A line file never refuses a line and tells in the same call whether it reached
                # roll.max_bytes (the same test as bytes_written below, done without the query).
                full = f.append(record)
            else:
                if (f.sink.write_row(record) if isinstance(record, dict) else f.sink.write_line(record)) is False:
                    f = self._roll_schema(f, ts_ms)
                    if isinstance(record, dict):
                        f.sink.write_row(record)
                    else:
                        f.sink.write_line(record)
                full = bool(roll.max_bytes) and f.sink.bytes_written >= roll.max_bytes
        except (OSError, pa.ArrowException) as e:  # a full disk, EFBIG, a lost connection
            raise self.storage._wrap("cannot write", f.write_path, e) from e
        f.records += 1
        f.last_write = now = self.clock()
        if full or (roll.max_records and f.records >= roll.max_records):
            self._close(f.key)
        if now - self._last_idle_check >= 1.0:
            self.roll_idle(now)

    def _roll_schema(self, f: _OpenFile, ts_ms: int) -> _OpenFile:
        """Go on in a new file: ``f``'s sink refused a record that needs a column
        its written row groups cannot add. The new file starts with ``f``'s
        columns, so later records without the new field do not roll again."""
        self._close(f.key)
        new = self._file_for(ts_ms)
        assert isinstance(new.sink, ParquetSink) and isinstance(f.sink, ParquetSink)  # a line sink never refuses
        new.sink.seed(f.sink)
        return new

    def _file_for(self, ts_ms: int) -> _OpenFile:
        """The open file for ``ts_ms``'s partition, opened if needed (write()'s slow path)."""
        part = self._partition_of(ts_ms)
        f = self._open.get(part.path)
        if f is None:
            f = self._open[part.path] = self._new_file(part)
        minute = ts_ms // 60_000
        start = minute * 60_000
        # Memoise only when the whole minute is in this partition (not so across an
        # offset change that is not on a minute boundary).
        try:
            whole = (self._partition_of(start).path == part.path
                     and self._partition_of(start + 59_999).path == part.path)
        except (ValueError, OverflowError, OSError):
            whole = False
        if whole:
            if len(self._file_of_minute) >= 100_000:
                self._file_of_minute.clear()
            self._file_of_minute[minute] = f
        return f

    def write_table(self, table: pa.Table, time_column: str, time_unit: TimeUnit | str = TimeUnit.MS) -> None:
        """Append an Arrow table (Parquet tables), routing rows by ``time_column``: a timestamp, or
        integers of ``time_unit`` (unchecked here: the front ends check plausibility)."""
        if self.table.config.format != "parquet":  # before any file opens: a line file has no columns
            raise InvalidInputError(f"write_table takes Parquet tables; this table's format is "
                                    f"{self.table.config.format}: write its records with write()")
        import pyarrow.compute as pc  # here, not at the top: its import is a third of a whole compaction's CPU

        if time_column not in table.column_names:
            raise BadRecordError(f"time column {time_column!r} is not in the batch (columns: "
                                 f"{', '.join(table.column_names)})")
        ts = epoch_ms(table.column(time_column), time_unit)
        if ts.null_count:
            raise BadRecordError(f"time column {time_column!r} has {ts.null_count} null values")
        # Integer division truncates toward zero; shift negatives (before 1970) so
        # it floors, or -1 ms would land in 1970-01-01T00:00 instead of 1969.
        if len(ts) and pc.min(ts).as_py() < 0:
            ts = pc.if_else(pc.less(ts, 0), pc.subtract(ts, 59_999), ts)
        minutes = pc.divide(ts, 60_000)
        uniq = pc.unique(minutes).sort()
        # Partitions in time order, and each distinct minute's partition. A
        # partition is the interval [start_ms, end_ms), so the sorted minutes
        # that lie wholly in it form one run, found by bisection: a day of
        # random times costs 24 partition lookups, not 1,440.
        slot: dict[str, int] = {}
        parts: list[PartitionDir] = []
        slot_of_minute: list[int] = []
        memo = self._part_of_minute
        ms = uniq.to_pylist()
        k = 0
        while k < len(ms):
            m = ms[k]
            part = memo.get(m)
            if part is None:
                if len(memo) >= 100_000:
                    memo.clear()
                part = memo[m] = self._partition_of(m * 60_000)
            # The last minute wholly inside; below m only if m itself straddles the end.
            end = max(k + 1, bisect.bisect_right(ms, part.end_ms // 60_000 - 1, k + 1))
            i = slot.get(part.path)
            if i is None:
                i = slot[part.path] = len(parts)
                parts.append(part)
            slot_of_minute += [i] * (end - k)
            k = end
        groups: list[tuple[pa.Table, GatheredSlice | None, int]]  # (rows, their gather, count) per partition
        if len(parts) == 1:
            groups = [(table, None, table.num_rows)]
        elif parts:
            # One pass instead of one is_in + filter per partition: a partition slot
            # per row and a stable sort by slot (rows keep their order within a
            # partition), then one gather of the batch in that order, on the
            # encoder's threads while this one routes the next batch; each file
            # takes its slice of the result when its row group is encoded.
            row_slot = pc.take(pa.array(slot_of_minute, pa.int32()), pc.index_in(minutes, value_set=uniq))
            vc = pc.value_counts(row_slot)
            counts = dict(zip(vc.field("values").to_pylist(), vc.field("counts").to_pylist()))
            n = len(row_slot)
            ordered = not pc.any(pc.less(row_slot.slice(1), row_slot.slice(0, n - 1))).as_py()
            if not ordered:
                order = pc.sort_indices(row_slot)
                gathered = shared_encoder().submit(lambda t=table, o=order: t.take(o))
            groups, start = [], 0
            for i in range(len(parts)):
                if ordered:  # time-ordered input: each partition is one run, no copy
                    groups.append((table.slice(start, counts[i]), None, counts[i]))
                else:
                    groups.append((table, GatheredSlice(gathered, start, counts[i]), counts[i]))
                start += counts[i]
        else:
            groups = []
        row_bytes = table.nbytes / max(1, table.num_rows)
        for part, (rows, indices, count) in zip(parts, groups):
            path = part.path
            f = self._open.get(path) or self._open.setdefault(path, self._new_file(part))
            assert isinstance(f.sink, ParquetSink)  # the format was checked above
            try:
                if f.sink.write_table(rows, indices, int(row_bytes * count)) is False:
                    # The batch adds a column (or widens one) after row groups were written.
                    old = f
                    self._close(path)
                    f = self._open[path] = self._new_file(part)
                    assert isinstance(f.sink, ParquetSink) and isinstance(old.sink, ParquetSink)
                    f.sink.seed(old.sink)
                    f.sink.write_table(rows, indices, int(row_bytes * count))
            except (OSError, pa.ArrowException) as e:  # a full disk, EFBIG, a lost connection
                raise self.storage._wrap("cannot write", f.write_path, e) from e
            f.records += count
            f.last_write = self.clock()
            if (self.roll.max_records and f.records >= self.roll.max_records) or (
                self.roll.max_bytes and f.sink.bytes_written >= self.roll.max_bytes
            ):
                self._close(path)

    def partition_rows(self, ts: list[int]) -> list[tuple[PartitionDir, list[int] | None]]:
        """Each partition of these event times with the rows (indices) it takes, in order of first row;
        None for all the rows when they share one partition. TimeOutOfRangeError as :meth:`write`."""
        lo, hi = self._partition_of(min(ts)), self._partition_of(max(ts))
        if lo.path == hi.path:  # partitions are intervals of time: every row between is in it too
            return [(lo, None)]
        groups: dict[str, tuple[PartitionDir, list[int]]] = {}
        part_of = self._partition_of
        for i, t in enumerate(ts):
            part = part_of(t)
            g = groups.get(part.path)
            if g is None:
                g = groups[part.path] = (part, [])
            g[1].append(i)
        return list(groups.values())

    def write_parsed(self, groups: list[tuple[PartitionDir, pa.StructArray, dict]]) -> bool:
        """Append rows parsed in bulk (:class:`~tributary_read.write.json_batch.JsonBatch`), one group per
        partition with its column types, as :meth:`write` would append them one by one; or write nothing and
        answer False where that could differ (a column conflict, a widening after a row group, a roll by
        record count inside a group): the caller then writes the records one by one."""
        plan = []
        for part, rows, types in groups:
            f = self._open.get(part.path)
            if self.roll.max_records and (f.records if f else 0) + len(rows) > self.roll.max_records:
                return False
            if f is None:
                plan.append((part, rows, types))
                continue
            sink = f.sink
            if not isinstance(sink, ParquetSink) or sink.has_empty_struct():
                return False
            changed = sink.columns.admit_types(types, can_widen=sink.writer is None)
            if changed is None:
                return False
            plan.append((part, rows, changed))
        now = self.clock()
        for part, rows, changed in plan:
            path = part.path
            f = self._open.get(path) or self._open.setdefault(path, self._new_file(part))
            assert isinstance(f.sink, ParquetSink)
            try:
                f.sink.append_parsed(pa.Table.from_struct_array(rows), changed)
            except (OSError, pa.ArrowException) as e:
                raise self.storage._wrap("cannot write", f.write_path, e) from e
            f.records += len(rows)
            f.last_write = now
            if (self.roll.max_records and f.records >= self.roll.max_records) or (
                self.roll.max_bytes and f.sink.bytes_written >= self.roll.max_bytes
            ):
                self._close(path)
        if now - self._last_idle_check >= 1.0:
            self.roll_idle(now)
        return True

    def write_lines(self, lines: list[bytes], ts: list[int]) -> bool:
        """Append lines (a line table's records) at event times ``ts`` in bulk, as :meth:`write` would one by
        one (a file rolls by record count at the same line); or write nothing and answer False where that
        could differ (a file that may roll by size inside the run). TimeOutOfRangeError as :meth:`write`,
        before anything is written."""
        if self.table.config.format == "parquet":
            return False
        parts = self.partition_rows(ts)
        roll = self.roll
        plan = []
        for part, idx in parts:
            rows = lines if idx is None else [lines[i] for i in idx]
            f = self._open.get(part.path)
            # The uncompressed bytes bound what the file can grow by: a roll by size is left to write().
            if roll.max_bytes and (f.sink.bytes_written if f else 0) + sum(map(len, rows)) + len(rows) + 1024 \
                    >= roll.max_bytes:
                return False
            plan.append((part, rows))
        now = self.clock()
        for part, rows in plan:
            path, i = part.path, 0
            while i < len(rows):
                f = self._open.get(path) or self._open.setdefault(path, self._new_file(part))
                sink = f.sink
                assert isinstance(sink, LineSink)
                n = len(rows) - i if not roll.max_records else min(len(rows) - i, roll.max_records - f.records)
                try:
                    sink.write_lines(rows[i:i + n] if i or n < len(rows) else rows)
                except (OSError, pa.ArrowException) as e:  # a full disk, EFBIG, a lost connection
                    raise self.storage._wrap("cannot write", f.write_path, e) from e
                f.records += n
                f.last_write = now
                i += n
                if roll.max_records and f.records >= roll.max_records:
                    self._close(path)
        if now - self._last_idle_check >= 1.0:
            self.roll_idle(now)
        return True

    def write_dead_letter(self, line: bytes, offset: int, reason: str, source: str | None = None,
                          extra: dict | None = None) -> None:
        """Keep an unplaceable record, with why, in a file committed like data.

        The record's exact bytes must be recoverable (to fix and replay it): a
        line that is valid UTF-8 is kept as text in ``line``, any other as
        base64 in ``line_b64``, never decoded with replacement characters.
        """
        try:
            kept = {"line": line.decode("utf-8")}
        except UnicodeDecodeError:
            kept = {"line_b64": base64.b64encode(line).decode("ascii")}
        if self._dead is None:
            self._seq += 1
            path = f"{DEAD_LETTER_DIR}/dl-{self.writer_id}-{self._seq:06d}.jsonl"
            self._dead = _OpenFile(path, path, open_sink(self.storage.open_output(path), "jsonl", "none"),
                                   {}, KIND_DEAD_LETTER)
        doc = {**({"source": source} if source is not None else {}), **(extra or {}), "offset": offset,
               "reason": reason, **kept}
        self._dead.sink.write_line(json.dumps(doc).encode())
        self._dead.records += 1

    def roll_idle(self, now: float | None = None) -> None:
        """Close files that saw no record for the inactivity limit."""
        now = self.clock() if now is None else now
        self._last_idle_check = now
        if self.roll.inactivity_s:
            for path in [p for p, f in self._open.items() if now - f.last_write >= self.roll.inactivity_s]:
                self._close(path)

    def _new_file(self, part: PartitionDir) -> _OpenFile:
        self._seq += 1
        path = f"{part.path}/part-{self.writer_id}-{self._seq:06d}{self._suffix}"
        if self.restate_run is not None:
            from tributary_read.table.restate_swap import moves, prepare, in_staging, staging_dir

            staging = staging_dir(part.path, self.restate_run)
            if staging not in self._markers:
                self._markers[staging] = prepare(self.storage, staging)
            write_path = in_staging(staging, path)
            if moves(self.storage, self.restate_by):  # no swap: the file is committed where it is written, and stays there
                path = write_path
                write_path = staged_name(path) if self.protocol is Protocol.RENAME else path
        else:
            write_path = staged_name(path) if self.protocol is Protocol.RENAME else path
        raw = self.storage.open_output(write_path)
        fmt = self.table.config.format
        sink = open_sink(raw, fmt, self.table.config.compression, shared_encoder() if fmt == "parquet" else None)
        append = sink.limit(self.roll.max_bytes).append if isinstance(sink, LineSink) else None
        return _OpenFile(path, write_path, sink, dict(part.values), key=part.path, append=append)

    def _finish(self, f: _OpenFile) -> tuple[FileEntry, str] | None:
        try:
            f.sink.close()
        except (OSError, pa.ArrowException) as e:  # the last bytes or an upload failed (EFBIG, ENOSPC)
            raise self.storage._wrap("cannot write", f.write_path, e) from e
        if not f.records:  # every record it was opened for was refused (SchemaConflictError)
            self.storage.delete(f.write_path)
            return None
        size = f.sink.size  # what the completed upload or closed file holds; the store is asked only
        if size is None:  # where the sink cannot tell (an Arrow codec's stream)
            info = self.storage.info(f.write_path)
            size = info.size if info else 0
        staged = f.write_path if f.write_path != f.path else None
        return FileEntry(f.path, size, f.records, f.partition, staged, f.kind), f.write_path

    def _finish_all(self, files: list[_OpenFile]) -> None:
        """Close files concurrently: closing encodes a Parquet file's buffered row
        group and completes the upload on object stores, and pyarrow releases the
        GIL for both, so a commit touching 24 hourly files costs about one file's
        close per thread instead of 24. Closed files are made durable together
        by :meth:`flush`, before any commit names them."""
        self._closing = files
        if len(files) > 1 and self.close_threads > 1:
            with ThreadPoolExecutor(min(len(files), self.close_threads), "trib-close") as pool:
                done = list(pool.map(self._finish, files))
        else:
            done = [self._finish(f) for f in files]
        self._closed.extend(d for d in done if d is not None)
        self._closing = []

    def _close(self, path: str) -> None:
        self._file_of_minute.clear()
        self._finish_all([self._open.pop(path)])

    # -- committing ----------------------------------------------------------
    @property
    def pending_records(self) -> int:
        return sum(e.records for e, _ in self._closed) + sum(f.records for f in self._open.values()) + (
            self._dead.records if self._dead else 0)

    def flush(self) -> list[FileEntry]:
        """Close every open file; return all files not yet committed."""
        files = list(self._open.values())
        self._open.clear()
        self._file_of_minute.clear()
        if self._dead is not None:
            files.append(self._dead)
            self._dead = None
        self._finish_all(files)
        # Every closed file (rolled ones too) and its directories durable in one call, before
        # the caller may commit them: the storage's one owner of durability (Storage.sync_many).
        unsynced = [where for _, where in self._closed[self._synced:]]
        unsynced += list(self._markers.values())[self._markers_synced:]  # a restate's staging directories
        if unsynced:
            try:
                self.storage.sync_many(unsynced)
            except OSError as e:
                raise self.storage._wrap("cannot sync", unsynced[0], e) from e
            self._synced, self._markers_synced = len(self._closed), len(self._markers)
        return [e for e, _ in self._closed]

    def commit(self, transaction: Transaction | None = None, base_version: int | None = None,
               claims: frozenset[str] | None = None) -> Commit | None:
        """Close files and commit them with ``transaction`` as one atomic step.

        Under ``rename`` the staged files are renamed to visible right after the
        manifest lands; a crash in between is repaired by :func:`roll_forward`.
        """
        if self.restate_run is not None:  # staged for a swap: only a restate commit may name them
            raise InvalidInputError("a restate's files are committed by the restate that stages them, with the "
                                    "partitions they replace (tributary_read.table.restatement)")
        files = self.flush()
        if not files and transaction is None:
            return None
        # From here on the batch belongs to the commit attempt, not to abort():
        # the manifest may land (or have landed, reply lost) at any instant, and
        # whatever interrupts us (an error, a signal) must never delete its files.
        # If it never lands they are orphans, which `trib clean` removes later.
        self._closed, self._synced = [], 0
        crash_point("writer.before_commit")  # every file of the batch written and closed, no commit attempted
        commit = self.table.log.commit(files, transaction, base_version=base_version,
                                       protocol=self.protocol, writer=self.writer_id, claims=claims)
        if self.protocol is Protocol.RENAME:
            roll_forward(self.table, commit.files)
        return commit

    def abort(self) -> None:
        """Drop the files of the batch not yet handed to a commit (best effort).

        Files of a batch whose commit was attempted are never touched here, even
        if that commit failed: it may have landed with its reply lost. Those that
        are really unreferenced are orphans for ``clean`` after its grace period.
        """
        files = list(self._open.values()) + ([self._dead] if self._dead else []) + self._closing
        # Every stream is closed before anything is deleted, and a failed delete stops nothing: an
        # error escaping here would replace the one being handled (and its exit code), and a stream
        # left to its destructor uploads under the GIL, the whole process waiting on the store.
        for f in files:
            try:
                f.sink.close()
            except Exception:  # noqa: BLE001 - we are discarding this file anyway
                pass
        for where in [f.write_path for f in files] + [where for _, where in self._closed]:
            try:
                self.storage.delete(where)
            except Exception:  # noqa: BLE001 - never committed: an orphan that `trib clean` removes
                pass
        self._open.clear()
        self._file_of_minute.clear()
        self._closed.clear()
        self._synced = 0
        self._closing = []
        self._dead = None
