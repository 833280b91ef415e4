#!/usr/bin/env python
"""The hourly ETL run's Hive step as the output table grows: the commit mount vs the full sync.

Starts its own metastore + HiveServer2 pair on free ports (as bench_hive_sync.py
does), or uses a running one (``--metastore thrift://HOST:PORT --hs2 HOST:PORT``:
its tables are bench_etl_N in the default database, dropped at the end), and
talks to the metastore through its Thrift API (a job's ``metastore =
"thrift://..."``). For each table size (``--sizes``, default 100, 1,000 and
10,000 hourly partitions, all mounted in a fresh EXTERNAL table and fully
synced once beforehand, as a year of hourly runs leaves it), it times the Hive
step of simulated hourly runs: each run commits one new hour and one late file
into an old partition, then runs the ETL's Hive step
(:func:`tributary_read.etl.sync_step.sync`, the code ``trib etl run`` runs,
on a real commit read from the log) in both modes:

* **commit mount** (the default): look up, add or refresh only the commit's
  partitions;
* **full sync** (``--full-sync``, the mechanism every run used before):
  list the table's directories and the metastore's partitions, plan, apply.

Reported: the median seconds per run of each mode and size, the growth of each
mode from the smallest to the largest table (the commit mount should stay
within 1.5x), and full / mount as a ratio.

    .venv/bin/python benchmarks/bench_etl_hive.py                   # 100, 1,000, 10,000 partitions
    .venv/bin/python benchmarks/bench_etl_hive.py --quick           # 100, 1,000
    .venv/bin/python benchmarks/bench_etl_hive.py --sizes 3 --runs 1 --metastore thrift://127.0.0.1:9083 \
        --hs2 127.0.0.1:10000                                          # a smoke run on a running pair
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import WorkDir, emit_report, fs_type, hive_pair, machine_info, md_table  # noqa: E402

from tributary_read.etl.job import Job  # noqa: E402
from tributary_read.etl.run import _Run  # noqa: E402
from tributary_read.etl.sync_step import sync as hive_step  # noqa: E402
from tributary_read.hive.model import TableName  # noqa: E402
from tributary_read.hive.thrift_metastore import ThriftMetastore  # noqa: E402
from tributary_read.hive.hs2 import Hs2Metastore  # noqa: E402
from tributary_read.hive.sync import sync as full_sync  # noqa: E402
from tributary_read.table.config import Table, TableConfig  # noqa: E402
from tributary_read.table.layout import Layout  # noqa: E402
from tributary_read.table.manifest import FileEntry  # noqa: E402

LAYOUT = Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")
T0 = 1_704_067_200_000  # 2024-01-01T00:00Z
H = 3_600_000


def _file(root: Path, hour: int, name: str) -> FileEntry:
    """Write one small file into hour ``hour``'s directory; its manifest entry."""
    p = LAYOUT.for_time(T0 + hour * H)
    d = root / p.path
    d.mkdir(parents=True, exist_ok=True)
    data = f"{hour} {name}\n".encode()
    (d / name).write_bytes(data)
    return FileEntry(f"{p.path}/{name}", len(data), 1, dict(p.values))


def build(work: Path, n: int, ms: ThriftMetastore, hs2: Hs2Metastore, metastore: str) -> tuple[Job, Table, Path]:
    """An output table of ``n`` committed hourly partitions, all mounted and fully synced once."""
    root = work / f"out-{n}"
    table = Table.create(str(root), TableConfig(LAYOUT, format="text"))
    entries = [_file(root, h, "part-0.txt") for h in range(n)]
    for i in range(0, n, 1000):  # a year of runs, in a few commits
        table.log.commit(entries[i:i + 1000])
    name = TableName("default", f"bench_etl_{n}")
    hs2._run(f"DROP TABLE IF EXISTS {name.sql}")
    hs2._run(f"CREATE EXTERNAL TABLE {name.sql} (line STRING) PARTITIONED BY (dt STRING) STORED AS TEXTFILE "
             f"LOCATION 'file://{root}'")
    full_sync(table, ms, name)  # everything mounted, the sync state written: the steady state
    job_file = work / f"job-{n}.toml"
    (work / "etl.sql").write_text("SELECT * FROM raw\n")
    source = work / f"in-{n}"  # the job's input: only its Hive step runs, but a job may not read its own output
    Table.create(str(source), TableConfig(LAYOUT, format="text"))
    job_file.write_text(f'[job]\nname = "bench{n}"\nsql = "etl.sql"\n\n[[inputs]]\ntable = "{source}"\nview = "raw"\n'
                        f'mode = "consumer"\n\n[output]\ntable = "{root}"\ntime_column = "ts"\n\n'
                        f'[hive]\ntable = "{name}"\nmetastore = "{metastore}"\n')
    return Job.load(job_file), table, root


