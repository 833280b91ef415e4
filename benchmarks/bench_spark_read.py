#!/usr/bin/env python
"""``read_files`` against ``spark.read`` on the same explicit path list.

One plain directory of ``--files`` (2,000) small files spread over ``--hours``
(48) hourly directories ``{yyyy}_{MM}_{dd}/{HH}``, resolved once by trib (not
timed: this measures the read). Both sides read the same files, with the same
schema, in the same SparkSession (``local[2]``), as two cases:

a. ``count()``: Spark prunes every column, so this is the cost of planning and
   scanning the exact file list (the goal: overhead <= 5%);
b. a full scan that materialises every column (``sum(hash(...))``), where
   ``read_files`` also computes the partition column ``dt`` per row from the
   file path and the baseline has no partition column at all.

Each case runs once to warm up, then ``--reps`` times with trib and the
baseline alternating; figures are medians (and bests).

    .venv/bin/python benchmarks/bench_spark_read.py
    .venv/bin/python benchmarks/bench_spark_read.py --quick --markdown out/spark-read.md --json out/spark-read.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import WorkDir, bench_session, emit, fs_type, hour_dir, machine_info, md_table, median  # noqa: E402

H = 3_600_000
T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z
DIRECTORY = "{yyyy}_{MM}_{dd}/{HH}"
SCHEMA = "id bigint, ts bigint, user string, msg string"
GOAL = 1.05


def make_tree(root: Path, files: int, hours: int, rows: int, fmt: str) -> int:
    n = 0
    for i in range(files):
        t = T0 + (i % hours) * H
        d = root / hour_dir(t)
        d.mkdir(parents=True, exist_ok=True)
        lines = []
        for j in range(rows):
            rec = {"id": n, "ts": t + j, "user": f"u{n % 97}", "msg": f"event {n} of file {i}"}
            lines.append(json.dumps(rec) if fmt == "jsonl" else f"{rec['id']},{rec['ts']},{rec['user']},{rec['msg']}")
            n += 1
        (d / f"part-{i:05d}.{'jsonl' if fmt == 'jsonl' else 'csv'}").write_text("\n".join(lines) + "\n")
    return n


def session(master: str):
    return bench_session(master, "bench-spark-read")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=2000, help="files (2,000)")
    ap.add_argument("--hours", type=int, default=48, help="hourly directories (48)")
    ap.add_argument("--rows", type=int, default=200, help="records per file (200)")
    ap.add_argument("--format", choices=["jsonl", "csv"], default="jsonl", help="file format (jsonl)")
    ap.add_argument("--reps", type=int, default=7, help="timed repetitions per side and case (7)")
    ap.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    ap.add_argument("--dir", help="scratch directory parent (default benchmarks/out)")
    ap.add_argument("--keep", action="store_true", help="keep the generated tree")
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--markdown", help="also write the markdown section here")
    args = ap.parse_args(argv)
    if args.quick:
        args.files, args.hours, args.rows, args.reps = 200, 12, 50, 3

    from pyspark.sql import functions as F

    from tributary_read.read.resolve import plain_layout, resolve
    from tributary_read.spark.read import read_files

    r: dict = {"machine": machine_info(), "args": vars(args)}
    with WorkDir(args.dir, prefix="bench-spark-read-", keep=args.keep) as work:
        r["fs"] = fs_type(work)
        root = work / "table"
        t = time.perf_counter()
        records = make_tree(root, args.files, args.hours, args.rows, args.format)
        r["generation_s"] = time.perf_counter() - t
        t = time.perf_counter()
        fs = resolve(str(root), layout=plain_layout(DIRECTORY))
        r["resolve_s"] = time.perf_counter() - t
        if len(fs.files) != args.files:
            raise RuntimeError(f"resolved {len(fs.files)} files, expected {args.files}")
        paths = [fs.hadoop_uri(f) for f in fs.files]
        spark_format = "json" if args.format == "jsonl" else "csv"
        t = time.perf_counter()
        spark = session(args.master)
        r["session_start_s"] = time.perf_counter() - t

        def baseline():
            return spark.read.format(spark_format).schema(SCHEMA).load(paths)

        def trib():
            return read_files(spark, fs, schema=SCHEMA, options={"format": args.format})

        def count(make):
            return make().count()

        def scan(make):
            df = make()
            return df.select(F.sum(F.hash(*df.columns))).collect()[0][0] is not None

        cases = {"count": count, "scan": scan}
        sides = {"spark.read": baseline, "read_files": trib}
        if count(baseline) != records or count(trib) != records:
            raise RuntimeError("read_files and spark.read disagree with the records written")
        if sorted(trib().columns) != sorted([*baseline().columns, "dt"]):
            raise RuntimeError(f"unexpected columns {trib().columns}")
        times: dict = {c: {s: [] for s in sides} for c in cases}
        for c, run in cases.items():
            for make in sides.values():  # warm-up
                run(make)
            for _ in range(args.reps):
                for s, make in sides.items():
                    t = time.perf_counter()
                    run(make)
                    times[c][s].append(time.perf_counter() - t)
        spark.stop()

    r["loadavg_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    r.update({"records": records, "times": times})
    rows = []
    for c, label in (("count", "a. `count()`"), ("scan", "b. full scan, `sum(hash(all columns))`")):
        base, ours = times[c]["spark.read"], times[c]["read_files"]
        ratio = median(ours) / median(base)
        r[f"{c}_ratio"] = ratio
        goal = (f"<= {GOAL:.2f}x: " + ("met" if ratio <= GOAL else "**MISSED**")) if c == "count" else \
            "(partition column computed per row)"
        rows.append([label, f"{median(base) * 1000:,.0f}", f"{min(base) * 1000:,.0f}",
                     f"{median(ours) * 1000:,.0f}", f"{min(ours) * 1000:,.0f}", f"{ratio:.3f}x", goal])
    m = r["machine"]
    md = [f"## Spark: `read_files` vs `spark.read` on the same path list ({args.files:,} files in {args.hours} "
          f"hourly directories, {records:,} {args.format} records, {r['fs']})", "",
          f"Same files, same schema (`{SCHEMA}`), same session (`{args.master}`); median (best) of {args.reps} "
          f"runs after a warm-up, the two sides alternating. trib's resolve (not timed here): "
          f"{r['resolve_s'] * 1000:,.0f} ms. Load average before: {m['loadavg']}; after: {r['loadavg_after']}.", "",
          md_table(["case", "spark.read median ms", "best", "read_files median ms", "best", "ratio", "goal"], rows),
          ""]
    return emit("\n".join(md), r, args)


if __name__ == "__main__":
    main()
