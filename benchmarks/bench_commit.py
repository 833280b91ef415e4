#!/usr/bin/env python
"""Commit latency of the manifest log, locally (fsync on) and on a real S3-protocol server.

Each commit is ``ManifestLog.commit(files, transaction, ...)`` with ``--files`` (5)
FileEntry items and a Transaction, as the ingest makes them. Two modes:

* ``base`` -- ``base_version`` passed, as the ingest does (it knows the version
  it read): one create-if-absent of the next commit file;
* ``probe`` -- no ``base_version``: the commit first finds the latest version
  (``latest_version()``: read the checkpoint hint, then exponential probe + bisect).

Every ``checkpoint_interval``-th commit also folds the state into a checkpoint;
those are reported separately as well as inside the overall figures.

Then the read side at a 1,000-commit log (``--log-commits``): ``latest_version()``
and ``state()`` just after a checkpoint (v=1000) and at the worst point of the
interval (v=1099: 99 commits to replay on top of the checkpoint).

The S3 server is moto's ``ThreadedMotoServer`` on 127.0.0.1, started inside this
process (so the server shares this process's GIL; a server in its own process
would answer faster), unless ``--s3-endpoint`` names another one.

    .venv/bin/python benchmarks/bench_commit.py           # 500 local, 200 S3 commits per mode
    .venv/bin/python benchmarks/bench_commit.py --quick   # 60 local, 30 S3
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import WorkDir, emit, fs_type, machine_info, md_table, percentile  # noqa: E402

from tributary_read.table.layout import Layout  # noqa: E402
from tributary_read.table.manifest import FileEntry, Transaction  # noqa: E402
from tributary_read.table.config import Table, TableConfig  # noqa: E402

LAYOUT = Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")
BUCKET = "trib-bench"


def make_files(i: int, n: int) -> list[FileEntry]:
    hour = i % 24
    return [
        FileEntry(f"2024_06_01/{hour:02d}/part-20240601000000-0123abcd-{i * n + k:06d}.jsonl.gz",
                  size=4_000_000 + k, records=25_000 + k, partition={"dt": f"20240601{hour:02d}"})
        for k in range(n)
    ]


def make_txn(i: int) -> Transaction:
    return Transaction("bench-app", {"events.log": i * 100_000 - 1},
                       {"positions": {"events.log": i * 15_000_000}})


def new_table(root: str, options: dict | None, checkpoint_interval: int) -> Table:
    return Table.create(root, TableConfig(layout=LAYOUT, format="jsonl", compression="gzip",
                                          checkpoint_interval=checkpoint_interval), options)


def time_commits(table: Table, n: int, files_per_commit: int, mode: str) -> dict:
    log = table.log
    base = log.latest_version()
    lat, cp_lat = [], []
    t_all = time.perf_counter()
    for i in range(1, n + 1):
        files, txn = make_files(i, files_per_commit), make_txn(i)
        t0 = time.perf_counter()
        c = log.commit(files, txn, base_version=base if mode == "base" else None, writer="bench")
        dt = time.perf_counter() - t0
        if c.version != base + 1:
            raise RuntimeError(f"unexpected version {c.version} after {base}")
        base = c.version
        (cp_lat if c.version % log.checkpoint_interval == 0 else lat).append(dt)
    wall = time.perf_counter() - t_all
    both = sorted(lat + cp_lat)
    return {
        "n": n, "mode": mode, "wall_s": wall,
        "all": _stats(both),
        "plain": _stats(sorted(lat)),
        "checkpoint": _stats(sorted(cp_lat)),
    }


def _stats(v: list[float]) -> dict:
    if not v:
        return {"n": 0}
    return {"n": len(v), "p50_ms": percentile(v, 50) * 1e3, "p99_ms": percentile(v, 99) * 1e3,
            "max_ms": v[-1] * 1e3, "mean_ms": sum(v) / len(v) * 1e3}


def time_reads(table: Table, log_commits: int, files_per_commit: int, reps: int) -> list[dict]:
    """Build a log of ``log_commits`` commits, then time latest_version() and state()."""
    log = table.log
    base = log.latest_version()
    t0 = time.perf_counter()
    while base < log_commits:
        base = log.commit(make_files(base + 1, files_per_commit), make_txn(base + 1), base_version=base).version
    build = time.perf_counter() - t0
    out = []
    points = [log_commits]
    worst = log_commits + log.checkpoint_interval - 1
    if log.checkpoint_interval > 1:
        points.append(worst)
    for target in points:
        while base < target:
            base = log.commit(make_files(base + 1, files_per_commit), make_txn(base + 1), base_version=base).version
        lv, st = [], []
        for _ in range(reps):
            a = time.perf_counter()
            v = log.latest_version()
            b = time.perf_counter()
            s = log.state()
            c = time.perf_counter()
            assert v == target and s.version == target, (v, s.version, target)
            lv.append(b - a)
            st.append(c - b)
        out.append({
            "version": target, "last_checkpoint": log.last_checkpoint(),
            "replayed": target - log.last_checkpoint(), "files_in_state": len(s.files),
            "latest_version": _stats(sorted(lv)), "state": _stats(sorted(st)), "reps": reps,
            "build_s": build,
        })
    return out


# -- S3 -----------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """moto's ThreadedMotoServer on a free port (or an external endpoint), with a bucket."""

    def __init__(self, endpoint: str | None = None):
        self.server = None
        if endpoint is None:
            import logging

            from moto.server import ThreadedMotoServer

            logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no access log per request

            port = _free_port()
            self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
            self.server.start()
            endpoint = f"http://127.0.0.1:{port}"
        self.options = {"endpoint_url": endpoint, "access_key_id": "testing",
                        "secret_access_key": "testing", "region": "us-east-1"}
        import boto3

        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                              aws_secret_access_key="testing", region_name="us-east-1")
        try:
            client.create_bucket(Bucket=BUCKET)
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass

    def root(self) -> str:
        return f"s3://{BUCKET}/bench-{uuid.uuid4().hex[:8]}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


