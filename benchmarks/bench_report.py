#!/usr/bin/env python
"""The lateness report at scale: time, peak memory and page size.

A plain directory of ``--files`` one-line files over ``--hours`` hourly
partition directories (default 1,000,000 over 2,000), each file's mtime some
minutes to a day after its hour ended (generation is not timed). Timed: ``trib
report lateness ROOT --layout … --out page.html`` as a process, as a user runs
it (start-up, the listing, the figures and the page), and the same with
``--json`` only. Reported: wall time, the process's peak RSS, and the page's
size. The page must not grow with the table (per-partition lines and a bounded
sample of files, docs/report.md): before 2026-11-26 it drew every file, about
160 bytes a file.

    .venv/bin/python benchmarks/bench_report.py             # 1,000,000 files
    .venv/bin/python benchmarks/bench_report.py --quick     # 20,000 files
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, WorkDir, emit, machine_info, md_table  # noqa: E402

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
HOUR = 3_600_000
T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z


def build(root: Path, files: int, hours: int) -> None:
    from datetime import datetime, timezone

    per = -(-files // hours)
    made = 0
    for h in range(hours):
        start = T0 + h * HOUR
        d = root / datetime.fromtimestamp(start / 1000, timezone.utc).strftime("%Y_%m_%d/%H")
        d.mkdir(parents=True, exist_ok=True)
        for i in range(min(per, files - made)):
            p = d / f"log-{i:05d}.log"
            p.write_bytes(b"x\n")
            late = start + HOUR + ((made * 7919) % (24 * 60)) * 60_000 - 30 * 60_000
            os.utime(p, ns=(late * 1_000_000, late * 1_000_000))
            made += 1


def run(args: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one trib process (a fresh parent per run, so each peak is its own)."""
    probe = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
             "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
             "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", probe, str(REPO / ".venv" / "bin" / "trib"), *args], check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[0]), int(out[1]) / 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=1_000_000)
    ap.add_argument("--hours", type=int, default=2_000)
    ap.add_argument("--quick", action="store_true", help="20,000 files over 200 hours")
    ap.add_argument("--json", help="write the figures as JSON to this file")
    ap.add_argument("--markdown", help="write the table as markdown to this file")
    args = ap.parse_args(argv)
    if args.quick:
        args.files, args.hours = 20_000, 200
    with WorkDir(prefix="bench-report-") as work:
        root = work / "logs"
        t = time.perf_counter()
        build(root, args.files, args.hours)
        made = time.perf_counter() - t
        page = work / "page.html"
        j_wall, j_rss = run(["report", "lateness", str(root), "--layout", LAYOUT, "--json"])
        h_wall, h_rss = run(["report", "lateness", str(root), "--layout", LAYOUT, "--out", str(page)])
        size = page.stat().st_size
    rows = [["--json", f"{j_wall:.1f}", f"{j_rss:,.0f}", "-"],
            ["--out page.html", f"{h_wall:.1f}", f"{h_rss:,.0f}", f"{size / 1e6:.2f} MB"]]
    text = (f"{args.files:,} files in {args.hours:,} hourly directories (made in {made:.0f} s, not timed)\n\n"
            + md_table(["trib report lateness", "wall s", "peak RSS MB", "page"], rows)
            + f"\n\npage: {size:,} bytes ({size / args.files:.2f} bytes a file)")
    emit(text, {"files": args.files, "hours": args.hours, "json_s": j_wall, "html_s": h_wall, "json_rss_mb": j_rss,
                "html_rss_mb": h_rss, "page_bytes": size, "machine": machine_info()}, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
