#!/usr/bin/env python
"""What the complete untracked-data check costs a manifest-tracked table's hourly run.

A table tracked ``manifest`` of ``--hours`` hourly partitions x ``--per-hour``
trib-named files (default 2,000 x 3 = 6,000 files on local disk, one commit per
hour, fsync off; generation is not timed). The run reads the newest commit
(``trib files ROOT --mode manifest --since-version N-1``), a non-empty answer
of one hour's files, as an hourly job does. Timed, in the same run:

* the default, which can fail (exit 13), so it lists its whole scope
  (``tributary_read.read.tracking.check_untracked``: one listing of the table,
  pruned to files modified after commit N-1);
* ``--allow-untracked``, the fast-but-narrow choice: the manifest answer and a
  probe of the partition directories it touches. This is the same work the
  default did before the complete check became the default (the probe was then the default for a
  non-empty answer), so it is also the "old" figure;
* a plain mtime listing of the same tree (``--mode mtime`` over the same
  window), for scale: what one listing costs.

Process figures (the CLI as a scheduler runs it, start-up included) and
in-process figures (``resolve``, warm), median and best of ``--reps``.

    .venv/bin/python benchmarks/bench_untracked.py            # 2,000 x 3, 15 reps
    .venv/bin/python benchmarks/bench_untracked.py --quick    # small smoke run
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, WorkDir, emit, fs_type, hour_dir, iso, machine_info, md_table, median, timed, touch  # noqa: E402

from tributary_read.read.resolve import resolve  # noqa: E402
from tributary_read.read.window import TimeWindow  # noqa: E402
from tributary_read.table.config import Table, TableConfig  # noqa: E402
from tributary_read.table.layout import Layout  # noqa: E402
from tributary_read.table.manifest import FileEntry  # noqa: E402

LAYOUT = Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")
H = 3_600_000
TRIB = [sys.executable, "-m", "tributary_read.cli.main"]


def make_table(root: Path, hours: int, per_hour: int) -> tuple[Table, int]:
    """The table and its latest version: one commit of ``per_hour`` files per hour, the newest last."""
    t = Table.create(str(root), TableConfig(layout=LAYOUT, tracking="manifest"), {"fsync": "false"})
    end = int(time.time() * 1000) // H * H - 2 * H
    for h in range(hours):
        at = end - (hours - h) * H
        d = root / hour_dir(at)
        d.mkdir(parents=True, exist_ok=True)
        entries = []
        for i in range(per_hour):
            name = f"part-{20200101000000 + h:014d}-{h:08x}-{i:06d}.jsonl"
            touch(str(d / name), at + 60_000 * (i + 1))
            entries.append(FileEntry(f"{hour_dir(at)}/{name}", 0, at + 60_000 * (i + 1),
                                     {"dt": hour_dir(at).replace("_", "").replace("/", "")}))
        t.log.commit(entries)
    return t, t.log.latest_version()


def run_proc(cmd: list[str], reps: int) -> tuple[float, float, int]:
    times, lines = [], 0
    for _ in range(reps):
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        times.append(time.perf_counter() - t0)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr[:500]}")
        lines = len(out.stdout.splitlines())
    return median(times), min(times), lines


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=int, default=2000, help="hourly partitions (2000)")
    ap.add_argument("--per-hour", type=int, default=3, help="files per partition (3)")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="200 x 3, 3 reps")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--markdown", default=None, help="write the summary here")
    args = ap.parse_args(argv)
    if args.quick:
        args.hours, args.reps = 200, 3
    result: dict = {"machine": machine_info(), "hours": args.hours, "per_hour": args.per_hour, "reps": args.reps}
    with WorkDir(args.workdir, prefix="bench-untracked-") as work:
        root = work / "raw"
        t0 = time.perf_counter()
        table, latest = make_table(root, args.hours, args.per_hour)
        result["generation_s"] = time.perf_counter() - t0
        result["fs"] = fs_type(work)
        since = str(latest - 1)
        base = [*TRIB, "files", str(root), "--mode", "manifest", "--since-version", since]
        lo = table.log.read_commit(latest - 1).timestamp_ms + 1
        window = ("--start", iso(lo) + "Z", "--end", iso(int(time.time() * 1000) + 3_600_000) + "Z")
        procs = {
            "complete": run_proc(base, args.reps),
            "allow": run_proc([*base, "--allow-untracked"], args.reps),
            "mtime": run_proc([*TRIB, "files", str(root), "--mode", "mtime", *window], args.reps),
        }
        load = Table.load(str(root))
        inproc = {
            "complete": timed(lambda: resolve(load, mode="manifest", since_version=latest - 1), args.reps),
            "allow": timed(lambda: resolve(load, mode="manifest", since_version=latest - 1, allow_untracked=True),
                           args.reps),
            "mtime": timed(lambda: resolve(load, mode="mtime", window=TimeWindow(lo, int(time.time() * 1000) + H)), args.reps),
        }
    files = args.hours * args.per_hour
    for k, (med, best, n) in procs.items():
        result[f"process_{k}"] = {"median_s": med, "best_s": best, "lines": n}
    for k, (med, best, fs) in inproc.items():
        result[f"inprocess_{k}"] = {"median_s": med, "best_s": best, "files": len(fs.files)}

    def ms(s: float) -> str:
        return f"{s * 1000:,.1f} ms"

    rows = [
        ["default (complete check: one listing of the scope)", ms(procs["complete"][0]), ms(procs["complete"][1]),
         ms(inproc["complete"][0]), procs["complete"][2], ""],
        ["`--allow-untracked` (probe of the answer's partitions; the old default)", ms(procs["allow"][0]),
         ms(procs["allow"][1]), ms(inproc["allow"][0]), procs["allow"][2],
         f"default / this: {procs['complete'][0] / procs['allow'][0]:.2f}x process, "
         f"{inproc['complete'][0] / inproc['allow'][0]:.1f}x in-process"],
        ["`--mode mtime` over the same span (one listing, for scale)", ms(procs["mtime"][0]), ms(procs["mtime"][1]),
         ms(inproc["mtime"][0]), procs["mtime"][2],
         f"default / this: {procs['complete'][0] / procs['mtime'][0]:.2f}x process"],
    ]
    result["ratio_complete_over_allow_process"] = procs["complete"][0] / procs["allow"][0]
    result["ratio_complete_over_allow_inprocess"] = inproc["complete"][0] / inproc["allow"][0]
    md = [f"## Untracked-data check: `trib files --mode manifest --since-version N-1` on a manifest-tracked table "
          f"({args.hours:,} hourly partitions x {args.per_hour} files = {files:,} files, {result['fs']}; the answer: "
          f"the newest hour's {args.per_hour} files)", "",
          f"{result['machine']['date']}, {result['machine']['nproc']} cores, load {result['machine']['loadavg']}, "
          f"git {result['machine']['git']}; median (best) of {args.reps}; process = whole CLI process.", "",
          md_table(["case", "process median", "process best", "in-process median", "files", "ratio"], rows)]
    result["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    md.append(f"\nload after: {result['load_after']}")
    return emit("\n".join(md), result, args)


if __name__ == "__main__":
    main()
