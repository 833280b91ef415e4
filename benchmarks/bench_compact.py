#!/usr/bin/env python
"""``trib compact`` against a hand-written pyarrow rewrite of the same files, and Spark before and after.

A template table per format (jsonl + gzip, Parquet + snappy) of ``--hours``
hourly partitions (1) x ``--files`` small trib-committed files (720: a file
every 5 seconds for an hour) x ``--records`` JSON-shaped records (1,000), made
once and not timed: files written with pyarrow, named as trib's writers name
them, committed in commits of 12 files, their mtimes set within one hour (the
compaction period, so each partition becomes one file). Then:

a. **Throughput.** ``--reps`` runs per side, interleaved (the order flips every
   run), each on a fresh copy of the template (the copy is not timed):

   * **trib**: ``trib -q compact ROOT --min-age 0s --json`` as a process: plan,
     rewrite (each input checked against its commit, the output fsynced and
     read back), one replace commit, the originals set aside, the outputs
     renamed into place.
   * **raw**: a process running :data:`RAW_SCRIPT`, the rewrite written by
     hand with pyarrow: for each partition, read its files in order and write
     one file with the same codec and level next to them (jsonl: decompress and
     recompress the bytes with gzip at trib's level; Parquet: read each file,
     write 65,536-row row groups through one ``pq.ParquetWriter``), then fsync
     it and its directories up to the root, as trib's output. No commit, no
     check, nothing moved. **raw, no fsync**: the same without any fsync.

   Both are timed from spawn to exit (interpreter start and imports included),
   with CPU seconds from ``wait4``. Reported: records/s, MB/s of input bytes on
   disk, and trib / raw (median of the per-run ratios of wall time; goal >= 0.90),
   and the ratio of median CPU seconds, which a shared machine's load
   moves less than wall time.
b. **Spark.** In this process, one ``local[2]`` session: ``spark.read`` (json
   with an explicit schema, or parquet) ``.count()`` over the explicit file
   list ``trib files ROOT --all --json`` gives for the first hour, before
   compaction (the template) and after (the last trib run's table). One
   warm-up each, then ``--spark-reps`` alternating; medians and the ratio.

    .venv/bin/python benchmarks/bench_compact.py            # 720 files x 1,000 records, 5 runs per side
    .venv/bin/python benchmarks/bench_compact.py --quick    # 120 files x 200 records, 3 runs per side
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (HERE, WorkDir, bench_session, emit, fmt_int, fs_type, hour_dir, machine_info,  # noqa: E402
                     md_table, median)

H = 3_600_000
T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z: the first event hour
LAYOUT, PARTITION = "{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}"
#: trib / raw records/s: against the fair durable baseline, and against raw without fsync
GOAL, GOAL_NOFSYNC = 0.95, 0.80
PER_COMMIT = 12  # files per commit: collectors rolling every 5 minutes
FORMATS = {"jsonl": ("jsonl", "gzip", ".jsonl.gz", "jsonl + gzip"),
           "parquet": ("parquet", "snappy", ".parquet", "Parquet + snappy")}
SPARK_SCHEMA = "ts BIGINT, user_id STRING, action STRING, url STRING, n BIGINT, value DOUBLE"

#: The hand-written rewrite: argv = format, a JSON file {partition directory: [input paths, in commit order]},
#: the table's root, ``fsync`` or ``no-fsync``, this directory (for ``_common``). Prints the records it wrote.
#: Each partition's inputs go into one file of ``_common.RawFiles`` (gzip at trib's level, read from
#: ``tributary_read.io.sinks.GZIP_LEVEL``; Parquet row groups of 65,536 rows), closed, and with ``fsync`` the
#: files and the directories from them to the root fsynced one after the other, as trib's output is durable.
RAW_SCRIPT = r"""
import json, os, sys
sys.path.insert(0, sys.argv[5])
import pyarrow as pa
import pyarrow.parquet as pq
from _common import RawFiles

fmt, plan, root, durable = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4] == "fsync"
files = RawFiles(root, fmt, "gzip" if fmt == "jsonl" else "snappy", durable)
records = 0
for directory, inputs in plan.items():
    part = os.path.relpath(directory, root)
    for f in inputs:
        if fmt == "jsonl":
            with pa.input_stream(f, compression="gzip") as src:
                while True:
                    chunk = src.read(1 << 20)
                    if not chunk:
                        break
                    records += chunk.count(b"\n")
                    files.lines(part, chunk)
        else:
            t = pq.ParquetFile(f).read()
            records += t.num_rows
            files.table(part, t)