def hourly(job: Job, table: Table, root: Path, hour: int, full: bool) -> tuple[float, int]:
    """One run's Hive step after a commit of hour ``hour`` plus a late file into an old hour."""
    files = [_file(root, hour, "part-0.txt"), _file(root, hour // 2, f"late-{hour}.txt")]
    commit = table.log.commit(files)
    run = _Run(job, T0 + (hour + 1) * H, T0 + (hour + 1) * H, table, None, False, lambda _m: None)
    t0 = time.perf_counter()
    rep = hive_step(run, commit, full)
    wall = time.perf_counter() - t0
    assert rep.mode == ("full" if full else "commit")
    assert len(rep.added) == 1 and len(rep.refreshed) >= 1, rep
    return wall, rep.statements


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="sizes 100 and 1,000, fewer runs")
    ap.add_argument("--sizes", help="comma list of table sizes in partitions (default 100,1000,10000)")
    ap.add_argument("--runs", type=int, help="hourly runs per mode and size (default 7, quick 3)")
    ap.add_argument("--json", dest="json_out", help="also write the results as JSON here")
    ap.add_argument("--markdown", help="also write the markdown section here")
    ap.add_argument("--metastore", metavar="thrift://HOST:PORT",
                    help="a running metastore to use, with --hs2, instead of starting a local pair")
    ap.add_argument("--hs2", metavar="HOST:PORT", help="that metastore's HiveServer2")
    args = ap.parse_args(argv)
    if bool(args.metastore) != bool(args.hs2):
        ap.error("--metastore and --hs2 go together")
    sizes = [int(x) for x in (args.sizes or ("100,1000" if args.quick else "100,1000,10000")).split(",")]
    runs = args.runs or (3 if args.quick else 7)
    before = machine_info()
    with WorkDir(prefix="etl-hive-") as work:
        if args.metastore:  # the tables are named bench_etl_N in its default database
            results = run(work, sizes, runs, args.metastore, args.hs2)
        else:
            with hive_pair(work) as (hms_port, hs2_port):
                results = run(work, sizes, runs, f"thrift://127.0.0.1:{hms_port}", f"127.0.0.1:{hs2_port}")
        fs = fs_type(work)
    after = machine_info()
    report = {"machine": before, "loadavg_after": after["loadavg"], "fs": fs, "runs": runs, "sizes": results}
    emit_report(report, print_report, args)
    return 0


def run(work: Path, sizes: list[int], runs: int, metastore: str, hs2_at: str) -> list[dict]:
    """Build every table first, then run the rounds across all sizes and both modes in turn, so
    that warm-up and drift in the machine's load hit every size and mode alike."""
    ms_at = urlsplit(metastore)
    hs2_host, _, hs2_port = hs2_at.rpartition(":")
    hs2 = Hs2Metastore(hs2_host, int(hs2_port), user="trib")
    with ThriftMetastore(ms_at.hostname, ms_at.port) as ms:
        warm = build(work, 50, ms, hs2, metastore)  # JIT and metastore caches, charged to nobody
        for i in range(10):
            hourly(*warm, 50 + i, i % 2 == 1)
        built = {}
        for n in sizes:
            t0 = time.perf_counter()
            built[n] = build(work, n, ms, hs2, metastore)
            print(f"  {n} partitions built and mounted in {time.perf_counter() - t0:.0f}s", file=sys.stderr)
        times: dict[tuple[int, bool], list[float]] = {(n, f): [] for n in sizes for f in (False, True)}
        stmts: dict[tuple[int, bool], int] = {}
        for i in range(runs):
            for n in sizes:
                for is_full in (False, True):
                    wall, s = hourly(*built[n], n + 2 * i + int(is_full), is_full)
                    times[(n, is_full)].append(wall)
                    stmts[(n, is_full)] = s
        for n in (50, *sizes):  # a running metastore (--metastore) keeps nothing of the benchmark's
            hs2._run(f"DROP TABLE IF EXISTS {TableName('default', f'bench_etl_{n}').sql}")
    hs2.close()
    out = []
    for n in sizes:
        mount, full = times[(n, False)], times[(n, True)]
        r = {"partitions": n, "mount_s": statistics.median(mount), "full_s": statistics.median(full),
             "mount_runs": [round(x, 4) for x in mount], "full_runs": [round(x, 4) for x in full],
             "mount_statements": stmts[(n, False)], "full_statements": stmts[(n, True)]}
        out.append(r)
        print(f"  {n}: mount {r['mount_s'] * 1000:.0f} ms, full {r['full_s'] * 1000:.0f} ms", file=sys.stderr)
    return out


def print_report(r: dict) -> None:
    sizes = r["sizes"]
    print("\n## The hourly ETL run's Hive step as the table grows: commit mount vs full sync "
          "(thrift:// metastore, HMS 2.3 on Derby)\n")
    print(f"machine: {r['machine']['nproc']} cores, {r['machine']['cpu']}; load {r['machine']['loadavg']} before, "
          f"{r['loadavg_after']} after; data on {r['fs']}; {r['machine']['date']}; median of {r['runs']} runs "
          "per mode and size, each a commit of one new hour and one late file into an old partition\n")
    rows = [[f"{s['partitions']:,}", f"{s['mount_s'] * 1000:.0f}", s["mount_statements"], f"{s['full_s'] * 1000:.0f}",
             s["full_statements"], f"{s['full_s'] / s['mount_s']:.1f}x"] for s in sizes]
    print(md_table(["partitions in the table", "commit mount ms", "requests", "full sync ms", "requests",
                    "full / mount"], rows))
    if len(sizes) > 1:
        a, b = sizes[0], sizes[-1]
        print(f"\nFrom {a['partitions']:,} to {b['partitions']:,} partitions the commit mount takes "
              f"{b['mount_s'] / a['mount_s']:.2f}x the time (flat: within 1.5x), the full sync "
              f"{b['full_s'] / a['full_s']:.1f}x.")


if __name__ == "__main__":
    sys.exit(main())
