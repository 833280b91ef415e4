#!/usr/bin/env python
"""Read-side speed: mtime windows vs find / raw pyarrow / Spark, manifest mode, consumer ledgers.

All in one run, on local disk (``benchmarks/out``; generation is not timed):

* a plain tree of ``--hours`` x ``--per-hour`` files (default 4,200 x 24 = 100,800)
  in ``{yyyy}_{MM}_{dd}/{HH}`` directories. A one-hour mtime window over the
  whole table and pruned to one day (``--partitions``), against
  ``find ROOT -type f -newermt A ! -newermt B``, a raw ``pyarrow.fs`` recursive
  ``FileSelector`` listing, and Spark's ``modifiedAfter``/``modifiedBefore``
  listing (``inputFiles()`` of a local[2] session; start-up not timed);
* a manifest table of ``--commits`` commits (default 8,400: one per 30 min, 12
  files each, the same logical files), written with explicit commit times
  (fsync off) so "the newest hour" is one hour of commits, not the whole log;
* a listing consumer over ``--ledger-days`` days x ``--ledger-per-hour`` files
  (default 90 x 100): its first plan, then ``--ledger-runs`` hourly runs with
  the horizon moving; state size and per-run plan+ack time.

In-process figures are the median (and best) of ``--reps`` runs in a warm
process; process figures include interpreter start-up.

    .venv/bin/python benchmarks/bench_listing.py            # full sizes
    .venv/bin/python benchmarks/bench_listing.py --quick    # small smoke run
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
from _common import REPO, WorkDir, emit, fs_type, hour_dir, iso, machine_info, md_table, median, timed, touch  # noqa: E402

import pyarrow.fs as pafs  # noqa: E402

from tributary_read.read.consumer import Consumer  # noqa: E402
from tributary_read.table.layout import Layout  # noqa: E402
from tributary_read.table.log import LAST_CHECKPOINT, checkpoint_path, commit_path  # noqa: E402
from tributary_read.table.manifest import Commit, FileEntry  # noqa: E402
from tributary_read.read.resolve import Source, resolve  # noqa: E402
from tributary_read.table.config import Table, TableConfig  # noqa: E402
from tributary_read.read.window import TimeWindow  # noqa: E402

LAYOUT = Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")
H = 3_600_000
END = 1_592_956_800_000  # 2020-06-24T00:00:00Z: the tree's newest hour ends here
TRIB = [sys.executable, "-m", "tributary_read.cli.main"]


def make_tree(root: Path, hours: int, per_hour: int, end: int = END) -> list[tuple[str, int]]:
    """Files at hour start + 60 s * i + 30 s; returns (path, hour start) per file.

    Each directory's mtime is then set to the end of its hour, as in a real
    hourly tree whose directories stopped changing when their hour was over.
    """
    out = []
    start = end - hours * H
    for h in range(hours):
        t = start + h * H
        d = root / hour_dir(t)
        d.mkdir(parents=True, exist_ok=True)
        for i in range(per_hour):
            name = f"part-{h:05d}-{i:03d}.log"
            touch(str(d / name), t + (60 * i + 30) * 1000 % H)
            out.append((f"{hour_dir(t)}/{name}", t))
        os.utime(d, ns=((t + H) * 1_000_000,) * 2)
    return out


def make_manifest(root: Path, files: list[tuple[str, int]], commits: int) -> Table:
    """A table whose log lists ``files`` over ``commits`` commits, one per 30 minutes, ending at END.

    Commits are written as ManifestLog.commit writes them (create-if-absent of
    the commit file) but with explicit commit times, and checkpoints every 1,000.
    """
    # a table only trib writes: the manifest-only reads this benchmark measures
    t = Table.create(str(root), TableConfig(layout=LAYOUT, checkpoint_interval=1000, tracking="manifest"),
                     {"fsync": "false"})
    st, log = t.storage, t.log
    n = len(files)
    step = 30 * 60_000
    for v in range(1, commits + 1):
        chunk = files[(v - 1) * n // commits : v * n // commits]
        entries = tuple(FileEntry(p, 1, 1, {"dt": hour_dir(h).replace("_", "").replace("/", "")})
                        for p, h in chunk)
        c = Commit(v, END - (commits - v) * step - 1, entries, writer="bench")
        st.create_if_absent(commit_path(v), c.encode())
        if v % 1000 == 0:
            state = log.state(v)
            st.create_if_absent(checkpoint_path(v), json.dumps(state.to_json(), separators=(",", ":")).encode())
            st.write(LAST_CHECKPOINT, json.dumps({"version": v}).encode())
    return t


def run_proc(cmd: list[str], reps: int, env=None) -> tuple[float, float, int]:
    times, lines = [], 0
    for _ in range(reps):
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
        times.append(time.perf_counter() - t0)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {out.stderr[:500]}")
        lines = len(out.stdout.splitlines())
    return median(times), min(times), lines


def raw_pyarrow(root: str, paths: bool = True):
    """One recursive FileSelector; with ``paths`` also the file paths, the least a caller needs."""
    fs = pafs.LocalFileSystem()
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True))
    return [i.path for i in infos if i.type == pafs.FileType.File] if paths else infos


def spark_listing(root: str, lo_ms: int, hi_ms: int, reps: int) -> dict:
    """Spark's own listing with its strict modifiedAfter/modifiedBefore bounds."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return {"error": "pyspark not installed"}
    t0 = time.perf_counter()
    spark = (SparkSession.builder.master("local[2]").appName("trib-bench-listing")
             .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "2g").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - t0

    def files():
        return (spark.read.format("text").option("modifiedAfter", iso(lo_ms))
                .option("modifiedBefore", iso(hi_ms)).option("recursiveFileLookup", "true")
                .load(root).inputFiles())
    try:
        files()  # JIT warm-up, not timed
        med, best, got = timed(files, reps)
    finally:
        spark.stop()
    return {"startup_s": startup, "median_s": med, "best_s": best, "files": len(got)}