files.close()
print(records)
"""


def _trib_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "trib"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "tributary_read.cli.main"]


def build(root: Path, fmt: str, hours: int, files: int, records: int) -> dict:
    """The template table: ``hours`` x ``files`` committed files; returns its plan for the raw side and sizes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tributary_read.table.config import Table, TableConfig
    from tributary_read.table.layout import Layout
    from tributary_read.table.manifest import FileEntry

    kind, codec, ext, _ = FORMATS[fmt]
    table = Table.create(str(root), TableConfig(Layout(LAYOUT, PARTITION), format=kind, compression=codec))
    plan: dict[str, list[str]] = {}
    entries: list[FileEntry] = []
    total_bytes = n = 0
    step = max(1, (H - 60_000) // max(1, files))  # arrivals spread over one hour, the hour after the events
    for h in range(hours):
        start = T0 + h * H
        rel_dir = hour_dir(start)
        d = root / rel_dir
        d.mkdir(parents=True, exist_ok=True)
        part = {"dt": rel_dir.replace("_", "").replace("/", "")}
        for i in range(files):
            rows = [{"ts": start + (n + j) % H, "user_id": f"u{(n + j) % 9973}", "action": ("click", "view", "buy")[j % 3],
                     "url": f"https://example.com/p/{(n + j) % 100_003}?ref=bench", "n": n + j, "value": (n + j) * 0.5}
                    for j in range(records)]
            name = f"part-20240101{h % 24:02d}0000-{i:08x}-{1:06d}{ext}"
            p = d / name
            if kind == "jsonl":
                data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows).encode()
                with pa.OSFile(str(p), "wb") as raw:
                    out = pa.CompressedOutputStream(raw, "gzip")
                    out.write(data)
                    out.close()
            else:
                pq.write_table(pa.Table.from_pylist(rows), str(p), compression="snappy")
            mtime = start + H + 30_000 + i * step  # one aligned hour of mtimes: one compacted file per partition
            os.utime(p, ns=(mtime * 1_000_000, mtime * 1_000_000))
            size = p.stat().st_size
            total_bytes += size
            n += records
            entries.append(FileEntry(f"{rel_dir}/{name}", size, records, part))
            plan.setdefault(str(d), []).append(str(p))
    for k in range(0, len(entries), PER_COMMIT):
        table.log.commit(entries[k:k + PER_COMMIT])
    return {"plan": plan, "bytes": total_bytes, "records": n, "files": len(entries)}


def _run_process(cmd: list[str], out_path: Path, label: str) -> dict:
    """Wall seconds from spawn to exit, CPU seconds (user + sys) from wait4, stdout."""
    with open(out_path, "wb") as out, open(str(out_path) + ".err", "wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        raise RuntimeError(f"{label} exited {rc}: {Path(str(out_path) + '.err').read_text()[-2000:]}")
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "out": out_path.read_text()}


def run_trib(copy: Path, built: dict) -> dict:
    r = _run_process(_trib_cmd() + ["-q", "compact", str(copy), "--min-age", "0s", "--json"],
                     copy.parent / f"{copy.name}.out", "trib compact")
    doc = json.loads(r.pop("out"))
    if doc["records"] != built["records"] or doc["files_in"] != built["files"] or doc["version"] is None:
        raise RuntimeError(f"trib compact merged {doc['files_in']} files, {doc['records']} records; the table "
                           f"holds {built['files']}, {built['records']}")
    r.update(records=doc["records"], files_out=doc["files_out"])
    return r


def run_raw(copy: Path, built: dict, fmt: str, template: Path, durable: bool = True) -> dict:
    plan = {d.replace(str(template), str(copy), 1): [f.replace(str(template), str(copy), 1) for f in fs]
            for d, fs in built["plan"].items()}
    plan_file = copy.parent / f"{copy.name}.plan.json"
    plan_file.write_text(json.dumps(plan))
    r = _run_process([sys.executable, "-c", RAW_SCRIPT, fmt, str(plan_file), str(copy),
                      "fsync" if durable else "no-fsync", str(HERE)], copy.parent / f"{copy.name}.out",
                     "the raw rewrite")
    got = int(r.pop("out").strip())
    if got != built["records"]:
        raise RuntimeError(f"the raw rewrite wrote {got} records; the table holds {built['records']}")
    r.update(records=got, files_out=len(plan))
    return r


def _settle() -> None:
    if hasattr(os, "sync"):
        os.sync()
    gc.collect()


