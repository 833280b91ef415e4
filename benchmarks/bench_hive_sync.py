#!/usr/bin/env python
"""Mounting a year of hourly partitions through HiveServer2: trib's batched sync vs the alternatives.

Starts its own metastore + HiveServer2 pair (Spark Thrift Server) on free ports,
builds ``--hours`` hour directories (``yyyy_MM_dd/HH``, one small file each) and,
in the same run, mounts them as ``dt=yyyyMMddHH`` partitions of fresh EXTERNAL
tables four ways:

* **trib sync** (batched ``ADD IF NOT EXISTS PARTITION ... PARTITION ...``), once
  per ``--batch-sizes``; in-process, timing the whole ``sync()`` call: listing,
  plan, DDL and the state file.
* **trib sync via the CLI** at the default batch size: the same, plus process start-up.
* **one statement per partition** (what a naive mount service does), on a sample
  of ``--single-sample`` partitions, extrapolated linearly to all of them.
* **MSCK REPAIR TABLE** over a ``dt=yyyyMMddHH`` (key=value) copy of the layout,
  which is the only layout MSCK understands.

Then the no-op re-sync of everything (in-process and CLI), and for information
the costs that shaped the design: SHOW PARTITIONS, DESCRIBE per partition, and a
batched DROP.

Each measured variant also reports CPU per partition: this process's (listing,
plan, the client's encoding) and each server JVM's (metastore, HiveServer2,
read from /proc), which a loaded machine inflates far less than wall time.

    .venv/bin/python benchmarks/bench_hive_sync.py            # 8,760 partitions (a year), ~10 min
    .venv/bin/python benchmarks/bench_hive_sync.py --quick    # 720 partitions (a month)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, WorkDir, emit_report, fs_type, hive_pair, machine_info, md_table  # noqa: E402

from tributary_read.hive.hs2 import Hs2Metastore  # noqa: E402
from tributary_read.hive.model import TableName  # noqa: E402
from tributary_read.hive.sql import render  # noqa: E402
from tributary_read.hive.sync import SyncOptions, sync  # noqa: E402
from tributary_read.table.layout import Layout  # noqa: E402
from tributary_read.table.config import Table, TableConfig  # noqa: E402

LAYOUT = Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")
START = datetime(2024, 1, 1, tzinfo=timezone.utc)
#: per statement/call: a fresh pair on a loaded machine can take minutes for one batch (the default is 60 s)
TIMEOUT_S = 600




class Cpu:
    """CPU seconds of this process and of the pair's two JVMs (/proc/PID/stat; zeros where unreadable)."""

    def __init__(self, work: Path):
        try:
            state = json.loads((work / "hive" / "services.json").read_text())
            self.pids = {"hms": state["hms_pid"], "hs2": state["hs2_pid"]}
        except (OSError, ValueError, KeyError):
            self.pids = {}

    @staticmethod
    def _jvm(pid: int) -> float:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return 0.0

    def now(self) -> dict[str, float]:
        return {"client": time.process_time(), **{k: self._jvm(p) for k, p in self.pids.items()}}

    @staticmethod
    def per_partition(before: dict[str, float], after: dict[str, float], n: int) -> dict[str, float]:
        """CPU ms per partition spent between two readings, by process."""
        return {f"{k}_cpu_ms": (after[k] - before[k]) * 1000 / n for k in before}


def build_dirs(root: Path, hours: int, key_value: bool) -> None:
    for h in range(hours):
        t = START + timedelta(hours=h)
        d = root / (f"dt={t:%Y%m%d%H}" if key_value else f"{t:%Y_%m_%d/%H}")
        d.mkdir(parents=True)
        (d / "part-0.txt").write_text(f"{t.isoformat()} a\n{t.isoformat()} b\n")


def create(ms: Hs2Metastore, name: str, root: Path) -> TableName:
    t = TableName("default", name)
    ms._run(f"DROP TABLE IF EXISTS {t.sql}")
    ms._run(f"CREATE EXTERNAL TABLE {t.sql} (line STRING) PARTITIONED BY (dt STRING) STORED AS TEXTFILE "
            f"LOCATION 'file://{root}'")
    return t


def count_partitions(ms: Hs2Metastore, t: TableName) -> int:
    return len(ms.list_partitions(t))


