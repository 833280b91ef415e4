#!/usr/bin/env python
"""Late data, record by record: trib's durable consumer against Spark's file stream source.

One plain landing zone laid out ``{yyyy}_{MM}_{dd}/{HH}`` on a simulated
clock: every file gets its mtime with ``os.utime``, and so does its directory
when an entry is added, renamed or removed (what the OS does with the real
clock); an in-place append or rewrite leaves the directory alone. Every line
written is one record with a unique id (``f00012:3``; a rewrite writes new ids,
``r00012:3``), so each reader's deliveries are counted exactly: *lost* is a
record written and never delivered, *duplicated* one delivered more than once,
*garbled* a line no file ever held.

The simulated hours end just before the real clock, because trib's lookback is
measured on it: ``--lookback-hours`` (default ``hours / 2 + 4`` hours) makes the
older half of the schedule's partitions *sealed* as soon as they are delivered,
the newer half stays inside the lookback. Each simulated hour, once what has
arrived by then is in place, both readers run over the same tree:

* **trib consumer**: the CLI, two processes, as a scheduler runs it:
  ``trib files ROOT --layout L --consumer C --lookback LB --json``, read the
  files it names (``[offset, valid_length)`` where the plan gives a range),
  then ``trib consumer ack ROOT C PLAN_ID``. Its default ``--full-scan-every
  24h`` runs on the wall clock, which the simulation does not advance, so the
  benchmark passes ``--full-scan`` every ``--full-scan-every`` simulated hours
  and in the drain runs;
* **Spark file source**: one checkpointed ``spark.readStream.format("text")``
  query per run over ``ROOT/[0-9]*/[0-9]*`` with ``trigger(availableNow=True)``
  and ``maxFileAge`` 3650d (its default, 7 days relative to the newest file,
  would drop old-mtime files), in one ``local[2]`` session.

A non-zero exit is what a scheduler sees; the benchmark plays the operator who
follows the message, ``--operator-delay`` (2) runs later (the runs between exit
the same way): after exit 17 at the ack (partitions held, the rest delivered
and acked) it runs ``trib consumer replay ROOT C --partition P,... --execute``. A full scan stays due until one is acked,
as ``--full-scan-every`` counts from the last acked one. Drain runs (full scans,
nothing arriving) follow the schedule until trib's plan is empty and clean.

Arrival patterns (``inside``: a partition inside the lookback; ``sealed``: one
past it, already delivered and sealed):

* on time; late with a fresh mtime; late with an old mtime (``rsync -t``,
  ``cp -p``, S3 multipart); renamed into place (a hidden upload renamed after
  runs listed its directory, keeping its old mtime), each inside and sealed;
* a file that grows after delivery (lines appended in the next hours), inside
  and sealed;
* a file removed after delivery, inside and sealed;
* a file rewritten in place after delivery with new records, same length and
  longer, inside and sealed: no reader can deliver that exactly; the table says
  what each one does;
* a file landing late in, and a file growing in, a partition held back by such
  a rewrite: they wait with it and are delivered once it is resolved.

trib must deliver every pattern but the rewrites with 0 lost and 0 duplicated,
no run stopping on them (a removal is a named hold by design: exit 17, the
rest delivered), and a rewrite must be named, never delivered in part, and
hold its partition only (exit 17), inside the lookback and past it; the benchmark exits 1 if not (``--no-check`` only reports).

    .venv/bin/python benchmarks/bench_late_data.py            # 48 hours, ~3 min on 2 cores
    .venv/bin/python benchmarks/bench_late_data.py --quick    # 20 hours, ~1 min
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (WorkDir, Event, apply, bench_session, emit, fs_type, hour_dir, iso, machine_info,  # noqa: E402
                     md_table, read_lines, shown_args)

H = 3_600_000
MIN = 60_000
LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
TRIB = [sys.executable, "-m", "tributary_read.cli.main", "-q"]
CONSUMER = "bench"
MAX_DRAIN = 8
READERS = {"trib": "trib consumer", "spark": "Spark file source"}
#: pattern -> (label, where); rewrites last: no reader delivers them exactly
PATTERNS = {
    "on_time": ("on time", "both"),
    "late_fresh": ("late, fresh mtime", "inside"),
    "late_old_mtime": ("late, old mtime (rsync -t)", "inside"),
    "renamed": ("renamed into place, old mtime", "inside"),
    "sealed_late_fresh": ("late, fresh mtime", "sealed"),
    "sealed_late_old_mtime": ("late, old mtime (rsync -t)", "sealed"),
    "sealed_renamed": ("renamed into place, old mtime", "sealed"),
    "growing": ("grows after delivery (lines appended)", "inside"),
    "sealed_growing": ("grows after delivery (lines appended)", "sealed"),
    "removed": ("removed after delivery", "inside"),
    "sealed_removed": ("removed after delivery", "sealed"),
    "rewrite_same": ("rewritten in place, same length", "inside"),
    "rewrite_longer": ("rewritten in place, longer", "inside"),
    "sealed_rewrite_same": ("rewritten in place, same length", "sealed"),
    "sealed_rewrite_longer": ("rewritten in place, longer", "sealed"),
    "held_late": ("late into a partition held back by a rewrite", "sealed"),
    "held_growing": ("grows while its partition is held back", "sealed"),
}
REWRITES = {p for p in PATTERNS if "rewrite" in p}


@dataclass
class Zone:
    """The landing zone's script: events in time order, and every record each pattern's files ever held."""

    base: int
    hours: int
    events: list[Event] = field(default_factory=list)
    records: dict[str, list[str]] = field(default_factory=dict)  # pattern -> every record id written
    new_records: dict[str, list[str]] = field(default_factory=dict)  # rewrite pattern -> the rewrite's ids
    paths: dict[str, str] = field(default_factory=dict)  # final path -> pattern
    n: int = 0

    def lines(self, pattern: str, k: int, prefix: str = "f", fid: str = "") -> tuple[str, ...]:
        if not fid:
            self.n += 1
            fid = f"{self.n:05d}"
        out = tuple(f"{prefix}{fid}:{i}" for i in range(k))
        self.records.setdefault(pattern, []).extend(out)
        return out

    def add(self, kind: str, t: int, path: str, mtime: int = 0, dst: str = "", lines: tuple[str, ...] = ()) -> None:
        self.events.append(Event(t, len(self.events), kind, path, mtime, dst, lines))

    def run_at(self, r: int) -> int:
        """Run ``r`` reads hour ``r``: it starts 5 minutes after that hour ends."""
        return self.base + (r + 1) * H + 5 * MIN

    def part(self, h: int) -> str:
        return hour_dir(self.base + h * H)


def build_zone(hours: int, base: int, horizon: int, seed: int, per_hour: int, lines: int, late: int) -> Zone:
    """The schedule. ``horizon``: partitions ending before it (with an hour's margin) are sealed when delivered."""
    z = Zone(base, hours)
    rng = random.Random(seed)
    sealed = [h for h in range(hours) if base + (h + 1) * H <= horizon - H]
    inside = [h for h in range(hours) if base + h * H >= horizon + H]
    if len(sealed) < 5 or len(inside) < 10:
        raise SystemExit(f"--hours/--lookback-hours leave {len(sealed)} sealed and {len(inside)} inside partitions: "
                         "need at least 5 and 10 (use more hours or a lookback nearer hours / 2 + 4)")
    last = z.run_at(hours - 1)  # every event lands before the last scheduled run

    def create(pattern: str, h: int, name: str, t: int, mtime: int, k: int = lines) -> str:
        path = f"{z.part(h)}/{name}"
        z.paths[path] = pattern
        z.add("create", t, path, mtime, lines=z.lines(pattern, k))
        return path

    for h in range(hours):  # on time: written inside its hour
        for i in range(per_hour):
            t = base + h * H + rng.randrange(5 * MIN, 55 * MIN)
            create("on_time", h, f"on-time-{i}.log", t, t)

    def late_at(h: int, lo: int, hi: int) -> int:
        return min(base + (h + 1) * H + rng.randrange(lo * H, hi * H), last - MIN)

    # Inside the lookback: 1-3 h late, so they land before the schedule ends.
    early_inside = [h for h in inside if base + (h + 4) * H <= last]
    for i in range(late):
        h = rng.choice(early_inside)
        t = late_at(h, 1, 3)
        create("late_fresh", h, f"late-fresh-{i}.log", t, t)
        h = rng.choice(early_inside)
        create("late_old_mtime", h, f"late-old-{i}.log", late_at(h, 1, 3), base + h * H + rng.randrange(H))
    for i in range(max(1, late // 2)):
        h = rng.choice(early_inside)
        m = base + h * H + rng.randrange(30 * MIN, 55 * MIN)
        hidden = f"{z.part(h)}/.renamed-{i}.log.tmp"  # written hidden, renamed after runs listed the directory
        z.add("create", m, hidden, m, lines=z.lines("renamed", lines))
        dst = f"{z.part(h)}/renamed-{i}.log"
        z.paths[dst] = "renamed"
        z.add("rename", late_at(h, 1, 3), hidden, dst=dst)
    # Into sealed partitions, hours or days after their run.
    for i in range(late):
        h = rng.choice(sealed)
        t = late_at(h, 2, max(3, (last - base) // H - h - 1))
        create("sealed_late_fresh", h, f"late-fresh-{i}.log", t, t)
        h = rng.choice(sealed)
        create("sealed_late_old_mtime", h, f"late-old-{i}.log", late_at(h, 2, max(3, (last - base) // H - h - 1)),
               base + h * H + rng.randrange(H))
    for i in range(max(1, late // 2)):
        h = rng.choice(sealed)
        m = base + h * H + rng.randrange(30 * MIN, 55 * MIN)
        hidden = f"{z.part(h)}/.renamed-{i}.log.tmp"
        z.add("create", m, hidden, m, lines=z.lines("sealed_renamed", lines))
        dst = f"{z.part(h)}/renamed-{i}.log"
        z.paths[dst] = "sealed_renamed"
        z.add("rename", late_at(h, 2, 6), hidden, dst=dst)

    # Each change below lands in a partition no other change uses (late files may share it: a held
    # partition holds every file of it back, and they are counted as delivered only once it is resolved).
    def own(pool: list[int], taken: set[int], margin: int) -> int:
        free = [x for x in pool if x not in taken and x + margin < hours]  # its last event lands at h + margin - 1
        if not free:
            raise SystemExit("too few partitions for the changes: use more --hours")
        h = rng.choice(free)
        taken.add(h)
        return h

    taken: set[int] = set()
    for where, pool, margin in (("", early_inside, 4), ("sealed_", sealed, 6)):
        for k in range(2):  # grows: appended to in each of the next 3 hours
            h = own(pool, taken, margin)
            t = base + h * H + 20 * MIN
            path = create(f"{where}growing", h, f"app-{k}.log", t, t, k=4)
            fid = z.events[-1].lines[0][1:].split(":")[0]
            for j in range(1, 4):
                t2 = min(t + j * H, last - MIN)
                more = tuple(f"f{fid}:{4 * j + i}" for i in range(4))
                z.records[f"{where}growing"].extend(more)
                z.add("append", t2, path, t2, lines=more)
        h = own(pool, taken, margin)  # removed 2 h after its partition's run
        t = base + h * H + 15 * MIN
        path = create(f"{where}removed", h, "removed.log", t, t)
        z.add("remove", base + (h + 3) * H, path)
        for kind, extra in (("same", 0), ("longer", lines)):  # rewritten 2 h after its run, new records
            h = own(pool, taken, margin)
            t = base + h * H + 25 * MIN
            pattern = f"{where}rewrite_{kind}"
            path = create(pattern, h, f"rewrite-{kind}.log", t, t)
            fid = z.events[-1].lines[0][1:].split(":")[0]
            new = z.lines(pattern, lines + extra, prefix="r", fid=fid)
            z.new_records[pattern] = list(new)
            t2 = base + (h + 3) * H + 10 * MIN
            z.add("rewrite", t2, path, t2, lines=new)
            if pattern == "sealed_rewrite_same":  # files that wait with the partition this change holds back
                t = base + h * H + 30 * MIN
                grow = create("held_growing", h, "held-app.log", t, t, k=4)
                fid = z.events[-1].lines[0][1:].split(":")[0]
                t3 = t2 + H  # lands 1 h after the rewrite: its directory changes, the partition is held
                create("held_late", h, "held-late.log", t3, t3)
                t4 = t2 + 2 * H  # appended to while the partition is held
                more = tuple(f"f{fid}:{4 + i}" for i in range(4))
                z.records["held_growing"].extend(more)
                z.add("append", t4, grow, t4, lines=more)
    z.events.sort()
    assert all(e.t <= last for e in z.events)
    return z


def _trib(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*TRIB, *args], capture_output=True, text=True)


@dataclass
class Stop:
    """A run that exited non-zero: reader, run (from 1), step, exit code, the line it printed, the paths it named."""

    reader: str
    run: int
    step: str
    code: int
    line: str
    named: list[str]


class Readers:
    def __init__(self, root: Path, work: Path, spark, zone: Zone, lookback: str, delay: int):
        self.root, self.work, self.spark, self.zone, self.lookback = root, work, spark, zone, lookback
        self.delay = delay
        self.replay_due: dict[str, int] = {}  # held partition -> the run before which the operator replays it
        self.full_due = False
        self.got = {k: Counter() for k in READERS}
        self.runs_of = {k: {} for k in READERS}  # record id -> the runs (from 1) that delivered it
        self.seconds = {k: 0.0 for k in READERS}
        self.stops: list[Stop] = []
        self.named: dict[str, set[str]] = {}  # path -> how trib named it (conflicts, held)
        self.ranges = 0
        self.sealed: set[str] = set()
        self.last_plan: dict = {}
        self.actions: list[str] = []

    def run(self, r: int, full_scan: bool) -> None:
        t0 = time.perf_counter()
        self._got("trib", r, self.trib(r, full_scan))
        self.seconds["trib"] += time.perf_counter() - t0
        if self.spark is not None:
            t0 = time.perf_counter()
            try:
                self._got("spark", r, self.spark_run())
            except Exception as e:  # noqa: BLE001 - a failed query is a stopped run, counted
                self.stops.append(Stop("spark", r + 1, "query", 1, str(e).splitlines()[0][:300], []))
            self.seconds["spark"] += time.perf_counter() - t0

    def _got(self, reader: str, r: int, lines: list[str]) -> None:
        self.got[reader].update(lines)
        for x in lines:
            self.runs_of[reader].setdefault(x, []).append(r + 1)

    def _named(self, text: str) -> list[str]:
        return sorted(p for p in self.zone.paths if p in text)

    def _line(self, p: subprocess.CompletedProcess) -> str:
        lines = [x for x in p.stderr.strip().splitlines() if x.strip()]
        line = (lines[-1] if lines else "").replace(self.root.as_uri(), "ROOT").replace(str(self.root), "ROOT")
        return line if len(line) <= 320 else line[:320] + " ..."

    def replay_due_now(self, r: int) -> None:
        """The operator, paged by exit 17, resolves the held partitions ``delay`` runs later as the line says."""
        due = sorted(p for p, at in self.replay_due.items() if at <= r)
        if not due:
            return
        rp = _trib("consumer", "replay", str(self.root), CONSUMER, "--partition", ",".join(due), "--execute")
        note = f"before run {r + 1}: trib consumer replay ROOT {CONSUMER} --partition {','.join(due)} --execute"
        if rp.returncode != 0:
            note += f" FAILED: exit {rp.returncode}: {self._line(rp)}"
        self.actions.append(note)
        for p in due:
            del self.replay_due[p]

    def trib(self, r: int, full_scan: bool) -> list[str]:
        # The periodic full scan stays due until a full-scan plan is acked (trib's --full-scan-every counts
        # from the last acked one), so a run stopped on a full scan is followed by full scans.
        full_scan = full_scan or self.full_due
        self.full_due = full_scan
        args = ["files", str(self.root), "--layout", LAYOUT, "--consumer", CONSUMER, "--lookback", self.lookback,
                "--json", *(["--full-scan"] if full_scan else [])]
        self.replay_due_now(r)
        p = _trib(*args)
        if p.returncode != 0:
            self.stops.append(Stop("trib", r + 1, "files", p.returncode, self._line(p), self._named(p.stderr)))
            return []
        plan = json.loads(p.stdout)
        self.last_plan = plan
        for c in plan.get("conflicts") or ():
            self.named.setdefault(c["path"], set()).add("conflicts")
        held_named = [f"{h['path']}/{c.split()[0]}" for h in plan.get("held") or () for c in h["changes"]]
        for x in held_named:
            self.named.setdefault(x, set()).add("held")
        lines = []
        for f in plan["files"]:
            if f.get("offset") is not None:
                self.ranges += 1
            lines += read_lines(self.root, f["path"], f.get("offset"), f.get("valid_length", f.get("size")))
        a = _trib("consumer", "ack", str(self.root), CONSUMER, plan["plan_id"])
        if a.returncode in (0, 17):
            self.full_due = False
        if a.returncode == 17:  # held partitions, the rest acked: the operator replays them `delay` runs later
            for h in plan["held"]:
                self.replay_due.setdefault(h["path"], r + 1 + self.delay)
            self.stops.append(Stop("trib", r + 1, "ack", 17, self._line(a), held_named))
        elif a.returncode != 0:
            self.stops.append(Stop("trib", r + 1, "ack", a.returncode, self._line(a), self._named(a.stderr)))
            return []  # not acked: the next plan delivers these files again; count them once
        return lines

    def spark_run(self) -> list[str]:
        got: list[str] = []
        df = self.spark.readStream.format("text").option("maxFileAge", "3650d").load(f"{self.root}/[0-9]*/[0-9]*")
        q = (df.writeStream.foreachBatch(lambda b, _id: got.extend(x.value for x in b.collect()))
             .trigger(availableNow=True).option("checkpointLocation", str(self.work / "spark-checkpoint")).start())
        q.awaitTermination()
        return got


def tally(zone: Zone, got: Counter) -> dict:
    """Per pattern: records expected, delivered (distinct), lost, duplicated; and lines no file held."""
    out = {}
    for pattern, ids in zone.records.items():
        new = set(zone.new_records.get(pattern, ()))
        v = {"files": sum(1 for p in zone.paths.values() if p == pattern), "expected": len(ids),
             "delivered": sum(got[x] > 0 for x in ids), "lost": sum(got[x] == 0 for x in ids),
             "dup": sum(got[x] - 1 for x in ids if got[x] > 1)}
        if new:
            v["new_expected"], v["new_delivered"] = len(new), sum(got[x] > 0 for x in new)
        out[pattern] = v
    known = {x for ids in zone.records.values() for x in ids}
    out["_garbled"] = sorted(x for x in got if x not in known)
    return out


def check(res: dict, zone: Zone) -> list[str]:
    """What must hold for trib: exact wherever a change can be told exactly; a rewrite named, never in part."""
    t, bad = res["tallies"]["trib"], []
    if t["_garbled"]:
        bad.append(f"trib delivered {len(t['_garbled'])} line(s) no file held, e.g. {t['_garbled'][:3]}")
    for p in PATTERNS:
        v = t[p]
        if p in REWRITES:
            old = v["expected"] - v["new_expected"]
            if v["dup"] or v["delivered"] - v["new_delivered"] != old:
                bad.append(f"{p}: the records before the rewrite were not delivered exactly once ({v})")
            if v["new_delivered"] not in (0, v["new_expected"]):
                bad.append(f"{p}: {v['new_delivered']} of {v['new_expected']} rewritten records delivered: in part")
            for path, pat in zone.paths.items():
                if pat == p and not res["trib_named"].get(path):
                    bad.append(f"{p}: {path} was rewritten and trib never named it")
            codes = res["stops_by_pattern"]["trib"].get(p, {})
            if set(codes) - {"17"}:  # inside the lookback or past it: hold that partition only
                bad.append(f"{p}: a rewrite stopped runs with {codes}, not only exit 17")
            continue
        if v["lost"] or v["dup"]:
            bad.append(f"{p}: trib lost {v['lost']} and duplicated {v['dup']} of {v['expected']} records")
        codes = res["stops_by_pattern"]["trib"].get(p, {})
        allowed = {"17"} if p in ("removed", "sealed_removed") else set()
        if set(codes) - allowed:
            bad.append(f"{p}: trib runs stopped with {codes}")
    for s in res["stops"]:
        if s["reader"] == "trib" and not s["named"]:
            bad.append(f"trib run {s['run']} {s['step']} exit {s['code']} named no file of the zone: {s['line']}")
        if s["reader"] == "trib" and s["code"] != 17:
            bad.append(f"trib run {s['run']} {s['step']} exit {s['code']}: {s['line']}")
    bad += [f"the operator's replay failed: {a}" for a in res["actions"] if "FAILED" in a]
    if not res["sealed_ok"]:
        bad.append(f"the partitions meant to be sealed were not all sealed: {res['sealed_missing'][:5]}")
    return bad


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=int, default=48, help="simulated hourly runs (48)")
    ap.add_argument("--lookback-hours", type=int, help="trib's --lookback in hours (default hours / 2 + 4: 28)")
    ap.add_argument("--per-hour", type=int, default=4, help="on-time files per hour (4)")
    ap.add_argument("--lines", type=int, default=25, help="records per file (25)")
    ap.add_argument("--late", type=int, default=6, help="late files per late pattern (6; renames: half)")
    ap.add_argument("--full-scan-every", type=int, default=24,
                    help="trib --full-scan every N runs (24, as the default 24h)")
    ap.add_argument("--operator-delay", type=int, default=2,
                    help="runs after a non-zero exit that run before the operator acts (2: they exit the same way)")
    ap.add_argument("--seed", type=int, default=44)
    ap.add_argument("--quick", action="store_true", help="20 hours, 2 files an hour, full scan every 8 runs")
    ap.add_argument("--no-spark", action="store_true", help="trib only (no JVM)")
    ap.add_argument("--no-check", action="store_true", help="report only; do not exit 1 when trib is not exact")
    ap.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    ap.add_argument("--dir", help="scratch directory parent (default benchmarks/out)")
    ap.add_argument("--keep", action="store_true", help="keep the landing zone")
    ap.add_argument("--json", help="write the result as JSON here")
    ap.add_argument("--markdown", help="write the markdown summary here")
    args = ap.parse_args(argv)
    if args.quick:
        args.hours, args.per_hour, args.late, args.full_scan_every = 20, 2, 2, 8
    lookback_h = args.lookback_hours or args.hours // 2 + 4
    lookback = f"{lookback_h}h"
    now = int(time.time() * 1000)
    base = now // H * H - (args.hours + 2) * H  # the last scheduled run lies an hour in the past
    horizon = now - lookback_h * H
    zone = build_zone(args.hours, base, horizon, args.seed, args.per_hour, args.lines, args.late)
    info = machine_info()
    t_all = time.perf_counter()
    spark, spark_start = None, 0.0
    if not args.no_spark:
        t0 = time.perf_counter()
        spark = bench_session(args.master, "bench-late-data")
        spark_start = time.perf_counter() - t0
    with WorkDir(args.dir, prefix="bench-late-", keep=args.keep) as work:
        root = work / "landing"
        root.mkdir()
        readers = Readers(root, work, spark, zone, lookback, args.operator_delay)
        pending = list(zone.events)
        r = 0
        for r in range(args.hours):
            at = zone.run_at(r)
            while pending and pending[0].t <= at:
                apply(root, pending.pop(0))
            full = r > 0 and r % args.full_scan_every == 0
            readers.run(r, full)
            print(f"run {r + 1}/{args.hours} ({iso(at)}){' full scan' if full else ''}", file=sys.stderr, flush=True)
        assert not pending, "every event lands before the last scheduled run"
        drains = 0
        while drains < MAX_DRAIN:  # nothing arrives: full scans until trib's plan is empty and nothing stopped
            r += 1
            drains += 1
            n_stops = len(readers.stops)
            before = sum(readers.got["trib"].values())
            readers.run(r, True)
            print(f"drain run {drains}", file=sys.stderr, flush=True)
            if len(readers.stops) == n_stops and sum(readers.got["trib"].values()) == before \
                    and not readers.last_plan.get("held") and not readers.replay_due:
                break
        show = json.loads(_trib("consumer", "show", str(root), CONSUMER, "--json").stdout or "{}")
        state = max((root / "_tributary/consumers" / CONSUMER).glob("state-*.json"))
        sealed_now = set(json.loads(state.read_text()).get("sealed") or {})
        meant = {zone.part(h) for h in range(args.hours) if base + (h + 1) * H <= horizon - H}
        fs = fs_type(root)
    if spark is not None:
        spark.stop()
    readers_run = {k: v for k, v in READERS.items() if k == "trib" or spark is not None}
    tallies = {k: tally(zone, readers.got[k]) for k in readers_run}
    stops_by_pattern: dict[str, dict[str, dict[str, int]]] = {k: {} for k in readers_run}
    for s in readers.stops:
        for pat in {zone.paths.get(x) for x in s.named} - {None}:
            c = stops_by_pattern[s.reader].setdefault(pat, {})
            c[str(s.code)] = c.get(str(s.code), 0) + 1
    held_ids = {x for p in ("held_late", "held_growing") for x in zone.records[p]}  # when they came: in the notes
    result = {
        "machine": info, "hours": args.hours, "runs": r + 1, "drain_runs": drains, "lookback": lookback,
        "seed": args.seed, "base": iso(base), "horizon": iso(horizon), "fs": fs,
        "spark_start_s": round(spark_start, 1), "total_s": round(time.perf_counter() - t_all, 1),
        "tallies": tallies, "seconds": {k: round(readers.seconds[k], 1) for k in readers_run},
        "stops": [vars(s) for s in readers.stops], "stops_by_pattern": stops_by_pattern, "actions": readers.actions,
        "trib_named": {p: sorted(v) for p, v in readers.named.items()}, "trib_ranges": readers.ranges,
        "runs_of": {k: {x: v for x, v in readers.runs_of[k].items() if x in held_ids} for k in readers_run},
        "sealed_ok": meant <= sealed_now, "sealed_missing": sorted(meant - sealed_now),
        "sealed_partitions": len(sealed_now), "held_at_end": show.get("held"),
        "args": {k: v for k, v in vars(args).items() if k not in ("json", "markdown")},
        "command": " ".join([".venv/bin/python", "benchmarks/bench_late_data.py", *shown_args(sys.argv[1:] if argv is None
                                                                                   else argv)]),
    }
    bad = check(result, zone)
    result["check_failures"] = bad
    emit(report(result, zone), result, args)
    if bad and not args.no_check:
        print("check failed: trib's consumer is not exact where it must be:\n  " + "\n  ".join(bad), file=sys.stderr)
        sys.exit(1)
    return result


def _what(res: dict, reader: str, p: str) -> str:
    """The notes column: exits attributed to the pattern, and what became of a rewrite's new records."""
    v = res["tallies"][reader][p]
    bits = [f"exit {c} x{n}" for c, n in sorted(res["stops_by_pattern"][reader].get(p, {}).items())]
    if p.startswith("held_"):
        runs = sorted({n for x in res["_records"][p] for n in res["runs_of"][reader].get(x, ())})
        bits.append(f"delivered in run {', '.join(map(str, runs))}" if runs else "")
    if "new_expected" in v:
        bits.append(f"new records {v['new_delivered']}/{v['new_expected']}")
        if reader == "trib":
            how = sorted({h for path, pat in res["_paths"].items() if pat == p
                          for h in res["trib_named"].get(path, ())})
            bits.append("named: " + ", ".join(how) if how else "**not named**")
    return "; ".join(bits)


def report(res: dict, zone: Zone) -> str:
    res["_paths"], res["_records"] = zone.paths, zone.records
    readers = list(res["tallies"])
    rows = []
    for p, (label, where) in PATTERNS.items():
        t = res["tallies"]["trib"][p]
        row = [label, where, t["files"], t["expected"]]
        for k in readers:
            v = res["tallies"][k][p]
            lost_dup = f"{v['lost']} / {v['dup']}"
            if (v["lost"] or v["dup"]) and p not in REWRITES:
                lost_dup = f"**{lost_dup}**"
            row += [v["delivered"], lost_dup, _what(res, k, p)]
        rows.append(row)
    exact = [p for p in PATTERNS if p not in REWRITES]
    tot = {k: [sum(res["tallies"][k][p][x] for p in exact) for x in ("expected", "delivered", "lost", "dup")]
           for k in readers}
    rows.append(["**all but the rewrites**", "", sum(res["tallies"]["trib"][p]["files"] for p in exact),
                 tot["trib"][0], *(c for k in readers for c in (tot[k][1], f"{tot[k][2]} / {tot[k][3]}", ""))])
    heads = ["arrival pattern", "partition", "files", "records"]
    for k in readers:
        heads += [f"{READERS[k]}: delivered", "lost / dup", "runs stopped, notes"]
    m = res["machine"]
    by_code = {k: Counter(s["code"] for s in res["stops"] if s["reader"] == k) for k in readers}
    out = [
        "## Late data, record by record: trib's consumer vs Spark's file stream source (`bench_late_data.py`)", "",
        f"One plain landing zone (`{LAYOUT}`, {res['fs']}), {res['hours']} simulated hourly runs from "
        f"{res['base']} UTC then {res['drain_runs']} drain run(s); trib's `--lookback {res['lookback']}` on the real "
        f"clock seals the partitions before {res['horizon']} UTC ({res['sealed_partitions']} sealed at the end; "
        "`sealed` rows land in them after they were delivered and sealed). Each record is a line with a unique id; "
        f"a rewrite writes new ids. Seed {res['seed']}. `{res['command']}`, {m['date']}, "
        f"{m['nproc']} CPUs ({m['cpu']}), "
        f"load average {m['loadavg']}, git {m['git']}.", "",
        md_table(heads, rows), "",
        md_table(["reader", "runs", "non-zero exits (by code)", "of which delivered nothing", "seconds, all runs",
                  "s per run"],
                 [[READERS[k], res["runs"], ", ".join(f"{c}: {n}" for c, n in sorted(by_code[k].items())) or "0",
                   sum(1 for s in res["stops"] if s["reader"] == k and s["step"] != "ack"),
                   f"{res['seconds'][k]:.1f}", f"{res['seconds'][k] / res['runs']:.2f}"] for k in readers]), "",
        f"trib delivered {res['trib_ranges']} byte range(s) of grown files. Its non-zero exits (runs numbered "
        "from 1) and what the simulated operator did (the way out each message names):", "",
    ]
    groups: list[list] = []  # the same stop in consecutive runs: one line
    for s in res["stops"]:
        key = (s["reader"], s["step"], s["code"], re.sub(r"plan \S+ ", "", s["line"]))
        if groups and groups[-1][0] == key and groups[-1][2] == s["run"] - 1:
            groups[-1][2] = s["run"]
        else:
            groups.append([key, s["run"], s["run"]])
    for (reader, step, code, line), first, last in groups:
        runs = f"run {first}" if first == last else f"runs {first}-{last}"
        out.append(f"- {READERS[reader]}, {runs} `{step}`: exit {code}: {line}")
    out += [f"- {a}" for a in res["actions"]]
    if not res["stops"]:
        out.append("- none")
    if res.get("held_at_end"):
        out += ["", f"Still held at the end: {res['held_at_end']}"]
    out += ["", f"Spark session start-up ({res['spark_start_s']} s) is not in its column. Whole benchmark "
            f"{res['total_s']} s."]
    if res["check_failures"]:
        out += ["", "**Check failed: trib is not exact where it must be:**", ""] + [f"- {b}" for b in
                                                                                  res["check_failures"]]
    else:
        out += ["", "Check passed: trib lost and duplicated nothing on every pattern but the rewrites, stopped no run "
                "on them (a removal is a named hold: exit 17, the rest delivered), and named "
                "every rewrite without delivering it in part."]
    del res["_paths"], res["_records"]
    return "\n".join(out)


if __name__ == "__main__":
    main()
