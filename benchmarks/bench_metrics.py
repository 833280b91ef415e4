#!/usr/bin/env python
"""``trib metrics`` on a year-old hourly table: 100,000 files in 8,760 commits (issue 31, part 2).

The target: a scrape costs under 200 ms for such a table, because it reads the latest version, the
newest commit, the consumers' documents, the commits after each manifest consumer's ack and the run
books, and never the state's file list. The control, in the same run, is the one read metrics avoid:
``log.state()`` (the checkpoint with every file, plus the tail commits).

Generation (not timed) commits the file entries straight through ``ManifestLog.commit`` (checkpoints
every 100 commits, as the default), with no data files behind them: metrics never open data files.
Two manifest consumers are acked ``--lag`` and 168 commits behind.

    .venv/bin/python benchmarks/bench_metrics.py            # 8,760 commits, 100,000 files (a few minutes to build)
    .venv/bin/python benchmarks/bench_metrics.py --quick    # 500 commits, 5,000 files
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, WorkDir, emit, hour_dir, machine_info, md_table, median  # noqa: E402

H = 3_600_000
TRIB = [sys.executable, "-m", "tributary_read.cli.main"]


def build(root: Path, commits: int, files: int, lags: list[int]) -> None:
    from tributary_read.read.consumer import Consumer
    from tributary_read.table.config import Table, TableConfig, Tracking
    from tributary_read.table.layout import Layout
    from tributary_read.table.manifest import FileEntry

    table = Table.create(str(root), TableConfig(Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}"),
                                                tracking=Tracking.MANIFEST))
    log = table.log
    start = (int(time.time() * 1000) // H - commits) * H
    per, extra = divmod(files, commits)
    ack_at = {commits - lag: name for name, lag in zip(("near", "far"), lags)}
    for v in range(1, commits + 1):
        d = hour_dir(start + v * H)
        n = per + (1 if v <= extra else 0)
        log.commit([FileEntry(f"{d}/part-{v:05d}-{i}.jsonl", 4096 + i, 100) for i in range(n)])
        if v in ack_at:
            c = Consumer(str(root), ack_at[v])
            plan = c.plan(mode="manifest", max_files="off")
            c.ack(plan.plan_id)


def timed_process(args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    subprocess.run([*TRIB, *args], check=True, capture_output=True, env=env)
    return time.perf_counter() - t0


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--commits", type=int, default=8760)
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--lag", type=int, default=1, help="commits the near consumer is behind (the far one: 168)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--markdown", help="write the summary here")
    args = ap.parse_args(argv)
    if args.quick:
        args.commits, args.files, args.reps = 500, 5_000, 3
    sys.path.insert(0, str(REPO))
    from tributary_read.metrics.collect import read_tables
    from tributary_read.table.config import Table

    with WorkDir(prefix="bench-metrics-") as work:
        root = work / "t"
        t0 = time.perf_counter()
        build(root, args.commits, args.files, [args.lag, 168])
        built = time.perf_counter() - t0
        uri = str(root)
        scrape = []
        for _ in range(args.reps):
            t = time.perf_counter()
            reading = read_tables([(uri, None)])
            scrape.append(time.perf_counter() - t)
        assert not reading.errors, reading.errors
        control = []
        for _ in range(args.reps):
            t = time.perf_counter()
            Table.load(uri).log.state()
            control.append(time.perf_counter() - t)
        process = [timed_process(["metrics", uri]) for _ in range(args.reps)]
        start = [timed_process(["--version"]) for _ in range(args.reps)]
    rows = [["metrics, in process (read_tables)", f"{median(scrape) * 1000:.1f}"],
            ["control: log.state(), the read metrics avoid", f"{median(control) * 1000:.1f}"],
            ["trib metrics ROOT, a process", f"{median(process) * 1000:.1f}"],
            ["trib --version, a process (start-up alone)", f"{median(start) * 1000:.1f}"]]
    text = (f"### trib metrics: {args.commits:,} commits, {args.files:,} files, manifest consumers "
            f"{args.lag} and 168 commits behind (built in {built:.0f} s)\n\n"
            + md_table(["what", "median ms"], rows)
            + f"\n\nstate() / metrics: {median(control) / median(scrape):.0f}x; median of {args.reps}.")
    result = {"commits": args.commits, "files": args.files, "scrape_ms": median(scrape) * 1000,
              "state_ms": median(control) * 1000, "process_ms": median(process) * 1000,
              "startup_ms": median(start) * 1000, "machine": machine_info()}
    return emit(text, result, args)


if __name__ == "__main__":
    main()
