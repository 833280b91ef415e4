"""Spark Structured Streaming into a trib table: a ``foreachBatch`` sink, exactly once per micro-batch.

Spark runs a micro-batch again after a crash (the one whose end it had not yet
written to its checkpoint), so a sink that appends is at-least-once. This one
commits each micro-batch through :func:`tributary_read.spark.write.write` with the
transaction ``(stream:QUERY, batch id)`` and the streaming query's id, in the same
atomic commit as the files: a batch already in the log is skipped, so the rerun
changes nothing (Delta's ``txnAppId``/``txnVersion``).

The query id is the checkpoint's: Spark keeps it across restarts from the same
checkpoint and makes a new one for a new checkpoint. A batch of another query id
is refused (:class:`CheckpointMismatchError`): batch ids restart at 0 with a new
checkpoint, so taking them as "already committed" would skip data silently, and
a second query of the same name on the same table would interleave with the
first. ``restart=True`` accepts a new checkpoint once, on purpose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Mapping

from tributary_read.errors import (  # noqa: F401 - the stream's errors, importable from here too
    CheckpointMismatchError, InvalidInputError, StreamingQueryFailedError, TributaryError)
from tributary_read.table.manifest import EVENT_WATERMARK, Transaction

APP_PREFIX = "stream:"
BATCH = "batch"  # the transaction's offset: the last micro-batch committed
QUERY_ID = "query_id"  # the transaction's meta: the streaming query (its checkpoint) that committed it
#: the transaction's meta: each source's end offset for the batch, as Spark's offset log has it (JSON text)
SOURCE_OFFSETS = "source_offsets"
#: The Spark local property holding the running query's id (StreamExecution.QUERY_ID_KEY).
QUERY_ID_PROPERTY = "sql.streaming.queryId"


class Step(Enum):
    WRITE = "write"
    SKIP = "skip"


def stream_app_id(query: str) -> str:
    if not query or any(c.isspace() for c in query):
        raise InvalidInputError("the query name must be a non-empty word", query="the query name")
    return APP_PREFIX + query


def decide(last: Transaction | None, query_id: str, batch_id: int, *, restart: bool = False) -> Step:
    """What to do with micro-batch ``batch_id`` of query ``query_id``, given the app's last transaction."""
    if last is None:
        return Step.WRITE
    done = last.offsets.get(BATCH)
    before = (last.meta or {}).get(QUERY_ID)
    if before != query_id:
        if restart:
            return Step.WRITE
        raise CheckpointMismatchError(
            f"{last.app_id}: batch {batch_id} comes from streaming query {query_id}, but the table's last batch "
            f"({done}) was committed by query {before}: another checkpoint, or another query of the same name "
            f"running now. Restart from the checkpoint of {before}, stop the other query, or accept this "
            f"checkpoint with restart=True (its source must start where batch {done} ended)",
            restart="restart=True")
    if done is None or batch_id == done + 1:
        return Step.WRITE
    if batch_id <= done:
        return Step.SKIP  # Spark runs the last batch again after a crash: it is in the table already
    raise CheckpointMismatchError(
        f"{last.app_id}: batch {batch_id} follows batch {done}, but batches {done + 1}..{batch_id - 1} are not "
        f"in the table: the query's checkpoint is ahead of the table (restored from elsewhere?)",
        restart="restart=True")


