#!/usr/bin/env python
"""cProfile the trib side of bench_writer (text and/or parquet); prints the top functions.

    .venv/bin/python benchmarks/profile_writer.py --variant text -n 200000
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_writer as bw  # noqa: E402
from _common import WorkDir  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="profile the trib side of bench_writer")
    ap.add_argument("--variant", choices=("text", "parquet"), default="text")
    ap.add_argument("-n", "--records", type=int, default=200_000)
    ap.add_argument("--order", choices=("random", "nearly-sorted", "sorted"), default="random")
    ap.add_argument("--compression", default=None, help="gzip/zstd for text, snappy/zstd/... for parquet")
    ap.add_argument("--sort", default="tottime")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--dir")
    args = ap.parse_args(argv)
    recs = bw.Records(args.records, 42, 24.0, args.order)
    with WorkDir(args.dir, "profile-") as work:
        prof = cProfile.Profile()
        if args.variant == "text":
            codec = args.compression or "gzip"
            prof.enable()
            bw.trib_text(recs, work / "t", codec)
            prof.disable()
        else:
            codec = args.compression or "snappy"
            batches = recs.batches(65_536)
            prof.enable()
            bw.trib_parquet(batches, work / "t", codec)
            prof.disable()
    pstats.Stats(prof).strip_dirs().sort_stats(args.sort).print_stats(args.top)


if __name__ == "__main__":
    main()