# -- main ---------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--local-commits", type=int, default=500, help="commits per mode on local disk (500)")
    ap.add_argument("--s3-commits", type=int, default=200, help="commits per mode on S3 (200; 0 = skip S3)")
    ap.add_argument("--files", type=int, default=5, help="FileEntry items per commit (5)")
    ap.add_argument("--checkpoint-interval", type=int, default=100)
    ap.add_argument("--log-commits", type=int, default=1000,
                    help="log size for the latest_version()/state() timings (1000; 0 = skip)")
    ap.add_argument("--read-reps", type=int, default=20, help="timed latest_version()/state() calls (20)")
    ap.add_argument("--s3-log-commits", type=int, default=None,
                    help="log size for the S3 read timings (default: same as --log-commits)")
    ap.add_argument("--modes", default="base,probe", help="comma list of base,probe")
    ap.add_argument("--s3-endpoint", help="use this S3 endpoint instead of starting moto in-process")
    ap.add_argument("--dir", help="scratch directory parent (default benchmarks/out, on the repo's disk)")
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--markdown", help="also write the markdown section here")
    args = ap.parse_args(argv)
    if args.quick:
        args.local_commits = min(args.local_commits, 60)
        args.s3_commits = min(args.s3_commits, 30)
        args.log_commits = min(args.log_commits, 120)
        args.checkpoint_interval = min(args.checkpoint_interval, 20)
        args.read_reps = min(args.read_reps, 5)
    if args.s3_log_commits is None:
        args.s3_log_commits = args.log_commits
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]

    result: dict = {"args": vars(args), "machine": machine_info(), "commits": [], "reads": []}
    with WorkDir(args.dir, "commit-") as work:
        result["workdir_fstype"] = fs_type(work)
        for mode in modes:
            t = new_table(str(work / f"local-{mode}"), None, args.checkpoint_interval)
            r = time_commits(t, args.local_commits, args.files, mode)
            r["store"] = "local (fsync on)"
            result["commits"].append(r)
            _log(r)
        if args.log_commits:
            t = new_table(str(work / "local-reads"), None, args.checkpoint_interval)
            for r in time_reads(t, args.log_commits, args.files, args.read_reps):
                r["store"] = "local"
                result["reads"].append(r)
                _log_read(r)
    if args.s3_commits or args.s3_log_commits:
        t0 = time.perf_counter()
        server = S3Server(args.s3_endpoint)
        print(f"S3 server up at {server.options['endpoint_url']} in {time.perf_counter() - t0:.1f}s",
              file=sys.stderr, flush=True)
        result["s3_endpoint"] = "external " + args.s3_endpoint if args.s3_endpoint else "moto ThreadedMotoServer (in-process)"
        try:
            if args.s3_commits:
                for mode in modes:
                    t = new_table(server.root(), server.options, args.checkpoint_interval)
                    r = time_commits(t, args.s3_commits, args.files, mode)
                    r["store"] = "S3 (moto)"
                    result["commits"].append(r)
                    _log(r)
            if args.s3_log_commits:
                t = new_table(server.root(), server.options, args.checkpoint_interval)
                for r in time_reads(t, args.s3_log_commits, args.files, args.read_reps):
                    r["store"] = "S3 (moto)"
                    result["reads"].append(r)
                    _log_read(r)
        finally:
            server.stop()

    md = render(result)
    return emit(md, result, args)


