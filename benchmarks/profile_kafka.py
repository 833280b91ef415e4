#!/usr/bin/env python
"""cProfile ``ingest_kafka`` (bounded) in-process on bench_kafka's topic; also the CPU of both sides unprofiled.

Starts the same in-memory Tansu broker and topic as bench_kafka.py, then per format:
the raw loop and ``ingest_kafka`` unprofiled (wall and CPU seconds of this process,
``--repeat`` times, interleaved), then one profiled ``ingest_kafka`` run.

    .venv/bin/python benchmarks/profile_kafka.py --format jsonl -n 200000
    .venv/bin/python benchmarks/profile_kafka.py --format parquet --no-profile --repeat 3
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_kafka as bk  # noqa: E402
from _common import WorkDir, median  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="profile ingest_kafka on bench_kafka's topic")
    ap.add_argument("--format", default="jsonl,parquet", help="comma list of jsonl,parquet")
    ap.add_argument("-n", "--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--commit-every", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=2, help="unprofiled runs per side (0: none)")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--sort", default="tottime")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--dir")
    args = ap.parse_args(argv)

    from bench_writer import LAYOUT, Records

    from tributary_read import KafkaSource, TimeSpec, ingest_kafka
    from tributary_read.table.config import Table, TableConfig

    with WorkDir(args.dir, "profile-kafka-") as work:
        broker = bk.start_broker(work)
        try:
            recs = Records(args.records, 42, 24.0, "nearly-sorted")
            broker.create_topic("t", args.partitions)
            bk.produce_all(broker, "t", recs.lines, args.partitions)
            counts = broker.partition_counts("t", timeout=600)
            del recs
            for fmt in [f.strip() for f in args.format.split(",") if f.strip()]:
                kind, codec, label = bk.FORMATS[fmt]
                seq = iter(range(1_000_000))

                def trib():
                    t = Table.create(str(work / f"{fmt}-{next(seq)}"),
                                     TableConfig(layout=LAYOUT, format=kind, compression=codec))
                    r = ingest_kafka(t, KafkaSource(broker.bootstrap, ("t",)), f"p-{uuid.uuid4().hex[:8]}",
                                     time_spec=TimeSpec(field="ts"), commit_every=args.commit_every)
                    assert r.records == sum(counts.values()), r

                def raw():
                    bk.raw_worker(kind, codec, broker.bootstrap, "t", counts, str(work / f"raw-{fmt}-{next(seq)}"))

                times: dict[str, list[tuple[float, float]]] = {"raw": [], "trib": []}
                for i in range(args.repeat):
                    for name in (("raw", "trib") if i % 2 == 0 else ("trib", "raw")):
                        bk._settle()
                        t0, c0 = time.perf_counter(), time.process_time()
                        (raw if name == "raw" else trib)()
                        times[name].append((time.perf_counter() - t0, time.process_time() - c0))
                if args.repeat:
                    n = sum(counts.values())
                    for name, ts in times.items():
                        wall, cpu = median([w for w, _ in ts]), median([c for _, c in ts])
                        print(f"{label:17s} {name:4s} wall {wall:6.2f} s  cpu {cpu:6.2f} s  "
                              f"({cpu / n * 1e6:5.1f} us CPU/record)  runs {[round(w, 2) for w, _ in ts]}")
                    print(f"{label:17s} trib/raw records/s (median wall): "
                          f"{median([w for w, _ in times['raw']]) / median([w for w, _ in times['trib']]):.2f}")
                if not args.no_profile:
                    prof = cProfile.Profile()
                    prof.enable()
                    trib()
                    prof.disable()
                    print(f"--- {label}: ingest_kafka, profiled")
                    pstats.Stats(prof).strip_dirs().sort_stats(args.sort).print_stats(args.top)
        finally:
            broker.close()


if __name__ == "__main__":
    main()
