"""A logging process for the spool fault tests: appends numbered JSON lines to ``DIR/app.log`` and rotates.

Every ``--rotate`` lines: ``app.log`` is renamed to ``app.log.SEQ``, the previous rotated file is
compressed the way gzip does it (``.gz`` written whole, then the original unlinked), and the oldest
compressed files beyond ``--keep`` are deleted. Lines are written in pieces now and then (half a line,
a pause, the rest), as a logger's buffered writes land. Each line's ``ts`` is spread over six hours, so
the lines land in several partitions. Ends with every line whole and ``DONE`` printed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--lines", type=int, default=30_000)
    ap.add_argument("--rotate", type=int, default=1_500)
    ap.add_argument("--keep", type=int, default=8)
    ap.add_argument("--rate", type=float, default=2_000.0, help="lines per second")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    d = a.dir
    seq = 0
    f = open(os.path.join(d, "app.log"), "ab", buffering=0)
    start = time.monotonic()
    for i in range(a.lines):
        line = json.dumps({"ts": f"2026-11-26T{8 + i % 6:02d}:{i % 60:02d}:{i % 59:02d}Z", "i": i,
                           "pad": "x" * rng.randint(10, 120)}).encode() + b"\n"
        if rng.random() < 0.01:
            cut = rng.randint(1, len(line) - 1)
            f.write(line[:cut])
            time.sleep(0.002)
            f.write(line[cut:])
        else:
            f.write(line)
        if (i + 1) % a.rotate == 0:
            f.close()
            seq += 1
            os.rename(os.path.join(d, "app.log"), os.path.join(d, f"app.log.{seq}"))
            f = open(os.path.join(d, "app.log"), "ab", buffering=0)
            prev = os.path.join(d, f"app.log.{seq - 1}")
            if seq > 1 and os.path.exists(prev):
                with open(prev, "rb") as src, gzip.open(prev + ".gz.tmp", "wb") as dst:
                    dst.write(src.read())
                os.rename(prev + ".gz.tmp", prev + ".gz")
                os.unlink(prev)
            for old in range(1, seq - a.keep + 1):
                p = os.path.join(d, f"app.log.{old}.gz")
                if os.path.exists(p):
                    os.unlink(p)
        ahead = (i + 1) / a.rate - (time.monotonic() - start)
        if ahead > 0.005:
            time.sleep(ahead)
    f.close()
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
