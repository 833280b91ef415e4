"""A warm hourly run: ``trib etl run`` against the same job written by hand, both on one Spark Connect server;
and the cold path: both on a classic driver of their own.

Each side is a whole process, as a scheduler starts it. **Warm**: each is a thin client of one local
Spark Connect server (``tributary_read.services.spark_connect``, what ``trib spark up`` starts) that is
warm before the first timed run:

* ``hand-written``: a PySpark Connect script given the hour's files: ``spark.read.schema(S).json(files)``
  -> the SQL -> ``write.partitionBy("dt").parquet`` into a fresh directory; nothing more;
* ``trib etl run``: a job reading the landing zone through a consumer (its first run: every file there),
  the same SQL, the output a trib Parquet table, committed with its manifest, the consumer acked.

**Cold** (``classic``): the same two, each starting its own classic driver (``local[2]``, a JVM per
process): the script with ``SparkSession.builder.master("local[2]")``, trib's job with ``[spark] master =
"local[2]"`` and no remote.

Each run is the next hour of one hourly job, as a scheduler runs it: the hour's files land (``--files`` x
``--records``), then the script reads them and appends to its output, and ``trib etl run`` reads them
through the job's consumer and commits them to the job's table. The two sides read the same files; the
job's consumer, table and (warm) Spark Connect session carry over from hour to hour. Goals (issue text): warm, trib <= 1.05x the hand-written script and <= 3 s whole
process on an idle 2-core machine; cold, trib <= 1.05x. Runs alternate, after one warm-up run of each
side. The CPU seconds are the client Python process's (user + system; a classic driver's JVM is not
counted: the process never waits for it, so its time is not the process's children's). Python's bytecode cache is on for every process (``PYTHONDONTWRITEBYTECODE`` is dropped),
as for an installed trib: without it trib would compile its own modules at every start.

    .venv/bin/python benchmarks/bench_warm_etl.py            # 10,000 records an hour, 5 runs each, both
    .venv/bin/python benchmarks/bench_warm_etl.py --only warm
    .venv/bin/python benchmarks/bench_warm_etl.py --quick
"""

from __future__ import annotations

import argparse
import os
import resource
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
if remote.startswith("local"):  # the cold path: a classic driver of its own, bound as trib binds its own
    spark = (SparkSession.builder.master(remote).config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.host", "127.0.0.1").config("spark.ui.showConsoleProgress", "false").getOrCreate())
else:
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
{spark}"""
CLASSIC = '\n[spark]\nmaster = "local[2]"\n'



def _land(raw: Path, end_ms: int, files: int, records: int, seed: int) -> list[str]:
    """The hour ending at ``end_ms``: ``files`` x ``records`` in its directory of ``raw``; its files."""
    make_source(raw, end_ms, 1, files, records, seed)
    return sorted(str(p) for p in (raw / time.strftime("%Y_%m_%d/%H", time.gmtime(end_ms / 1000 - 3600))).glob("*.jsonl"))


def _timed(argv: list[str], env: dict) -> tuple[float, float]:
    """(wall s, CPU s of the process and the children it waited for) of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    took = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} ... failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _side_by_side(work: Path, name: str, remote: str, args, env: dict, end: int) -> dict:
    """Alternating whole-process runs of the hand-written script and ``trib etl run`` against ``remote``
    (``sc://``: a server; ``local[2]``: each its own classic driver), each run the next hour of one hourly
    job: its files land, then each side processes them. Returns their times."""
    hand = work / "hand.py"
    hand.write_text(HAND)
    out: dict[str, list[float]] = {"hand": [], "trib": [], "hand_cpu": [], "trib_cpu": []}
    classic = not remote.startswith("sc://")
    raw, table = work / f"{name}-raw", work / f"{name}-out"
    subprocess.run([*TRIB, "table", "create", str(table), "--layout", LAYOUT, "--partition", PARTITION,
                    "--format", "parquet"], check=True, capture_output=True, env=env)
    (work / "q.sql").write_text(SQL + "\n")
    job = work / f"{name}.toml"
    job.write_text(JOB.format(name=name, raw=raw, layout=LAYOUT, schema=SCHEMA, out=table,
                              spark=CLASSIC if classic else ""))
    for i in range(args.reps + 1):  # run 0 warms both sides up, untimed
        hour_end = end - (args.reps - i) * H
        files = _land(raw, hour_end, args.files, args.records, seed=i)
        h, hc = _timed([sys.executable, str(hand), remote, str(work / f"{name}-hand-out"), SQL, SCHEMA, *files],
                       env)
        t, tc = _timed([*TRIB, "etl", "run", str(job), "--schedule-time",
                        time.strftime("%Y-%m-%dT%H:00:00Z", time.gmtime(hour_end / 1000)), "-q"], env)
        if i:
            for k, v in (("hand", h), ("trib", t), ("hand_cpu", hc), ("trib_cpu", tc)):
                out[k].append(v)
        print(f"{name} run {i}{' (warm-up)' if not i else ''}: hand-written {h:.2f} s ({hc:.1f} CPU-s), "
              f"trib {t:.2f} s ({tc:.1f} CPU-s)", file=sys.stderr)
    return out


