#!/usr/bin/env python
"""Iceberg mirror latency per trib commit as the table grows, against pyiceberg's ``add_files``, in one run.

A trib table gets ``--commits`` commits of ``--files-per-commit`` Parquet files each (hard links of a few
small template files, spread over 720 hourly partitions; making them is not timed). After every commit
the mirror runs once (``tributary_read.iceberg.mirror.sync``, what ``trib iceberg sync`` runs, catalog
opened each time), and its wall time is that commit's latency. At each of ``--sizes`` (a count of
commits) the report takes the ``--window`` commits ending there: median, mean (merges included), p95.

The baseline registers the same files by hand with pyiceberg's ``Table.add_files`` (its defaults: a fast
append, the duplicate check on), one call per trib commit, into an Iceberg table of the same catalog
type (SQLite), schema, partition spec and properties. At each size N it times ``--baseline-reps`` calls,
the last ones before N, on a table that already holds the commits before them:

* at the first size, that history was made by ``add_files`` itself, call by call;
* at larger sizes, making it call by call would take hours (the cost this measures grows with it), so the
  history is written directly in the shape ``add_files`` leaves: one snapshot per commit, each with its
  own manifest, the current manifest list naming all of them. Those entries carry no column statistics
  (``add_files``' own do), which makes the baseline's duplicate check read less than it would: the
  comparison errs in the baseline's favour.

Both sides read the same files' footers. Iceberg's partition value of a file comes from trib's manifest
on the mirror's side; ``add_files`` infers it from column statistics and finds none for ``dt`` (a
path-only column), so its entries say NULL: the baseline does the same work and gets the wrong answer.

    .venv/bin/python benchmarks/bench_iceberg.py              # 10,000 commits x 100 files = 1,000,000 files
    .venv/bin/python benchmarks/bench_iceberg.py --quick      # 300 commits x 5 files
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import WorkDir, emit, fs_type, hour_dir, machine_info, md_table, percentile, shown_args  # noqa: E402

H = 3_600_000
LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
PARTITION = "dt={yyyy}{MM}{dd}{HH}"
START = 1_767_225_600_000  # 2026-01-01T00:00Z
HOURS = 720
#: Hard links per template file (ext4 allows 65,000 links to one inode).
LINKS = 50_000
MIRROR, BASE = "bench.mirror", "bench.add_files"


class Source:
    """The trib table and the Parquet files its commits register."""

    def __init__(self, work: Path, per: int):
        import pyarrow as pa
        import pyarrow.parquet as pq

        from tributary_read.table.config import Table, TableConfig
        from tributary_read.table.layout import Layout

        self.table = Table.create(str(work / "t"), TableConfig(Layout(LAYOUT, PARTITION), format="parquet"))
        self.per, self.made = per, 0
        self.templates = work / "templates"
        self.templates.mkdir()
        self._pa, self._pq = pa, pq
        self.paths: list[list[str]] = []  # each commit's files, relative to the table

    def _template(self) -> Path:
        k = self.made // LINKS
        p = self.templates / f"t{k}.parquet"
        if not p.exists():
            n = 10
            self._pq.write_table(self._pa.table({"id": list(range(n)), "ts": [START + i for i in range(n)],
                                                 "name": [f"n{i}" for i in range(n)]}), p)
        return p

    def commit(self) -> None:
        from tributary_read.table.manifest import FileEntry, Transaction

        i = len(self.paths)
        d = hour_dir(START + (i % HOURS) * H)
        dt = d.replace("_", "").replace("/", "")
        os.makedirs(self.table.storage.abspath(d), exist_ok=True)
        entries, paths = [], []
        for j in range(self.per):
            src = self._template()
            rel = f"{d}/part-{i:06d}-{j:03d}.parquet"
            os.link(src, self.table.storage.abspath(rel))
            self.made += 1
            entries.append(FileEntry(rel, src.stat().st_size, 10, {"dt": dt}))
            paths.append(rel)
        self.table.log.commit(entries, Transaction("bench", {"i": i}))
        self.paths.append(paths)

    def uris(self, i: int) -> list[str]:
        return [self.table.storage.uri_for(p) for p in self.paths[i]]


def _stats(xs: list[float]) -> dict:
    s = sorted(xs)
    return {"median_ms": 1000 * statistics.median(s), "mean_ms": 1000 * statistics.fmean(s),
            "p95_ms": 1000 * percentile(s, 95), "max_ms": 1000 * s[-1], "n": len(s)}


def _baseline_table(catalog, mirror_ice):
    """An empty table for add_files: the mirror's schema, spec and properties (name mapping included)."""
    if catalog.table_exists(BASE):
        catalog.drop_table(BASE)
    props = {k: v for k, v in mirror_ice.properties.items() if not k.startswith("trib.")}
    return catalog.create_table(BASE, schema=mirror_ice.schema(), partition_spec=mirror_ice.spec(), properties=props)