@dataclass
class StreamSink:
    """``df.writeStream.foreachBatch(StreamSink(...))``: see :func:`trib_sink`.

    ``mount``: called with (table, commit) after each commit instead of the table's partition-commit
    policy (``trib etl stream`` mounts into its job's ``[hive]`` table the way ``trib etl run`` does).
    """

    table: object
    query: str
    time_column: str
    options: Mapping[str, str] | None = None
    time_unit: object = None  # a unit name, or an IntegerTimes (a job file's time_unit and allow_any_time)
    restart: bool = False
    mount: Callable[[object, object], None] | None = None
    #: the query's checkpointLocation: each batch's source offsets, read from it, go into its commit
    checkpoint: str | None = None
    #: told when the table's Iceberg mirror starts failing (once per outage); the query goes on
    warn: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        self.app_id = stream_app_id(self.query)
        _refuse_connect()
        from tributary_read.spark.ship import check_active_session

        check_active_session()  # a session whose workers cannot run trib: refused now, not in the first batch
        self._table = None
        self._committer = None
        self.skipped: list[int] = []
        #: what this process committed: batches, records, the last version
        self.batches = self.records = 0
        self.version: int | None = None
        self.busy = False  # inside a batch: a graceful stop waits for it to end
        self.error: TributaryError | None = None  # what failed the last batch, as trib raised it
        self.mirror = None  # the table's Iceberg mirror hook (iceberg.auto.MirrorHook), False when it has none

    def _open(self):
        if self._table is None:
            from tributary_read.table.config import Table, load_config, resolve_table

            if isinstance(self.table, Table):
                self._table = self.table
            else:
                from tributary_read.io.storage import resolve_options

                root, alias_opts = resolve_table(str(self.table), load_config())
                self._table = Table.load(root, resolve_options({**alias_opts, **(self.options or {})}))
        return self._table

    def __call__(self, df, batch_id: int) -> None:
        self.busy = True
        try:
            self._batch(df, batch_id)
        except TributaryError as e:  # Spark wraps it in a StreamingQueryException: keep it for the caller
            self.error = e
            raise
        finally:
            self.busy = False

    def _batch(self, df, batch_id: int) -> None:
        from tributary_read.spark.write import write

        table = self._open()
        query_id = df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY) or ""
        state = table.log.state()
        app = state.apps.get(self.app_id)
        step = decide(app.transaction if app else None, query_id, batch_id, restart=self.restart)
        if step is Step.SKIP:
            self.skipped.append(batch_id)
            return
        self.restart = False  # accepted once: the new checkpoint's batches are checked from now on
        meta: dict = {QUERY_ID: query_id}
        ends = source_offsets(self.checkpoint, batch_id, self.options)
        if ends is not None:  # where the batch's sources end: a new checkpoint may start there
            meta[SOURCE_OFFSETS] = ends
        watermark = _watermark(df.sparkSession, query_id)
        if watermark is not None:  # the query's event-time watermark: the event clock of partition commit
            meta[EVENT_WATERMARK] = watermark
        txn = Transaction(self.app_id, {BATCH: batch_id}, meta)
        result = write(df, table, time_column=self.time_column, transaction=txn, base_version=state.version,
                       time_unit=self.time_unit)
        if result.already_committed:  # a copy of (query, batch) landed while this one wrote: whose?
            other = result.commit.transaction if result.commit is not None else None
            if other is not None and (other.meta or {}).get(QUERY_ID) != query_id:
                decide(other, query_id, batch_id)  # another query of the same name: refused, never merged
            self.skipped.append(batch_id)
            return
        self.batches += 1
        self.records += result.records
        self.version = result.version
        self._mount(result)
        self._mirror(result)

    def _mirror(self, result) -> None:
        """The batch's commit into the table's Iceberg mirror, if it has one (``trib table set --iceberg``).
        A failure does not fail the query (the batch is committed); the next batch's mirror catches up, and
        :attr:`mirror`'s last outcome says how the run ends."""
        if result.commit is None or result.already_committed:
            return
        if self.mirror is None:
            from tributary_read.iceberg.auto import hook

            self.mirror = hook(self._open(), self.warn) or False
        if self.mirror:
            self.mirror.on_commit(result.commit)

    def _mount(self, result) -> None:
        """Partitions mounted in Hive as the table's partition-commit policy says, on every commit."""
        if result.commit is None or result.already_committed:
            return
        if self.mount is not None:
            self.mount(self._open(), result.commit)
            return
        if self._committer is None:
            from tributary_read.hive.commit import committer_for

            self._committer = committer_for(self._open()) or False
        if self._committer:
            self._committer.on_commit(result.commit)


