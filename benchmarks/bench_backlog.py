#!/usr/bin/env python
"""A new consumer's first plan over a large history, with the default file cap and without.

A new consumer delivers every existing file by default, so its first plan over
years of history holds them all unless a cap bounds it. This makes ``--files``
(1,000,000) empty files in ``--hours`` (2,000) hourly directories
``{yyyy}_{MM}_{dd}/{HH}`` ending now, on local disk (``benchmarks/out``;
generation is not timed), then runs, each as its own process:

a. ``trib files ROOT --consumer c1 --json`` (the default cap, 100,000 files),
   then its ``trib consumer ack``;
b. ``trib files ROOT --consumer c2 --json --max-files off``, then its ack;
c. c1's next plan and ack: the drain's second capped run.

It reports each process's wall time and peak RSS (``os.wait4``), the plan
file's size and the backlog the capped plan reports. The planner streams the
listing one directory at a time against the cap, so a capped plan's memory
does not grow with the history; ``--capped-only`` leaves out case b, which
holds every file at once (about 2 GB per million files).

    .venv/bin/python benchmarks/bench_backlog.py            # 1M files (~2-4 min)
    .venv/bin/python benchmarks/bench_backlog.py --quick    # 20,000 files
    .venv/bin/python benchmarks/bench_backlog.py --files 10000000 --hours 10000 --capped-only  # ~25 min
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
from _common import REPO, WorkDir, hour_dir, md_table  # noqa: E402

H = 3_600_000
LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
TRIB = [sys.executable, "-m", "tributary_read.cli.main"]


def make_tree(root: Path, files: int, hours: int) -> None:
    now = int(time.time() * 1000) // H * H
    per = files // hours
    for h in range(hours):
        t = now - (hours - h) * H
        d = root / hour_dir(t)
        d.mkdir(parents=True, exist_ok=True)
        for i in range(per):  # written now: --min-age 0s delivers them
            os.close(os.open(str(d / f"part-{i:05d}.log"), os.O_CREAT | os.O_WRONLY, 0o644))


def run(args: list[str]) -> tuple[float, float, str]:
    """(seconds, peak RSS in MB, stdout) of one trib process."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    p = subprocess.Popen([*TRIB, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    out_parts: list[str] = []
    assert p.stdout is not None
    for chunk in iter(lambda: p.stdout.read(1 << 20), ""):
        out_parts.append(chunk)
    err = p.stderr.read() if p.stderr else ""
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    took = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"trib {' '.join(args)} failed ({p.returncode}): {err[-2000:]}")
    return took, usage.ru_maxrss / 1024, "".join(out_parts)


def case(root: Path, name: str, extra: list[str], label: str | None = None) -> dict:
    took, rss, out = run(["files", str(root), "--layout", LAYOUT, "--consumer", name, "--min-age", "0s", "--json",
                          "-q", *extra])
    doc = json.loads(out)
    plans = sorted((root / "_tributary" / "consumers" / name).glob("plan-*.json"))
    size = plans[-1].stat().st_size  # this run's plan (earlier ones are kept a while)
    ack_took, ack_rss, _ = run(["consumer", "ack", str(root), name, doc["plan_id"]])
    return {"case": label or " ".join(extra) or "default cap", "files": doc["count"], "plan_s": round(took, 1),
            "plan_rss_mb": round(rss), "plan_file_mb": round(size / 1e6, 1), "ack_s": round(ack_took, 1),
            "ack_rss_mb": round(ack_rss), "backlog_files": doc["backlog"]["files"],
            "oldest_left": doc["backlog"]["oldest_partition"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1_000_000)
    ap.add_argument("--hours", type=int, default=2_000)
    ap.add_argument("--quick", action="store_true", help="20,000 files in 200 hours")
    ap.add_argument("--workdir", help="where to make the tree (default benchmarks/out)")
    ap.add_argument("--capped-only", action="store_true", help="leave out the uncapped plan (case b)")
    a = ap.parse_args()
    files, hours = (20_000, 200) if a.quick else (a.files, a.hours)
    with WorkDir(a.workdir, prefix="backlog-") as work:
        root = work / "raw"
        t0 = time.perf_counter()
        make_tree(root, files, hours)
        print(f"made {files} files in {hours} hourly directories in {time.perf_counter() - t0:.0f} s", flush=True)
        rows = [case(root, "c1", [])]
        if not a.capped_only:
            rows.append(case(root, "c2", ["--max-files", "off"]))
        rows.append(case(root, "c1", [], "default cap, next plan"))
    cols = list(rows[0])
    print(md_table(cols, [[r[c] for c in cols] for r in rows]))


if __name__ == "__main__":
    main()