def _log(r: dict) -> None:
    a = r["all"]
    print(f"  {r['store']:16s} {r['mode']:5s} {r['n']} commits: p50 {a['p50_ms']:.2f} ms, "
          f"p99 {a['p99_ms']:.2f} ms, max {a['max_ms']:.2f} ms", file=sys.stderr, flush=True)


def _log_read(r: dict) -> None:
    print(f"  {r['store']:16s} v={r['version']}: latest_version p50 {r['latest_version']['p50_ms']:.2f} ms, "
          f"state p50 {r['state']['p50_ms']:.2f} ms", file=sys.stderr, flush=True)


def _f(x: float) -> str:
    return f"{x:.2f}" if x < 100 else f"{x:.0f}"


def render(r: dict) -> str:
    a = r["args"]
    out = [
        "## Commit latency (`benchmarks/bench_commit.py`)",
        "",
        f"`ManifestLog.commit` with {a['files']} FileEntry items + a Transaction; checkpoint every "
        f"{a['checkpoint_interval']} commits. Local: scratch dir on {r.get('workdir_fstype', '?')}, fsync on "
        f"(default). S3: {r.get('s3_endpoint', 'skipped')}. `base` = base_version passed (the ingest's path); "
        "`probe` = no base_version, so each commit first runs `latest_version()`. Latencies in ms; "
        "p99 is nearest-rank.",
        "",
    ]
    rows = []
    for c in r["commits"]:
        al, pl, cp = c["all"], c["plain"], c["checkpoint"]
        rows.append([c["store"], c["mode"], c["n"], _f(al["p50_ms"]), f"**{_f(al['p99_ms'])}**", _f(al["max_ms"]),
                     _f(pl["p99_ms"]) if pl.get("n") else "-",
                     f"{cp['n']} x, p50 {_f(cp['p50_ms'])} / max {_f(cp['max_ms'])}" if cp.get("n") else "-",
                     f"{c['n'] / c['wall_s']:.0f}"])
    out.append(md_table(["store", "mode", "commits", "p50", "p99", "max", "p99 w/o checkpoint commits",
                         "checkpoint commits", "commits/s"], rows))
    local = [c for c in r["commits"] if c["store"].startswith("local")]
    if local:
        worst = max(c["all"]["p99_ms"] for c in local)
        out.append("")
        out.append(f"- goal (local p99 < 20 ms): {'met' if worst < 20 else 'NOT met'} "
                   f"(worst local p99 {worst:.2f} ms).")
    if r["reads"]:
        out += ["", "Read side (median of "
                f"{r['reads'][0]['reps']} calls; ms):", ""]
        rows = []
        for x in r["reads"]:
            rows.append([x["store"], f"{x['version']:,}", x["last_checkpoint"], x["replayed"],
                         f"{x['files_in_state']:,}", _f(x["latest_version"]["p50_ms"]),
                         _f(x["latest_version"]["max_ms"]), _f(x["state"]["p50_ms"]), _f(x["state"]["max_ms"])])
        out.append(md_table(["store", "log version", "last checkpoint", "commits replayed", "files in state",
                             "latest_version() p50", "max", "state() p50", "max"], rows))
    return "\n".join(out)


if __name__ == "__main__":
    main()
