#!/usr/bin/env python
"""Structured Streaming: trib's foreachBatch sink against a plain ``df.write.partitionBy``.

One local SparkSession; a file stream of ``--files`` JSON files (``--records``
each, event times over three hours), one file a micro-batch (``availableNow``),
into a Parquet output by two ``foreachBatch`` functions, in interleaved rounds:

* **baseline**: ``df.write.partitionBy("dt", "hh").mode("append").parquet(dir)``,
  no commit, no exactly-once (what a hand-written sink does before its MSCK);
* **trib**: :func:`tributary_read.spark.stream.trib_sink` into a trib table of the
  same layout (files staged, one atomic commit with the batch's transaction).

Each batch is timed inside its ``foreachBatch`` call; the first batch of a round
(warm-up) is left out. Reported: the median seconds per batch of each, and trib /
baseline (the goal: at most 1.2).

With ``--hive`` it also starts a metastore + HiveServer2 pair and runs a third kind,
**trib+hive**: the trib table's partition commit mounts into a Hive table (through the
metastore's Thrift API) from inside the sink, after each commit, timed per batch like
the others so the mount's cost shows beside the plain sink's. It also reports the time
from each batch's commit (the commit's own timestamp) to the end of its partitions'
mount, checked by reading the partitions back through HiveServer2.

    .venv/bin/python benchmarks/bench_stream.py                # 12 batches x 3 rounds, 100,000 records each
    .venv/bin/python benchmarks/bench_stream.py --hive --quick
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import WorkDir, bench_session, emit_report, hive_pair, machine_info, md_table  # noqa: E402

T0 = 1_704_067_200_000  # 2024-01-01T00:00Z
LAYOUT, PARTITION = "{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}"


def make_inbox(inbox: Path, files: int, records: int) -> None:
    rng = random.Random(23)
    inbox.mkdir(parents=True, exist_ok=True)
    for k in range(files):
        with open(inbox / f"f{k:04d}.json", "w") as f:
            for i in range(records):
                ts = T0 + k * 600_000 + rng.randrange(3 * 3_600_000)
                f.write(json.dumps({"id": k * records + i, "ts": ts, "user": f"u{rng.randrange(10_000)}",
                                    "msg": "x" * rng.randrange(20, 120)}) + "\n")


def run_round(spark, inbox: Path, work: Path, kind: str, k: int, hive: dict | None = None) -> dict:
    from pyspark.sql import functions as F

    from tributary_read.table.config import Table, TableConfig
    from tributary_read.table.layout import Layout

    times: list[float] = []
    visible: list[float] = []
    out = work / f"{kind}-{k}"
    if kind.startswith("trib"):
        from tributary_read.spark.stream import trib_sink

        Table.create(str(out), TableConfig(Layout(LAYOUT, PARTITION), format="parquet"))
        if hive is not None:
            hive["attach"](out, k)
        sink = trib_sink(str(out), query="bench", time_column="ts")

        def each(df, batch_id):
            t0 = time.perf_counter()
            sink(df, batch_id)
            times.append(time.perf_counter() - t0)
            if hive is not None and sink.version is not None:
                commit = Table.load(str(out)).log.read_commit(sink.version)
                visible.append(time.time() - commit.timestamp_ms / 1000)
                hive["check"](out, k, commit)
    else:
        def each(df, batch_id):
            t0 = time.perf_counter()
            (df.withColumn("dt", F.date_format("ts", "yyyyMMdd")).withColumn("hh", F.date_format("ts", "HH"))
             .write.partitionBy("dt", "hh").mode("append").parquet(str(out)))
            times.append(time.perf_counter() - t0)

    df = (spark.readStream.schema("id long, ts long, user string, msg string").option("maxFilesPerTrigger", 1)
          .json(str(inbox)).withColumn("ts", F.timestamp_millis("ts")))
    q = (df.writeStream.foreachBatch(each).option("checkpointLocation", str(work / f"ck-{kind}-{k}"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    return {"batch_s": times[1:], "visible_s": visible[1:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=12, help="input files = micro-batches per round")
    ap.add_argument("--records", type=int, default=100_000, help="records per file")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hive", action="store_true", help="also time each batch's commit -> Hive partitions mounted")
    ap.add_argument("--quick", action="store_true", help="6 files of 20,000 records, 2 rounds")
    ap.add_argument("--workdir", help="scratch directory (default: benchmarks/out/stream-*)")
    ap.add_argument("--markdown", help="also write the report here")
    ap.add_argument("--json", "--json-out", dest="json_out", help="also write the raw figures here")
    args = ap.parse_args()
    if args.quick:
        args.files, args.records, args.rounds = 6, 20_000, 2
    with WorkDir(args.workdir, "stream-") as work:
        inbox = work / "in"
        make_inbox(inbox, args.files, args.records)
        spark = bench_session("local[2]", "bench-stream")
        if args.hive:
            with hive_pair(work) as (hms_port, hs2_port):
                report = _rounds(spark, inbox, work, args, _hive(hms_port, hs2_port))
        else:
            report = _rounds(spark, inbox, work, args, None)
        spark.stop()
    emit_report(report, _print, args)


def _rounds(spark, inbox, work, args, hive) -> dict:
    """Each round runs every kind once, in an order rotated from round to round."""
    kinds = ["baseline", "trib"] + (["trib+hive"] if hive is not None else [])
    got: dict[str, list[float]] = {kind: [] for kind in kinds}
    visible: list[float] = []
    for k in range(args.rounds):
        for kind in kinds[k % len(kinds):] + kinds[:k % len(kinds)]:
            r = run_round(spark, inbox, work, kind, k, hive if kind == "trib+hive" else None)
            got[kind] += r["batch_s"]
            visible += r["visible_s"]
            print(f"round {k} {kind}: median {statistics.median(r['batch_s']):.3f} s/batch", file=sys.stderr)
    base = statistics.median(got["baseline"])
    medians = {kind: statistics.median(got[kind]) for kind in kinds}
    return {"machine": machine_info(), "files": args.files, "records": args.records, "rounds": args.rounds,
            "baseline_s": base, "trib_s": medians["trib"], "ratio": medians["trib"] / base,
            "trib_hive_s": medians.get("trib+hive"),
            "visible_median_s": statistics.median(visible) if visible else None,
            "visible_max_s": max(visible) if visible else None, "batches": len(got["trib"])}


def _hive(hms_port: int, hs2_port: int) -> dict:
    """attach: the trib table's partition commit mounts into a new Hive table; check: its partitions are there."""
    from tributary_read.hive.commit import CommitPolicy, save_policy
    from tributary_read.hive.model import TableName
    from tributary_read.table.config import Table

    uri = f"hs2://127.0.0.1:{hs2_port}?user=trib"  # the table's DDL and the check, through HiveServer2
    mount = f"thrift://127.0.0.1:{hms_port}"  # the partition commit: the metastore's Thrift API, its fast path

    def attach(root: Path, k: int) -> None:
        from tributary_read.hive.metastore import open_metastore
        from tributary_read.hive.uri import MetastoreURI

        name = f"default.bench_stream_{k}"
        with open_metastore(MetastoreURI.parse(uri)) as ms:
            ms._run(f"DROP TABLE IF EXISTS {name}")
            ms._run(f"CREATE EXTERNAL TABLE {name} (id BIGINT, ts TIMESTAMP, user STRING, msg STRING) "
                    f"PARTITIONED BY (dt STRING) STORED AS PARQUET LOCATION 'file://{root}'")
        save_policy(Table.load(str(root)), CommitPolicy(("metastore",), name, mount))

    def check(root: Path, k: int, commit) -> None:
        from tributary_read.hive.metastore import open_metastore
        from tributary_read.hive.uri import MetastoreURI
        from tributary_read.spark.write import partitions_of

        want = {"dt=" + p.replace("_", "").replace("/", "") for p in partitions_of(commit.files)}
        with open_metastore(MetastoreURI.parse(uri)) as ms:
            have = {p.spec for p in ms.list_partitions(TableName.parse(f"default.bench_stream_{k}"))}
        missing = want - have
        assert not missing, f"partitions not mounted after the batch: {sorted(missing)[:5]}"

    return {"attach": attach, "check": check}


def _print(r: dict) -> None:
    m = r["machine"]
    print(f"## Structured Streaming sink ({m['date']}, {m['nproc']} cores, git {m['git']})\n")
    print(f"{r['batches']} timed micro-batches of {r['records']:,} records each ({r['rounds']} rounds, "
          "the first batch of each round left out), local[2], Parquet.\n")
    rows = [["`df.write.partitionBy` (no commit)", f"{r['baseline_s']:.3f}", "1.00"],
            ["`trib_sink` (exactly once)", f"{r['trib_s']:.3f}", f"{r['ratio']:.2f}"]]
    if r.get("trib_hive_s") is not None:
        rows.append(["`trib_sink`, each commit's partitions mounted in Hive", f"{r['trib_hive_s']:.3f}",
                     f"{r['trib_hive_s'] / r['baseline_s']:.2f}"])
    print(md_table(["foreachBatch", "median s / batch", "ratio"], rows))
    if r.get("visible_median_s") is not None:
        print(f"\nCommit → partitions mounted in Hive (checked through HiveServer2): median "
              f"{r['visible_median_s']:.2f} s, max {r['visible_max_s']:.2f} s.")


if __name__ == "__main__":
    main()
