"""Issue 23 (in progress): the foreachBatch sink, exactly once per micro-batch, on real Spark.

A file stream (one JSON file a micro-batch) into a trib table through
``trib_sink``; Spark's own re-run of a batch (the same query id, the same batch
id) is skipped; another checkpoint (a new query id) is refused, not taken for
"already committed", unless ``restart=True``.
"""

from __future__ import annotations

import json

import pytest
from conftest import invoke_trib
from helpers import LAYOUT, PARTITION

from tributary_read.spark.stream import (BATCH, QUERY_ID, CheckpointMismatchError, Step, decide, stream_app_id,
                                         trib_sink)
from tributary_read.table.config import Table
from tributary_read.table.manifest import Transaction

T0 = 1_592_960_400_000  # 2020-06-24T01:00:00Z


def _last(batch: int, query: str = "q-1") -> Transaction:
    return Transaction("stream:events", {BATCH: batch}, {QUERY_ID: query})


@pytest.mark.unit
def test_decide_writes_the_next_batch_skips_a_rerun_and_refuses_another_checkpoint():
    assert decide(None, "q-1", 0) is Step.WRITE
    assert decide(_last(4), "q-1", 5) is Step.WRITE
    assert decide(_last(4), "q-1", 4) is Step.SKIP  # Spark's re-run of the last batch after a crash
    assert decide(_last(4), "q-1", 2) is Step.SKIP
    with pytest.raises(CheckpointMismatchError, match="batches 5..6 are not in the table"):
        decide(_last(4), "q-1", 7)
    with pytest.raises(CheckpointMismatchError, match="committed by query q-1"):
        decide(_last(4), "q-2", 0)  # a new checkpoint starts at batch 0: never "already committed"
    assert decide(_last(4), "q-2", 0, restart=True) is Step.WRITE
    with pytest.raises(Exception, match="non-empty word"):
        stream_app_id("two words")


def _records(root) -> list[int]:
    t = Table.load(str(root))
    out = []
    for f in t.log.state().files.values():
        out += [json.loads(line)["id"] for line in (root / f.path).read_text().splitlines()]
    return sorted(out)


@pytest.mark.integration
def test_each_micro_batch_commits_once_a_rerun_is_skipped_and_a_new_checkpoint_is_refused(tmp_path, spark):
    from pyspark.sql import functions as F

    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    inbox = tmp_path / "in"
    inbox.mkdir()
    for k in range(3):  # one file a batch; each file's records over two hours, the last one late
        rows = [{"id": k * 100 + i, "ts": T0 + i * 600_000 - (3_600_000 if i == 9 else 0)} for i in range(10)]
        (inbox / f"f{k}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def run(checkpoint, sink):
        df = (spark.readStream.schema("id long, ts long").option("maxFilesPerTrigger", 1).json(str(inbox))
              .withColumn("ts", F.timestamp_millis("ts")))
        q = (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
        q.awaitTermination()
        return q

    sink = trib_sink(str(root), query="events", time_column="ts")
    run(tmp_path / "ck", sink)
    want = sorted(k * 100 + i for k in range(3) for i in range(10))
    assert _records(root) == want
    txn = Table.load(str(root)).log.state().apps["stream:events"].transaction
    assert txn.offsets[BATCH] == 2

    # Spark's re-run of the last batch (what it does after a crash before its checkpoint's commit): skipped.
    again = spark.read.schema("id long, ts long").json(str(inbox / "f2.json")).withColumn("ts", F.timestamp_millis("ts"))
    replay = trib_sink(str(root), query="events", time_column="ts")
    spark.sparkContext.setLocalProperty("sql.streaming.queryId", txn.meta[QUERY_ID])
    try:
        replay(again, 2)
    finally:
        spark.sparkContext.setLocalProperty("sql.streaming.queryId", None)
    assert replay.skipped == [2] and _records(root) == want

    # A new checkpoint: its batch 0 is refused (the query fails), nothing is added.
    (inbox / "f3.json").write_text(json.dumps({"id": 999, "ts": T0}) + "\n")
    with pytest.raises(Exception, match="committed by query"):
        run(tmp_path / "ck2", trib_sink(str(root), query="events", time_column="ts"))
    assert _records(root) == want

    # The same checkpoint again: it goes on from batch 3 with the new file only.
    run(tmp_path / "ck", trib_sink(str(root), query="events", time_column="ts"))
    assert _records(root) == sorted(want + [999])
    v = invoke_trib("verify", str(root), "--json")
    assert v.returncode == 0, v.stdout + v.stderr


@pytest.mark.integration
def test_the_query_watermark_is_the_event_clock_of_partition_commit(tmp_path, spark):
    """``withWatermark`` on the stream: each commit records the query's watermark as of its last finished
    batch, and the table's partition commit on the event clock marks an hour once that passes its end."""
    from pyspark.sql import functions as F

    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    invoke_trib("partitions", "configure", str(root), "--policy", "success-file", "--clock", "event", check=True)
    inbox = tmp_path / "in"
    inbox.mkdir()
    hour = 3_600_000
    for k in range(4):  # file k: hour k of the day, ten minutes apart
        rows = [{"id": k * 100 + i, "ts": T0 + k * hour + i * 300_000} for i in range(10)]
        (inbox / f"f{k}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    df = (spark.readStream.schema("id long, ts long").option("maxFilesPerTrigger", 1).json(str(inbox))
          .withColumn("ts", F.timestamp_millis("ts")).withWatermark("ts", "0 seconds"))
    q = (df.writeStream.foreachBatch(trib_sink(str(root), query="events", time_column="ts"))
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    t = Table.load(str(root))
    marks = [c.transaction.meta.get("event_watermark_ms") for c in t.log.commits()
             if c.transaction is not None and c.transaction.app_id == "stream:events"]
    # Batch k sees the watermark batch k-1 ran with: the newest event time of batch k-2 (none before).
    assert marks == [None, None, T0 + 45 * 60_000, T0 + hour + 45 * 60_000]
    done = {p.parent.name for p in root.rglob("_SUCCESS")}
    assert done == {"01"}, done  # 01:00-02:00 ended before 02:45; 02:00-03:00 has not, nor the later hours