def _rows(times: dict, what: str, goal_s: float | None) -> tuple[list[list[str]], float]:
    hm, tm = median(times["hand"]), median(times["trib"])
    ratio = tm / hm
    goal = f"<= {GOAL_RATIO}x: {'met' if ratio <= GOAL_RATIO else '**MISSED**'}"
    if goal_s is not None:
        goal += f"; <= {goal_s:.0f} s: {'met' if tm <= goal_s else '**MISSED**'}"
    return [[f"hand-written {what} script", f"{hm:.2f}", f"{min(times['hand']):.2f}",
             f"{median(times['hand_cpu']):.1f}", "1.00x", ""],
            ["`trib etl run` (consumer input, trib table, manifest, ack)", f"{tm:.2f}", f"{min(times['trib']):.2f}",
             f"{median(times['trib_cpu']):.1f}", f"{ratio:.2f}x", goal]], ratio


def _sizes(args) -> str:
    """The command's size options where they are not the defaults (``--quick`` says its own)."""
    if args.quick:
        return ""
    given = (("--files", args.files, 10), ("--records", args.records, 1_000), ("--reps", args.reps, 5))
    return "".join(f" {flag} {value}" for flag, value, default in given if value != default)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=10, help="files in the hour (10)")
    ap.add_argument("--records", type=int, default=1_000, help="records per file (1,000)")
    ap.add_argument("--reps", type=int, default=5, help="timed runs per side (5)")
    ap.add_argument("--only", choices=("warm", "classic"), help="one section only (default: both)")
    ap.add_argument("--dir", help="scratch directory parent (default benchmarks/out)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--markdown", help="also write the markdown section here")
    args = ap.parse_args(argv)
    if args.quick:
        args.files, args.records, args.reps = 4, 250, 2

    from tributary_read.services import spark_connect as sc

    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed trib has its bytecode; so do the server's workers
    info = machine_info()
    now = int(time.time() * 1000)
    end = now - now % H  # the hour that just ended: past any minimum age
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for var in ("SPARK_REMOTE", "TRIB_SPARK_REMOTE", "TRIB_SPARK_MASTER", "SPARK_MASTER"):
        env.pop(var, None)
    records = args.files * args.records
    sections, result = [], {"machine": info, "records": records}
    with WorkDir(args.dir, "bench-warm-", args.keep) as work:
        if args.only in (None, "warm"):
            t0 = time.perf_counter()
            server = sc.start(str(work / "server"), 0, hive_dir=None, timeout=300)[0]
            started = time.perf_counter() - t0
            try:
                warm = _side_by_side(work, "warm", server.remote, args, {**env, "TRIB_SPARK_REMOTE": server.remote},
                                     end)
            finally:
                sc.stop(str(work / "server"))
            rows, ratio = _rows(warm, "PySpark Connect", GOAL_SECONDS)
            result.update(times=warm, ratio=ratio, server_start_s=started)
            sections += [
                "### Warm: both on one Spark Connect server",
                "",
                f"One local Spark Connect server (local[2], started once: {started:.1f} s, not timed), warm before "
                "the timed runs; each side a thin client.",
                "",
                md_table(["side", "median s", "best s", "median CPU-s", "ratio", "goal"], rows),
                ""]
        if args.only in (None, "classic"):
            cold = _side_by_side(work, "classic", "local[2]", args, env, end)
            rows, ratio = _rows(cold, "classic PySpark", None)
            result.update(classic_times=cold, classic_ratio=ratio)
            sections += [
                "### Cold: each its own classic driver",
                "",
                "Each process starts its own `local[2]` driver (a JVM): the script with "
                "`SparkSession.builder.master(\"local[2]\")`, trib's job with `[spark] master = \"local[2]\"` and no "
                "remote. CPU-s are the Python process's only, not its driver's JVM.",
                "",
                md_table(["side", "median s", "best s", "median CPU-s", "ratio", "goal"], rows),
                ""]
    load_after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = "\n".join([
        "## A warm hourly run on Spark Connect, and the cold path (`benchmarks/bench_warm_etl.py`)",
        "",
        f"Hours of {records:,} records in {args.files} jsonl files, one hourly job; each side a whole process, "
        f"{args.reps} alternating hours after one warm-up hour. {info['date']}, {info['nproc']} CPUs ({info['cpu']}), load "
        f"average {info['loadavg']} at the start, {load_after} at the end, git {info['git']}.",
        "",
        *sections,
        f"Command: `.venv/bin/python benchmarks/bench_warm_etl.py{' --quick' if args.quick else ''}"
        f"{' --only ' + args.only if args.only else ''}{_sizes(args)}`.",
    ])
    result["loadavg_end"] = load_after
    return emit(text, result, args)


if __name__ == "__main__":
    main()
