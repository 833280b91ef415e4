#!/usr/bin/env python
"""Writer throughput: trib's TableWriter against a raw pyarrow baseline, same records, same run.

Two variants, each timed ``--repeat`` times with trib and raw runs interleaved:

* **text + gzip** -- N jsonl lines written through ``TableWriter.write(line, ts_ms)``
  into an hourly-partitioned table plus one final ``commit()``, against a plain
  loop writing the same lines into the same hourly files (each line routed by
  ``ts // 1h``, chunks of ~1 MiB joined per file, gzip at trib's level, read from
  ``tributary_read.io.sinks.GZIP_LEVEL``: ``_common.RawFiles``).
* **parquet** -- the same records as an Arrow table (id, ts, level, user, msg)
  through ``TableWriter.write_table(batch, 'ts')`` in batches of ``--batch-rows``
  plus one ``commit()``, against a plain loop that splits each batch by hour
  (``pc.equal`` + ``filter``) into one ``pq.ParquetWriter`` per hour, a row group
  per 65,536 rows buffered (trib's row group).

Data generation, table creation and clean-up are outside the timings. The
trib side includes everything a real writer pays: partition routing, one file
per partition, fsync of every data file and of the directories naming them,
the fsynced manifest commit. The raw side does the same work: the same files,
codec and level, and (``raw``) fsyncs each file and each directory from the
partitions to the root, one after the other, inside its timing. ``raw, no
fsync`` is the same loop without any fsync: trib's ratio to it is what
durability costs on this disk. Every ``os.fsync`` of a timed run is counted and
reported per side.

    .venv/bin/python benchmarks/bench_writer.py            # 1,000,000 records, median of 5
    .venv/bin/python benchmarks/bench_writer.py --quick    # 20,000 records, 3 runs
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RawFiles, WorkDir, emit, fmt_int, fs_type, machine_info, md_table, median  # noqa: E402

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from tributary_read.table.layout import Layout  # noqa: E402
from tributary_read.table.config import Table, TableConfig  # noqa: E402
from tributary_read.write.writer import TableWriter  # noqa: E402

LAYOUT = Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")
BASE_MS = 1_717_200_000_000  # 2024-06-01T00:00:00Z
FLUSH_BYTES = 1 << 20  # the same chunking LineSink uses
#: trib / raw throughput goals: against the fair durable baseline and against raw without fsync.
GOALS = {"durable": 0.95, "nofsync": 0.80}

WORDS = ("the quick brown fox jumps over lazy dog request served user login logout cart checkout "
         "payment accepted declined retry timeout cache miss hit upstream downstream shard replica "
         "leader follower commit abort snapshot compaction partition offset lag consumer producer "
         "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike").split()
LEVELS = ("INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR")


# -- data ---------------------------------------------------------------------
class Records:
    """N records as jsonl lines and as the equivalent Arrow table."""

    def __init__(self, n: int, seed: int, hours: float, order: str):
        rng = random.Random(seed)
        span = int(hours * 3_600_000)
        ts = [BASE_MS + rng.randrange(span) for _ in range(n)]
        if order == "sorted":
            ts.sort()
        elif order == "nearly-sorted":  # log-like: mostly increasing, a few minutes of jitter
            ts.sort()
            ts = [max(BASE_MS, t - rng.randrange(300_000)) for t in ts]
        levels = [rng.choice(LEVELS) for _ in range(n)]
        users = [f"u{rng.randrange(100_000):05d}" for _ in range(n)]
        choice, randint = rng.choice, rng.randint
        msgs = [" ".join([choice(WORDS) for _ in range(randint(6, 18))]) for _ in range(n)]
        self.n = n
        self.ts = ts
        self.lines = [
            f'{{"id":{i},"ts":{t},"level":"{lv}","user":"{u}","msg":"{m}"}}'.encode()
            for i, (t, lv, u, m) in enumerate(zip(ts, levels, users, msgs))
        ]
        self.text_bytes = sum(len(x) for x in self.lines) + n  # with newlines
        self.table = pa.table({
            "id": pa.array(range(n), pa.int64()),
            "ts": pa.array(ts, pa.int64()),
            "level": pa.array(levels, pa.string()),
            "user": pa.array(users, pa.string()),
            "msg": pa.array(msgs, pa.string()),
        })
        self.arrow_bytes = self.table.nbytes
        self.partitions = Counter(LAYOUT.for_time(t).path for t in ts)

    def batches(self, rows: int) -> list[pa.Table]:
        return [pa.Table.from_batches([b]) for b in self.table.to_batches(max_chunksize=rows)]


# -- the timed bodies ------------------------------------------------------------
class FsyncCounter:
    """Counts ``os.fsync`` calls while active (trib's local storage and the raw side both call it)."""

    def __init__(self):
        self.count = 0
        self._orig = None

    def __enter__(self) -> "FsyncCounter":
        self._orig = orig = os.fsync

        def counting(fd):
            self.count += 1
            return orig(fd)

        os.fsync = counting
        return self

    def __exit__(self, *exc) -> None:
        os.fsync = self._orig


def hour_path(hour: int) -> str:
    """The raw side's partition directory of an epoch hour: LAYOUT's ``{yyyy}_{MM}_{dd}/{HH}`` in UTC."""
    return time.strftime("%Y_%m_%d/%H", time.gmtime(hour * 3600))


def raw_text(lines: list[bytes], ts: list[int], root: Path, codec: str, durable: bool = True) -> dict:
    """The same lines into the same hourly files as trib, same codec and level, fsynced as trib's if ``durable``."""
    t0 = time.perf_counter()
    files = RawFiles(root, "jsonl", codec, durable)
    put = files.line
    dirs: dict[int, str] = {}
    for line, t in zip(lines, ts):
        h = t // 3_600_000
        d = dirs.get(h)
        if d is None:
            d = dirs[h] = hour_path(h)
        put(d, line)
    t1 = time.perf_counter()
    files.close()
    total = time.perf_counter() - t0
    return {"total": total, "write": t1 - t0, "commit": total - (t1 - t0)}


def trib_text(recs: Records, root: Path, codec: str, protocol: str | None = None) -> dict:
    table = Table.create(str(root), TableConfig(layout=LAYOUT, format="jsonl", compression=codec,
                                                protocol=protocol))
    lines, ts = recs.lines, recs.ts
    t0 = time.perf_counter()
    w = TableWriter(table)
    write = w.write
    for line, t in zip(lines, ts):
        write(line, t)
    t1 = time.perf_counter()
    commit = w.commit()
    t2 = time.perf_counter()
    return {"total": t2 - t0, "write": t1 - t0, "commit": t2 - t1, "_commit": commit}


def raw_parquet(batches: list[pa.Table], root: Path, codec: str, durable: bool = True) -> dict:
    """Each batch split by hour into the same hourly files as trib, fsynced as trib's if ``durable``."""
    t0 = time.perf_counter()
    files = RawFiles(root, "parquet", codec, durable)
    for b in batches:
        hours = pc.divide(b.column("ts"), 3_600_000)  # positive ms: truncation is the floor
        for h in pc.unique(hours).to_pylist():
            files.table(hour_path(h), b.filter(pc.equal(hours, h)))
    t1 = time.perf_counter()
    files.close()
    total = time.perf_counter() - t0
    return {"total": total, "write": t1 - t0, "commit": total - (t1 - t0)}


def trib_parquet(batches: list[pa.Table], root: Path, codec: str, protocol: str | None = None) -> dict:
    table = Table.create(str(root), TableConfig(layout=LAYOUT, format="parquet", compression=codec,
                                                protocol=protocol))
    t0 = time.perf_counter()
    w = TableWriter(table)
    for b in batches:
        w.write_table(b, "ts")
    t1 = time.perf_counter()
    commit = w.commit()
    t2 = time.perf_counter()
    return {"total": t2 - t0, "write": t1 - t0, "commit": t2 - t1, "_commit": commit}


# -- harness ---------------------------------------------------------------------
def _settle() -> None:
    """Write back earlier runs' dirty pages and collect garbage, outside the timings."""
    if hasattr(os, "sync"):
        os.sync()
    gc.collect()


def run_variant(name: str, runs: dict, repeat: int, work: Path) -> dict[str, list[dict]]:
    """Run each body in ``runs`` ``repeat`` times, interleaved, alternating the order."""
    results: dict[str, list[dict]] = {k: [] for k in runs}
    keys = list(runs)
    for i in range(repeat):
        for k in (keys if i % 2 == 0 else keys[::-1]):
            target = work / f"{name}-{k}-{i}"
            _settle()
            cpu0 = time.process_time()
            with FsyncCounter() as fsyncs:
                r = runs[k](target)
            r["cpu"] = time.process_time() - cpu0  # all threads: what the work costs, load aside
            r["fsyncs"] = fsyncs.count
            r["out_bytes"] = _du(target)
            results[k].append(r)
            last = {kk: v for kk, v in r.items() if not kk.startswith("_")}
            print(f"  {name:8s} {k:11s} run {i + 1}/{repeat}: "
                  + ", ".join(f"{kk}={v:.3f}" if isinstance(v, float) else f"{kk}={v}" for kk, v in last.items()),
                  file=sys.stderr, flush=True)
            if i < repeat - 1:
                shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
    return results


def _du(p: Path) -> int:
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and "_tributary" not in f.parts)


