#!/usr/bin/env python
"""Kafka ingest: ``trib ingest --kafka`` against a plain confluent-kafka loop, same broker, same run.

One Tansu broker (tests/kafka_broker.py, in-memory storage) and one topic of
``--records`` JSON records over ``--partitions`` partitions, produced once and
counted by consuming (Tansu's watermarks are wrong: docs/kafka-broker-notes.md).
Then, each timed ``--repeat`` times with trib and raw runs interleaved, every
run reading the whole topic from the start with a fresh app id (group id) and
a fresh table or output file:

* **trib**: the real CLI as a process, bounded mode,
  ``trib -q ingest ROOT --kafka HOST:PORT --topic T --app-id A --time-field ts --json``
  (default ``--commit-every``: 10,000 records per commit) into an hourly table
  (jsonl + gzip, or Parquet + snappy) created beforehand with ``Table.create``.
* **raw**: a process of this script running a plain consumer loop: assign every
  partition from the beginning, ``consume(1000, 0.5)`` (as trib's loop, with trib's
  fetch settings) until each partition's EOF event after at least the records
  produced to it, ``json.loads`` each value, and write it into the same hourly
  files as trib (by its ``ts``; ``_common.RawFiles``): the value bytes + newline
  in 1 MiB chunks, gzip at trib's level (``tributary_read.io.sinks.GZIP_LEVEL``),
  or ``pa.Table.from_pylist`` row groups through one ``pq.ParquetWriter`` per
  file (snappy). Every ``--commit-every`` records (the CLI's default unless
  ``--trib-args`` sets it), where trib commits and so closes its files, the raw
  loop closes its files and fsyncs each and its directories, one after the
  other, and starts new ones. No offset commit, no manifest. **raw, no fsync**:
  the same loop without any fsync (what durability costs on this disk).

Both are timed from process start to exit (interpreter start and imports
included), with CPU seconds (user + sys) of the process from ``wait4``.

Then two latency measurements:

* **commit latency**: ``ingest_kafka(..., follow=True, commit_every=N)`` in this
  process over the whole pre-filled topic (a fresh table per format). The CLI
  reports no per-commit time and ``on_commit`` only tells when a commit landed,
  so the benchmark wraps the ingest loop's commit step (``_Run._commit``: close
  and fsync of the batch's files, the manifest commit, the renames, the
  asynchronous group-offset commit) with ``perf_counter``: the time the loop
  stops reading for each commit.
* **end-to-end delay** under ``--follow``: ``trib ingest --follow
  --commit-interval I`` as a process on a new topic while this process produces
  at a steady rate, each record's ``ts`` being its produce time (ms). Each
  commit's landing time is its log file's ctime (set by the link(2) that
  publishes it); for every committed record,
  delay = landing time - produce time.

    .venv/bin/python benchmarks/bench_kafka.py            # 1,000,000 records, 5 runs per side (~10 min)
    .venv/bin/python benchmarks/bench_kafka.py --quick    # 20,000 records, 3 runs, short follow run
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (REPO, RawBatches, WorkDir, emit, fmt_int, fs_type, machine_info, md_table, median,  # noqa: E402
                     percentile, trib_commit_every)

BATCH, WAIT_S = 1000, 0.5  # consume(BATCH, WAIT_S), as trib's loop: the last call waits WAIT_S for its EOFs
#: The client settings of trib's (tributary_read.kafka.client.DEFAULTS) that bear on fetching, for the raw
#: side too (main() checks they still match); the rest of both sides' settings are librdkafka's defaults.
FETCH = {"fetch.wait.max.ms": "200", "queued.max.messages.kbytes": "65536"}
#: trib / raw records/s: against the fair durable baseline, and against raw without fsync
GOAL, GOAL_NOFSYNC = 0.95, 0.80
FORMATS = {"jsonl": ("jsonl", "gzip", "jsonl + gzip"), "parquet": ("parquet", "snappy", "Parquet + snappy")}


def _trib_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "trib"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "tributary_read.cli.main"]


# -- the raw baseline (runs as its own process: ``--raw-worker``) ---------------------------
def raw_worker(fmt: str, codec: str, bootstrap: str, topic: str, counts: dict[int, int], out: str,
               durable: bool = True, every: int = 0) -> dict:
    """Read every partition to its end once, json-decode each value, write it to its event hour's file,
    closing the files every ``every`` records (where trib commits) and fsyncing them if ``durable``.
    No offset commit, no manifest."""
    import pyarrow  # noqa: F401  (imported up front, as trib's writer does)
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{uuid.uuid4().hex[:12]}", **FETCH,
                  "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    md = c.list_topics(topic, timeout=20).topics[topic]
    parts = sorted(md.partitions)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    got = dict.fromkeys(parts, 0)
    left = set(parts)
    loads = json.loads
    files = RawBatches(out, fmt, codec, durable, every)
    dirs: dict[int, str] = {}
    EOF = KafkaError._PARTITION_EOF
    while left:
        for msg in c.consume(BATCH, WAIT_S):
            err = msg.error()
            p = msg.partition()
            if err is not None:
                if err.code() == EOF:
                    if got[p] >= counts.get(p, 0):
                        left.discard(p)
                    continue
                raise KafkaException(err)
            value = msg.value()
            doc = loads(value)
            got[p] += 1
            h = doc["ts"] // 3_600_000
            d = dirs.get(h)
            if d is None:
                d = dirs[h] = time.strftime("%Y_%m_%d/%H", time.gmtime(h * 3600))
            if fmt == "jsonl":
                files.files.line(d, value)
            else:
                files.files.row(d, doc)
            files.counted()
    n_files = files.close()
    c.close()
    return {"records": sum(got.values()), "partitions": {str(p): n for p, n in got.items()}, "files": n_files,
            "fsyncs": files.fsyncs}


# -- set-up ---------------------------------------------------------------------------------
def start_broker(work: Path):
    """Tansu in memory on a free loopback port (tests/kafka_broker.py); exits naming why if it cannot run here."""
    sys.path.insert(0, str(REPO / "tests"))
    from kafka_broker import Broker, BrokerUnavailable

    try:
        return Broker(work / "broker", storage="memory").start()
    except BrokerUnavailable as e:
        sys.exit(f"bench_kafka: no Kafka broker on this machine: {e}")


def produce_all(broker, topic: str, lines: list[bytes], partitions: int) -> None:
    from confluent_kafka import Producer

    p = Producer(broker.config(**{"linger.ms": 20, "batch.num.messages": 10_000,
                                  "queue.buffering.max.messages": 500_000}))
    errors: list[str] = []

    def report(err, _msg):
        if err is not None:
            errors.append(str(err))

    for i, line in enumerate(lines):
        while True:
            try:
                p.produce(topic, line, partition=i % partitions, on_delivery=report)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(300)
    if left or errors:
        raise RuntimeError(f"produce: {left} undelivered, {len(errors)} failed: {errors[:3]}")


# -- timed runs -------------------------------------------------------------------------------
def _run_process(cmd: list[str], stdout_path: Path, stderr_path: Path) -> dict:
    """Run ``cmd`` to its end: wall seconds from spawn to exit, CPU seconds (user + sys) from wait4, stdout."""
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=REPO)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... exited {rc}: {stderr_path.read_text()[-2000:]}")
    return {"total": wall, "cpu": ru.ru_utime + ru.ru_stime, "out": stdout_path.read_text()}


def run_trib(ctx: dict, fmt: str, target: Path, extra: tuple[str, ...] = ()) -> dict:
    from tributary_read.table.config import Table, TableConfig

    kind, codec, _ = FORMATS[fmt]
    Table.create(str(target), TableConfig(layout=ctx["layout"], format=kind, compression=codec))
    app = f"bench-{uuid.uuid4().hex[:10]}"
    cmd = _trib_cmd() + ["-q", "ingest", str(target), "--kafka", ctx["bootstrap"], "--topic", ctx["topic"],
                         "--app-id", app, "--time-field", "ts", "--json", *ctx["trib_args"], *extra]
    r = _run_process(cmd, target.parent / f"{target.name}.out", target.parent / f"{target.name}.err")
    doc = json.loads(r.pop("out"))
    r.update(records=doc["records"], commits=doc["commits"], files=doc["files"], dead=doc["dead_letters"])
    return r


def run_raw(ctx: dict, fmt: str, target: Path, durable: bool = True) -> dict:
    kind, codec, _ = FORMATS[fmt]
    cmd = [sys.executable, str(Path(__file__).resolve()), "--raw-worker", kind, codec, ctx["bootstrap"],
           ctx["topic"], json.dumps(ctx["counts"]), str(target), "fsync" if durable else "no-fsync",
           str(ctx["every"])]
    r = _run_process(cmd, target.parent / f"{target.name}.out", target.parent / f"{target.name}.err")
    doc = json.loads(r.pop("out"))
    r.update(records=doc["records"], commits=0, files=doc["files"], fsyncs=doc["fsyncs"], dead=0)
    return r


def commit_every_of(trib_args: list[str]) -> int:
    """The timed trib run's records per commit: its ``--commit-every``, else the CLI's default."""
    for i, a in enumerate(trib_args):
        if a == "--commit-every" and i + 1 < len(trib_args):
            return int(trib_args[i + 1])
        if a.startswith("--commit-every="):
            return int(a.split("=", 1)[1])
    return trib_commit_every()


def _settle() -> None:
    if hasattr(os, "sync"):
        os.sync()
    gc.collect()


def _du(p: Path) -> int:
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and "_tributary" not in f.parts)


def run_variant(ctx: dict, fmt: str, repeat: int, work: Path) -> dict[str, list[dict]]:
    runs = {"raw": run_raw, "raw_nofsync": lambda c, f, t: run_raw(c, f, t, durable=False), "trib": run_trib}
    if ctx["also_every"]:  # information: the same command with fewer commits
        runs["trib_fewer"] = lambda c, f, t: run_trib(c, f, t, ("--commit-every", str(ctx["also_every"])))
    results: dict[str, list[dict]] = {k: [] for k in runs}
    keys = list(runs)
    for i in range(repeat):
        for k in (keys if i % 2 == 0 else keys[::-1]):
            target = work / f"{fmt}-{k}-{i}"
            _settle()
            r = runs[k](ctx, fmt, target)
            if r["records"] != ctx["n"] or r["dead"]:
                raise RuntimeError(f"{fmt} {k} run {i + 1}: read {r['records']} records ({r['dead']} dead "
                                   f"letters), the topic holds {ctx['n']}")
            r["out_bytes"] = _du(target)
            results[k].append(r)
            print(f"  {fmt:8s} {k:10s} run {i + 1}/{repeat}: "
                  + ", ".join(f"{kk}={v:.3f}" if isinstance(v, float) else f"{kk}={v}" for kk, v in r.items()),
                  file=sys.stderr, flush=True)
            if i < repeat - 1:
                shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
    return results


# -- checks (not timed) -----------------------------------------------------------------------
def committed_ids(root: Path) -> list[int]:
    import pyarrow.parquet as pq

    from tributary_read.table.config import Table
    from tributary_read.table.manifest import KIND_DATA

    ids: list[int] = []
    for f in Table.load(str(root)).log.state().files.values():
        if f.kind != KIND_DATA:
            continue
        path = root / f.path
        if f.path.endswith(".parquet"):
            ids += pq.read_table(path, columns=["id"]).column("id").to_pylist()
        else:
            with (gzip.open if f.path.endswith(".gz") else open)(path, "rb") as fh:
                ids += [json.loads(line)["id"] for line in fh]
    return ids


def raw_ids(root: Path, fmt: str) -> list[int]:
    import pyarrow.parquet as pq

    ids: list[int] = []
    for path in sorted(root.rglob("part-*")):
        if fmt == "parquet":
            ids += pq.read_table(path, columns=["id"]).column("id").to_pylist()
        else:
            with gzip.open(path, "rb") as fh:
                ids += [json.loads(line)["id"] for line in fh]
    return ids


def check_ids(ids: list[int], n: int) -> str:
    if len(ids) != n:
        return f"FAILED: {len(ids)} records, {n} produced"
    if len(set(ids)) != n or min(ids) != 0 or max(ids) != n - 1:
        return "FAILED: ids lost or duplicated"
    return "OK"


# -- commit latency (in-process Python API) ---------------------------------------------------
def commit_latency(ctx: dict, fmt: str, every: int, root: Path) -> dict:
    from tributary_read import KafkaSource, TimeSpec, ingest_kafka
    from tributary_read.kafka import ingest as kafka_ingest
    from tributary_read.table.config import Table, TableConfig
    from tributary_read.write.ingest import StopRequest

    kind, codec, _ = FORMATS[fmt]
    table = Table.create(str(root), TableConfig(layout=ctx["layout"], format=kind, compression=codec))
    stop = StopRequest()
    landed = [0]
    durations: list[float] = []
    sizes: list[int] = []

    def on_commit(commit) -> None:
        landed[0] += commit.records
        sizes.append(len(commit.files))
        if landed[0] >= ctx["n"]:
            stop.signum = signal.SIGTERM  # everything produced is committed: end the follow run

    original = kafka_ingest._Run._commit

    def timed_commit(run, writer):
        t0 = time.perf_counter()
        try:
            return original(run, writer)
        finally:
            durations.append(time.perf_counter() - t0)

    kafka_ingest._Run._commit = timed_commit
    t0 = time.perf_counter()
    try:
        result = ingest_kafka(table, KafkaSource(ctx["bootstrap"], (ctx["topic"],)), f"lat-{uuid.uuid4().hex[:10]}",
                              time_spec=TimeSpec(field="ts"), follow=True, commit_every=every,
                              commit_interval_s=3600.0, on_commit=on_commit, stop=stop)
    finally:
        kafka_ingest._Run._commit = original
    wall = time.perf_counter() - t0
    if result.records != ctx["n"]:
        raise RuntimeError(f"commit latency run ({fmt}): {result.records} records, the topic holds {ctx['n']}")
    ms = sorted(d * 1000 for d in durations)
    return {"label": FORMATS[fmt][2], "commit_every": every, "commits": len(ms), "records": result.records,
            "p50_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99), "max_ms": ms[-1],
            "mean_ms": sum(ms) / len(ms), "files_per_commit": median(sizes), "wall_s": wall,
            "commit_share": sum(durations) / wall}


# -- end-to-end delay under --follow ---------------------------------------------------------
def end_to_end(broker, ctx: dict, args, work: Path) -> dict:
    from confluent_kafka import Producer

    from tributary_read.table.config import Table, TableConfig
    from tributary_read.table.log import commit_path

    topic = f"e2e-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, args.partitions)
    root = work / "e2e-table"
    Table.create(str(root), TableConfig(layout=ctx["layout"], format="jsonl", compression="gzip"))
    interval = args.e2e_interval
    every = 1_000_000_000  # the interval alone decides when to commit
    cmd = _trib_cmd() + ["-q", "ingest", str(root), "--kafka", ctx["bootstrap"], "--topic", topic, "--app-id",
                         "e2e", "--time-field", "ts", "--follow", "--commit-interval", f"{interval:g}s",
                         "--commit-every", str(every)]
    err_path = work / "e2e.err"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, cwd=REPO)
    try:
        time.sleep(args.e2e_warmup)  # trib up and following before the first record
        if proc.poll() is not None:
            raise RuntimeError(f"trib --follow exited {proc.returncode}: {err_path.read_text()[-2000:]}")
        p = Producer(broker.config(**{"linger.ms": 5}))
        n = int(args.e2e_rate * args.e2e_seconds)
        t_start = time.time()
        pad = "x" * 80
        for i in range(n):
            due = t_start + i / args.e2e_rate
            delay = due - time.time()
            if delay > 0:
                p.poll(0)
                time.sleep(delay)
            now_ms = int(time.time() * 1000)
            p.produce(topic, f'{{"id":{i},"ts":{now_ms},"msg":"{pad}"}}'.encode(), partition=i % args.partitions)
        p.flush(60)
        achieved = n / (time.time() - t_start)
        # Wait for the commits that take the last records, then stop it (one last commit, exit 0).
        deadline = time.monotonic() + 3 * interval + 60
        table = Table.load(str(root))
        while time.monotonic() < deadline:
            if sum(f.records for f in table.log.state().files.values()) >= n:
                break
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(120)
    if rc != 0:
        raise RuntimeError(f"trib --follow exited {rc}: {err_path.read_text()[-2000:]}")
    delays: list[float] = []
    ids: list[int] = []
    commits = 0
    landings = []
    for c in table.log.commits():
        if not c.files:
            continue
        commits += 1
        # link(2) puts the commit file in the log (local storage): that sets its ctime, the landing instant.
        landed_ms = (root / commit_path(c.version)).stat().st_ctime_ns / 1e6
        landings.append(landed_ms)
        for f in c.files:
            with gzip.open(root / f.path, "rb") as fh:
                for line in fh:
                    doc = json.loads(line)
                    ids.append(doc["id"])
                    delays.append(landed_ms - doc["ts"])
    gaps = [b - a for a, b in zip(landings, landings[1:])]
    ds = sorted(delays)
    return {"records": len(ds), "produced": n, "rate": args.e2e_rate, "achieved_rate": achieved,
            "seconds": args.e2e_seconds, "interval_s": interval, "commits": commits,
            "p50_ms": percentile(ds, 50), "p99_ms": percentile(ds, 99), "max_ms": ds[-1], "min_ms": ds[0],
            "commit_gap_median_s": median(gaps) / 1000 if gaps else float("nan"),
            "check": check_ids(ids, n)}


# -- report ---------------------------------------------------------------------------------
def summarise(n: int, runs: list[dict]) -> dict:
    totals = [r["total"] for r in runs]
    med, best = median(totals), min(totals)
    return {"median_s": med, "best_s": best, "rps_median": n / med, "rps_best": n / best,
            "cpu_s_median": median([r["cpu"] for r in runs]), "runs_s": totals,
            "out_bytes": runs[-1]["out_bytes"], "commits": runs[-1]["commits"], "files": runs[-1]["files"],
            "fsyncs": runs[-1].get("fsyncs")}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--records", type=int, default=1_000_000, help="records in the topic (default 1,000,000)")
    ap.add_argument("--partitions", type=int, default=3, help="topic partitions (default 3)")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per side and format; median reported (default 5)")
    ap.add_argument("--hours", type=float, default=24.0, help="event-time spread in hours (default 24)")
    ap.add_argument("--formats", default="jsonl,parquet", help="comma list of jsonl,parquet")
    ap.add_argument("--trib-args", default="", help="extra arguments for the timed trib ingest (quoted), e.g. "
                                                   "'--commit-every 100000'")
    ap.add_argument("--also-commit-every", type=int, default=100_000,
                    help="also time trib with this --commit-every, for information (default 100,000; 0: no)")
    ap.add_argument("--latency-commit-every", type=int, default=10_000,
                    help="records per commit of the commit latency run (default 10,000, the CLI's default)")
    ap.add_argument("--e2e-seconds", type=float, default=60.0, help="how long the follow run's producer runs (default 60)")
    ap.add_argument("--e2e-rate", type=float, default=2000.0, help="records/s the producer writes (default 2,000)")
    ap.add_argument("--e2e-interval", type=float, default=5.0, help="--commit-interval of the follow run, s (default 5)")
    ap.add_argument("--e2e-warmup", type=float, default=3.0, help="s between starting trib --follow and producing")
    ap.add_argument("--skip", default="", help="comma list of throughput,latency,e2e to skip")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--dir", help="scratch directory parent (default benchmarks/out, on the repo's disk)")
    ap.add_argument("--keep", action="store_true", help="keep the written files")
    ap.add_argument("--quick", action="store_true", help="small smoke run: 20,000 records, 3 runs, 10 s follow run")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--markdown", help="also write the markdown section here")
    args = ap.parse_args(argv)
    if args.quick:
        args.records = min(args.records, 20_000)
        args.repeat = min(args.repeat, 3)
        args.e2e_seconds = min(args.e2e_seconds, 10.0)
        args.e2e_rate = min(args.e2e_rate, 500.0)
        args.e2e_interval = min(args.e2e_interval, 2.0)
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}

    import shlex

    from bench_writer import LAYOUT, Records

    from tributary_read.kafka.client import DEFAULTS

    drift = {k: (v, DEFAULTS.get(k)) for k, v in FETCH.items() if DEFAULTS.get(k) != v}
    if drift:
        sys.exit(f"bench_kafka.FETCH no longer matches trib's client defaults: {drift}")

    info = machine_info()
    result: dict = {"args": vars(args), "machine": info, "variants": {}, "latency": {}, "e2e": None}
    with WorkDir(args.dir, "kafka-", args.keep) as work:
        result["workdir_fstype"] = fs_type(work)
        broker = start_broker(work)
        try:
            t0 = time.perf_counter()
            recs = Records(args.records, args.seed, args.hours, "nearly-sorted")
            topic = f"bench-{uuid.uuid4().hex[:8]}"
            broker.create_topic(topic, args.partitions)
            produce_all(broker, topic, recs.lines, args.partitions)
            counts = broker.partition_counts(topic, timeout=600)
            n = sum(counts.values())
            if n != recs.n:
                raise RuntimeError(f"the topic holds {n} records, {recs.n} were produced")
            print(f"produced and counted {n:,} records ({recs.text_bytes / 1e6:.1f} MB as jsonl) in "
                  f"{args.partitions} partitions {counts}, {time.perf_counter() - t0:.1f}s; broker "
                  f"{broker.version} on {broker.bootstrap}", file=sys.stderr, flush=True)
            result.update(records=n, text_bytes=recs.text_bytes, broker=broker.version, counts=counts,
                          hour_partitions=len(recs.partitions))
            del recs
            ctx = {"bootstrap": broker.bootstrap, "topic": topic, "counts": counts, "n": n, "layout": LAYOUT,
                   "trib_args": shlex.split(args.trib_args), "also_every": args.also_commit_every,
                   "every": commit_every_of(shlex.split(args.trib_args))}
            if "throughput" not in skip:
                for fmt in formats:
                    runs = run_variant(ctx, fmt, args.repeat, work)
                    last = args.repeat - 1
                    checks = {"trib": check_ids(committed_ids(work / f"{fmt}-trib-{last}"), n),
                              "raw": check_ids(raw_ids(work / f"{fmt}-raw-{last}", fmt), n)}
                    v = result["variants"][fmt] = {
                        "label": FORMATS[fmt][2], "check": checks, **{k: summarise(n, rs) for k, rs in runs.items()}}
                    v["ratio_median"] = v["trib"]["rps_median"] / v["raw"]["rps_median"]
                    v["ratio_best"] = v["trib"]["rps_best"] / v["raw"]["rps_best"]
                    v["ratios"] = [rw / tr for rw, tr in zip(v["raw"]["runs_s"], v["trib"]["runs_s"])]
                    v["ratio_nofsync_median"] = v["trib"]["rps_median"] / v["raw_nofsync"]["rps_median"]
                    v["ratios_nofsync"] = [rw / tr for rw, tr in zip(v["raw_nofsync"]["runs_s"], v["trib"]["runs_s"])]
            if "latency" not in skip:
                for fmt in formats:
                    _settle()
                    lat = commit_latency(ctx, fmt, args.latency_commit_every, work / f"latency-{fmt}")
                    result["latency"][fmt] = lat
                    print(f"  commit latency {fmt}: {lat}", file=sys.stderr, flush=True)
            if "e2e" not in skip:
                _settle()
                result["e2e"] = end_to_end(broker, ctx, args, work)
                print(f"  end-to-end: {result['e2e']}", file=sys.stderr, flush=True)
        finally:
            broker.close()
    result["loadavg_after"] = machine_info()["loadavg"]
    md = render(result, argv if argv is not None else sys.argv[1:])
    return emit(md, result, args)


def render(r: dict, argv: list[str]) -> str:
    import shlex

    a = r["args"]
    m = r["machine"]
    shown, skip_next = [], False
    for x in argv:  # the output files run_all.py asks for are not part of the measurement
        if skip_next or x in ("--json", "--markdown"):
            skip_next = not skip_next and x in ("--json", "--markdown")
            continue
        if x.startswith(("--json=", "--markdown=")):
            continue
        shown.append(x)
    lines = [
        "## Kafka ingest: `trib ingest --kafka` against a plain confluent-kafka loop (`benchmarks/bench_kafka.py`)",
        "",
        f"- command: `{' '.join(['.venv/bin/python', 'benchmarks/bench_kafka.py'] + [shlex.quote(x) for x in shown])}` "
        "(from the repository root)",
        f"- {m['date']}, git {m['git']}; {m['nproc']} CPUs ({m['cpu']}); python {m['python']}, pyarrow "
        f"{m['pyarrow']}; broker {r.get('broker', '?')} (in-memory storage, same machine); scratch dir on "
        f"{r.get('workdir_fstype', '?')}",
        f"- load average (1/5/15 min) before: {m['loadavg']}; after: {r.get('loadavg_after', '?')}"
        + (" **(above 3: the machine was shared; read the same-run ratios, not the absolute rates)**"
           if _load1(m["loadavg"]) > 3 or _load1(r.get("loadavg_after", "0")) > 3 else ""),
        "",
    ]
    if r.get("records"):
        lines += [
            f"{r['records']:,} JSON records ({r['text_bytes'] / 1e6:.1f} MB), produced once to {a['partitions']} "
            f"partitions ({', '.join(f'{k}: {v:,}' for k, v in r['counts'].items())}, counted by consuming), "
            f"event times nearly sorted over {a['hours']:g} h ({r['hour_partitions']} hourly partitions). Every run "
            "reads the whole topic from offset 0 with a fresh app id and a fresh table or file. Both sides are "
            f"processes timed from start to exit; median (and best) of {a['repeat']} interleaved runs.",
            "",
        ]
    if r["variants"]:
        rows = []
        every = a.get("also_commit_every")
        for v in r["variants"].values():
            raw = v["raw"]
            for side, label in (("raw", f"raw: consume + json.loads + pyarrow into the same hourly files, closed "
                                        f"and fsynced every {a.get('every', 10_000):,} records as trib's (fair "
                                        "durable baseline)"),
                                ("raw_nofsync", "raw, the same without fsync"),
                                ("trib", "trib ingest --kafka (CLI, bounded, default --commit-every 10,000)"),
                                ("trib_fewer", f"trib, `--commit-every {every:,}` (information)" if every else "")):
                if side not in v:
                    continue
                s = v[side]
                ratio = (f"**{v['ratio_median']:.2f}** ({v['ratio_best']:.2f}); no fsync: "
                         f"**{v['ratio_nofsync_median']:.2f}**" if side == "trib" else
                         "1.00" if side == "raw" else
                         f"{s['rps_median'] / raw['rps_median']:.2f} ({s['rps_best'] / raw['rps_best']:.2f})")
                rows.append([v["label"], label, fmt_int(s["rps_median"]) + f" ({fmt_int(s['rps_best'])})",
                             f"{s['median_s']:.2f}", f"{s['cpu_s_median']:.2f}",
                             f"{raw['cpu_s_median'] / s['cpu_s_median']:.2f}", f"{s['out_bytes'] / 1e6:.1f}",
                             f"0 / {s['files']}" if side.startswith("raw") else f"{s['commits']} / {s['files']}",
                             ratio])
        lines.append(md_table(["format", "reader", "records/s median (best)", "time s (median)",
                               "CPU s of the process (median)", "CPU raw/this", "output MB", "commits / files",
                               "ratio trib/raw fsynced records/s, median (best); to raw no fsync"], rows))
        lines.append("")
        for v in r["variants"].values():
            lines.append(f"- {v['label']}: ratios of the runs (trib/raw, back to back): "
                         f"{', '.join(f'{x:.2f}' for x in v['ratios'])}; output check of the last runs: "
                         f"trib {v['check']['trib']}, raw {v['check']['raw']}.")
        lines.append(f"- goals (trib >= {GOAL:.0%} of the fair durable baseline, >= {GOAL_NOFSYNC:.0%} of raw "
                     "without fsync): " + ", ".join(
            f"{v['label']}: {'met' if v['ratio_median'] >= GOAL else 'NOT met'} ({v['ratio_median']:.0%}), "
            f"{'met' if v['ratio_nofsync_median'] >= GOAL_NOFSYNC else 'NOT met'} ({v['ratio_nofsync_median']:.0%})"
            for v in r["variants"].values()))
        lines.append("")
    if r["latency"]:
        lat = next(iter(r["latency"].values()))
        lines += [
            f"Commit latency: `ingest_kafka(..., follow=True, commit_every={lat['commit_every']:,})` in-process over "
            "the same topic (a fresh table each), each commit step of the ingest loop timed with `perf_counter` "
            "(closing and fsyncing the batch's files, the manifest commit, the renames, the asynchronous "
            "group-offset commit: the time the loop stops reading).",
            "",
        ]
        rows = [[x["label"], f"{x['commits']}", f"{x['files_per_commit']:g}", f"{x['p50_ms']:.1f}",
                 f"{x['p99_ms']:.1f}", f"{x['max_ms']:.1f}", f"{x['commit_share']:.0%}"]
                for x in r["latency"].values()]
        lines.append(md_table(["format", "commits", "files per commit (median)", "p50 ms", "p99 ms", "max ms",
                               "share of the run's wall time"], rows))
        lines.append("")
    e = r.get("e2e")
    if e:
        lines += [
            f"End-to-end delay under `--follow`: `trib ingest --follow --commit-interval {e['interval_s']:g}s` "
            f"(a process, jsonl + gzip) while this script produces {e['rate']:,.0f} records/s for "
            f"{e['seconds']:g} s (achieved {e['achieved_rate']:,.0f}/s) to a new {a['partitions']}-partition topic, "
            "each record's `ts` its produce time. Delay = the landing time of the commit that holds the record "
            "(its log file's ctime, set by the link(2) that publishes it) - produce time.",
            "",
            md_table(["records", "commits", "commit interval", "median gap between commits", "p50", "p99", "max",
                      "check"],
                     [[f"{e['records']:,}", e["commits"], f"{e['interval_s']:g} s", f"{e['commit_gap_median_s']:.2f} s",
                       f"{e['p50_ms'] / 1000:.2f} s", f"{e['p99_ms'] / 1000:.2f} s", f"{e['max_ms'] / 1000:.2f} s",
                       e["check"]]]),
            "",
        ]
    return "\n".join(lines).rstrip()


def _load1(text: str) -> float:
    try:
        return float(str(text).split()[0])
    except (ValueError, IndexError):
        return 0.0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--raw-worker":
        _, _, kind, codec, bootstrap, topic, counts, out, sync, every = sys.argv
        print(json.dumps(raw_worker(kind, codec, bootstrap, topic, {int(k): v for k, v in json.loads(counts).items()},
                                    out, sync == "fsync", int(every))))
    else:
        main()
