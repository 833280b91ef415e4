"""One hourly ETL cycle: ``trib`` (run_job) against the same Spark job written by hand.

A raw source (another tool's ``yyyy_MM_dd/HH`` directory of jsonl files, each
file's mtime inside its hour, some records late by 1-3 hours) holds 24 hours;
each cycle reads the newest hour, runs one SQL query and writes Parquet
partitioned by event hour. Variants, all in ONE SparkSession, same data, same
SQL, a fresh output directory per run:

* ``hand-written``: the file list given explicitly (a listing of the hour's
  directory): ``spark.read.json(paths)`` -> SQL -> ``df.write.partitionBy``
  to a plain directory;
* ``spark modifiedAfter``: Spark's own ``modifiedAfter``/``modifiedBefore``
  over the whole root (``recursiveFileLookup``) -> SQL -> ``partitionBy``;
* ``trib run_job``: :func:`tributary_read.etl.run.run_job` (an ``mtime`` input:
  resolve the window, read exactly those files, SQL, write through the
  committer with the transaction, one manifest), ``count_inputs = false``
  (the default also counts the input rows: one more pass, shown separately);
* ``trib library``: the same calls without the runner (resolve ->
  ``read_files`` -> SQL -> ``spark.write.write``).

Goal: ``trib run_job`` <= 1.2x ``hand-written``. Median of ``--reps`` runs after
a warm-up round, the variants interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

from _common import WorkDir, emit, fs_type, machine_info, md_table, median  # noqa: E402

H = 3_600_000
SCHEMA = "id BIGINT, ts BIGINT, user STRING, kind STRING, amount DOUBLE"
#: the job's SQL, on the view ``raw``; trib adds the layout's partition column ``dt`` to the view
SQL = ("SELECT id, timestamp_millis(ts) AS ts, user, upper(kind) AS kind, amount * 1.1 AS amount "
       "FROM raw WHERE amount >= 0")
GOAL = 1.2


def make_source(root: Path, end_ms: int, hours: int, files: int, records: int, seed: int = 1) -> int:
    """``hours`` hourly directories ending at ``end_ms``; returns the newest hour's record count."""
    rng = random.Random(seed)
    kinds = ["click", "view", "buy", "share"]
    rid = 0
    newest = 0
    for h in range(hours):
        start = end_ms - (hours - h) * H
        d = root / time.strftime("%Y_%m_%d/%H", time.gmtime(start / 1000))
        d.mkdir(parents=True, exist_ok=True)
        for f in range(files):
            lines = []
            for _ in range(records):
                late = rng.random() < 0.05
                ts = start + rng.randrange(H) - (rng.randrange(1, 4) * H if late else 0)
                lines.append(json.dumps({"id": rid, "ts": ts, "user": f"u{rng.randrange(10_000)}",
                                         "kind": rng.choice(kinds), "amount": round(rng.uniform(-1, 100), 2)}))
                rid += 1
            p = d / f"events-{h:03d}-{f:03d}.jsonl"
            p.write_text("\n".join(lines) + "\n")
            mtime = (start + (f + 1) * (H // (files + 1))) / 1000
            os.utime(p, (mtime, mtime))
        if h == hours - 1:
            newest = files * records
    return newest


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=int, default=24, help="hours of source data (24)")
    ap.add_argument("--files", type=int, default=20, help="files per hour (20)")
    ap.add_argument("--records", type=int, default=2_000, help="records per file (2,000)")
    ap.add_argument("--reps", type=int, default=5, help="timed runs per variant (5)")
    ap.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    ap.add_argument("--dir", help="scratch directory parent (default benchmarks/out)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--markdown", help="also write the markdown section here")
    args = ap.parse_args(argv)
    if args.quick:
        args.hours, args.files, args.records, args.reps = 4, 5, 200, 2

    from pyspark.sql import functions as F

    from tributary_read.etl.job import Job
    from tributary_read.etl.run import run_job
    from tributary_read.read.resolve import Source, resolve
    from tributary_read.read.window import TimeWindow
    from tributary_read.table.manifest import Transaction
    from tributary_read.spark.read import read_files
    from tributary_read.spark.session import spark_session
    from tributary_read.spark.write import write
    from tributary_read.table.config import Table, TableConfig
    from tributary_read.table.layout import Layout

    layout = Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")
    r: dict = {"machine": machine_info(), "args": vars(args)}
    spark = spark_session(args.master, {"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false"},
                          "trib-bench-etl")
    spark.sparkContext.setLogLevel("ERROR")
    end = (int(time.time() * 1000) // H) * H  # the schedule time: the newest hour is [end - 1 h, end)
    with WorkDir(args.dir, prefix="bench-etl-", keep=args.keep) as work:
        r["fs"] = fs_type(work)
        src = work / "raw"
        want = make_source(src, end, args.hours, args.files, args.records)
        newest_dir = src / time.strftime("%Y_%m_%d/%H", time.gmtime((end - H) / 1000))
        runs = {"n": 0}

        def fresh(kind: str) -> Path:
            runs["n"] += 1
            return work / f"out-{kind}-{runs['n']}"

        def partitioned(df):
            return (df.withColumn("day", F.date_format("ts", "yyyy_MM_dd"))
                    .withColumn("hour", F.date_format("ts", "HH")))

        def hand_written() -> int:
            out = fresh("hand")
            paths = sorted(str(p) for p in newest_dir.iterdir() if p.is_file())
            spark.read.schema(SCHEMA).json(paths).createOrReplaceTempView("raw")
            partitioned(spark.sql(SQL)).write.mode("append").partitionBy("day", "hour").parquet(str(out))
            return len(paths)

        def spark_mtime() -> int:
            out = fresh("mtime")
            after = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((end - H) / 1000 - 1))
            before = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(end / 1000))
            (spark.read.schema(SCHEMA).option("recursiveFileLookup", "true")
             .option("modifiedAfter", after).option("modifiedBefore", before)
             .json(str(src)).createOrReplaceTempView("raw"))
            partitioned(spark.sql(SQL)).write.mode("append").partitionBy("day", "hour").parquet(str(out))
            return -1

        def job_file(count: bool) -> Path:
            out = fresh("trib")
            Table.create(str(out), TableConfig(layout, format="parquet", compression="snappy"))
            (out.parent / f"{out.name}.sql").write_text(SQL)
            path = out.parent / f"{out.name}.toml"
            path.write_text(
                f'[job]\nname = "bench"\nsql = "{out.name}.sql"\ncount_inputs = {str(count).lower()}\n\n'
                f'[[inputs]]\ntable = "{src}"\nview = "raw"\nmode = "mtime"\nwindow = "1h"\n'
                f'layout = "{layout.directory}"\nformat = "jsonl"\nschema = "{SCHEMA}"\n\n'
                f'[output]\ntable = "{out}"\ntime_column = "ts"\n')
            return path

        def trib_job(count: bool):
            def run() -> int:
                report = run_job(Job.load(job_file(count)), end, spark=spark)
                d = report.to_json() if hasattr(report, "to_json") else {}
                return d.get("inputs", [{}])[0].get("files", -1)
            return run

        def trib_library() -> int:
            out = fresh("lib")
            table = Table.create(str(out), TableConfig(layout, format="parquet", compression="snappy"))
            fs = resolve(Source.open(str(src), None, layout), mode="mtime", window=TimeWindow(end - H, end - 1))
            read_files(spark, fs, schema=SCHEMA, options={"format": "jsonl"}).createOrReplaceTempView("raw")
            write(spark.sql(SQL), table, time_column="ts",
                  transaction=Transaction("etl:bench", {"schedule_time_ms": end}))
            return len(fs.files)

        variants = {"hand-written": hand_written, "spark modifiedAfter": spark_mtime,
                    "trib run_job": trib_job(False), "trib run_job, count_inputs": trib_job(True)}
        try:
            trib_library()
            variants["trib library"] = trib_library
        except Exception as e:  # noqa: BLE001 - the library path's signature may differ: say so, go on
            r["library_error"] = f"{type(e).__name__}: {e}"
        times: dict[str, list[float]] = {k: [] for k in variants}
        for k, fn in variants.items():  # warm-up: JIT, Python workers, caches
            fn()
        for _ in range(args.reps):
            for k, fn in variants.items():
                t0 = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t0)
        # the trib output has every record of the newest hour exactly once
        outs = sorted((p for p in work.glob("out-trib-*") if p.is_dir()), key=lambda p: int(p.name.rsplit("-", 1)[1]))
        last = outs[-1]
        committed = Table.load(str(last)).log.state()
        n = sum(f.records for f in committed.files.values())
        back = spark.read.parquet(*[str(last / p) for p in committed.files]).count() if committed.files else 0
        kept = spark.read.schema(SCHEMA).json(str(newest_dir)).where("amount >= 0").count()
        if not (n == back == kept):
            raise RuntimeError(f"trib output has {n} records ({back} read back), expected {kept}")
    spark.stop()

    base = median(times["hand-written"])
    rows = []
    res = {}
    for k, ts in times.items():
        m = median(ts)
        res[k] = {"median_s": m, "best_s": min(ts), "runs": ts, "ratio": m / base}
        goal = ""
        if k == "trib run_job":
            goal = f"<= {GOAL}x: " + ("met" if m / base <= GOAL else "**MISSED**")
        rows.append([k, f"{m * 1000:,.0f}", f"{min(ts) * 1000:,.0f}", f"{m / base:.2f}x", goal])
    r.update({"variants": res, "newest_hour_records": want, "newest_hour_files": args.files, "output_records": n})
    md = [f"## One hourly ETL cycle ({args.files} files x {args.records:,} records in the newest of {args.hours} "
          f"hours, {r['fs']}, Spark {args.master})", "",
          f"Read the newest hour's jsonl files, `{SQL}`, write Parquet (snappy, as Spark's default) "
          f"partitioned by event hour ({n:,} output records). One SparkSession; median (best) of {args.reps} runs after a warm-up, "
          "variants interleaved, a fresh output per run. Load average before: "
          f"{r['machine']['loadavg']}.", "",
          md_table(["variant", "median ms", "best ms", "ratio", "goal"], rows), ""]
    if "library_error" in r:
        md += [f"(trib library variant skipped: {r['library_error']})", ""]
    return emit("\n".join(md), r, args)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
