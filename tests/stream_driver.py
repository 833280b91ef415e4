"""A streaming driver for the kill tests (tests/test_stream_faults.py): a file stream into a trib table
through trib_sink, one input file a micro-batch, ``availableNow``. Prints ``begin N`` and ``done N``
around each batch and ``finished`` at the end, so the test can kill it at moments that matter.

    python tests/stream_driver.py ROOT INBOX CHECKPOINT [FILES_PER_BATCH]

``FILES_PER_BATCH`` (default 1): the last run, which only has to drain what the killed runs left, takes it in
one batch (after Spark's re-run of the batch the last kill interrupted, with that batch's own offsets).
"""

from __future__ import annotations

import sys


def main(root: str, inbox: str, checkpoint: str, files_per_batch: str = "1") -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from tributary_read.spark.stream import trib_sink

    spark = (SparkSession.builder.master("local[2]").appName("trib-stream-driver")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    sink = trib_sink(root, query="events", time_column="ts")

    def each(df, batch_id: int) -> None:
        print(f"begin {batch_id}", flush=True)
        sink(df, batch_id)
        print(f"done {batch_id}", flush=True)

    df = (spark.readStream.schema("id long, ts long").option("maxFilesPerTrigger", int(files_per_batch)).json(inbox)
          .withColumn("ts", F.timestamp_millis("ts")))
    q = (df.writeStream.foreachBatch(each).option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    print("finished", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:5])