def _history_like_add_files(ice, src: Source, upto: int) -> None:
    """Commits 0..upto-1 as ``add_files`` leaves them: a snapshot each, each with its own manifest, the
    current manifest list naming them all (older lists name only their own: never read by add_files)."""
    import uuid

    from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus, write_manifest, write_manifest_list
    from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
    from pyiceberg.table.snapshots import Operation, Snapshot, SnapshotSummaryCollector, Summary, \
        update_snapshot_summaries
    from pyiceberg.table.update import AddSnapshotUpdate, SetSnapshotRefUpdate

    from tributary_read.iceberg import appends
    from tributary_read.iceberg import schema as shape

    part = shape.Partitioning(src.table, None)
    every: list = []
    step = 500
    for lo in range(0, upto, step):
        md = ice.metadata
        spec, schema = md.spec(), md.schema()
        head = md.current_snapshot()
        seq = md.last_sequence_number
        updates: list = []
        cu = uuid.uuid4()
        for i in range(lo, min(upto, lo + step)):
            sid = md.new_snapshot_id()
            seq += 1
            files = [shape.data_file(md, uri, e, part, "bench") for uri, e in
                     zip(src.uris(i), (src.table.log.read_commit(i + 1).files))]
            loc = ice.location_provider().new_metadata_location
            with write_manifest(2, spec, schema, ice.io.new_output(loc(f"{cu}-m{i}.avro")), sid, "deflate") as w:
                for df in files:
                    w.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=sid, data_file=df))
            m = appends._assigned(w.to_manifest_file(), seq)
            every.insert(0, m)
            last = i == upto - 1
            path = loc(f"snap-{sid}-0-{cu}.avro")
            with write_manifest_list(2, ice.io.new_output(path), sid, head.snapshot_id if head else None, seq,
                                     "deflate") as lw:
                lw.add_manifests(every if last else [m])
            ssc = SnapshotSummaryCollector()
            for df in files:
                ssc.add_file(df, schema=schema, partition_spec=spec)
            summary = update_snapshot_summaries(Summary(operation=Operation.APPEND, **ssc.build()),
                                                previous_summary=head.summary if head else None)
            snap = Snapshot(**{"snapshot_id": sid, "parent_snapshot_id": head.snapshot_id if head else None,
                               "sequence_number": seq, "manifest_list": path, "summary": summary,
                               "schema_id": md.current_schema_id})
            updates += [AddSnapshotUpdate(snapshot=snap),
                        SetSnapshotRefUpdate(**{"ref_name": MAIN_BRANCH, "type": SnapshotRefType.BRANCH,
                                                "snapshot_id": sid})]
            head = snap
        ice._do_commit(tuple(updates), ())


def baseline(catalog, mirror_ice, src: Source, n: int, reps: int, organic: bool) -> dict:
    """Seconds of each of ``reps`` add_files calls registering commits n-reps..n-1, on a table holding the
    commits before them."""
    ice = _baseline_table(catalog, mirror_ice)
    t0 = time.perf_counter()
    if organic:
        for i in range(n - reps):
            ice.add_files(src.uris(i))
    else:
        _history_like_add_files(ice, src, n - reps)
    built = time.perf_counter() - t0
    times, cpu = [], []
    for i in range(n - reps, n):
        t0, c0 = time.perf_counter(), time.process_time()
        ice.add_files(src.uris(i))
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    assert len(ice.snapshots()) == n, len(ice.snapshots())
    nulls = ice.scan(selected_fields=("dt",), limit=1).to_arrow().column("dt").null_count
    location = ice.metadata.location.removeprefix("file://")
    catalog.drop_table(BASE)
    shutil.rmtree(location, ignore_errors=True)
    return {"times_s": times, "median_ms": 1000 * statistics.median(times),
            "cpu_median_ms": 1000 * statistics.median(cpu), "history": "add_files" if organic else
            "written in add_files' shape", "history_s": built, "dt_null": bool(nulls)}


