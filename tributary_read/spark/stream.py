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

from dataclasses import dataclass
from enum import Enum
from typing import Mapping

from tributary_read.errors import InvalidInputError, SourceMismatchError
from tributary_read.table.manifest import Transaction

APP_PREFIX = "stream:"
BATCH = "batch"  # the transaction's offset: the last micro-batch committed
QUERY_ID = "query_id"  # the transaction's meta: the streaming query (its checkpoint) that committed it
#: The Spark local property holding the running query's id (StreamExecution.QUERY_ID_KEY).
QUERY_ID_PROPERTY = "sql.streaming.queryId"


class CheckpointMismatchError(SourceMismatchError):
    """The table's last micro-batch of this query name was committed by another streaming query (another
    checkpoint, or a second query of the same name running now): restart from that checkpoint, stop the
    other query, or accept the new checkpoint with ``restart=True`` knowing where its source starts."""


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
    """``df.writeStream.foreachBatch(StreamSink(...))``: see :func:`trib_sink`."""

    table: object
    query: str
    time_column: str
    options: Mapping[str, str] | None = None
    time_unit: str | None = None
    restart: bool = False

    def __post_init__(self) -> None:
        self.app_id = stream_app_id(self.query)
        self._table = None
        self._committer = None
        self.skipped: list[int] = []

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
        txn = Transaction(self.app_id, {BATCH: batch_id}, {QUERY_ID: query_id})
        result = write(df, table, time_column=self.time_column, transaction=txn, base_version=state.version,
                       time_unit=self.time_unit)
        if result.already_committed:  # a copy of (query, batch) landed while this one wrote: whose?
            other = result.commit.transaction if result.commit is not None else None
            if other is not None and (other.meta or {}).get(QUERY_ID) != query_id:
                decide(other, query_id, batch_id)  # another query of the same name: refused, never merged
            self.skipped.append(batch_id)
            return
        self._mount(result)

    def _mount(self, result) -> None:
        """Partitions mounted in Hive as the table's partition-commit policy says, on every commit."""
        if result.commit is None or result.already_committed:
            return
        if self._committer is None:
            from tributary_read.hive.commit import committer_for

            self._committer = committer_for(self._open()) or False
        if self._committer:
            self._committer.on_commit(result.commit)


def trib_sink(table, *, query: str, time_column: str, options: Mapping[str, str] | None = None,
              time_unit: str | None = None, restart: bool = False) -> StreamSink:
    """A ``foreachBatch`` function that commits each micro-batch into ``table`` exactly once.

    ``table``: a Table, a root URI or a trib.toml alias. ``query``: the name of the
    stream in the table's log (one running query per name). ``time_column``: the
    event time (TIMESTAMP, or epoch integers of ``time_unit``); rows land in the
    partition of their event time, late ones too.
    """
    return StreamSink(table, query, time_column, options, time_unit, restart)
