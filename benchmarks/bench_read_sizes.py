#!/usr/bin/env python
"""What the size check before a read (:mod:`tributary_read.read.sizes`) adds to ``read_files``.

One trib table of ``--files`` (1,000) small jsonl files over ``--hours`` (24)
hourly partitions on local disk, committed by trib (one file per commit
batch), resolved once (not timed). Timed, in the same SparkSession
(``local[2]``), alternating, ``--reps`` times after a warm-up:

a. ``check_sizes`` alone: over the manifest FileSet (sizes from the entries),
   and over the same files without their versions, as a consumer's plan from
   a listing carries them (then the table's state is read too);
b. ``read_files(...).count()`` with the check and with it stubbed out (a
   no-op put in its place in this process only): the ratio is the cost.

    .venv/bin/python benchmarks/bench_read_sizes.py
    .venv/bin/python benchmarks/bench_read_sizes.py --files 200 --reps 3
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import WorkDir, bench_session, machine_info, median  # noqa: E402

H = 3_600_000
T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z


def make_table(root: Path, files: int, hours: int, rows: int):
    from tributary_read.table.config import Table, TableConfig
    from tributary_read.table.layout import Layout
    from tributary_read.write.writer import TableWriter

    t = Table.create(str(root), TableConfig(Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}"),
                                            format="jsonl", tracking="manifest"))
    n = 0
    per_commit = hours  # one file per partition per commit
    for _ in range(files // per_commit):
        w = TableWriter(t)
        for h in range(hours):
            for j in range(rows):
                w.write(json.dumps({"id": n, "ts": T0 + h * H + j, "msg": f"event {n}"}).encode(), T0 + h * H + j)
                n += 1
        w.commit()
    return t, n


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--hours", type=int, default=25)
    ap.add_argument("--rows", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args(argv)

    import tributary_read.read.sizes as sizes
    from tributary_read.read.resolve import resolve
    from tributary_read.spark.read import read_files

    with WorkDir(prefix="bench-read-sizes-") as scratch:
        t, n = make_table(scratch / "t", args.files, args.hours, args.rows)
        fs = resolve(t)
        listed = replace(fs, files=tuple(replace(f, version=None) for f in fs.files))
        spark = bench_session(args.master, "bench-read-sizes")
        real = sizes.check_sizes

        def read(check: bool) -> None:
            sizes.check_sizes = real if check else (lambda *a, **k: None)
            try:
                assert read_files(spark, fs).count() == n
            finally:
                sizes.check_sizes = real

        read(True), read(False), real(fs), real(listed)  # warm-up
        res: dict[str, list[float]] = {"check_manifest": [], "check_listed": [], "read_with": [], "read_without": []}
        for _ in range(args.reps):
            res["check_manifest"].append(timed(lambda: real(fs)))
            res["check_listed"].append(timed(lambda: real(listed)))
            res["read_with"].append(timed(lambda: read(True)))
            res["read_without"].append(timed(lambda: read(False)))
        spark.stop()
    med = {k: median(v) for k, v in res.items()}
    out = {"files": len(fs.files), "records": n, "reps": args.reps, "median_s": med,
           "ratio_read": med["read_with"] / med["read_without"], "machine": machine_info()}
    print(f"{len(fs.files)} files, {n} records, {args.reps} reps (medians)")
    print(f"  check_sizes, manifest FileSet:          {med['check_manifest'] * 1000:8.1f} ms")
    print(f"  check_sizes, listed (reads the state):  {med['check_listed'] * 1000:8.1f} ms")
    print(f"  read_files().count() with the check:    {med['read_with'] * 1000:8.1f} ms")
    print(f"  read_files().count() without:           {med['read_without'] * 1000:8.1f} ms")
    print(f"  ratio with/without:                     {out['ratio_read']:8.3f}")
    return out


if __name__ == "__main__":
    main()
