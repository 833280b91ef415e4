#!/usr/bin/env python
"""Run every benchmark and write a markdown summary to ``benchmarks/results.md``.

Each benchmark runs in its own process (a clean heap per benchmark; the S3
server lives and dies with its benchmark). The summary records the exact
command line, the machine, the date and the load average before and after.

    .venv/bin/python benchmarks/run_all.py            # full sizes (several minutes)
    .venv/bin/python benchmarks/run_all.py --quick    # smoke run of everything
    .venv/bin/python benchmarks/run_all.py --only cli,commit   # some of them
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_WORKDIR, HERE, REPO, machine_info  # noqa: E402


#: Every benchmark by its --skip / --only name, in the order they run.
NAMES = ("writer", "commit", "commit-contention", "listing", "cli", "hive", "etl-hive", "spark-read", "etl",
         "warm-etl", "spark-listing", "window-query", "readers", "late-data", "restate", "iceberg", "ledger",
         "untracked", "hourly", "kafka", "report", "compact", "metrics", "spool", "stream")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, to check everything works")
    ap.add_argument("--orders", default="random,nearly-sorted,sorted",
                    help="event-time orders to run the writer benchmark with (default random,nearly-sorted,sorted)")
    ap.add_argument("--writer-args", default="", help="extra arguments for bench_writer.py (quoted)")
    ap.add_argument("--commit-args", default="", help="extra arguments for bench_commit.py (quoted)")
    ap.add_argument("--listing-args", default="", help="extra arguments for bench_listing.py (quoted)")
    ap.add_argument("--hive-args", default="", help="extra arguments for bench_hive_sync.py (quoted)")
    ap.add_argument("--etl-hive-args", default="", help="extra arguments for bench_etl_hive.py (quoted)")
    ap.add_argument("--cli-args", default="", help="extra arguments for bench_cli.py (quoted)")
    ap.add_argument("--spark-read-args", default="", help="extra arguments for bench_spark_read.py (quoted)")
    ap.add_argument("--etl-args", default="", help="extra arguments for bench_etl.py (quoted)")
    ap.add_argument("--spark-listing-args", default="", help="extra arguments for bench_spark_listing.py (quoted)")
    ap.add_argument("--readers-args", default="", help="extra arguments for bench_readers.py (quoted)")
    ap.add_argument("--kafka-args", default="", help="extra arguments for bench_kafka.py (quoted)")
    ap.add_argument("--report-args", default="", help="extra arguments for bench_report.py (quoted)")
    ap.add_argument("--compact-args", default="", help="extra arguments for bench_compact.py (quoted)")
    ap.add_argument("--metrics-args", default="", help="extra arguments for bench_metrics.py (quoted)")
    ap.add_argument("--spool-args", default="", help="extra arguments for bench_spool.py (quoted)")
    ap.add_argument("--stream-args", default="--hive", help="extra arguments for bench_stream.py (quoted)")
    ap.add_argument("--late-data-args", default="", help="extra arguments for bench_late_data.py (quoted)")
    ap.add_argument("--restate-args", default="", help="extra arguments for bench_restate.py (quoted)")
    ap.add_argument("--iceberg-args", default="", help="extra arguments for bench_iceberg.py (quoted)")
    ap.add_argument("--skip", default="", help=f"comma list of {','.join(NAMES)} to skip")
    ap.add_argument("--only", default="", help="comma list of benchmarks to run, the others skipped (default all)")
    ap.add_argument("--output", default=str(HERE / "results.md"), help="summary file (default benchmarks/results.md)")
    args = ap.parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    if (skip | only) - set(NAMES):
        ap.error(f"no benchmark named {', '.join(sorted((skip | only) - set(NAMES)))}; the names: {','.join(NAMES)}")
    if only:
        skip |= set(NAMES) - only

    cmdline = " ".join(shlex.quote(x) for x in [_rel_python(), _rel(sys.argv[0])] + (sys.argv[1:] if argv is None else argv))
    before = machine_info()
    DEFAULT_WORKDIR.mkdir(parents=True, exist_ok=True)
    sections: list[str] = []
    failures: list[str] = []
    t0 = time.perf_counter()
    quick = ["--quick"] if args.quick else []
    jobs = []
    if "writer" not in skip:
        for order in [o.strip() for o in args.orders.split(",") if o.strip()]:
            jobs.append((f"writer-{order}", "bench_writer.py", quick + ["--order", order] + shlex.split(args.writer_args)))
    if "commit" not in skip:
        jobs.append(("commit", "bench_commit.py", quick + shlex.split(args.commit_args)))
    if "commit-contention" not in skip:
        jobs.append(("commit-contention", "bench_commit_contention.py", quick))
    if "listing" not in skip:
        jobs.append(("listing", "bench_listing.py", quick + shlex.split(args.listing_args)))
    if "cli" not in skip:
        jobs.append(("cli", "bench_cli.py", quick + shlex.split(args.cli_args)))
    if "hive" not in skip:
        jobs.append(("hive", "bench_hive_sync.py", quick + shlex.split(args.hive_args)))
    if "etl-hive" not in skip:
        jobs.append(("etl-hive", "bench_etl_hive.py", quick + shlex.split(args.etl_hive_args)))
    for name, script, more in (("spark-read", "bench_spark_read.py", args.spark_read_args),
                               ("etl", "bench_etl.py", args.etl_args),
                               ("warm-etl", "bench_warm_etl.py", ""),
                               ("spark-listing", "bench_spark_listing.py", args.spark_listing_args),
                               ("window-query", "bench_window_query.py", ""),
                               ("readers", "bench_readers.py", args.readers_args),
                               ("late-data", "bench_late_data.py", args.late_data_args),
                               ("restate", "bench_restate.py", args.restate_args),
                               ("iceberg", "bench_iceberg.py", args.iceberg_args),
                               ("ledger", "bench_ledger.py", ""),
                               ("untracked", "bench_untracked.py", ""),
                               ("hourly", "bench_hourly.py", ""),
                               ("kafka", "bench_kafka.py", args.kafka_args),
                               ("report", "bench_report.py", args.report_args),
                               ("compact", "bench_compact.py", args.compact_args),
                               ("metrics", "bench_metrics.py", args.metrics_args),
                               ("spool", "bench_spool.py", args.spool_args),
                               ("stream", "bench_stream.py", args.stream_args)):
        if name not in skip:
            jobs.append((name, script, quick + shlex.split(more)))
    for name, script, extra in jobs:
        md = DEFAULT_WORKDIR / f"{name}.md"
        md.unlink(missing_ok=True)
        cmd = [sys.executable, str(HERE / script), *extra, "--markdown", str(md),
               "--json", str(DEFAULT_WORKDIR / f"{name}.json")]
        print(f"== {name}: {' '.join(shlex.quote(c) for c in cmd)}", file=sys.stderr, flush=True)
        t = time.perf_counter()
        rc = subprocess.run(cmd, cwd=REPO).returncode
        print(f"== {name}: exit {rc} after {time.perf_counter() - t:.0f}s", file=sys.stderr, flush=True)
        if rc != 0 or not md.exists():
            failures.append(f"{script} {' '.join(extra)} failed (exit {rc})")
            continue
        sections.append(md.read_text().strip())
    after = machine_info()

    head = [
        "# Tributary Read benchmarks",
        "",
        f"- command: `{cmdline}` (from the repository root)",
        f"- date: {before['date']} (took {time.perf_counter() - t0:.0f} s)",
        f"- machine: {before['nproc']} CPUs ({before['cpu']}), {before['platform']}",
        f"- python {before['python']}, pyarrow {before['pyarrow']}, git {before['git']}",
        f"- load average (1/5/15 min) before: {before['loadavg']}; after: {after['loadavg']} "
        "(other processes may share this machine)",
        "",
    ]
    if failures:
        head += ["**Failures:**", ""] + [f"- {f}" for f in failures] + [""]
    text = "\n".join(head) + "\n" + "\n\n".join(sections) + "\n"
    Path(args.output).write_text(text)
    print(text)
    print(f"(written to {args.output})", file=sys.stderr)
    return 1 if failures else 0


def _rel(p: str) -> str:
    try:
        return os.path.relpath(os.path.abspath(p), REPO)
    except ValueError:
        return p


def _rel_python() -> str:
    exe = sys.executable
    rel = _rel(exe)
    return rel if not rel.startswith("..") else exe


if __name__ == "__main__":
    sys.exit(main())
