"""A warm hourly run: ``trib etl run`` against the same job written by hand, both on one Spark Connect server.

Each side is a whole process, as a scheduler starts it, and a thin client of one local Spark Connect
server (``tributary_read.services.spark_connect``, what ``trib spark up`` starts) that is warm before
the first timed run:

* ``hand-written``: a PySpark Connect script given the hour's files: ``spark.read.schema(S).json(files)``
  -> the SQL -> ``write.partitionBy("dt").parquet`` into a fresh directory; nothing more;
* ``trib etl run``: a job reading the landing zone through a consumer (its first run: every file there),
  the same SQL, the output a trib Parquet table, committed with its manifest, the consumer acked.

Each timed run has its own landing zone (one hour, ``--files`` x ``--records``), output and consumer,
so trib does the first run of its job every time (exactly once per schedule time), and the two sides
read the same files. Goal (issue text): trib ≤ 1.05x the hand-written script, and ≤ 3 s whole process
on an idle 2-core machine. Runs alternate, after one warm-up run of each side.

    .venv/bin/python benchmarks/bench_warm_etl.py            # 10,000 records an hour, 5 runs each
    .venv/bin/python benchmarks/bench_warm_etl.py --quick
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, WorkDir, emit, machine_info, md_table, median  # noqa: E402
from bench_etl import H, SCHEMA, SQL, make_source  # noqa: E402

GOAL_RATIO, GOAL_SECONDS = 1.05, 3.0
LAYOUT, PARTITION = "{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}"
TRIB = [sys.executable, "-m", "tributary_read.cli.main"]

HAND = """\
import sys
from pyspark.sql import SparkSession

remote, out, sql, schema, *paths = sys.argv[1:]
spark = SparkSession.builder.remote(remote).getOrCreate()
spark.read.schema(schema).json(paths).createOrReplaceTempView("raw")
(spark.sql(sql).selectExpr("*", "date_format(ts, 'yyyyMMddHH') AS dt")
 .write.mode("append").partitionBy("dt").parquet(out))
spark.stop()
"""

JOB = """\
[job]
name = "{name}"
sql = "q.sql"

[[inputs]]
table = "{raw}"
view = "raw"
mode = "consumer"
consumer = "{name}"
layout = "{layout}"
format = "jsonl"
schema = "{schema}"

[output]
table = "{out}"
time_column = "ts"
"""


def _land(base: Path, end_ms: int, files: int, records: int, seed: int) -> tuple[Path, list[str]]:
    raw = base / "raw"
    make_source(raw, end_ms, 1, files, records, seed)
    return raw, sorted(str(p) for p in raw.rglob("*.jsonl"))


def _timed(argv: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    took = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} ... failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return took


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=10, help="files in the hour (10)")
    ap.add_argument("--records", type=int, default=1_000, help="records per file (1,000)")
    ap.add_argument("--reps", type=int, default=5, help="timed runs per side (5)")
    ap.add_argument("--dir", help="scratch directory parent (default benchmarks/out)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--markdown", help="also write the markdown section here")
    args = ap.parse_args(argv)
    if args.quick:
        args.files, args.records, args.reps = 4, 250, 2

    from tributary_read.services import spark_connect as sc

    info = machine_info()
    now = int(time.time() * 1000)
    end = now - now % H  # the hour that just ended: past any minimum age
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("SPARK_REMOTE", None)
    times: dict[str, list[float]] = {"hand": [], "trib": []}
    with WorkDir(args.dir, "bench-warm-", args.keep) as work:
        hand = work / "hand.py"
        hand.write_text(HAND)
        t0 = time.perf_counter()
        server = sc.start(str(work / "server"), 0, hive_dir=None, timeout=300)[0]
        started = time.perf_counter() - t0
        env["TRIB_SPARK_REMOTE"] = server.remote
        try:
            for i in range(args.reps + 1):  # run 0 warms both sides up, untimed
                base = work / f"run{i}"
                raw, files = _land(base, end, args.files, args.records, seed=i)
                h = _timed([sys.executable, str(hand), server.remote, str(base / "hand-out"), SQL, SCHEMA, *files],
                           env)
                out = base / "out"
                subprocess.run([*TRIB, "table", "create", str(out), "--layout", LAYOUT, "--partition", PARTITION,
                                "--format", "parquet"], check=True, capture_output=True, env=env)
                (base / "q.sql").write_text(SQL + "\n")
                job = base / "job.toml"
                job.write_text(JOB.format(name=f"warm{i}", raw=raw, layout=LAYOUT, schema=SCHEMA, out=out))
                t = _timed([*TRIB, "etl", "run", str(job), "--schedule-time",
                            time.strftime("%Y-%m-%dT%H:00:00Z", time.gmtime(end / 1000)), "-q"], env)
                if i:
                    times["hand"].append(h)
                    times["trib"].append(t)
                print(f"run {i}{' (warm-up)' if not i else ''}: hand-written {h:.2f} s, trib {t:.2f} s",
                      file=sys.stderr)
        finally:
            sc.stop(str(work / "server"))
    hm, tm = median(times["hand"]), median(times["trib"])
    ratio = tm / hm
    records = args.files * args.records
    rows = [["hand-written PySpark Connect script", f"{hm:.2f}", f"{min(times['hand']):.2f}", "1.00x", ""],
            ["`trib etl run` (consumer input, trib table, manifest, ack)", f"{tm:.2f}", f"{min(times['trib']):.2f}",
             f"{ratio:.2f}x", f"<= {GOAL_RATIO}x: {'met' if ratio <= GOAL_RATIO else '**MISSED**'}; "
             f"<= {GOAL_SECONDS:.0f} s: {'met' if tm <= GOAL_SECONDS else '**MISSED**'}"]]
    text = "\n".join([
        "## A warm hourly run on Spark Connect (`benchmarks/bench_warm_etl.py`)",
        "",
        f"One hour of {records:,} records in {args.files} jsonl files; one local Spark Connect server "
        f"(local[2], started once: {started:.1f} s, not timed), warm before the timed runs; each side a whole "
        f"process, {args.reps} alternating runs after one warm-up each. {info['date']}, {info['nproc']} CPUs "
        f"({info['cpu']}), load average {info['loadavg']}, git {info['git']}.",
        "",
        md_table(["side", "median s", "best s", "ratio", "goal"], rows),
        "",
        f"Command: `.venv/bin/python benchmarks/bench_warm_etl.py{' --quick' if args.quick else ''}`.",
    ])
    return emit(text, {"machine": info, "records": records, "times": times, "ratio": ratio,
                       "server_start_s": started}, args)


if __name__ == "__main__":
    main()
