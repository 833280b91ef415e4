"""The `make demo` story: ingest -> kill -9 -> resume -> verify, on a local table.

Every step runs the real `trib` CLI as a separate process, exactly as a
scheduler would; the only thing this script does itself is count records.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

TRIB = [str(Path(sys.executable).with_name("trib"))]
BASE_MS = 1_592_960_400_000  # 2020-06-24T01:00:00Z


def trib(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    print(f"$ trib {' '.join(args)}", flush=True)
    p = subprocess.run([*TRIB, *args], capture_output=True, text=True)
    out = (p.stdout + p.stderr).rstrip()
    if out:
        print("  " + out.replace("\n", "\n  "), flush=True)
    if check and p.returncode != 0:
        sys.exit(f"demo: step failed with exit code {p.returncode}")
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dir", default=".trib/demo")
    ap.add_argument("--records", type=int, default=200_000)
    args = ap.parse_args()
    work = Path(args.dir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    root, src = work / "events", work / "events.jsonl"

    print(f"== a source of {args.records} events spread over 24 hours, some arriving late")
    rng = random.Random(42)
    with open(src, "w") as f:
        for i in range(args.records):
            ts = BASE_MS + rng.randrange(24 * 3_600_000)
            f.write(json.dumps({"id": i, "ts": ts, "user": f"u{rng.randrange(1000)}"}) + "\n")

    print("\n== a table: hour directories yyyy_MM_dd/HH mounted as dt=yyyyMMddHH")
    trib("table", "create", str(root), "--layout", "{yyyy}_{MM}_{dd}/{HH}",
         "--partition", "dt={yyyy}{MM}{dd}{HH}", "--format", "jsonl", "--compression", "gzip",
         "--protocol", "rename")

    ingest = ["ingest", str(root), "--source", str(src), "--app-id", "demo-etl",
              "--time-field", "ts", "--commit-every", "5000"]
    for n in range(1, 4):
        print(f"\n== run {n}: start the ingest and kill -9 it mid-flight")
        p = subprocess.Popen([*TRIB, "-q", *ingest], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.6 + 0.3 * n)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()
            print("  killed with SIGKILL")
        trib("recover", str(root), "--app-id", "demo-etl")
        trib("verify", str(root), check=False)

    print("\n== resume: the ingest restarts from the committed offset, from the table alone")
    trib("-q", *ingest)
    trib("log", str(root), "--limit", "3")

    print("\n== check: every source record exactly once, in the partition of its event time")
    files = json.loads(trib("files", str(root), "--all", "--json").stdout)["files"]
    import gzip

    ids: Counter = Counter()
    for f in files:
        for line in gzip.decompress((root / f["path"]).read_bytes()).splitlines():
            ids[json.loads(line)["id"]] += 1
    dup = sum(1 for c in ids.values() if c > 1)
    missing = args.records - len(ids)
    print(f"  {len(files)} committed files, {sum(ids.values())} records, {dup} duplicated, {missing} missing")
    trib("verify", str(root))
    trib("clean", str(root), "--older-than", "0s")
    if dup or missing:
        sys.exit("demo: exactly-once check FAILED")
    print(f"\ndemo: OK. The table is at {root}; try `trib log {root}` or `trib files {root} --all --json`.")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