def consumer_ledger(work: Path, days: int, per_hour: int, runs: int) -> dict:
    """State size and run time of a listing consumer after months of hourly partitions."""
    root = work / "ledger"
    hours = days * 24
    t0 = time.perf_counter()
    make_tree(root, hours, per_hour)
    gen = time.perf_counter() - t0
    src = Source.open(str(root), layout=LAYOUT)
    c = Consumer(src, "bench")
    now = END + 5 * 60_000
    t0 = time.perf_counter()
    # The whole history in one first plan, as before the default file cap and in older checkouts.
    uncapped = {"max_files": 0} if "max_files" in __import__("inspect").signature(c.plan).parameters else {}
    p = c.plan(lookback_ms=7 * 24 * H, now_ms=now, **uncapped)
    first_files = len(p.files)
    c.ack(p.plan_id, now_ms=now)
    first = time.perf_counter() - t0
    per_run, sizes = [], []
    for k in range(runs):
        t = END + k * H
        d = root / hour_dir(t)
        d.mkdir(parents=True, exist_ok=True)
        step = min(1000, H // 2 // per_hour)  # every new file settles before the run's clock (min_age)
        for i in range(per_hour):
            touch(str(d / f"new-{k:04d}-{i:03d}.log"), t + i * step)
        os.utime(d, ns=((t + H) * 1_000_000,) * 2)
        now = t + H + 5 * 60_000
        t1 = time.perf_counter()
        p = c.plan(now_ms=now)
        c.ack(p.plan_id, now_ms=now)
        per_run.append(time.perf_counter() - t1)
        if len(p.files) != per_hour:
            raise RuntimeError(f"run {k} delivered {len(p.files)} files, expected {per_hour}")
    st = c.current()
    state_file = root / "_tributary/consumers/bench" / f"state-{st.version:020d}.json"
    sizes = state_file.stat().st_size
    return {"files": hours * per_hour + runs * per_hour, "partitions": hours + runs, "generation_s": gen,
            "first_plan_ack_s": first, "first_files": first_files, "runs": runs, "run_median_s": median(per_run), "run_max_s": max(per_run),
            "state_bytes": sizes, "ledger_dirs": len(st.ledger), "ledger_files": sum(len(e["files"]) for e in
                                                                                     st.ledger.values()),
            "sealed_dirs": len(st.sealed), "last_plan_stats": dict(p.stats)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=int, default=4200, help="hourly directories in the tree (4200)")
    ap.add_argument("--per-hour", type=int, default=24, help="files per directory (24)")
    ap.add_argument("--commits", type=int, default=8400, help="manifest commits (8400)")
    ap.add_argument("--ledger-days", type=int, default=90)
    ap.add_argument("--ledger-per-hour", type=int, default=100)
    ap.add_argument("--ledger-runs", type=int, default=24)
    ap.add_argument("--reps", type=int, default=7, help="timed repetitions per case (7)")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--dir", help="scratch directory parent (default benchmarks/out)")
    ap.add_argument("--keep", action="store_true", help="keep the generated trees")
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--markdown", help="also write the markdown section here")
    args = ap.parse_args(argv)
    if args.quick:
        args.hours, args.per_hour, args.commits, args.reps = 240, 10, 500, 3
        args.ledger_days, args.ledger_per_hour, args.ledger_runs = 10, 10, 4
    r: dict = {"machine": machine_info(), "args": vars(args)}
    with WorkDir(args.dir, prefix="bench-listing-", keep=args.keep) as work:
        r["fs"] = fs_type(work)
        data, mroot = work / "data", work / "manifest"
        t0 = time.perf_counter()
        files = make_tree(data, args.hours, args.per_hour)
        r["generation_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        table = make_manifest(mroot, files, args.commits)
        r["manifest_generation_s"] = time.perf_counter() - t0
        n = len(files)
        lo, hi = END - 30 * H, END - 29 * H - 1  # one hour, a day and more before the end
        day = hour_dir(lo)[:10]
        day_dt = day.replace("_", "")
        w = TimeWindow(lo, hi)
        src = Source.open(str(data), layout=LAYOUT)
        reps = args.reps

        cases = {}
        cases["raw_call"] = timed(lambda: raw_pyarrow(str(data), paths=False), reps)
        cases["raw"] = timed(lambda: raw_pyarrow(str(data)), reps)
        cases["full"] = timed(lambda: resolve(src, mode="mtime", window=w), reps)
        cases["raw_day"] = timed(lambda: raw_pyarrow(str(data / day)), reps)
        cases["day"] = timed(lambda: resolve(src, mode="mtime", window=w,
                                             partitions=f"dt>={day_dt}00,dt<={day_dt}23"), reps)
        n_hour = len(cases["full"][2].files)
        if len(cases["day"][2].files) != n_hour:
            raise RuntimeError("pruned and full resolutions disagree")
        latest = table.log.latest_version()
        mw = TimeWindow(END - H, END - 1)
        cases["manifest_hour"] = timed(lambda: resolve(Table.load(str(mroot)), mode="manifest", window=mw), reps)
        cases["manifest_versions"] = timed(
            lambda: resolve(Table.load(str(mroot)), mode="manifest", since_version=latest - 2), reps)
        cases["manifest_all"] = timed(lambda: resolve(Table.load(str(mroot)), mode="manifest"), max(1, reps // 2))

        env = {**os.environ, "PYTHONPATH": str(REPO)}
        # find's -newermt bounds are (A, B]; [lo, hi] in whole seconds is the same set here (mtimes at :30 s).
        find_cmd = ["find", str(data), "-type", "f", "-newermt", iso(lo - 1000) + "Z", "!", "-newermt",
                    iso(hi) + "Z"]
        find_day = ["find", str(data / day), "-type", "f", "-newermt", iso(lo - 1000) + "Z", "!", "-newermt",
                    iso(hi) + "Z"]
        trib_cmd = [*TRIB, "files", str(data), "--layout", LAYOUT.directory, "--start", str(lo), "--end", str(hi)]
        procs = {
            "find": run_proc(find_cmd, reps),
            "trib": run_proc(trib_cmd, reps, env),
            "find_day": run_proc(find_day, reps),
            "trib_day": run_proc(trib_cmd + ["--partitions", f"dt>={day_dt}00,dt<={day_dt}23"], reps, env),
            "trib_manifest": run_proc([*TRIB, "files", str(mroot), "--mode", "manifest", "--start", str(END - H),
                                       "--end", str(END - 1)], reps, env),
            "trib_startup": run_proc([*TRIB, "--version"], reps, env),
        }
        for k in ("find", "trib", "find_day", "trib_day"):
            if procs[k][2] != n_hour:
                raise RuntimeError(f"{k} returned {procs[k][2]} files, expected {n_hour}")
        spark = {"skipped": True} if args.no_spark else spark_listing(str(data), lo - 1, hi + 1, reps)
        ledger = consumer_ledger(work, args.ledger_days, args.ledger_per_hour, args.ledger_runs)

    ms = lambda s: f"{s * 1000:,.1f}"  # noqa: E731
    r.update({"files": n, "window_files": n_hour, "commits": args.commits,
              "cases": {k: {"median_s": v[0], "best_s": v[1]} for k, v in cases.items()},
              "processes": {k: {"median_s": v[0], "best_s": v[1], "lines": v[2]} for k, v in procs.items()},
              "spark": spark, "ledger": ledger})
    full_ratio = cases["full"][0] / cases["raw_call"][0]
    proc_ratio = procs["trib"][0] / procs["find"][0]
    mh = cases["manifest_hour"][0]
    speedup = cases["full"][0] / mh
    rows = [
        ["raw pyarrow recursive FileSelector (get_file_info only), whole table", "in-process",
         ms(cases["raw_call"][0]), ms(cases["raw_call"][1]), f"{n:,} listed", "1.00x", ""],
        ["raw pyarrow recursive FileSelector + file paths, whole table", "in-process", ms(cases["raw"][0]),
         ms(cases["raw"][1]), f"{n:,} listed", f"{cases['raw'][0] / cases['raw_call'][0]:.2f}x", ""],
        ["trib mtime window, whole table", "in-process", ms(cases["full"][0]), ms(cases["full"][1]), n_hour,
         f"{full_ratio:.2f}x raw", "<= 1.5x raw: " + ("met" if full_ratio <= 1.5 else "MISSED")],
        ["raw pyarrow listing of one day", "in-process", ms(cases["raw_day"][0]), ms(cases["raw_day"][1]),
         f"{args.per_hour * 24:,} listed", "", ""],
        ["trib mtime window, pruned to one day", "in-process", ms(cases["day"][0]), ms(cases["day"][1]), n_hour,
         f"{cases['day'][0] / cases['raw_day'][0]:.2f}x raw day", ""],
        ["find -newermt, whole table", "process", ms(procs["find"][0]), ms(procs["find"][1]), procs["find"][2],
         "1.00x", ""],
        ["trib files --start/--end, whole table", "process", ms(procs["trib"][0]), ms(procs["trib"][1]),
         procs["trib"][2], f"{proc_ratio:.2f}x find", "<= 3x find: " + ("met" if proc_ratio <= 3 else "MISSED")],
        ["find -newermt, one day directory", "process", ms(procs["find_day"][0]), ms(procs["find_day"][1]),
         procs["find_day"][2], "", ""],
        ["trib files --partitions (one day)", "process", ms(procs["trib_day"][0]), ms(procs["trib_day"][1]),
         procs["trib_day"][2], f"{procs['trib_day'][0] / procs['find_day'][0]:.2f}x find day", ""],
        ["trib --version (interpreter + imports only)", "process", ms(procs["trib_startup"][0]),
         ms(procs["trib_startup"][1]), "", "", ""],
    ]
    if "median_s" in spark:
        rows.append(["Spark modifiedAfter/Before inputFiles(), whole table", "in-process (JVM, warm)",
                     ms(spark["median_s"]), ms(spark["best_s"]), spark["files"],
                     f"{spark['median_s'] / cases['full'][0]:.1f}x trib", f"session start-up {spark['startup_s']:.1f} s"])
    rows += [
        [f"manifest, newest hour by commit time ({args.commits:,} commits)", "in-process", ms(mh),
         ms(cases["manifest_hour"][1]), len(cases["manifest_hour"][2].files), f"{speedup:,.0f}x faster than listing",
         "< 50 ms and >= 100x: " + ("met" if mh < 0.05 and speedup >= 100 else "MISSED")],
        ["manifest, last 2 versions", "in-process", ms(cases["manifest_versions"][0]),
         ms(cases["manifest_versions"][1]), len(cases["manifest_versions"][2].files), "", ""],
        ["manifest, whole table (checkpoint + tail)", "in-process", ms(cases["manifest_all"][0]),
         ms(cases["manifest_all"][1]), len(cases["manifest_all"][2].files), "", ""],
        ["trib files --mode manifest, newest hour", "process", ms(procs["trib_manifest"][0]),
         ms(procs["trib_manifest"][1]), procs["trib_manifest"][2], "", ""],
    ]
    md = [f"## Read side: listing, mtime windows, manifests ({n:,} files in {args.hours:,} hourly directories, "
          f"{r['fs']})", "",
          f"One-hour window [{iso(lo)}, {iso(hi)}.999] (both ends inclusive), {n_hour} matching files. "
          f"Median (best) of {reps} runs; generation not timed ({r['generation_s']:.0f} s tree, "
          f"{r['manifest_generation_s']:.0f} s manifest).", "",
          md_table(["case", "how", "median ms", "best ms", "files", "ratio", "goal"], rows), ""]
    lg = ledger
    md += [f"Listing consumer ledger: {lg['partitions']:,} hourly partitions x {args.ledger_per_hour} files "
           f"({lg['files']:,} files), 7-day lookback. First plan+ack {lg['first_plan_ack_s']:.2f} s; then "
           f"{lg['runs']} hourly runs: plan+ack median {lg['run_median_s'] * 1000:,.0f} ms, max "
           f"{lg['run_max_s'] * 1000:,.0f} ms. State after the last run: {lg['state_bytes'] / 1e6:.2f} MB "
           f"({lg['ledger_files']:,} files in {lg['ledger_dirs']} ledger partitions, {lg['sealed_dirs']:,} sealed "
           f"partitions); the last run listed {lg['last_plan_stats']['listed_dirs']} directories and skipped "
           f"{lg['last_plan_stats']['unchanged_dirs']:,} unchanged ones.", ""]
    text = "\n".join(md)
    return emit(text, r, args)


if __name__ == "__main__":
    main()
