#!/usr/bin/env python
"""Commits under contention on an S3-protocol server: requests per commit, lost races, throughput.

``--writers`` processes (8) each append ``--commits`` (40) commits of ``--files`` (5)
FileEntry items and a transaction of their own app to one table, as concurrent
ingests do: each passes the version its view was read at, and every lost race
costs the loser reads of the commits it jumped over. The baseline, in the same
run, is one writer making the same number of commits alone. The S3 server is
moto's ``ThreadedMotoServer`` on 127.0.0.1 in this process; every request it
answers is counted from its access log (method, and whether the key is in the
table's log).

    .venv/bin/python benchmarks/bench_commit_contention.py            # 8 x 40, then 1 x 40
    .venv/bin/python benchmarks/bench_commit_contention.py --quick    # 4 x 10, then 1 x 10
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, machine_info, md_table  # noqa: E402
from bench_commit import S3Server, make_files, new_table  # noqa: E402

_REQUEST = re.compile(r'"(\w+) (\S+) HTTP')
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # werkzeug colours the lines of 4xx and 206 answers


class RequestCount(logging.Handler):
    """Every request the in-process server answers, by kind (``PUT log``: a key in ``_tributary/log/``)."""

    def __init__(self):
        super().__init__()
        self.kinds: collections.Counter = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        m = _REQUEST.search(_COLOUR.sub("", record.getMessage()))
        if m:
            self.kinds[m.group(1) + (" log" if "/_tributary/log/" in m.group(2) else "")] += 1


def writer(root: str, index: int, commits: int, files: int) -> None:
    """One writer process: ``commits`` commits of app ``w<index>``, each on the version of the last.
    It reaches the server through the environment (TRIB_S3_ENDPOINT_URL, AWS_*), never argv."""
    from tributary_read.table.config import Table
    from tributary_read.table.manifest import Transaction

    log = Table.load(root).log
    base = log.latest_version()
    for k in range(commits):
        txn = Transaction(f"w{index}", {"src": k})
        c = log.commit(make_files(index * 100_000 + k, files), txn, base_version=base)
        base = c.version


def contend(server: S3Server, count: RequestCount, writers: int, commits: int, files: int) -> dict:
    from tributary_read.table.config import Table

    root = server.root()
    new_table(root, server.options, 50)
    count.kinds.clear()
    t0 = time.perf_counter()
    env = {**os.environ, "TRIB_S3_ENDPOINT_URL": server.options["endpoint_url"],
           "AWS_ACCESS_KEY_ID": server.options["access_key_id"],
           "AWS_SECRET_ACCESS_KEY": server.options["secret_access_key"], "AWS_REGION": server.options["region"]}
    procs = [subprocess.Popen([sys.executable, __file__, "--writer", root, str(i), str(commits), str(files)], env=env)
             for i in range(writers)]
    codes = [p.wait() for p in procs]
    wall = time.perf_counter() - t0
    if any(codes):
        raise SystemExit(f"a writer failed: exit codes {codes}")
    n = writers * commits
    version = Table.load(root, server.options).log.latest_version()
    assert version == n, f"{version} commits in the log for {n} made"
    kinds = dict(count.kinds)
    total = sum(kinds.values())
    return {"writers": writers, "commits": n, "wall_s": wall, "commits_per_s": n / wall,
            "requests": total, "requests_per_commit": total / n,
            "slot_puts_per_commit": kinds.get("PUT log", 0) / n, "kinds": kinds}


def render(r: dict) -> str:
    rows = [[f"{x['writers']} x {x['commits'] // x['writers']}", x["commits"], f"{x['wall_s']:.1f}",
             f"{x['commits_per_s']:.1f}", f"{x['requests_per_commit']:.1f}", f"{x['slot_puts_per_commit']:.2f}",
             ", ".join(f"{k} {v}" for k, v in sorted(x["kinds"].items(), key=lambda kv: -kv[1]))]
            for x in r["runs"]]
    ratio = r["runs"][0]["requests_per_commit"] / r["runs"][1]["requests_per_commit"]
    return ("## Commits under contention (`benchmarks/bench_commit_contention.py`)\n\n"
            + md_table(["writers x commits", "commits", "wall s", "commits/s", "requests per commit",
                        "slot PUTs per commit", "requests by kind"], rows)
            + f"\n\n- requests per commit, contended / alone (same run): **{ratio:.2f}x**\n")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--commits", type=int, default=40, help="commits per writer (40)")
    ap.add_argument("--files", type=int, default=5, help="FileEntry items per commit (5)")
    ap.add_argument("--quick", action="store_true", help="4 writers x 10 commits")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--markdown", help="also write the markdown section here")
    args = ap.parse_args(argv)
    if args.quick:
        args.writers, args.commits = min(args.writers, 4), min(args.commits, 10)
    count = RequestCount()
    logging.getLogger("werkzeug").addHandler(count)
    server = S3Server()
    logging.getLogger("werkzeug").setLevel(logging.INFO)  # S3Server turned the access log off: we count it
    try:
        runs = [contend(server, count, args.writers, args.commits, args.files),
                contend(server, count, 1, args.writers * args.commits, args.files)]
    finally:
        server.stop()
    result = {"args": vars(args), "machine": machine_info(), "runs": runs}
    return emit(render(result), result, args)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        root, index, commits, files = sys.argv[2:6]
        writer(root, int(index), int(commits), int(files))
    else:
        main()
        os._exit(0)  # the server's threads
