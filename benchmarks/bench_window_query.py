#!/usr/bin/env python
"""Seed 002's window query against the same query with no window, on a Hive text table of 10,000 files.

One partitioned EXTERNAL text table (``--files`` files over ``--hours`` hour partitions, mtimes spread
evenly over a day), in a local Hive-enabled SparkSession with ``trib udfs spark-args``'s conf (embedded
Derby metastore in the work dir). Three variants of ``SELECT COUNT(1) FROM t``, alternating, ``--reps``
times each after one warm-up:

* **window**: seed 002's ``set dip...sync=true`` + start/end for one hour of mtimes (1/24 of the files);
* **no window**: the same query without the set lines (the filter class is configured but idle);
* **sync=false**: the set lines with ``sync=false``.

The window variant stats every file (a PathFilter sees only the path), then reads 1/24 of the data.

    .venv/bin/python benchmarks/bench_window_query.py
    .venv/bin/python benchmarks/bench_window_query.py --files 2000 --reps 3
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import WorkDir, emit, fs_type, machine_info, md_table, median  # noqa: E402

T0 = 1_592_928_000_000  # seed 002's starttime
H = 3_600_000


def make_table(root: Path, files: int, hours: int, rows: int) -> None:
    for i in range(files):
        d = root / f"2020_06_{24 + i % hours // 24:02d}" / f"{i % hours % 24:02d}"
        d.mkdir(parents=True, exist_ok=True)
        p = d / f"part-{i:05d}.log"
        p.write_text("".join(f"{i}\t{j}\tx\n" for j in range(rows)))
        mtime = T0 + (i * 24 * H) // files  # spread over one day
        os.utime(p, ns=(mtime * 1_000_000,) * 2)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2,000 files, 2 reps")
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--hours", type=int, default=48)
    ap.add_argument("--rows", type=int, default=10)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    args = ap.parse_args(argv)
    if args.quick:
        args.files, args.reps = 2000, 2
    before = machine_info()
    with WorkDir(prefix="bench-window-") as work:
        make_table(work / "t", args.files, args.hours, args.rows)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from tributary_read.hive_udfs import registry as udfs
        from tributary_read.spark.session import spark_session

        conf = {"spark.ui.enabled": "false", "spark.sql.warehouse.dir": (work / "wh").as_uri(),
                "spark.driver.extraJavaOptions": f"-Dderby.system.home={work}", **udfs.spark_conf()}
        spark = spark_session("local[2]", conf, "bench-window", hive=True)
        spark.sparkContext.setLogLevel("ERROR")
        spark.sql(f"CREATE EXTERNAL TABLE t (a STRING, b STRING, c STRING) PARTITIONED BY (dt STRING) "
                  f"ROW FORMAT DELIMITED FIELDS TERMINATED BY '\\t' LOCATION '{(work / 't').as_uri()}'")
        for d in sorted((work / "t").glob("*/*")):
            spark.sql(f"ALTER TABLE t ADD PARTITION (dt='{d.parent.name.replace('_', '')}{d.name}') "
                      f"LOCATION '{d.as_uri()}'")
        keys = [f"dip.mapreduce.input.fileinputformat.{k}" for k in ("sync", "starttime", "endtime")]
        window = {keys[0]: "true", keys[1]: str(T0), keys[2]: str(T0 + H - 1)}
        variants = {"window": window, "no window": {}, "sync=false": {**window, keys[0]: "false"}}
        times: dict[str, list[float]] = {v: [] for v in variants}
        counts = {}
        for rep in range(args.reps + 1):
            for name, sets in variants.items():
                for k in keys:
                    spark.conf.unset(k)
                for k, v in sets.items():
                    spark.sql(f"SET {k}={v}")
                t0 = time.perf_counter()
                counts[name] = spark.sql("SELECT COUNT(1) FROM t").collect()[0][0]
                if rep:
                    times[name].append(time.perf_counter() - t0)
        spark.stop()
        fs = fs_type(work)
    expected_window = sum(1 for i in range(args.files) if (i * 24 * H) // args.files < H) * args.rows
    assert counts["window"] == expected_window and counts["no window"] == args.files * args.rows
    base = median(times["no window"])
    rows = [[n, f"{median(t):.2f}", f"{min(t):.2f}", counts[n], f"{median(t) / base:.2f}x"] for n, t in times.items()]
    text = (f"## Seed 002's window query vs no window: {args.files:,} files, {args.hours} partitions\n\n"
            f"machine: {before['nproc']} cores, {before['cpu']}; load {before['loadavg']}; data on {fs}; "
            f"{before['date']}; {args.reps} reps after a warm-up\n\n"
            + md_table(["query", "median s", "best s", "COUNT(1)", "vs no window"], rows))
    return emit(text, {"files": args.files, "times": times, "counts": counts, "machine": before}, args)


if __name__ == "__main__":
    main()