def source_offsets(checkpoint: str | None, batch_id: int, options: Mapping[str, str] | None = None) -> list | None:
    """Each source's end offset for ``batch_id``, from the checkpoint's offset log (``offsets/N``: a version
    line, the batch's metadata, then a line per source; Spark writes it before the batch runs). None when
    it cannot be read: the offsets are a convenience for recovery, never what exactly-once rests on."""
    if not checkpoint:
        return None
    from tributary_read.io.storage import open_storage

    try:
        text = open_storage(checkpoint, options).read(f"offsets/{batch_id}").decode()
    except (OSError, UnicodeDecodeError, TributaryError):
        return None
    lines = text.splitlines()
    return [None if x == "-" else x for x in lines[2:]] if len(lines) >= 3 and lines[0].startswith("v") else None


#: Spark's error classes that only wrap the cause of a failed batch (the batch function's, the query's).
_WRAPPERS = frozenset({"STREAM_FAILED", "FOREACH_BATCH_USER_FUNCTION_ERROR"})
_ERROR_CLASS = re.compile(r"\[([A-Z][A-Z0-9_.]*)\] ")


def query_failure(sink: StreamSink, error) -> TributaryError:
    """The error a failed query ends with: the sink's own, as raised (its class gives the exit code), else
    Spark's reason: the first line that names an error class other than a wrapper's (a failed task's
    ``[CAST_INVALID_INPUT] ...`` lies in the Python traceback py4j wraps the batch function's failure in),
    else the first line."""
    if sink.error is not None:
        return sink.error
    text = str(getattr(error, "desc", None) or error).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = next(iter(lines), type(error).__name__)
    for line in lines:
        m = next((m for m in _ERROR_CLASS.finditer(line) if m.group(1) not in _WRAPPERS), None)
        if m is not None:
            first = line[m.start():]
            break
    return StreamingQueryFailedError(f"{sink.app_id}: the streaming query failed: {first[:400]}; the committed "
                                     "batches stand, and a restart from the same checkpoint runs the failed one again")


def _watermark(spark, query_id: str) -> int | None:
    """The query's event-time watermark as of its last finished batch (epoch ms; None: the query has no
    ``withWatermark``). A batch's own watermark is at least that one: partition commit waits the longer."""
    if not query_id:
        return None
    try:
        # A batch runs on a clone of the session that started the query, whose query manager does not
        # know it: ask the original (the default session) too.
        from pyspark.sql import SparkSession

        # The session that started it is the process's first (pyspark's _instantiatedSession): read,
        # never built here (spark/session.py is the one place a session is assembled).
        sessions = [spark, SparkSession.getActiveSession(), getattr(SparkSession, "_instantiatedSession", None)]
        q = next((x for x in (s.streams.get(query_id) for s in sessions if s is not None) if x is not None), None)
        progress = q.lastProgress if q is not None else None
    except Exception:  # noqa: BLE001 - a session without the query (a test calling the sink directly)
        return None
    text = ((progress or {}).get("eventTime") or {}).get("watermark")
    if not text:
        return None
    from tributary_read.timespec import parse_instant

    ms = parse_instant(text, what="the query's watermark")
    return ms or None  # Spark reports 1970 before its first watermark


def _refuse_connect() -> None:
    """A Spark Connect client's session is refused when the sink is made: its batches would run in the
    server's Python, where the streaming query's id (a SparkContext property, the checkpoint's identity
    that makes each batch exactly once) cannot be read, so every batch would fail inside the query."""
    import sys

    if "pyspark.sql.connect.session" not in sys.modules:
        return
    from pyspark.sql.connect.session import SparkSession

    if SparkSession.getActiveSession() is not None:
        raise InvalidInputError("trib_sink needs a classic SparkSession, not a Spark Connect one: its batches "
                                "read the streaming query's id from the SparkContext. Build the session with "
                                "SparkSession.builder.master(...) (or run the job with trib etl stream)")


def trib_sink(table, *, query: str, time_column: str, options: Mapping[str, str] | None = None,
              time_unit: str | None = None, restart: bool = False) -> StreamSink:
    """A ``foreachBatch`` function that commits each micro-batch into ``table`` exactly once.

    ``table``: a Table, a root URI or a trib.toml alias. ``query``: the name of the
    stream in the table's log (one running query per name). ``time_column``: the
    event time (TIMESTAMP, or epoch integers of ``time_unit``); rows land in the
    partition of their event time, late ones too.
    """
    return StreamSink(table, query, time_column, options, time_unit, restart)