def verify_text(recs: Records, root: Path, commit, codec: str) -> str:
    """Check the last trib run wrote exactly the input lines, each in its partition (not timed)."""
    try:
        got = Counter()
        total = 0
        nested = 0
        for f in commit.files:
            part = f.path.rsplit("/", 1)[0]
            with pa.CompressedInputStream(pa.OSFile(str(root / f.path)), codec) as fh:
                data = fh.read()
            if data[:2] == b"\x1f\x8b" or data[:4] == b"\x28\xb5\x2f\xfd":  # gzip / zstd magic
                nested += 1
                with pa.CompressedInputStream(pa.BufferReader(data), codec) as fh:
                    data = fh.read()
            lines = data.split(b"\n")
            assert lines[-1] == b"", f"{f.path} does not end with a newline"
            n = len(lines) - 1
            assert n == f.records, (f.path, n, f.records)
            got[part] += n
            total += n
        assert total == recs.n, (total, recs.n)
        assert got == recs.partitions, "per-partition record counts differ"
    except AssertionError as e:
        return f"FAILED: {e}"
    if nested:
        return (f"records OK, but {nested}/{len(commit.files)} files are {codec} inside {codec} "
                "(compressed twice: the stream from Storage.open_output already compresses by extension)")
    return "OK"


def verify_parquet(recs: Records, root: Path, commit) -> str:
    try:
        got = Counter()
        ids = []
        row_groups = 0
        for f in commit.files:
            pf = pq.ParquetFile(root / f.path)
            row_groups += pf.metadata.num_row_groups
            t = pf.read(columns=["id", "ts"])
            assert t.num_rows == f.records
            sample = set(t.column("ts").to_pylist()[:: max(1, t.num_rows // 50)])
            parts = {LAYOUT.for_time(x).path for x in sample}
            assert parts == {f.path.rsplit("/", 1)[0]}, (f.path, parts)
            got[f.path.rsplit("/", 1)[0]] += t.num_rows
            ids.extend(t.column("id").chunks)
        assert got == recs.partitions, "per-partition record counts differ"
        all_ids = pa.chunked_array(ids, pa.int64()).to_pylist()
        assert len(all_ids) == recs.n and len(set(all_ids)) == recs.n, "ids lost or duplicated"
    except AssertionError as e:
        return f"FAILED: {e}"
    return f"OK ({row_groups} row groups in {len(commit.files)} files)"


def summarise(n: int, in_bytes: int, runs: list[dict]) -> dict:
    totals = [r["total"] for r in runs]
    med, best = median(totals), min(totals)
    out = {
        "median_s": med, "best_s": best,
        "rps_median": n / med, "rps_best": n / best,
        "mbps_median": in_bytes / med / 1e6, "mbps_best": in_bytes / best / 1e6,
        "write_s_median": median([r["write"] for r in runs]),
        "cpu_s_median": median([r["cpu"] for r in runs]),
        "commit_s_median": median([r["commit"] for r in runs]),
        "out_bytes": runs[-1]["out_bytes"],
        "runs_s": totals,
        "fsyncs": runs[-1]["fsyncs"],
    }
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--records", type=int, default=1_000_000, help="records per variant (default 1,000,000)")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per side; median reported (default 5)")
    ap.add_argument("--hours", type=float, default=24.0, help="event-time spread in hours (default 24)")
    ap.add_argument("--order", choices=("random", "nearly-sorted", "sorted"), default="random",
                    help="event-time order of the input (default random: every record may hit any partition)")
    ap.add_argument("--batch-rows", type=int, default=65_536, help="Arrow batch size for parquet (default 65,536)")
    ap.add_argument("--text-compression", choices=("gzip", "zstd"), default="gzip")
    ap.add_argument("--parquet-compression", choices=("snappy", "zstd", "gzip", "none"), default="snappy")
    ap.add_argument("--variants", default="text,parquet", help="comma list of text,parquet")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--protocol", choices=("rename", "direct"),
                    help="the trib table's commit protocol (default: a new table's, rename since 2026-11-25; "
                         "its renames run inside the commit's timing)")
    ap.add_argument("--dir", help="scratch directory parent (default benchmarks/out, on the repo's disk)")
    ap.add_argument("--keep", action="store_true", help="keep the written files")
    ap.add_argument("--quick", action="store_true", help="small smoke run: 20,000 records, 3 runs")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--markdown", help="also write the markdown section here")
    args = ap.parse_args(argv)
    if args.quick:
        args.records = min(args.records, 20_000)
        args.repeat = min(args.repeat, 3)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]

    info = machine_info()
    t0 = time.perf_counter()
    recs = Records(args.records, args.seed, args.hours, args.order)
    print(f"generated {recs.n:,} records ({recs.text_bytes / 1e6:.1f} MB as jsonl, "
          f"{recs.arrow_bytes / 1e6:.1f} MB as Arrow, {len(recs.partitions)} partitions) "
          f"in {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)

    from tributary_read.table.config import DEFAULT_PROTOCOL

    args.protocol = args.protocol or DEFAULT_PROTOCOL.value
    result: dict = {"args": vars(args), "machine": info, "records": recs.n,
                    "text_bytes": recs.text_bytes, "arrow_bytes": recs.arrow_bytes,
                    "partitions": len(recs.partitions), "variants": {}}
    with WorkDir(args.dir, "writer-", args.keep) as work:
        result["workdir_fstype"] = fs_type(work)
        if "text" in variants:
            codec = args.text_compression
            runs = run_variant("text", {
                "raw": lambda p: raw_text(recs.lines, recs.ts, p, codec),
                "raw_nofsync": lambda p: raw_text(recs.lines, recs.ts, p, codec, durable=False),
                "trib": lambda p: trib_text(recs, p, codec, args.protocol),
            }, args.repeat, work)
            check = verify_text(recs, work / f"text-trib-{args.repeat - 1}", runs["trib"][-1]["_commit"], codec)
            result["variants"]["text"] = {
                "label": f"text/jsonl + {codec}", "in_bytes": recs.text_bytes,
                "raw": summarise(recs.n, recs.text_bytes, runs["raw"]),
                "raw_nofsync": summarise(recs.n, recs.text_bytes, runs["raw_nofsync"]),
                "trib": summarise(recs.n, recs.text_bytes, runs["trib"]),
                "files": len(runs["trib"][-1]["_commit"].files), "check": check,
            }
        if "parquet" in variants:
            codec = args.parquet_compression
            batches = recs.batches(args.batch_rows)
            runs = run_variant("parquet", {
                "raw": lambda p: raw_parquet(batches, p, codec),
                "raw_nofsync": lambda p: raw_parquet(batches, p, codec, durable=False),
                "trib": lambda p: trib_parquet(batches, p, codec, args.protocol),
            }, args.repeat, work)
            check = verify_parquet(recs, work / f"parquet-trib-{args.repeat - 1}", runs["trib"][-1]["_commit"])
            result["variants"]["parquet"] = {
                "label": f"parquet + {codec} ({args.batch_rows:,}-row batches)", "in_bytes": recs.arrow_bytes,
                "raw": summarise(recs.n, recs.arrow_bytes, runs["raw"]),
                "raw_nofsync": summarise(recs.n, recs.arrow_bytes, runs["raw_nofsync"]),
                "trib": summarise(recs.n, recs.arrow_bytes, runs["trib"]),
                "files": len(runs["trib"][-1]["_commit"].files), "check": check,
            }
    for v in result["variants"].values():
        v["ratio_median"] = v["trib"]["rps_median"] / v["raw"]["rps_median"]
        v["ratio_best"] = v["trib"]["rps_best"] / v["raw"]["rps_best"]
        # Run i's raw and trib ran back to back: their ratio is the least noisy on a shared machine.
        v["ratios"] = [rw / tr for rw, tr in zip(v["raw"]["runs_s"], v["trib"]["runs_s"])]
        v["ratio_nofsync_median"] = v["trib"]["rps_median"] / v["raw_nofsync"]["rps_median"]
        v["ratios_nofsync"] = [rw / tr for rw, tr in zip(v["raw_nofsync"]["runs_s"], v["trib"]["runs_s"])]

    md = render(result, argv if argv is not None else sys.argv[1:])
    return emit(md, result, args)


def render(r: dict, argv: list[str]) -> str:
    a = r["args"]
    lines = [
        f"## Writer throughput, {a['order']} event times, `{a.get('protocol', 'direct')}` protocol "
        "(`benchmarks/bench_writer.py`)",
        "",
        f"{r['records']:,} records, event times spread over {a['hours']:g} h ({a['order']} order) -> "
        f"{r['partitions']} hourly partitions; {r['text_bytes'] / 1e6:.1f} MB as jsonl, "
        f"{r['arrow_bytes'] / 1e6:.1f} MB as Arrow. Median (and best) of {a['repeat']} interleaved runs; "
        f"scratch dir on {r.get('workdir_fstype', '?')}. MB/s = uncompressed input "
        "(jsonl bytes incl. newlines for text, Arrow `nbytes` for parquet) per second.",
        "",
    ]
    rows = []
    for v in r["variants"].values():
        for side, label in (("raw", "raw loop, fsynced as trib (fair durable baseline)"),
                            ("raw_nofsync", "raw loop, no fsync"), ("trib", "trib TableWriter + commit")):
            if side not in v:
                continue
            s = v[side]
            ratio = (f"**{v['ratio_median']:.2f}** ({v['ratio_best']:.2f}); no fsync: "
                     f"**{v['ratio_nofsync_median']:.2f}**" if side == "trib"
                     else ("1.00" if side == "raw" else f"{s['rps_median'] / v['raw']['rps_median']:.2f}"))
            rows.append([v["label"], label, fmt_int(s["rps_median"]) + f" ({fmt_int(s['rps_best'])})",
                         f"{s['mbps_median']:.1f} ({s['mbps_best']:.1f})", f"{s['median_s']:.3f}",
                         f"{s['cpu_s_median']:.3f}",
                         f"{s['out_bytes'] / 1e6:.1f}", ratio])
    lines.append(md_table(["variant", "writer", "records/s median (best)", "MB/s median (best)",
                           "time s (median)", "CPU s, all threads (median)", "output MB",
                           "ratio to raw fsynced median (best); to raw no fsync"], rows))
    lines.append("")
    for k, v in r["variants"].items():
        t = v["trib"]
        lines.append(f"- {v['label']}: trib wrote {v['files']} files; time split (median) write "
                     f"{t['write_s_median']:.3f} s + flush/fsync/commit {t['commit_s_median']:.3f} s; "
                     f"fsync calls per run: raw {v['raw']['fsyncs']} (its files and their directories, one "
                     f"after the other, inside its time), trib {t['fsyncs']} (its data files and their "
                     f"directories, concurrently, and the manifest commit's); output check of the last trib "
                     f"run: {v['check']}. Ratios of all runs (trib/raw fsynced, same run): "
                     f"{', '.join(f'{x:.2f}' for x in v['ratios'])}; trib/raw no fsync: "
                     f"{', '.join(f'{x:.2f}' for x in v['ratios_nofsync'])}.")
    lines.append("- goals (trib >= 95% of the fair durable baseline, >= 80% of raw without fsync): " + ", ".join(
        f"{v['label']}: {'met' if v['ratio_median'] >= GOALS['durable'] else 'NOT met'} ({v['ratio_median']:.0%}), "
        f"{'met' if v['ratio_nofsync_median'] >= GOALS['nofsync'] else 'NOT met'} ({v['ratio_nofsync_median']:.0%})"
        for k, v in r["variants"].items()))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