def throughput(fmt: str, template: Path, built: dict, reps: int, work: Path) -> tuple[dict, Path]:
    """Interleaved runs on fresh copies; returns the runs per side and the last trib copy (compacted)."""
    sides = {"raw": lambda c: run_raw(c, built, fmt, template),
             "raw_nofsync": lambda c: run_raw(c, built, fmt, template, durable=False),
             "trib": lambda c: run_trib(c, built)}
    runs: dict[str, list[dict]] = {k: [] for k in sides}
    keys = list(sides)
    last_trib = None
    for i in range(reps):
        for k in (keys if i % 2 == 0 else keys[::-1]):
            copy = work / f"{fmt}-{k}-{i}"
            shutil.copytree(template, copy, symlinks=True)  # copy2: mtimes kept
            _settle()
            r = runs[k].append(sides[k](copy)) or runs[k][-1]
            print(f"  {fmt:8s} {k:11s} run {i + 1}/{reps}: {r['wall']:.3f} s wall, {r['cpu']:.3f} s CPU, "
                  f"{r['files_out']} files out", file=sys.stderr, flush=True)
            if k == "trib":
                if last_trib is not None:
                    shutil.rmtree(last_trib, ignore_errors=True)
                last_trib = copy
            else:
                shutil.rmtree(copy, ignore_errors=True)
    assert last_trib is not None
    return runs, last_trib


def _uris(root: Path, first_hour: str) -> list[str]:
    out = subprocess.run(_trib_cmd() + ["files", str(root), "--all", "--json"], check=True, capture_output=True,
                         text=True).stdout
    doc = json.loads(out)
    base = doc["root"].rstrip("/")
    return [f"{base}/{f['path']}" for f in doc["files"] if f["path"].startswith(first_hour + "/")]


def spark_counts(spark, fmt: str, before: Path, after: Path, records: int, reps: int) -> dict:
    first = hour_dir(T0)
    paths = {"before": _uris(before, first), "after": _uris(after, first)}

    def count(which: str) -> int:
        reader = spark.read.format("json").schema(SPARK_SCHEMA) if fmt == "jsonl" else spark.read.format("parquet")
        return reader.load(paths[which]).count()

    times: dict[str, list[float]] = {"before": [], "after": []}
    for which in times:  # warm-up, and the check
        got = count(which)
        if got != records:
            raise RuntimeError(f"Spark counted {got} records {which} compaction; the hour holds {records}")
    for i in range(reps):
        for which in (("before", "after") if i % 2 == 0 else ("after", "before")):
            t0 = time.perf_counter()
            count(which)
            times[which].append(time.perf_counter() - t0)
    return {"files_before": len(paths["before"]), "files_after": len(paths["after"]), "times": times,
            "before_s": median(times["before"]), "after_s": median(times["after"]),
            "speedup": median(times["before"]) / median(times["after"])}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=int, default=1, help="hourly partitions (1)")
    ap.add_argument("--files", type=int, default=720, help="small files per partition (720)")
    ap.add_argument("--records", type=int, default=1000, help="records per file (1,000)")
    ap.add_argument("--reps", type=int, default=5, help="timed runs per side and format (5)")
    ap.add_argument("--spark-reps", type=int, default=5, help="timed Spark counts before and after (5)")
    ap.add_argument("--formats", default="jsonl,parquet", help="jsonl,parquet")
    ap.add_argument("--no-spark", action="store_true", help="skip the Spark counts")
    ap.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    ap.add_argument("--dir", help="scratch directory parent (default benchmarks/out)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch tables")
    ap.add_argument("--quick", action="store_true", help="120 files x 200 records, 3 runs, 3 Spark counts")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--markdown", help="also write the markdown section here")
    args = ap.parse_args(argv)
    if args.quick:
        args.files, args.records, args.reps, args.spark_reps = 120, 200, 3, 3
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    machine = machine_info()
    results: dict = {"hours": args.hours, "files": args.files, "records_per_file": args.records, "reps": args.reps,
                     "formats": {}, "machine": machine}
    with WorkDir(args.dir, prefix="bench-compact-", keep=args.keep) as work:
        fs = fs_type(work)
        spark = None
        for fmt in formats:
            template = work / f"{fmt}-template"
            t = time.perf_counter()
            built = build(template, fmt, args.hours, args.files, args.records)
            print(f"{fmt}: {built['files']:,} files, {built['records']:,} records, {built['bytes'] / 1e6:.1f} MB "
                  f"(made in {time.perf_counter() - t:.1f} s)", file=sys.stderr, flush=True)
            runs, compacted = throughput(fmt, template, built, args.reps, work)
            res = {"built": {k: v for k, v in built.items() if k != "plan"}, "runs": runs}
            if not args.no_spark:
                if spark is None:
                    spark = bench_session(args.master, "bench-compact")
                res["spark"] = spark_counts(spark, fmt, template, compacted, args.records * args.files,
                                            args.spark_reps)
                print(f"  {fmt:8s} spark: before {res['spark']['before_s']:.3f} s, after "
                      f"{res['spark']['after_s']:.3f} s", file=sys.stderr, flush=True)
            results["formats"][fmt] = res
        if spark is not None:
            spark.stop()
    results["fs"] = fs
    return emit(report(results), results, args)