def run(args) -> dict:
    from tributary_read.iceberg import mirror
    from tributary_read.iceberg.catalog import open_catalog

    sizes = sorted(int(s) for s in args.sizes.split(","))
    assert sizes[-1] <= args.commits
    with WorkDir(args.workdir, prefix="bench-iceberg-", keep=args.keep) as work:
        src = Source(work, args.files_per_commit)
        uri = f"sqlite:///{work}/catalog/iceberg.db"
        lat: list[float] = []
        cpu: list[float] = []  # the process's CPU seconds per sync: less moved by other load than wall time
        rows, out = [], {"sizes": []}
        t_start = time.perf_counter()
        for c in range(args.commits):
            src.commit()
            t0, c0 = time.perf_counter(), time.process_time()
            r = mirror.sync(src.table, MIRROR, uri)
            lat.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            assert r.version == c + 1 and len(r.snapshots) == 1
            n = c + 1
            if n in sizes:
                m = _stats(lat[max(0, n - args.window):n])
                m["cpu_median_ms"] = 1000 * statistics.median(cpu[max(0, n - args.window):n])
                catalog = open_catalog(uri)
                ice = catalog.load_table(MIRROR)
                try:
                    b = baseline(catalog, ice, src, n, args.baseline_reps, organic=(n == sizes[0]))
                except Exception as e:  # keep the mirror's figures of a long run; say what failed
                    b = {"times_s": [], "median_ms": float("nan"), "cpu_median_ms": float("nan"),
                         "history": f"failed: {e!r}"[:200], "history_s": 0, "dt_null": None}
                entry = {"commits": n, "files": n * args.files_per_commit, "mirror": m, "add_files": b,
                         "snapshots_kept": len(ice.snapshots()),
                         "manifests": len(ice.current_snapshot().manifests(ice.io)),
                         "elapsed_s": time.perf_counter() - t_start}
                out["sizes"].append(entry)
                print(f"{n} commits: mirror median {m['median_ms']:.1f} ms mean {m['mean_ms']:.1f} ms; add_files "
                      f"{b['median_ms']:.0f} ms ({b['history']}); {entry['elapsed_s']:.0f} s so far",
                      file=sys.stderr, flush=True)
        out["fs"] = fs_type(work)
        out["latencies_ms"] = [round(1000 * x, 2) for x in lat]
        out["cpu_ms"] = [round(1000 * x, 2) for x in cpu]
    first = out["sizes"][0]["mirror"]
    for e in out["sizes"]:
        m, b = e["mirror"], e["add_files"]
        rows.append([f"{e['commits']:,}", f"{e['files']:,}", f"{m['median_ms']:.1f}", f"{m['mean_ms']:.1f}",
                     f"{m['p95_ms']:.1f}", f"{m['max_ms']:.0f}", f"{m['cpu_median_ms']:.1f}",
                     f"{m['median_ms'] / first['median_ms']:.2f} / {m['cpu_median_ms'] / first['cpu_median_ms']:.2f}",
                     f"{b['median_ms']:,.0f}", f"{b['cpu_median_ms']:,.0f}", b["history"],
                     f"**{b['median_ms'] / m['median_ms']:.1f}x**", f"{b['median_ms'] / m['mean_ms']:.1f}x",
                     e["snapshots_kept"], e["manifests"]])
    out["table"] = md_table(["commits", "files", "mirror median ms", "mirror mean ms", "p95 ms", "max ms",
                             "mirror CPU median ms", "median / first size (wall / CPU)", "add_files median ms",
                             "add_files CPU median ms", "add_files' history", "add_files / mirror (median)",
                             "add_files / mirror (mean)", "snapshots kept", "manifests listed"], rows)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commits", type=int, default=10_000)
    ap.add_argument("--files-per-commit", type=int, default=100)
    ap.add_argument("--sizes", default="100,1000,10000", help="commit counts to report at")
    ap.add_argument("--window", type=int, default=100, help="mirror commits summarised at each size")
    ap.add_argument("--baseline-reps", type=int, default=3, help="add_files calls timed at each size")
    ap.add_argument("--quick", action="store_true", help="300 commits x 5 files, sizes 100,300")
    ap.add_argument("--workdir", help="parent of the scratch directory (default benchmarks/out)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--markdown", help="also write the markdown section here")
    args = ap.parse_args(argv)
    if args.quick:
        args.commits, args.files_per_commit, args.sizes, args.window = 300, 5, "100,300", 50
    import pyiceberg

    machine = machine_info()
    t0 = time.perf_counter()
    res = run(args)
    took = time.perf_counter() - t0
    after = machine_info()["loadavg"]
    cmd = " ".join(["benchmarks/bench_iceberg.py", *shown_args(sys.argv[1:] if argv is None else argv)])
    text = "\n".join([
        "## Iceberg mirror latency per trib commit as the table grows, against pyiceberg's add_files "
        "(`benchmarks/bench_iceberg.py`)",
        "",
        f"- command: `.venv/bin/python {cmd}` (from the repository root)",
        f"- {machine['date']}, git {machine['git']}; {machine['nproc']} CPUs ({machine['cpu']}); python "
        f"{machine['python']}, pyarrow {machine['pyarrow']}, pyiceberg {pyiceberg.__version__}; SQLite catalog; "
        f"scratch dir on {res['fs']}; took {took:.0f} s",
        f"- load average (1/5/15 min) before: {machine['loadavg']}; after: {after}",
        "",
        f"{args.commits:,} trib commits of {args.files_per_commit} Parquet files each, one mirror run after each "
        f"commit; at each size the mirror's figures are over the {args.window} commits ending there, add_files' "
        f"the median of {args.baseline_reps} calls (one trib commit's files each) on a table holding the commits "
        "before them.",
        "",
        res["table"],
    ])
    return emit(text, {"machine": machine, "args": vars(args), **res}, args)


if __name__ == "__main__":
    main()
