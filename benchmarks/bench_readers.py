#!/usr/bin/env python
"""Who loses or duplicates files: four hourly readers over one simulated landing zone.

One plain directory laid out ``{yyyy}_{MM}_{dd}/{HH}``, written the way other
tools write it, on a simulated clock: every file gets its mtime with
``os.utime`` and so does its directory when an entry is added or renamed (what
the OS does with the real clock); an append leaves the directory alone. The
clock ends a few hours before the real one, so trib's 7-day lookback and
Spark's ``maxFileAge`` see the ages they would see in production. Each
simulated hour, after the files that have arrived by then are in place, four
readers run over the same tree:

* **trib consumer**: the CLI in its own process, as a scheduler runs it:
  ``trib files ROOT --layout L --consumer bench --json``, read the files it
  names (a byte range where the plan gives ``offset`` / ``valid_length``), then
  ``trib consumer ack ROOT bench PLAN_ID``. Its default ``--full-scan-every
  24h`` runs on the wall clock, which a simulation does not advance, so the
  benchmark passes ``--full-scan`` every 24 simulated hours and in its last
  drain run, as the default schedule would;
* **Spark file source**: Spark's own file stream source, one query per run in
  one ``local[2]`` session: ``spark.readStream.format("text").load(ROOT/[0-9]*/[0-9]*)``
  with ``trigger(availableNow=True)``, a checkpoint, and ``foreachBatch``
  collecting the lines (default options: ``maxFileAge`` 7d, ``latestFirst``
  false). The glob names the hour directories, so trib's ``_tributary/`` state
  is not read as data;
* **mtime window**: ``trib files ROOT --layout L --mode mtime --schedule-time T
  --period 1h --json``: the files whose mtime lies in the previous hour;
* **previous hour**: the naive job: read directory ``T - 1h``.

Two drain runs follow the last hour, nothing arriving. Every line names its
file, so the count is exact: a file is *lost* if a line of it was never read
and *duplicated* if one was read twice; the growing file is counted in lines.

Arrival patterns. The first five come from the demo's seeded mix
(``tributary_read.demo.mix``; its two ``trib ingest`` patterns need a trib
table and are left out); the rest are added here:

* on time (``on_time_foreign``); late with a fresh mtime (``straggler``,
  ``late_fresh``); backdated (``preserved_mtime``: ``cp -p``, rsync -t); renamed
  in late (``hidden_renamed``: a hidden upload renamed into place, keeping its
  old mtime); boundary mtimes (exactly ``HH:00:00.000``);
* more than 7 days older than the newest: a backfill of hours 10 days back
  landing mid-run with its original mtimes, in partitions that did not exist;
* late into a partition more than 7 days old, with a fresh mtime (trib's
  ``beyond_horizon`` case);
* a file that grows after delivery: a log appended to every hour for 3 hours;
* history that predates the reader: files 8-12 days old, there before run 0.

    .venv/bin/python benchmarks/bench_readers.py            # 48 hours
    .venv/bin/python benchmarks/bench_readers.py --quick    # 8 hours, 20-40 s on 2 shared cores
    .venv/bin/python benchmarks/bench_readers.py --check    # exit 1 if trib's consumer loses or doubles anything
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (WorkDir, Event, apply, bench_session, emit, fs_type, hour_dir, iso, machine_info,  # noqa: E402
                     md_table, read_lines)

from tributary_read.demo.mix import HOUR_MS as H, MINUTE_MS as MIN, build  # noqa: E402

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
DAY = 24 * H
TRIB = [sys.executable, "-m", "tributary_read.cli.main", "-q"]
CONSUMER = "bench"
DRAIN_RUNS = 2
READERS = {"trib": "trib consumer", "spark": "Spark file source", "mtime": "mtime window",
           "naive": "previous hour"}
#: row key -> label; the growing file's row counts lines
PATTERNS = {
    "on_time": "on time",
    "late_fresh": "late, fresh mtime",
    "backdated": "backdated (mtime kept, lands 1-6 h late)",
    "renamed_late": "renamed in late (hidden upload, old mtime)",
    "boundary": "boundary mtimes (HH:00:00.000)",
    "older_than_7d": "> 7 d older than the newest (backfill, mtime kept)",
    "late_old_partition": "late into a partition > 7 d old, fresh mtime",
    "growing": "a file that grows after delivery (lines)",
    "history": "history that predates the reader (8-12 d old)",
}
FIRST_FIVE = ("on_time", "late_fresh", "backdated", "renamed_late", "boundary")
#: the demo mix's patterns -> rows (its trib-ingest patterns need a trib table: left out)
FROM_MIX = {"on_time_foreign": "on_time", "boundary": "boundary", "straggler": "late_fresh",
            "late_fresh": "late_fresh", "preserved_mtime": "backdated", "hidden_renamed": "renamed_late"}


@dataclass
class Zone:
    """The landing zone's script: events in time order, and every line each pattern's files hold at the end."""

    base: int
    hours: int
    events: list[Event] = field(default_factory=list)
    lines: dict[str, list[str]] = field(default_factory=dict)  # pattern -> every line written
    files: dict[str, str] = field(default_factory=dict)  # file id -> pattern
    n: int = 0

    def file(self, pattern: str, lines: int = 2) -> tuple[str, ...]:
        self.n += 1
        fid = f"f{self.n:05d}"
        self.files[fid] = pattern
        out = tuple(f"{fid}:{i}" for i in range(lines))
        self.lines.setdefault(pattern, []).extend(out)
        return out

    def add(self, kind: str, t: int, path: str, mtime: int = 0, dst: str = "", lines: tuple[str, ...] = ()) -> None:
        self.events.append(Event(t, len(self.events), kind, path, mtime, dst, lines))

    def run_at(self, r: int) -> int:
        """Run ``r`` reads hour ``r``: it starts 5 minutes after that hour ends."""
        return self.base + (r + 1) * H + 5 * MIN


def build_zone(hours: int, base: int, seed: int, history: int, backfill: int) -> Zone:
    z = Zone(base, hours)
    rng = random.Random(seed)
    for d in build(hours, base, seed).drops:
        row = FROM_MIX.get(d.pattern)
        if row is None:
            continue
        lines = z.file(row)
        if d.pattern == "hidden_renamed":  # written hidden inside its hour, renamed visible later
            hidden = f"{d.directory}/.{d.name}"
            z.add("create", d.written_ms, hidden, d.written_ms, lines=lines)
            z.add("rename", d.arrival_ms, hidden, dst=d.path)
        else:
            z.add("create", d.arrival_ms, d.path, d.mtime_ms, lines=lines)
    # The backfill's hour directories, 10 days back: new directories, so no history lands there.
    backfill_at = base + (hours // 2 + 1) * H
    backfill_parts = [backfill_at - 10 * DAY + (k // 2) * H for k in range(backfill)]
    # History: one file per hour directory 8-12 days back, there long before the first run.
    old = sorted(rng.sample([b for b in range(8 * 24, 12 * 24) if base - b * H not in backfill_parts], history))
    for k, back in enumerate(old):
        part = base - back * H
        m = part + rng.randrange(H)
        z.add("create", m, f"{hour_dir(part)}/history-{k}.log", m, lines=z.file("history"))
    # Late into two of those old partitions, with a fresh mtime, mid-schedule.
    for k, back in enumerate(old[:2]):
        t = base + (hours // 2) * H + (20 + k) * MIN
        z.add("create", t, f"{hour_dir(base - back * H)}/late-old-{k}.log", t, lines=z.file("late_old_partition"))
    # A backfill of hours 10 days back (directories that did not exist), mtimes kept.
    t = backfill_at + 30 * MIN
    for k, part in enumerate(backfill_parts):
        z.add("create", t + k, f"{hour_dir(part)}/backfill-{k}.log", part + (7 + k) * MIN,
              lines=z.file("older_than_7d"))
    # A log appended to every hour: 2 lines at first, 2 more in each of the next 3 hours.
    g = 1
    path = f"{hour_dir(base + g * H)}/app.log"
    first = z.file("growing")
    z.add("create", base + g * H + 30 * MIN, path, base + g * H + 30 * MIN, lines=first)
    fid = first[0].split(":")[0]
    for k in range(1, 4):
        if g + k >= hours:
            break
        more = tuple(f"{fid}:{2 * k + i}" for i in range(2))
        z.lines["growing"].extend(more)
        t = base + (g + k) * H + 30 * MIN
        z.add("append", t, path, t, lines=more)
    z.events.sort()
    return z


def _trib(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*TRIB, *args], capture_output=True, text=True)


def _err(p: subprocess.CompletedProcess) -> str:
    lines = [x for x in p.stderr.strip().splitlines() if x.strip()]
    return f"exit {p.returncode}: {lines[-1] if lines else ''}"[:300]


class Readers:
    def __init__(self, root: Path, work: Path, spark):
        self.root, self.work, self.spark = root, work, spark
        self.names = [k for k in READERS if spark is not None or k != "spark"]  # --no-spark: no Spark column
        self.got = {k: Counter() for k in self.names}
        self.seconds = {k: 0.0 for k in self.names}
        self.failed: dict[str, list[str]] = {k: [] for k in self.names}
        self.reported = Counter()  # trib: files named in beyond_horizon / conflicts

    def run(self, r: int, at: int, base: int, full_scan: bool) -> None:
        for name, fn in (("trib", lambda: self.trib(full_scan)), ("spark", self.spark_run),
                         ("mtime", lambda: self.mtime(at)), ("naive", lambda: self.naive(base + r * H))):
            if name not in self.names:
                continue
            t0 = time.perf_counter()
            try:
                lines = fn()
            except RunFailed as e:
                self.failed[name].append(f"run {r}: {e}")
                lines = []
            self.seconds[name] += time.perf_counter() - t0
            self.got[name].update(lines)

    def trib(self, full_scan: bool) -> list[str]:
        p = _trib("files", str(self.root), "--layout", LAYOUT, "--consumer", CONSUMER, "--json",
                  *(["--full-scan"] if full_scan else []))
        if p.returncode != 0:
            raise RunFailed(_err(p))
        plan = json.loads(p.stdout)
        self.reported.update(x["path"] for k in ("beyond_horizon", "conflicts") for x in plan.get(k) or ())
        lines = [x for f in plan["files"] for x in read_lines(self.root, f["path"], f.get("offset"), f.get("valid_length"))]
        a = _trib("consumer", "ack", str(self.root), CONSUMER, plan["plan_id"])
        if a.returncode != 0:
            raise RunFailed("ack " + _err(a))
        return lines

    def spark_run(self) -> list[str]:
        got: list[str] = []
        df = self.spark.readStream.format("text").load(f"{self.root}/[0-9]*/[0-9]*")
        q = (df.writeStream.foreachBatch(lambda b, _id: got.extend(x.value for x in b.collect()))
             .trigger(availableNow=True).option("checkpointLocation", str(self.work / "spark-checkpoint")).start())
        q.awaitTermination()
        return got

    def mtime(self, at: int) -> list[str]:
        p = _trib("files", str(self.root), "--layout", LAYOUT, "--mode", "mtime", "--schedule-time", str(at),
                  "--period", "1h", "--json")
        if p.returncode != 0:
            raise RunFailed(_err(p))
        return [x for f in json.loads(p.stdout)["files"] for x in read_lines(self.root, f["path"])]

    def naive(self, hour_start: int) -> list[str]:
        d = self.root / hour_dir(hour_start)
        names = sorted(n for n in os.listdir(d) if not n.startswith((".", "_"))) if d.is_dir() else []
        return [x for n in names for x in read_lines(self.root, f"{hour_dir(hour_start)}/{n}")]


class RunFailed(Exception):
    pass


def tally(zone: Zone, got: Counter) -> dict[str, dict[str, int]]:
    """Per pattern: lost and duplicated files (lines for the growing file)."""
    out = {}
    for pattern, lines in zone.lines.items():
        if pattern == "growing":
            out[pattern] = {"n": len(lines), "lost": sum(got[x] == 0 for x in lines),
                            "dup": sum(got[x] - 1 for x in lines if got[x] > 1)}
            continue
        by_file: dict[str, list[int]] = {}
        for x in lines:
            by_file.setdefault(x.split(":")[0], []).append(got[x])
        out[pattern] = {"n": len(by_file), "lost": sum(min(c) == 0 for c in by_file.values()),
                        "dup": sum(max(c) > 1 for c in by_file.values())}
    unknown = set(got) - {x for ls in zone.lines.values() for x in ls}
    if unknown:
        raise AssertionError(f"read lines no file holds: {sorted(unknown)[:5]}")
    return out


def session(master: str):
    return bench_session(master, "bench-readers")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=int, default=48, help="simulated hourly runs (48)")
    ap.add_argument("--history", type=int, default=24, help="history files, 8-12 days old (24)")
    ap.add_argument("--backfill", type=int, default=4, help="files of the 10-days-back backfill (4)")
    ap.add_argument("--seed", type=int, default=2002, help="the arrival mix's seed (2002, the demo's)")
    ap.add_argument("--quick", action="store_true", help="8 hours, 6 history files, 2 backfill files")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if trib's consumer loses or duplicates anything, or a run of it fails")
    ap.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    ap.add_argument("--no-spark", action="store_true",
                    help="the other three readers only (no JVM: a few seconds at small sizes)")
    ap.add_argument("--dir", help="scratch directory parent (default benchmarks/out)")
    ap.add_argument("--keep", action="store_true", help="keep the landing zone")
    ap.add_argument("--json", help="write the result as JSON here")
    ap.add_argument("--markdown", help="write the markdown summary here")
    args = ap.parse_args(argv)
    if args.quick:
        args.hours, args.history, args.backfill = 8, 6, 2
    if args.hours < 6:
        ap.error("--hours must be at least 6")
    now = int(time.time() * 1000)
    base = now // H * H - (args.hours + DRAIN_RUNS + 2) * H  # the last run still lies in the past
    zone = build_zone(args.hours, base, args.seed, args.history, args.backfill)
    info = machine_info()
    t_all = time.perf_counter()
    t0 = time.perf_counter()
    spark = None if args.no_spark else session(args.master)
    spark_start = time.perf_counter() - t0
    with WorkDir(args.dir, prefix="bench-readers-", keep=args.keep) as work:
        root = work / "landing"
        root.mkdir()
        readers = Readers(root, work, spark)
        pending = list(zone.events)
        runs = args.hours + DRAIN_RUNS
        for r in range(runs):
            at = zone.run_at(r)
            while pending and pending[0].t <= at:
                apply(root, pending.pop(0))
            full = (r > 0 and r % 24 == 0) or r == runs - 1
            readers.run(r, at, base, full)
            print(f"run {r + 1}/{runs} ({iso(at)}){' full scan' if full else ''}", file=sys.stderr, flush=True)
        assert not pending, "every event lands before the last run"
        fs = fs_type(root)
    if spark is not None:
        spark.stop()
    tallies = {k: tally(zone, readers.got[k]) for k in readers.names}
    result = {"machine": info, "hours": args.hours, "runs": runs, "seed": args.seed, "base": iso(base),
              "fs": fs, "spark_start_s": round(spark_start, 1), "total_s": round(time.perf_counter() - t_all, 1),
              "tallies": tallies, "seconds": {k: round(v, 1) for k, v in readers.seconds.items()},
              "failed_runs": readers.failed, "trib_reported": sorted(readers.reported)}
    trib_bad = any(v["lost"] or v["dup"] for v in tallies["trib"].values()) or readers.failed["trib"]
    result["trib_loses_nothing"] = not trib_bad
    emit(report(result, zone), result, args)
    if args.check and trib_bad:
        print("check failed: trib's consumer lost, duplicated or failed (see the table)", file=sys.stderr)
        sys.exit(1)
    return result


def report(res: dict, zone: Zone) -> str:
    t = res["tallies"]
    names = {k: v for k, v in READERS.items() if k in t}  # the readers that ran

    def cell(k: str, p: str) -> str:
        v = t[k][p]
        s = f"{v['lost']} / {v['dup']}"
        return s if not (v["lost"] or v["dup"]) else f"**{s}**"

    rows = [[label, t["trib"][p]["n"], *(cell(k, p) for k in names)] for p, label in PATTERNS.items() if p in t["trib"]]
    tot = {k: (sum(v["lost"] for p, v in t[k].items() if p != "growing"),
               sum(v["dup"] for p, v in t[k].items() if p != "growing")) for k in names}
    rows.append(["**files, all patterns but the growing one**",
                 sum(v["n"] for p, v in t["trib"].items() if p != "growing"),
                 *(f"{tot[k][0]} / {tot[k][1]}" for k in names)])
    m = res["machine"]
    out = ["## Readers compared: files lost / duplicated per arrival pattern (`bench_readers.py`)", "",
           f"One plain landing zone (`{LAYOUT}`, {res['fs']}), {res['hours']} simulated hours from "
           f"{res['base']} UTC then {res['runs'] - res['hours']} drain runs; each run sees only what has "
           f"arrived by then. Seed {res['seed']}. Measured on this machine: {m['nproc']} CPUs ({m['cpu']}), "
           f"load average {m['loadavg']}, {m['date']}, git {m['git']}.", "",
           md_table(["arrival pattern", "files", *(f"{v} (lost / dup)" for v in names.values())], rows), "",
           md_table(["reader", "seconds, all runs", "s per run", "failed runs"],
                    [[READERS[k], f"{s:.1f}", f"{s / res['runs']:.2f}", len(res["failed_runs"][k])]
                     for k, s in res["seconds"].items()]), "",
           (f"Spark session start-up ({res['spark_start_s']} s) is not in its column. " if "spark" in t else "") + f"Whole benchmark "
           f"{res['total_s']} s."]
    if res["trib_reported"]:
        out += ["", f"trib's consumer named {len(res['trib_reported'])} file(s) in `beyond_horizon` / `conflicts` "
                "(a warning on stderr, exit 0) without delivering them."]
    for k, fails in res["failed_runs"].items():
        for f in fails[:5]:
            out.append(f"- {READERS[k]} failed, {f}")
    spark_first = [p for p in FIRST_FIVE if "spark" in t and (t["spark"][p]["lost"] or t["spark"][p]["dup"])]
    if spark_first:
        out += ["", f"Note: Spark's file source lost or doubled files on {', '.join(spark_first)} (not expected)."]
    return "\n".join(out)


if __name__ == "__main__":
    main()