def report(res: dict) -> str:
    rows = []
    spark_rows = []
    for fmt, r in res["formats"].items():
        b = r["built"]
        raw, trib = r["runs"]["raw"], r["runs"]["trib"]
        nofsync = r["runs"].get("raw_nofsync") or raw
        ratios = [x["wall"] / y["wall"] for x, y in zip(raw, trib)]  # trib speed / raw speed
        ratios_nf = [x["wall"] / y["wall"] for x, y in zip(nofsync, trib)]
        nf_s = median([x["wall"] for x in nofsync])
        raw_s, trib_s = median([x["wall"] for x in raw]), median([x["wall"] for x in trib])
        raw_cpu, trib_cpu = median([x["cpu"] for x in raw]), median([x["cpu"] for x in trib])
        rows.append([FORMATS[fmt][3], f"{b['files']:,} -> {trib[0]['files_out']}", f"{b['bytes'] / 1e6:.1f} MB",
                     f"{fmt_int(b['records'] / raw_s)} rec/s, {b['bytes'] / 1e6 / raw_s:.1f} MB/s "
                     f"({raw_s:.2f} s, CPU {raw_cpu:.2f} s)",
                     f"{fmt_int(b['records'] / trib_s)} rec/s, {b['bytes'] / 1e6 / trib_s:.1f} MB/s "
                     f"({trib_s:.2f} s, CPU {trib_cpu:.2f} s)",
                     f"{fmt_int(b['records'] / nf_s)} rec/s ({nf_s:.2f} s)",
                     f"**{median(ratios):.2f}** ({min(ratios):.2f}-{max(ratios):.2f})",
                     f"**{median(ratios_nf):.2f}** ({min(ratios_nf):.2f}-{max(ratios_nf):.2f})",
                     f"{raw_cpu / trib_cpu:.2f}",
                     f"{'met' if median(ratios) >= GOAL else 'not met'}, "
                     f"{'met' if median(ratios_nf) >= GOAL_NOFSYNC else 'not met'}"])
        if "spark" in r:
            s = r["spark"]
            spark_rows.append([FORMATS[fmt][3], f"{s['files_before']:,}", f"{s['before_s'] * 1000:,.0f} ms",
                               f"{s['files_after']:,}", f"{s['after_s'] * 1000:,.0f} ms", f"**{s['speedup']:.1f}x**"])
    m = res["machine"]
    text = (f"### `trib compact` (bench_compact.py)\n\n"
            f"{res['hours']} hourly partition(s) x {res['files']:,} small files x {res['records_per_file']:,} "
            f"records; {res['reps']} runs per side, interleaved, each on a fresh copy; {m['nproc']} CPUs, {res['fs']}, "
            f"load {m['loadavg']} at the start, git {m['git']}.\n\n"
            + md_table(["format", "files", "input", "hand-written pyarrow rewrite, fsynced as trib (process)",
                        "`trib compact --min-age 0s` (process)", "the raw rewrite without fsync",
                        "trib / raw fsynced (median, range)", "trib / raw no fsync (median, range)",
                        "CPU: raw / trib", f"goals >= {GOAL}, >= {GOAL_NOFSYNC}"], rows)
            + "\n\nThe raw rewrite writes the same files as trib's (one per partition, same codec and level), "
              "fsyncs each and its directories up to the root as trib makes its output durable; trib also "
              "checks each input against its commit and reads its output back, commits, and renames.")
    if spark_rows:
        text += ("\n\nSpark `count()` over the first hour's files, explicit list from `trib files ROOT --all --json` "
                 "(`local[2]`, medians):\n\n"
                 + md_table(["format", "files before", "count before", "files after", "count after",
                             "before / after"], spark_rows))
    return text


if __name__ == "__main__":
    main()
    sys.exit(0)
