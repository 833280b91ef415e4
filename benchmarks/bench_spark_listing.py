#!/usr/bin/env python
"""Listing on Spark executors against the local listing, on the same tree in the same run.

The tree is ``--days`` x 24 hourly directories ``{yyyy}_{MM}_{dd}/{HH}`` x
``--per-hour`` empty files (default 168 x 24 x 50 = 201,600 files in 4,032
directories), built once under ``benchmarks/out/spark-listing-*`` and reused
(``--rebuild`` to start over). Three cases, each a local call
(:func:`tributary_read.read.resolve.resolve`, ``mode="mtime"``) against
:func:`tributary_read.spark.listing.list_on_executors`, alternating, median of
``--reps`` after one warm-up each; every executor answer is asserted equal to
the local one (files, skipped, plan, stats but timings):

a. the whole table (the tree strategy: the top-level day directories are the tasks);
b. a one-hour mtime window over the whole table (executors ship the matches only);
c. a 24-hour partition range (the 24 candidate directories are the tasks).

Also measured once, untimed: the driver memory a FileSet holds per file
(tracemalloc) and the pickled bytes per entry an executor ships back.

    .venv/bin/python benchmarks/bench_spark_listing.py                 # ~2-4 min
    .venv/bin/python benchmarks/bench_spark_listing.py --quick         # smoke run
    .venv/bin/python benchmarks/bench_spark_listing.py --markdown out.md --json out.json
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_WORKDIR, emit, fs_type, hour_dir, machine_info, md_table, median, touch  # noqa: E402

H = 3_600_000
DIRECTORY = "{yyyy}_{MM}_{dd}/{HH}"
END = 1_700_000_000_000 // H * H  # a fixed hour: the tree is the same whenever it is built


def build(root: Path, days: int, per_hour: int, rebuild: bool) -> Path:
    marker = root / ".built"
    want = f"{days} {per_hour}"
    if marker.exists() and marker.read_text() == want and not rebuild:
        return root
    import shutil

    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    hours = days * 24
    for h in range(hours):
        t = END - (hours - h) * H
        d = root / hour_dir(t)
        d.mkdir(parents=True, exist_ok=True)
        for i in range(per_hour):
            touch(str(d / f"part-{h:05d}-{i:04d}.log"), t + (60 * i + 30) * 1000 % H)
    marker.write_text(want)  # hidden: never listed
    return root


def r_files(args) -> int:
    return args.days * 24 * args.per_hour


def same(local, remote) -> None:
    for k in ("mode", "files", "plan", "root", "skipped", "untracked", "format"):
        assert getattr(local, k) == getattr(remote, k), f"executor listing differs from the local one in {k}"
    drop = ("seconds", "listed_dirs")
    assert {k: v for k, v in local.stats.items() if k not in drop} == \
           {k: v for k, v in remote.stats.items() if k not in drop}


class Timed:
    """Wraps a lister and adds up the time its Spark jobs take (collect, until results are back)."""

    def __init__(self, inner):
        self.inner, self.seconds = inner, 0.0

    @property
    def spread(self):
        return self.inner.spread

    def list_many(self, storage, rels, hint):
        t = time.perf_counter()
        out = list(self.inner.list_many(storage, rels, hint))
        self.seconds += time.perf_counter() - t
        return out


def main() -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, default=168, help="days of hourly directories (168)")
    ap.add_argument("--per-hour", type=int, default=50, help="files per hourly directory (50)")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions per case (5)")
    ap.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    ap.add_argument("--dir", help="where the tree lives (default benchmarks/out)")
    ap.add_argument("--rebuild", action="store_true", help="build the tree again")
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--markdown", help="also write the markdown section here")
    args = ap.parse_args()
    if args.quick:
        args.days, args.per_hour, args.reps = 3, 10, 2

    from tributary_read.read.resolve import plain_layout, resolve
    from tributary_read.read.window import TimeWindow
    from tributary_read.spark.listing import list_on_executors, spark_lister
    from tributary_read.spark.session import spark_session

    parent = Path(args.dir) if args.dir else DEFAULT_WORKDIR
    root = build(parent / f"spark-listing-{args.days}x{args.per_hour}", args.days, args.per_hour, args.rebuild)
    layout = plain_layout(DIRECTORY)
    n_dirs = args.days * 24
    t0 = time.perf_counter()
    spark = spark_session(args.master, {"spark.ui.enabled": "false"}, "trib-bench-listing")
    session_s = time.perf_counter() - t0
    spark.sparkContext.setLogLevel("ERROR")
    machine = machine_info()
    last_hour = TimeWindow(END - H, END - 1)
    dt = lambda ms: hour_dir(ms).replace("_", "").replace("/", "")  # noqa: E731 - the default partition spec
    day_range = f"dt>={dt(END - 48 * H)},dt<={dt(END - 25 * H)}"  # 24 hourly directories
    cases = {
        "a": ("whole table", {}),
        "b": ("one-hour mtime window, whole table", {"window": last_hour}),
        "c": (f"24 hours of partitions (`{day_range}`)", {"partitions": day_range}),
    }
    results: dict = {}
    for key, (label, kw) in cases.items():
        local_t, remote_t, spark_t, local_cpu, remote_cpu = [], [], [], [], []
        local = resolve(str(root), mode="mtime", layout=layout, **kw)  # warm-up (page cache, imports)
        remote = list_on_executors(spark, str(root), layout=layout, **kw)  # warm-up (Python workers)
        same(local, remote)
        for _ in range(args.reps):
            t, c = time.perf_counter(), time.process_time()
            local = resolve(str(root), mode="mtime", layout=layout, **kw)
            local_t.append(time.perf_counter() - t)
            local_cpu.append(time.process_time() - c)
            lister = Timed(spark_lister(spark))
            t, c = time.perf_counter(), time.process_time()
            remote = resolve(str(root), mode="mtime", layout=layout, lister=lister, **kw)
            remote_t.append(time.perf_counter() - t)
            remote_cpu.append(time.process_time() - c)
            spark_t.append(lister.seconds)
            same(local, remote)
        results[key] = {"label": label, "files": len(local.files), "strategy": local.stats["strategy"],
                        "listed_entries": local.stats["listed_entries"],
                        "local_median_s": median(local_t), "executors_median_s": median(remote_t),
                        "spark_jobs_median_s": median(spark_t), "local_s": local_t, "executors_s": remote_t,
                        "local_cpu_median_s": median(local_cpu), "driver_cpu_median_s": median(remote_cpu)}

    # Untimed: what the driver holds per file, and what an executor ships per entry.
    gc.collect()
    tracemalloc.start()
    fs = resolve(str(root), mode="mtime", layout=layout)
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    per_file_bytes = held / max(1, len(fs.files))
    from tributary_read.io.storage import open_storage
    from tributary_read.spark.listing import _pack

    st = open_storage(str(root))
    infos, unlisted = st.list_infos(hour_dir(END - H), True)
    shipped = len(pickle.dumps(_pack(infos, unlisted, cut=len(st.root) + 1, windowed=False),
                               protocol=pickle.HIGHEST_PROTOCOL))
    per_entry_wire = shipped / max(1, len(infos))
    del fs
    spark.stop()

    r = {"machine": machine, "fs": fs_type(root), "root": str(root), "days": args.days, "per_hour": args.per_hour,
         "files": args.days * 24 * args.per_hour, "directories": n_dirs, "reps": args.reps,
         "master": args.master, "session_start_s": session_s, "cases": results,
         "driver_bytes_per_file": per_file_bytes, "listing_peak_bytes_per_file": peak / max(1, r_files(args)), "wire_bytes_per_entry": per_entry_wire,
         "loadavg_after": " ".join(f"{x:.2f}" for x in os.getloadavg())}
    ms = lambda s: f"{s * 1000:,.0f}"  # noqa: E731
    rows = [[k, v["label"], v["strategy"], f"{v['files']:,}", ms(v["local_median_s"]),
             ms(v["executors_median_s"]), ms(v["spark_jobs_median_s"]),
             f"{v['executors_median_s'] / v['local_median_s']:.2f}x", ms(v["local_cpu_median_s"]),
             ms(v["driver_cpu_median_s"])] for k, v in results.items()]
    n = r["files"]
    md = [f"## Listing on Spark executors vs local listing ({n:,} files in {n_dirs:,} hourly directories, "
          f"{r['fs']}, master `{args.master}`)", "",
          f"{args.days} days x 24 `{DIRECTORY}` directories x {args.per_hour} files, one process, warm page "
          f"cache; median of {args.reps} runs after a warm-up, local and executors alternating; every executor "
          f"FileSet asserted equal to the local one. `executors` is the whole call on the driver (plan, Spark "
          f"jobs, collecting the entries); `Spark jobs` its part inside `collect()`; CPU = this Python "
          f"process's user + system time (the driver's share; executors run in other processes), which "
          f"a loaded machine inflates less than wall time. Session start-up "
          f"({session_s:.1f} s) is not counted. {machine['nproc']} cores ({machine['cpu']}); load average "
          f"before {machine['loadavg']}, after {r['loadavg_after']}.", "",
          md_table(["", "case", "strategy", "files", "local ms", "executors ms", "Spark jobs ms", "ratio",
                    "local CPU ms", "driver CPU ms"], rows),
          "",
          f"Driver memory held by a FileSet: {per_file_bytes:,.0f} bytes per file (tracemalloc, whole table; "
          f"{r['listing_peak_bytes_per_file']:,.0f} at the peak of a local listing). "
          f"An executor ships {per_entry_wire:,.0f} bytes per entry (pickled; paths relative to the root, "
          f"{len(infos[0].path) - len(st.root) - 1} characters here).", ""]
    return emit("\n".join(md), r, args)


if __name__ == "__main__":
    main()
