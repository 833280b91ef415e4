"""Write a Spark DataFrame into a trib table: files by the executors, one commit by the driver.

Each task writes its rows under hidden staged names (the ``rename`` protocol, the
default; final names at once under a ``direct`` table) into the partitions
of their event time, through trib's own
:class:`~tributary_read.write.writer.TableWriter`, and returns the entries of the
files it wrote. Spark keeps the result of one successful attempt per task, so a
failed attempt, or the loser of a speculative pair, never reaches the driver;
the driver then commits ONE manifest listing every file, carrying the
transaction, and renames them visible. Nothing is visible to readers before that
commit: a killed driver, a killed executor or a speculative loser leaves only
hidden files (under ``direct``, visible ones to directory readers), orphans that
``trib clean`` removes.

On a Spark Connect server the same holds when the client dies: the entries come
back only to the client that ran the tasks (``collect``), and only it commits.
The server may finish a killed client's tasks later; their files, named by that
run's own writer id, are handed to no commit, whatever a rerun does meanwhile.

Exactly once per transaction (same app id and offsets): a transaction already in
the log is found before any Spark job runs, and a concurrent copy that committed
while this one ran is found by the commit itself (the log refuses a commit of the
same app after the writer's view). Either way the answer is a returned value,
``WriteResult.already_committed`` with the version that holds it, and the same
schedule time never lands twice. A caller that already asked (the ETL) passes
the version it asked at, and the question is not asked again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Iterator, Mapping, Sequence

from tributary_read.errors import AlreadyCommittedError, BadRecordError, InvalidInputError, TimeOutOfRangeError
from tributary_read.table.config import Table, load_config, resolve_table
from tributary_read.table.manifest import KIND_DATA, Commit, FileEntry, Transaction
from tributary_read.table.log import ManifestLog
from tributary_read.table.timeunit import IntegerTimes, TimeUnit
from tributary_read.spark.failure import as_tributary

#: The Spark local property that injects a fault into the write tasks, for tests
#: (like ``TRIB_CRASH_AT`` in :mod:`tributary_read.faults`): ``fail_first_attempt``
#: makes the first attempt of every task raise after writing its first batch, so
#: a test can prove that only the retry's files are committed. Set it with
#: ``spark.sparkContext.setLocalProperty``; it reaches only the jobs of that thread.
FAULT_PROPERTY = "trib.fault.write"
#: The columns the driver adds for text formats: the record, encoded by Spark, and its time.
LINE_COLUMN, TIME_COLUMN = "__trib_line", "__trib_time"
#: Rows with a bad time named in the error, at most.
SAMPLES = 3
_TASK_SCHEMA = "entries string, records long, bad long, samples string, implausible long, first string"


@dataclass(frozen=True)
class WriteResult:
    """What a :func:`write` committed (or, ``already_committed``, what an earlier run did).

    ``partitions`` are the partition directories that received files (e.g.
    ``2024_01_01/05``), sorted: late rows land in the partition of their event
    time, so these are the partitions to add or refresh in Hive.
    """

    commit: Commit | None
    version: int | None
    files: tuple[FileEntry, ...]
    records: int
    partitions: tuple[str, ...]
    already_committed: bool = False
    #: the row count of each DataFrame :func:`write` was asked to ``count``, in order (empty: none asked)
    counts: tuple[int, ...] = ()

    @classmethod
    def of_commit(cls, commit: Commit, already_committed: bool = False) -> WriteResult:
        """The result of ``commit``: for a run that finds its transaction already in the log."""
        files = tuple(commit.files)
        # a restated partition the recompute left empty holds no file, and is still one the commit changed
        parts = tuple(sorted(set(partitions_of(files)) | {r.directory for r in commit.restated}))
        return cls(commit, commit.version, files, sum(f.records for f in files), parts, already_committed)

    def to_json(self) -> dict:
        t = self.commit.transaction if self.commit is not None else None
        return {
            "version": self.version,
            "already_committed": self.already_committed,
            "records": self.records,
            "files": [f.to_json() for f in self.files],
            "partitions": list(self.partitions),
            **({"transaction": t.to_json()} if t is not None else {}),
        }


def partitions_of(files) -> tuple[str, ...]:
    """The partition directories of the data files among ``files``, sorted (a moved restate's files by their
    partition's, not the directory they lie in)."""
    from tributary_read.table.restate_swap import logical_dir

    return tuple(sorted({logical_dir(f.path) for f in files if f.kind == KIND_DATA}))


def table_columns(log: ManifestLog, version: int | None = None) -> list[tuple[str, str, bool]] | None:
    """The table's columns as its newest schema-recording commit (up to ``version``) left them, or None.

    Read from the table state's last transaction per app (kept in checkpoints, so
    log retention never loses it): no scan of the log.
    """
    from tributary_read.io.parquet_schema import recorded_columns

    best = None
    for app in log.state(version).apps.values():
        cols = recorded_columns(app.transaction.meta)
        if cols is not None and (best is None or app.version > best[0]):
            best = (app.version, cols)
    return best[1] if best else None


def with_columns(log: ManifestLog, transaction: Transaction, base_version: int, columns=None,
                 schema_change: str = "refuse") -> Transaction:
    """``transaction`` carrying the table's columns after its commit (``columns``: what it writes; None:
    it writes no files, and the recorded columns carry forward). A change no reader of the whole table
    can merge raises SchemaChangeError (exit 3) unless ``schema_change`` is ``allow``: before any task."""
    from tributary_read.io.parquet_schema import SCHEMA_KEY, columns_json, evolve_columns

    recorded = table_columns(log, base_version)
    cols = recorded if columns is None else evolve_columns(recorded, columns, schema_change == "allow",
                                                           f"the output {log.storage.uri}")
    if cols is None:
        return transaction
    return replace(transaction, meta={**transaction.meta, SCHEMA_KEY: columns_json(cols)})


def spark_columns(df) -> list[tuple[str, str, bool]]:
    """A DataFrame's columns as a commit records them: (name, Spark SQL type, nullable)."""
    return [(f.name, f.dataType.simpleString(), f.nullable) for f in df.schema.fields]


def commit_files(log: ManifestLog, files, transaction: Transaction | None, *, base_version: int,
                 protocol: str = "direct", writer: str | None = None, restated=()) -> WriteResult:
    """Commit ``files`` with ``transaction`` on top of ``base_version``: the one commit path of a writer
    of transactions (:func:`write`, and the ETL's empty hour).

    A transaction that does not say the table's columns carries the recorded ones
    forward (an empty hour writes none), so the last transaction of every app
    still holds them (:func:`table_columns`).

    A concurrent copy of the same transaction that committed after ``base_version``
    is reported as ``already_committed`` (its commit, not ours; our files are
    orphans for ``trib clean``), never as a conflict: it did the same work.
    """
    from tributary_read.io.parquet_schema import SCHEMA_KEY

    if transaction is not None and SCHEMA_KEY not in (transaction.meta or {}):
        transaction = with_columns(log, transaction, base_version)
    try:
        commit = log.commit(files, transaction, base_version=base_version, protocol=protocol, writer=writer,
                            restated=restated)
    except AlreadyCommittedError as e:
        existing = log.read_commit(e.version) if e.version is not None else None
        if existing is None:
            raise
        return WriteResult.of_commit(existing, already_committed=True)
    return WriteResult.of_commit(commit)


def write(df, table: Table | str, *, time_column: str, transaction: Transaction | None = None,
          options: Mapping[str, str] | None = None, time_unit: TimeUnit | str | IntegerTimes | None = None,
          allow_any_time: bool = False, base_version: int | None = None,
          schema_change: str = "refuse", count: Sequence = (), restate: Mapping | None = None,
          restate_causes: Mapping | None = None, restate_by: str | None = None) -> WriteResult:
    """Write ``df`` into ``table`` (a Table, or a root URI / trib.toml alias with
    storage ``options``), routing each row by ``time_column``, and commit once.

    ``time_column`` is a TIMESTAMP or an integer column of epoch ``time_unit``
    (``"s"``, ``"ms"``, ``"us"``, ``"ns"``; undeclared: ms). An integer time before
    2000-01-01 or more than a day ahead of the clock in that unit refuses the whole
    write before anything is committed (TimeUnitError when no unit was declared and
    another unit fits, else ImplausibleTimeError; both exit 3), naming the first
    such value and the unit that fits: epoch seconds taken as ms would otherwise
    land in 1970. ``allow_any_time=True`` (historical data) turns that check off and
    needs ``time_unit``. ``time_unit`` may also be an :class:`IntegerTimes`, whose
    spelling names the settings as the caller's front end does.

    A row whose time is null or has no partition (outside years 1..9999 in the
    table's zone) fails the write with BadRecordError before anything is
    committed, naming how many and a few examples: in an ETL such a row is a bug
    of the query, and a dead letter would hide it (fix the SQL and run again).

    Files are written in the table's format: Parquet takes the DataFrame's
    columns as they are; jsonl and csv take each row as Spark encodes it
    (``to_json`` / ``to_csv``); text takes the string column ``value``.

    A transaction already in the log returns that commit's result with
    ``already_committed`` set (no task runs; a concurrent copy that commits
    first while the tasks run is reported the same way, and this copy's files
    are orphans for ``trib clean``). ``base_version``: the log version at which
    the caller found ``transaction`` not committed; write then does not ask
    again, and any commit of the same app after it is found by the commit. An
    empty DataFrame with a transaction still commits (an empty commit records
    that the run is done); without one it commits nothing.
    CommitStateUnknownError propagates as is: the commit may have landed, so
    its files are kept.

    With a transaction, the commit records the table's columns, and a DataFrame
    whose columns no reader of the whole table could merge with the recorded
    ones (a changed type, a dropped column, a new column that is not nullable) is
    refused before any task runs (SchemaChangeError, exit 3), unless
    ``schema_change="allow"`` (:func:`tributary_read.io.parquet_schema.evolve_columns`).

    ``count``: DataFrames (an ETL's inputs) whose rows are counted in the same Spark job as the write
    (``WriteResult.counts``, in order): each is counted in full, as ``df.count()`` would, but a run
    pays one Spark job and one round trip for the write and its counts, not one more per input.
    They are asked only of a write that runs its tasks: a transaction found already committed
    returns with no counts.

    ``restate``: the partitions this write recomputes whole (directory -> PartitionDir,
    :mod:`tributary_read.table.restatement`): every file is staged in its partition's staging directory,
    a row outside them refuses the write (nothing committed), and the commit is one restate of
    exactly these partitions, swapped in after it (:mod:`tributary_read.table.restate_swap`), or moved:
    ``restate_by`` ``"move"``, or a store that cannot swap (:func:`~tributary_read.table.restate_swap.moves`).
    ``restate_causes``: directory -> what caused its recompute (``RestateInput``s), kept in the commit.
    """
    from tributary_read.spark import require_pyspark

    require_pyspark()
    try:  # mapInArrow refuses to start without it
        import pandas  # noqa: F401
    except ImportError:
        from tributary_read.errors import missing_extra

        raise missing_extra("pandas", "spark") from None
    from tributary_read.io.storage import resolve_options
    from tributary_read.spark.ship import ship_to_executors
    from tributary_read.table.renames import roll_forward_commit
    from tributary_read.write.names import new_writer_id

    ship_to_executors(df.sparkSession)  # the write tasks are trib's code

    if isinstance(table, Table):
        tbl = table
        opts = _storage_options(tbl.storage)
    else:
        root, alias_opts = resolve_table(table, load_config())
        opts = resolve_options({**alias_opts, **(options or {})})
        tbl = Table.load(root, opts)
    tbl.storage.hadoop_uri()  # executors must reach the table: refuses a memory:// table in one line
    times = time_unit if isinstance(time_unit, IntegerTimes) else IntegerTimes(time_unit, allow_any_time)
    latest = times.latest_ms()  # one clock for every task
    projected, time_col = _project(df, tbl.config.format, time_column)
    log = tbl.log
    if base_version is not None:
        base = base_version
    else:
        base = log.latest_version()
        done = log.find_transaction(transaction) if transaction is not None else None
        if done is not None:
            roll_forward_commit(tbl, done)  # a run killed between its commit and its renames (or swaps)
            return WriteResult.of_commit(done, already_committed=True)
    if transaction is not None:
        transaction = with_columns(log, transaction, base, spark_columns(df), schema_change)
    run_id = new_writer_id()
    protocol = tbl.protocol_for()
    if restate is not None:
        from tributary_read.table.restatement import check_storage

        check_storage(tbl.storage, restate_by)
    task = _WriteTask(tbl.uri, opts, run_id, time_col, tbl.config.format != "parquet", protocol.value, times,
                      latest, restate_run=run_id if restate is not None else None, restate_by=restate_by)
    try:
        rows = _with_counts(projected.mapInArrow(task, _task_schema()), count).collect()
    except Exception as e:  # noqa: BLE001 - py4j wraps the executor's exception in a Java one
        # Nothing was handed to a commit: failed attempts removed their own files, and
        # finished tasks' files are unreferenced orphans for `trib clean`.
        mapped = as_tributary(e, f"writing {tbl.uri} on Spark executors")
        if mapped is None:
            raise
        raise mapped from None
    tallies = sorted((r for r in rows if r["entries"] is None), key=lambda r: int(r["first"]))
    counts, rows = tuple(r["records"] for r in tallies), [r for r in rows if r["entries"] is not None]
    files = sorted((FileEntry.from_json(e) for r in rows for e in json.loads(r["entries"])), key=lambda f: f.path)
    implausible = sum(r["implausible"] for r in rows)
    if implausible:
        _discard(tbl, files)  # never handed to a commit: ours to delete
        first = next(r["first"] for r in rows if r["first"])
        e = times.refusal(int(first), f"time column {time_column}", latest)
        raise type(e)(f"{e} ({implausible} row(s) like it; nothing was committed)")
    bad = sum(r["bad"] for r in rows)
    if bad:
        samples = [s for r in rows for s in json.loads(r["samples"])][:SAMPLES]
        _discard(tbl, files)  # never handed to a commit: ours to delete
        raise BadRecordError(
            f"{bad} row(s) have a null time, or one no partition of the table holds, in column "
            f"{time_column!r} (e.g. {', '.join(samples)}); nothing was committed: filter or fix them")
    restated = ()
    if restate is not None:
        from tributary_read.table.restatement import restatements

        try:
            restated = restatements(tbl.storage, run_id, restate, files, restate_causes, restate_by)
        except InvalidInputError:
            _discard(tbl, files)  # never handed to a commit: ours to delete
            raise
    if not files and transaction is None and not restated:
        return WriteResult(None, None, (), 0, (), counts=counts)
    # A concurrent copy of this very transaction that committed while the tasks ran
    # comes back as already_committed; our files stay (a commit was attempted).
    result = commit_files(log, files, transaction, base_version=base, protocol=protocol.value, writer=run_id,
                          restated=restated)
    # After the commit point: ours, or a concurrent copy's (whose writer may have died before
    # its renames). A crash before this is finished by the rerun, `trib recover` or a reader.
    roll_forward_commit(tbl, result.commit)
    return replace(result, counts=counts)


def _task_schema():
    """:data:`_TASK_SCHEMA` as a StructType: built here, where a DDL string costs Spark Connect a round trip."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    kinds = {"string": StringType(), "long": LongType()}
    return StructType([StructField(name, kinds[kind]) for name, kind in
                       (col.split() for col in _TASK_SCHEMA.split(", "))])


def _with_counts(tasks, frames: Sequence):
    """The write tasks' rows, then one row per DataFrame of ``frames``: its row count (``records``), its
    index in ``first`` and a null ``entries`` (a task's row always has entries). One job for all."""
    if not frames:
        return tasks
    from pyspark.sql import functions as F

    out = tasks
    for i, df in enumerate(frames):
        out = out.unionByName(df.agg(F.count(F.lit(1)).alias("records")).select(
            F.lit(None).cast("string").alias("entries"), F.col("records").cast("long").alias("records"),
            F.lit(0).cast("long").alias("bad"), F.lit("[]").alias("samples"),
            F.lit(0).cast("long").alias("implausible"), F.lit(str(i)).alias("first")))
    return out


def _storage_options(storage) -> dict[str, str]:
    """Options that reopen ``storage`` on an executor (credentials and endpoint included)."""
    opts = {k: str(v) for k, v in (getattr(storage, "options", None) or {}).items() if v is not None}
    if getattr(storage, "fsync", True) is False:
        opts.setdefault("fsync", "false")
    return opts


def _project(df, fmt: str, time_column: str):
    """``df`` as the tasks take it, and the name of its time column there.

    Parquet files take the rows as they are. For a text format Spark encodes
    each row here, so a file reads back with Spark exactly as Spark wrote it.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    fields = {f.name: f for f in df.schema.fields}
    field = fields.get(time_column)
    if field is None:
        raise InvalidInputError(f"the time column {time_column!r} is not in the DataFrame (columns: "
                                f"{', '.join(fields) or 'none'})", time_column="the time column")
    kind = field.dataType
    if not isinstance(kind, (T.TimestampType, T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
        hint = (" (a TIMESTAMP_NTZ names no instant: cast it with to_utc_timestamp or to TIMESTAMP)"
                if type(kind).__name__ == "TimestampNTZType" else
                " (cast it, e.g. F.to_timestamp(col) or col.cast('timestamp'))")
        raise InvalidInputError(f"the time column {time_column!r} is {kind.simpleString()}: a timestamp or "
                                f"an integer epoch time is needed{hint}", time_column="the time column")
    if fmt == "parquet":
        return df, time_column
    cols = [df[c] for c in df.columns]
    if fmt == "jsonl":
        line = F.to_json(F.struct(*cols))
    elif fmt == "csv":
        line = F.to_csv(F.struct(*cols))
    else:  # text: the one string column, as Spark's own text writer takes it
        value = fields.get("value")
        extra = sorted(set(fields) - {"value", time_column})
        if value is None or not isinstance(value.dataType, T.StringType) or extra:
            raise InvalidInputError(
                f"a text table takes one string column 'value' (and the time column {time_column!r}); "
                f"the DataFrame has {', '.join(fields)}")
        line = df["value"]
    return df.select(line.alias(LINE_COLUMN), df[time_column].alias(TIME_COLUMN)), TIME_COLUMN


def _discard(table: Table, files) -> None:
    for f in files:
        try:
            table.storage.delete(f.staged or f.path)
        except Exception:  # noqa: BLE001 - a stray file is an orphan for `trib clean`
            pass


class _WriteTask:
    """The function each task runs (``mapInArrow``): write its rows, return its file entries.

    A plain picklable object: executors import tributary_read and reopen the
    table from its root and options. The writer id is unique per task attempt
    and has the shape trib's names need (``clean`` and ``tracking = both``
    recognise it): the run's random 32 bits plus Spark's task attempt id, which
    is unique within the application, so two attempts never share a file name.
    """

    def __init__(self, root: str, options: Mapping[str, str], run_id: str, time_column: str, lines: bool,
                 protocol: str = "direct", times: IntegerTimes = IntegerTimes(), latest_ms: int | None = None,
                 restate_run: str | None = None, restate_by: str | None = None):
        self.root, self.options, self.run_id = root, dict(options), run_id
        self.time_column, self.lines, self.protocol = time_column, lines, protocol
        self.times, self.latest_ms, self.restate_run, self.restate_by = times, latest_ms, restate_run, restate_by

    def writer_id(self, attempt_id: int) -> str:
        stamp, _, rand = self.run_id.rpartition("-")
        return f"{stamp}-{(int(rand, 16) + attempt_id) % (1 << 32):08x}"

    def __call__(self, batches: Iterator) -> Iterator:
        import pyarrow as pa
        from pyspark import TaskContext

        from tributary_read.write.writer import TableWriter

        ctx = TaskContext.get()
        fault = ctx.attemptNumber() == 0 and ctx.getLocalProperty(FAULT_PROPERTY) == "fail_first_attempt"
        table = Table.load(self.root, self.options)
        writer = TableWriter(table, protocol=self.protocol, writer_id=self.writer_id(ctx.taskAttemptId()),
                             restate_run=self.restate_run, restate_by=self.restate_by)
        bad, samples, implausible = 0, [], []
        try:
            for batch in batches:
                if not batch.num_rows:
                    continue
                bad += self._write(writer, pa.Table.from_batches([batch]), samples, implausible)
                if fault:
                    writer.flush()  # the first rows are on storage now: abort() must remove them
                    raise RuntimeError(f"{FAULT_PROPERTY}: first attempt of task {ctx.partitionId()} fails")
            entries = writer.flush()
        except BaseException:
            writer.abort()  # nothing of this attempt was handed to a commit
            raise
        yield pa.RecordBatch.from_pydict({
            "entries": [json.dumps([e.to_json() for e in entries])],
            "records": [sum(e.records for e in entries)],
            "bad": [bad],
            "samples": [json.dumps(samples)],
            "implausible": [sum(n for n, _ in implausible)],
            "first": pa.array([str(implausible[0][1]) if implausible else None], pa.string()),
        })

    def _write(self, writer, t, samples: list, implausible: list) -> int:
        """Write ``t``'s placeable, plausible rows; return how many were not placeable (their times go
        to ``samples``). Implausible integer times go to ``implausible`` as (count, first raw value)."""
        import pyarrow.compute as pc

        raw = t.column(self.time_column)
        ms, odd = self.times.to_ms_array(raw, self.latest_ms)
        ok = _placeable(writer, ms)
        n_odd = (pc.sum(odd).as_py() or 0) if odd is not None and len(odd) else 0
        if n_odd:
            implausible.append((n_odd, pc.filter(raw, odd)[0].as_py()))
            keep = pc.invert(odd)
            t, ms, ok = t.filter(keep), pc.filter(ms, keep), pc.filter(ok, keep)
        n_bad = len(ok) - pc.sum(ok).as_py() if len(ok) else 0
        if n_bad:
            for v in pc.filter(ms, pc.invert(ok)).to_pylist()[: SAMPLES - len(samples)]:
                samples.append("null" if v is None else f"{v} ms")
            t, ms = t.filter(ok), pc.filter(ms, ok)
        if not t.num_rows:
            return n_bad
        if not self.lines:
            writer.write_table(t, self.time_column, self.times.effective)
            return n_bad
        for line, ts in zip(t.column(LINE_COLUMN).to_pylist(), ms.to_pylist()):
            writer.write((line or "").encode("utf-8"), ts)
        return n_bad


def _placeable(writer, ms):
    """A mask of the times a partition holds: not null, and inside the layout's range.

    The range is contiguous, so when its earliest and latest times have a
    partition all have; only then are distinct times looked at one by one.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    ok = pc.is_valid(ms)
    if ms.null_count == len(ms):
        return ok
    lo, hi = pc.min_max(ms).values()
    try:
        writer.partition_for(lo.as_py())
        writer.partition_for(hi.as_py())
        return ok
    except TimeOutOfRangeError:
        pass
    out = set()
    for v in pc.unique(ms.filter(ok)).to_pylist():
        try:
            writer.partition_for(v)
        except TimeOutOfRangeError:
            out.add(v)
    return pc.and_(ok, pc.invert(pc.is_in(ms, value_set=pa.array(sorted(out), pa.int64()))))