def cli_sync(root: Path, t: TableName, port: int) -> tuple[float, dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "tributary_read.cli.main", "partitions", "sync", str(root), "--hive-table", str(t),
                        "--metastore", f"hs2://127.0.0.1:{port}?user=trib&timeout={TIMEOUT_S}", "--json"],
                       capture_output=True, text=True, env=env, cwd=REPO)
    wall = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit(f"CLI sync failed: {p.stderr}")
    return wall, json.loads(p.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a month (720 partitions), small samples")
    ap.add_argument("--hours", type=int, help="hour directories (default 8760, quick 720)")
    ap.add_argument("--batch-sizes", help="comma list of partitions per statement (default 100,500,1000,2000)")
    ap.add_argument("--single-sample", type=int, help="partitions mounted one statement each (default 300)")
    ap.add_argument("--skip", default="", help="comma list of single,msck,cli,info,thrift to skip")
    ap.add_argument("--json", dest="json_out", help="also write the results as JSON here")
    ap.add_argument("--markdown", help="also write the markdown section here")
    args = ap.parse_args(argv)
    hours = args.hours or (720 if args.quick else 8760)
    batch_sizes = [int(x) for x in (args.batch_sizes or ("1000" if args.quick else "100,500,1000,2000")).split(",")]
    sample = min(args.single_sample or (50 if args.quick else 300), hours)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    before = machine_info()

    with WorkDir(prefix="hive-sync-") as work:
        with hive_pair(work, timeout=900) as (hms_port, hs2_port):  # a loaded machine needs more than 300 s
            results = run(work, hs2_port, hours, batch_sizes, sample, skip, hms_port)
        fs = fs_type(work)
    after = machine_info()
    report = {"hours": hours, "machine": before, "loadavg_after": after["loadavg"], "fs": fs, **results}
    emit_report(report, print_report, args)
    return 0


def run(work: Path, port: int, hours: int, batch_sizes: list[int], sample: int, skip: set[str],
        hms_port: int | None = None) -> dict:
    out: dict = {"batched": [], "single": None, "msck": None, "thrift": None}
    cpu = Cpu(work)
    ms = Hs2Metastore("127.0.0.1", port, user="trib", timeout=TIMEOUT_S)
    # Warm the JVMs (JIT, metastore caches) so that the first variant is not charged for it.
    warm = work / "warm-up"
    build_dirs(warm, 300, key_value=False)
    wt = create(ms, "bench_warm_up", warm)
    ms.add_partitions(wt, [({"dt": f"{START + timedelta(hours=h):%Y%m%d%H}"},
                            f"file://{warm}/{START + timedelta(hours=h):%Y_%m_%d/%H}") for h in range(300)])
    ms._run(f"DROP TABLE {wt.sql}")
    print(f"building {hours} hour directories per variant ...", file=sys.stderr)

    # -- trib's batched sync, per batch size (each on a fresh table over its own directories).
    # "no SET": Spark then splits each statement into metastore calls of 100 partitions.
    variants = [(bs, True) for bs in batch_sizes] + [(max(batch_sizes), False)]
    for bs, conf in variants:
        root = work / f"layout-{bs}-{conf}"
        table = Table.create(str(root), TableConfig(LAYOUT, format="text"))
        build_dirs(root, hours, key_value=False)
        m = ms if conf else Hs2Metastore("127.0.0.1", port, user="trib", timeout=TIMEOUT_S)
        if not conf:
            m.dialect = replace(m.dialect, batch_conf=None)
        t = create(ms, f"bench_sync_{bs}_{int(conf)}", root)
        c0 = cpu.now()
        t0 = time.perf_counter()
        r = sync(table, m, t, SyncOptions(batch_size=bs))
        wall = time.perf_counter() - t0
        c1 = cpu.now()
        assert count_partitions(ms, t) == hours
        out["batched"].append({"batch_size": bs, "set_batch_conf": conf, "seconds": wall,
                               "ms_per_partition": wall * 1000 / hours, "statements": r.statements,
                               "add_s": r.timings.get("add_s"), "plan_s": r.timings.get("plan_s"),
                               **Cpu.per_partition(c0, c1, hours)})
        print(f"  batch {bs}{'' if conf else ' (no SET)'}: {wall:.1f}s, {wall * 1000 / hours:.2f} ms/partition",
              file=sys.stderr)
    # -- the same sync straight through the metastore's Thrift API (no SQL engine), batch 1000
    if "thrift" not in skip and hms_port:
        from tributary_read.hive.thrift_metastore import ThriftMetastore

        root = work / "layout-thrift"
        table = Table.create(str(root), TableConfig(LAYOUT, format="text"))
        build_dirs(root, hours, key_value=False)
        t = create(ms, "bench_sync_thrift", root)
        with ThriftMetastore("127.0.0.1", hms_port, timeout=TIMEOUT_S) as tm:
            warm_t = create(ms, "bench_thrift_warm", warm)
            tm.add_partitions(warm_t, [({"dt": f"{START + timedelta(hours=h):%Y%m%d%H}"},
                                        f"file://{warm}/{START + timedelta(hours=h):%Y_%m_%d/%H}") for h in range(300)])
            ms._run(f"DROP TABLE {warm_t.sql}")
            c0 = cpu.now()
            t0 = time.perf_counter()
            r = sync(table, tm, t, SyncOptions(batch_size=1000))
            wall = time.perf_counter() - t0
            c1 = cpu.now()
        assert count_partitions(ms, t) == hours
        out["thrift"] = {"seconds": wall, "ms_per_partition": wall * 1000 / hours, "calls": r.statements,
                         "add_s": r.timings.get("add_s"), **Cpu.per_partition(c0, c1, hours)}
        print(f"  thrift: {wall:.1f}s, {wall * 1000 / hours:.2f} ms/partition", file=sys.stderr)
    bs = 1000 if 1000 in batch_sizes else batch_sizes[-1]
    default_root, default_table = work / f"layout-{bs}-True", TableName("default", f"bench_sync_{bs}_1")

    # -- the no-op re-sync
    table = Table.load(str(default_root))
    noop = []
    for _ in range(3):
        t0 = time.perf_counter()
        r = sync(table, ms, default_table)
        noop.append((time.perf_counter() - t0, r))
    best = min(noop, key=lambda x: x[0])
    assert best[1].statements == 0 and best[1].plan.empty
    out["noop"] = {"seconds": best[0], "timings": {k: round(v, 4) for k, v in best[1].timings.items()},
                   "runs": [round(x[0], 3) for x in noop]}
    print(f"  no-op re-sync: {best[0]:.2f}s", file=sys.stderr)

    if "cli" not in skip:
        root = work / "layout-cli"
        Table.create(str(root), TableConfig(LAYOUT, format="text"))
        build_dirs(root, hours, key_value=False)
        t = create(ms, "bench_sync_cli", root)
        wall, doc = cli_sync(root, t, port)
        noop_wall, noop_doc = cli_sync(root, t, port)
        assert noop_doc["statements"] == 0
        out["cli"] = {"seconds": wall, "ms_per_partition": wall * 1000 / hours, "noop_seconds": noop_wall,
                      "statements": doc["statements"]}
        print(f"  CLI: {wall:.1f}s, no-op {noop_wall:.2f}s", file=sys.stderr)

    # -- one statement per partition, on a sample
    if "single" not in skip:
        root = work / "layout-single"
        build_dirs(root, sample, key_value=False)
        t = create(ms, "bench_single", root)
        keys = [(START + timedelta(hours=h)) for h in range(sample)]
        t0 = time.perf_counter()
        for k in keys:
            ms.add_partitions(t, [({"dt": f"{k:%Y%m%d%H}"}, f"file://{root}/{k:%Y_%m_%d/%H}")])
        wall = time.perf_counter() - t0
        assert count_partitions(ms, t) == sample
        per = wall * 1000 / sample
        out["single"] = {"sample": sample, "seconds": wall, "ms_per_partition": per,
                         "extrapolated_seconds": per * hours / 1000}
        print(f"  single: {per:.1f} ms/partition on {sample}", file=sys.stderr)

    # -- MSCK REPAIR TABLE on a key=value copy
    if "msck" not in skip:
        root = work / "keyvalue"
        build_dirs(root, hours, key_value=True)
        t = create(ms, "bench_msck", root)
        t0 = time.perf_counter()
        ms._run(render("msck_repair", table=t.sql))
        wall = time.perf_counter() - t0
        n = count_partitions(ms, t)
        assert n == hours, n
        out["msck"] = {"seconds": wall, "ms_per_partition": wall * 1000 / hours}
        print(f"  MSCK: {wall:.1f}s", file=sys.stderr)

    # -- the costs behind the design
    if "info" not in skip:
        info: dict = {}
        t0 = time.perf_counter()
        n = count_partitions(ms, default_table)
        info["show_partitions_s"] = time.perf_counter() - t0
        info["show_partitions_n"] = n
        t0 = time.perf_counter()
        ndesc = min(50, hours)
        for h in range(ndesc):
            ms.describe_partition(default_table, {"dt": f"{START + timedelta(hours=h):%Y%m%d%H}"})
        info["describe_ms"] = (time.perf_counter() - t0) * 1000 / ndesc
        ndrop = min(100, hours)
        t0 = time.perf_counter()
        ms.drop_partitions(default_table, [{"dt": f"{START + timedelta(hours=h):%Y%m%d%H}"} for h in range(ndrop)])
        info["drop_ms_per_partition"] = (time.perf_counter() - t0) * 1000 / ndrop
        info["drop_n"] = ndrop
        out["info"] = info
    ms.close()
    return out


def print_report(r: dict) -> None:
    n = r["hours"]
    rows = []

    def cpu_cells(v: dict) -> list[str]:
        return [f"{v[k]:.2f}" if k in v else "" for k in ("client_cpu_ms", "hms_cpu_ms", "hs2_cpu_ms")]

    for b in r["batched"]:
        label = f"trib sync, {b['batch_size']} per statement" + ("" if b["set_batch_conf"] else
                                                                 ", Spark's own 100 per metastore call")
        rows.append([label, f"{b['seconds']:.1f}", f"{b['ms_per_partition']:.2f}", *cpu_cells(b), b["statements"],
                     "measured"])
    if r.get("thrift"):
        th = r["thrift"]
        rows.append(["trib sync through thrift:// (metastore API, 1000 per call)", f"{th['seconds']:.1f}",
                     f"{th['ms_per_partition']:.2f}", *cpu_cells(th), th["calls"], "measured"])
    if r.get("cli"):
        c = r["cli"]
        rows.append(["trib partitions sync (CLI, batch 1000)", f"{c['seconds']:.1f}", f"{c['ms_per_partition']:.2f}",
                     "", "", "", c["statements"], "measured, incl. process start"])
    if r.get("single"):
        s = r["single"]
        rows.append(["one ADD PARTITION per statement", f"{s['extrapolated_seconds']:.0f}",
                     f"{s['ms_per_partition']:.1f}", "", "", "", n, f"extrapolated from {s['sample']}"])
    if r.get("msck"):
        m = r["msck"]
        rows.append(["MSCK REPAIR TABLE (key=value copy)", f"{m['seconds']:.1f}", f"{m['ms_per_partition']:.2f}",
                     "", "", "", 1, "measured"])
    print(f"\n## Mounting {n:,} hourly partitions: HiveServer2 (Spark Thrift Server 4.3), the metastore's Thrift "
          "API (HMS 2.3, Derby) and MSCK\n")
    if r.get("thrift") and r["batched"]:
        hs2 = next((b for b in r["batched"] if b["batch_size"] == 1000 and b["set_batch_conf"]), r["batched"][0])
        print(f"thrift vs HS2 (batch {hs2['batch_size']}): {r['thrift']['ms_per_partition']:.2f} vs "
              f"{hs2['ms_per_partition']:.2f} ms/partition = {r['thrift']['seconds'] / hs2['seconds']:.2f}x the time"
              + (f"; vs MSCK {r['thrift']['seconds'] / r['msck']['seconds']:.2f}x" if r.get("msck") else "") + "\n")
    print(f"machine: {r['machine']['nproc']} cores, {r['machine']['cpu']}; load {r['machine']['loadavg']} before, "
          f"{r['loadavg_after']} after; data on {r['fs']}; {r['machine']['date']}\n")
    print(md_table(["method", "total s", "ms / partition", "client CPU ms / p.", "metastore CPU ms / p.",
                    "HS2 CPU ms / p.", "statements", "how"], rows))
    no = r["noop"]
    print(f"\nNo-op re-sync of {n:,} partitions: {no['seconds']:.2f} s in-process "
          f"(runs {no['runs']}; {json.dumps(no['timings'])})"
          + (f", {r['cli']['noop_seconds']:.2f} s through the CLI" if r.get("cli") else ""))
    if r.get("info"):
        i = r["info"]
        print(f"\nFor the design: SHOW PARTITIONS of {i['show_partitions_n']:,}: {i['show_partitions_s']:.2f} s; "
              f"DESCRIBE FORMATTED per partition: {i['describe_ms']:.0f} ms; batched DROP: "
              f"{i['drop_ms_per_partition']:.0f} ms / partition ({i['drop_n']} in one statement).")


if __name__ == "__main__":
    sys.exit(main())
