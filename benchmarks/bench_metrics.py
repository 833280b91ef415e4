#!/usr/bin/env python
"""``trib metrics`` on a year-old hourly table: 100,000 files in 8,760 commits.

The target: a scrape costs under 200 ms for such a table, because it reads the latest version, the
newest commit, the consumers' documents, the commits after each manifest consumer's ack and the run
books, and never the state's file list. The control, in the same run, is the one read metrics avoid:
``log.state()`` (the checkpoint with every file, plus the tail commits).

Generation (not timed) commits the file entries straight through ``ManifestLog.commit`` (checkpoints
every 100 commits, as the default), with no data files behind them: metrics never open data files.
Two manifest consumers are acked ``--lag`` and 168 commits behind.

    .venv/bin/python benchmarks/bench_metrics.py            # 8,760 commits, 100,000 files (a few minutes to build)
    .venv/bin/python benchmarks/bench_metrics.py --quick    # 500 commits, 5,000 files

The processes run with bytecode caches (in the scratch directory), as an installed package has them:
without them every start compiles every module trib imports, which is what a first measurement
here (238 ms, this environment sets PYTHONDONTWRITEBYTECODE) mostly timed.
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


def process_env(pycache: Path) -> dict:
    """The timed processes' environment: bytecode caches on, under ``pycache``, as an installed package
    has them (pip compiles at install), whatever PYTHONDONTWRITEBYTECODE says."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "TRIB_CONFIG")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def timed_process(args: list[str], env: dict) -> float:
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
    ap.add_argument("--process-reps", type=int, default=15, help="runs of each timed process (noisy: shared cores)")
    ap.add_argument("--root", help="an existing table built by this script (kept); default: build one, then remove it")
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--markdown", help="write the summary here")
    args = ap.parse_args(argv)
    if args.quick:
        args.commits, args.files, args.reps = 500, 5_000, 3
    sys.path.insert(0, str(REPO))
    from tributary_read.metrics.collect import read_tables
    from tributary_read.table.config import Table

    with WorkDir(prefix="bench-metrics-") as work:
        root = Path(args.root) if args.root else work / "t"
        t0 = time.perf_counter()
        if not args.root:
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
        env = process_env(work / "pycache")
        timed_process(["metrics", uri], env)  # the warm-up: fills the bytecode caches
        timed_process(["metrics", uri, "--json"], env)
        # Interleaved, so that a burst of load on the shared cores falls on every command alike.
        cmds = {"text": ["metrics", uri], "json": ["metrics", uri, "--json"], "start": ["--version"]}
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for _ in range(args.process_reps):
            for k, a in cmds.items():
                times[k].append(timed_process(a, env))
    ms = lambda xs: f"{median(xs) * 1000:.1f}"  # noqa: E731
    rows = [["metrics, in process (read_tables)", ms(scrape), f"{min(scrape) * 1000:.1f}"],
            ["control: log.state(), the read metrics avoid", ms(control), f"{min(control) * 1000:.1f}"],
            ["`trib metrics ROOT`, a process (text, through prometheus_client)", ms(times["text"]),
             f"{min(times['text']) * 1000:.1f}"],
            ["`trib metrics ROOT --json`, a process", ms(times["json"]), f"{min(times['json']) * 1000:.1f}"],
            ["`trib --version`, a process (start-up alone)", ms(times["start"]), f"{min(times['start']) * 1000:.1f}"]]
    text = (f"### trib metrics: {args.commits:,} commits, {args.files:,} files, manifest consumers "
            f"{args.lag} and 168 commits behind (built in {built:.0f} s)\n\n"
            + md_table(["what", "median ms", "min ms"], rows)
            + f"\n\nstate() / metrics: {median(control) / median(scrape):.0f}x; in process: median of {args.reps}; "
            f"processes: median of {args.process_reps}, interleaved, bytecode compiled beforehand (as pip "
            f"installs it); load average {machine_info()['loadavg']}.")
    result = {"commits": args.commits, "files": args.files, "scrape_ms": median(scrape) * 1000,
              "state_ms": median(control) * 1000, "process_ms": median(times["text"]) * 1000,
              "process_json_ms": median(times["json"]) * 1000, "startup_ms": median(times["start"]) * 1000,
              "machine": machine_info()}
    return emit(text, result, args)


if __name__ == "__main__":
    main()
