"""An hourly incremental run over a million files: trib's consumer against Spark's file stream source.

One landing zone of ``--hours`` hourly directories x ``--per-hour`` one-line files
(default 144 x 7,000 = 1,008,000), all inside the last 7 days. Both readers
first catch up (trib: one uncapped first plan + ack; Spark: one
``availableNow`` query with ``maxFileAge=1h`` so its first batch reads only
the newest hour but still lists and records the tree). Then, ``--runs`` times,
one new hour of ``--per-hour`` files lands and each reader runs once, timed as
a scheduler runs it:

* trib: ``trib files ROOT --layout L --consumer C --json`` then
  ``trib consumer ack``, two processes;
* Spark (driver heap ``--driver-memory``, 4g: at 1g its file source runs out of
  memory on a million paths): one checkpointed ``spark.readStream.format("text")`` query over
  ``ROOT/[0-9]*/[0-9]*`` with ``trigger(availableNow=True)`` in a running
  ``local[2]`` session (its start-up is not counted).

Both must deliver exactly the new hour's files each run (checked).

    .venv/bin/python benchmarks/bench_hourly.py            # ~10 min: 1M files
    .venv/bin/python benchmarks/bench_hourly.py --quick    # 48 x 500
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, WorkDir, bench_session, emit, hour_dir, machine_info, md_table, median  # noqa: E402

H = 3_600_000
LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
TRIB = [sys.executable, "-m", "tributary_read.cli.main", "-q"]


def make_hour(root: Path, t: int, per_hour: int, tag: str) -> None:
    d = root / hour_dir(t)
    d.mkdir(parents=True, exist_ok=True)
    step = min(1000, H // 2 // per_hour)
    for i in range(per_hour):
        path = d / f"{tag}-{i:05d}.log"
        path.write_bytes(b"x\n")  # one line: a file stream source sees a file through its rows
        os.utime(path, ns=((t + i * step) * 1_000_000,) * 2)
    os.utime(d, ns=((t + H // 2 + 1000) * 1_000_000,) * 2)


def trib_run(root: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    p = subprocess.run([*TRIB, "files", str(root), "--layout", LAYOUT, "--consumer", "bench", "--max-files", "off",
                        "--json"], capture_output=True, text=True, cwd=REPO)
    if p.returncode:
        raise RuntimeError(p.stderr[-2000:])
    plan = json.loads(p.stdout)
    a = subprocess.run([*TRIB, "consumer", "ack", str(root), "bench", plan["plan_id"]], capture_output=True, text=True,
                       cwd=REPO)
    if a.returncode:
        raise RuntimeError(a.stderr[-2000:])
    return time.perf_counter() - t0, len(plan["files"])


def spark_run(spark, root: Path, checkpoint: Path) -> tuple[float, int]:
    from pyspark.sql import functions as F

    seen: list[int] = []
    t0 = time.perf_counter()
    df = (spark.readStream.format("text").option("maxFileAge", "1h").load(f"{root}/[0-9]*/[0-9]*")
          .select(F.input_file_name().alias("f")))
    q = (df.writeStream.foreachBatch(lambda b, _id: seen.append(b.distinct().count()))
         .trigger(availableNow=True).option("checkpointLocation", str(checkpoint)).start())
    q.awaitTermination()
    return time.perf_counter() - t0, sum(seen)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=int, default=144)
    ap.add_argument("--per-hour", type=int, default=7000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--driver-memory", default="4g", help="Spark's driver heap: its file source keeps every seen "
                    "path in memory (the default 1g runs out at 1M files)")
    ap.add_argument("--quick", action="store_true", help="48 hours x 500 files, 2 runs")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--markdown", help="also write the markdown section here")
    args = ap.parse_args(argv)
    if args.quick:
        args.hours, args.per_hour, args.runs = 48, 500, 2
    machine = machine_info()
    now = int(time.time() * 1000)
    base = now - now % H - (args.hours + args.runs + 1) * H
    with WorkDir(prefix="hourly-") as work:
        root = work / "zone"
        t0 = time.perf_counter()
        for h in range(args.hours):
            make_hour(root, base + h * H, args.per_hour, "part")
        gen = time.perf_counter() - t0
        files = args.hours * args.per_hour
        print(f"{files:,} files in {gen:.0f} s; catching up ...", file=sys.stderr)
        trib_first, n = trib_run(root)
        assert n == files, (n, files)
        spark = bench_session("local[2]", "bench-hourly", **{"spark.driver.memory": args.driver_memory})
        spark_first, _ = spark_run(spark, root, work / "checkpoint")
        trib_s, spark_s = [], []
        for r in range(args.runs):
            make_hour(root, base + (args.hours + r) * H, args.per_hour, f"new{r}")
            s, n = trib_run(root)
            assert n == args.per_hour, ("trib", r, n)
            trib_s.append(s)
            s, n = spark_run(spark, root, work / "checkpoint")
            assert n == args.per_hour, ("spark", r, n)
            spark_s.append(s)
            print(f"run {r}: trib {trib_s[-1]:.2f} s, Spark {spark_s[-1]:.2f} s", file=sys.stderr)
        spark.stop()
    t, s = median(trib_s), median(spark_s)
    rows = [["an hourly run (median)", f"{t:.2f} s", f"{s:.2f} s", f"{s / t:.1f}x"],
            ["catching up (first run)", f"{trib_first:.1f} s", f"{spark_first:.1f} s", ""]]
    text = "\n".join([
        f"## An hourly run over {files:,} files: trib's consumer vs Spark's file stream source (`bench_hourly.py`)", "",
        f"{args.hours} hourly directories x {args.per_hour:,} files, then {args.runs} runs of one new hour each. "
        f"{machine.get('nproc')} CPUs, load {machine.get('loadavg')}.", "",
        md_table(["", "trib consumer (2 processes)", "Spark file source (query)", "Spark / trib"], rows), ""])
    return emit(text, {"trib_s": trib_s, "spark_s": spark_s, "trib_first_s": trib_first,
                       "spark_first_s": spark_first, "files": files, "machine": machine}, args)


if __name__ == "__main__":
    main()
