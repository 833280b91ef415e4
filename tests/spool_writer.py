"""A logging process for the spool fault tests: appends numbered JSON lines to ``DIR/app.log`` and rotates.

Every ``--rotate`` lines ``app.log`` is rotated to ``app.log.SEQ`` by ``--mode``: ``rename`` (rename, and
the program opens a new ``app.log``), ``copytruncate`` (logrotate's: copy to ``app.log.SEQ`` in pieces, the
copy visible while it grows, then truncate ``app.log`` in place and write on through the same descriptor),
or ``mixed`` (one of the two at random). The previous rotated file is then compressed (delaycompress), the
way gzip does it: ``.gz`` written in place a piece at a time with pauses (a reader sees a stream without its
trailer), then the original unlinked; ``--gz-tmp`` writes it under a temporary name and renames it whole
instead. The oldest compressed files beyond ``--keep`` are deleted. Lines are written in pieces now and then
(half a line, a pause, the rest), as a logger's buffered writes land. The program writes nothing between a
copy and its truncation, so nothing is lost by copytruncate's nature and every line must reach the table.
Each line's ``ts`` is spread over six hours, so the lines land in several partitions. Ends with every line
whole and ``DONE`` printed.
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
    ap.add_argument("--mode", choices=("rename", "copytruncate", "mixed"), default="rename")
    ap.add_argument("--gz-tmp", action="store_true", help="compress under a temporary name, renamed whole")
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
            seq += 1
            now = os.path.join(d, "app.log")
            rotated = os.path.join(d, f"app.log.{seq}")
            if a.mode == "copytruncate" or (a.mode == "mixed" and rng.random() < 0.5):
                with open(now, "rb") as src, open(rotated, "wb") as dst:
                    while True:
                        piece = src.read(16 * 1024)
                        if not piece:
                            break
                        dst.write(piece)
                        dst.flush()
                        time.sleep(0.001)
                f.truncate(0)  # the program's own descriptor (O_APPEND): it writes on from offset 0
            else:
                f.close()
                os.rename(now, rotated)
                f = open(now, "ab", buffering=0)
            prev = os.path.join(d, f"app.log.{seq - 1}")
            if seq > 1 and os.path.exists(prev):
                _compress(prev, a.gz_tmp)
            for old in range(1, seq - a.keep + 1):
                p = os.path.join(d, f"app.log.{old}.gz")
                if os.path.exists(p):
                    os.unlink(p)
        ahead = (i + 1) / a.rate - (time.monotonic() - start)
        if ahead > 0.005:
            time.sleep(ahead)
    f.close()
    print("DONE", flush=True)


def _compress(path: str, tmp: bool) -> None:
    """gzip's order: the ``.gz`` is complete before the original goes."""
    with open(path, "rb") as src:
        data = src.read()
    if tmp:
        with gzip.open(path + ".gz.tmp", "wb") as dst:
            dst.write(data)
        os.rename(path + ".gz.tmp", path + ".gz")
    else:
        with open(path + ".gz", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as dst:
            for k in range(0, len(data), 32 * 1024):
                dst.write(data[k:k + 32 * 1024])
                dst.flush()  # a sync flush: what is there so far decompresses, without a trailer
                raw.flush()
                time.sleep(0.002)
    os.unlink(path)


if __name__ == "__main__":
    main()
