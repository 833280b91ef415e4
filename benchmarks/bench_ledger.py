"""A listing consumer's state size and run time, this checkout against an earlier one, in the same run.

Since 2026-11-25 a new consumer delivers history (not baseline it), seals partitions
it delivers past the lookback, and keeps byte ranges of growing files in the
ledger. The ledger must stay bounded by the lookback as before: this runs the
same consumer (``bench_listing.consumer_ledger``: ``--days`` of hourly
partitions x ``--per-hour`` files, a 7-day lookback, then ``--runs`` hourly
runs) once with this checkout's library and once with ``--before REV``'s (a
temporary git worktree), each in its own process, and prints state size, run
times and peak RSS side by side::

    .venv/bin/python benchmarks/bench_ledger.py                 # 91 days x 100 files (2,184 partitions)
    .venv/bin/python benchmarks/bench_ledger.py --quick         # 10 days x 10 files
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, emit, machine_info, md_table  # noqa: E402

#: The comparison point: the segmented ledger as it first landed, before the planner streamed the
#: listing and stopped reading unchanged directories' segments. 20bd7da is the
#: point before the consumer delivered history and sealed partitions, for the state-size comparison at 2,184 partitions.
BEFORE = "a7329b4"


def child(code: str, work: str, days: int, per_hour: int, runs: int) -> None:
    """In a fresh process: import the library from ``code`` and run the ledger benchmark once."""
    sys.path.insert(0, code)
    import tributary_read

    assert Path(tributary_read.__file__).resolve().is_relative_to(Path(code).resolve()), tributary_read.__file__
    from bench_listing import consumer_ledger

    r = consumer_ledger(Path(work), days, per_hour, runs)
    r["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(r, default=str))


def run(code: str, days: int, per_hour: int, runs: int) -> dict:
    out_dir = REPO / "benchmarks" / "out"  # git ignores it
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-ledger-", dir=out_dir) as work:
        out = subprocess.run([sys.executable, __file__, "--child", code, work, str(days), str(per_hour), str(runs)],
                             capture_output=True, text=True, env={**os.environ, "PYTHONPATH": code})
        if out.returncode:
            raise RuntimeError(f"benchmark with {code} failed: {out.stderr[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, default=91, help="days of hourly partitions before the runs (91)")
    ap.add_argument("--per-hour", type=int, default=100)
    ap.add_argument("--runs", type=int, default=24, help="hourly runs after the first plan (24)")
    ap.add_argument("--before", default=BEFORE, help=f"the earlier revision to compare with ({BEFORE})")
    ap.add_argument("--quick", action="store_true", help="10 days x 10 files, 4 runs")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--markdown", help="also write the markdown section here")
    args = ap.parse_args(argv)
    if args.quick:
        args.days, args.per_hour, args.runs = 10, 10, 4
    machine = machine_info()
    old = Path(tempfile.mkdtemp(prefix="bench-ledger-before-"))
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(old), args.before], check=True)
    try:
        before = run(str(old), args.days, args.per_hour, args.runs)
        after = run(str(REPO), args.days, args.per_hour, args.runs)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)], check=False)
    rows = []
    for name, key, fmt in (("state after the last run", "state_bytes", lambda v: f"{v / 1e6:.2f} MB"),
                           ("partitions in the ledger / sealed", None, None),
                           ("files delivered by the first plan", "first_files", lambda v: f"{v:,}"),
                           ("first plan + ack", "first_plan_ack_s", lambda v: f"{v:.2f} s"),
                           ("hourly plan + ack, median", "run_median_s", lambda v: f"{v * 1000:.0f} ms"),
                           ("hourly plan + ack, max (the periodic full scan)", "run_max_s",
                            lambda v: f"{v * 1000:.0f} ms"),
                           ("peak RSS of the process", "peak_rss_mb", lambda v: f"{v:.0f} MB")):
        if key is None:
            rows.append([name] + [f"{r['ledger_dirs']} / {r['sealed_dirs']:,}" for r in (before, after)])
        else:
            rows.append([name] + [fmt(r[key]) if r.get(key) is not None else "-" for r in (before, after)])
    text = "\n".join([
        f"## Listing consumer ledger, before ({args.before}) and after (`bench_ledger.py`)", "",
        f"{args.days * 24:,} hourly partitions x {args.per_hour} files, 7-day lookback, then {args.runs} hourly "
        f"runs of {args.per_hour} files. {machine.get('nproc')} CPUs, load {machine.get('loadavg')}.", "",
        md_table(["", f"before ({args.before})", "after"], rows), ""])
    return emit(text, {"before": before, "after": after, "machine": machine}, args)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    else:
        main()
