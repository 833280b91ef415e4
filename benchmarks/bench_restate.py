"""Restate against append and against recomputing the last 24 hours every hour: an hourly distinct count
over the demo's late-file mix, three ways in one run, one warm Spark for all.

The raw side is the demo's measured late arrivals (``tributary_read.demo.mix``, seed 2002, ``--days`` x
24 event hours): per hour an on-time file of 120 events, two of 60 and two 20-event files exactly on
the hour's boundaries; 35% of the hours get a straggler (1-40 min late), a late file with a fresh mtime
(1-6 h late), a late ``ingest``-style file (1-4 h), a ``cp -p`` copy with an mtime inside its hour
(1-6 h) and an upload written hidden and renamed into place (1-4 h), each 25-40 events. The events are
written as JSON lines (``ts`` ms, ``user``, ``action``, ``id``) into a plain directory laid out
``{yyyy}_{MM}_{dd}/{HH}``; each file is written in a staging directory and renamed in (the hidden
upload: written as ``.NAME`` when it starts, renamed to ``NAME`` when it arrives), its mtime the mix's.
Time is simulated: the run of hour ``h`` happens 5 minutes after it ends (the mix's ``run_at``), once
everything that arrives by then has landed; nothing sleeps. The next hour's first file (on its start
boundary) has landed by then too, so every run also computes that hour from one file; a partition is
**late** in a run when its hour ended before the run's own hour began. ``--scale K`` writes each of the
mix's events K times (same files, same arrivals, same distinct users): the demo's volume is a few
hundred events an hour, where every way's cost is mostly a Spark job's fixed cost.

The three ways, each run at every hour's schedule time with the same SQL
(``SELECT CAST(ts - ts % 3600000 AS BIGINT) AS hour, count(DISTINCT user) AS users, count(*) AS events
FROM raw GROUP BY 1``):

* **append**: a trib job, ``[output] mode = "append"``, its input the raw directory through a consumer:
  each run reads the files new since the last run and adds their rows. A late file gives its hour a
  second, partial row (distinct counts cannot be added): the wrong answer, timed for reference;
* **restate**: the same job with ``[output] mode = "restate"``: each run recomputes the hours its new
  files touch from their complete input and replaces them whole;
* **24 h recompute**: each hour, every file in the last 24 hour directories (the run's own hour and the
  23 before it), read by a hand-written PySpark job (``spark.read.schema(S).json(directories)``, which
  skips hidden names), the same SQL, the 24 hours overwritten in a plain Parquet directory
  (``partitionOverwriteMode=dynamic``). This is the usual way to take in late data without an mtime
  window or a consumer: it reads by event-time directory, so a file late by up to 23 hours is in (the
  mix's latest is 6 hours). It is the fairest baseline we know for the cost: it carries none of
  trib's bookkeeping (no consumer, no manifest, no swap), so the gap is the work (24 hours read and
  written every hour against the hours late data touched), and the restate side pays all of trib's
  overheads. ``trib etl run JOB --restate START/END`` over the last 24 hours would do the same
  work and more (a listing, a manifest commit, the swap), and it reads only what a consumer has
  delivered, so it cannot stand alone.

One in-process ``local[2]`` SparkSession serves all three (``run_job(job, t, spark=session)`` for trib's
two), so the figures are the work of each way, not process or JVM start-up. The ways take turns at
each hour (the order rotates). Per run: wall seconds, and CPU seconds of this Python process (all its
threads) plus the driver JVM's (``/proc/PID/stat``, all its threads, the executors' included in
``local`` mode). Per run too: the hours read, files read and events read (from the files on disk when
the run happened: for restate, the complete input of every hour it recomputed).

Goals (issue text): restate <= 1.3x append in runs with 3 or fewer late partitions; restate at least
10x cheaper than the 24-hour recompute; restate's results equal a from-scratch recompute. At the end
every way's output is compared with the answer computed from the mix's events, and with a from-scratch
Spark recompute over the final raw directory; restate's table is read both through its manifest and as
a directory reader sees it. Exits 1 when restate or the 24 h recompute is wrong (``--no-check``: report
only); append's wrong hours are counted, not checked.

    .venv/bin/python benchmarks/bench_restate.py                # 30 days: 720 runs per way
    .venv/bin/python benchmarks/bench_restate.py --days 3
    .venv/bin/python benchmarks/bench_restate.py --quick         # one day, ~2 min
    .venv/bin/python benchmarks/bench_restate.py --days 2 --scale 100   # 100x the events, same files
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import WorkDir, bench_session, emit, fs_type, machine_info, md_table, shown_args  # noqa: E402

LAYOUT, PARTITION = "{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}"
SCHEMA = "ts BIGINT, user STRING, action STRING, id STRING"
SQL = ("SELECT CAST(ts - ts % 3600000 AS BIGINT) AS hour, count(DISTINCT user) AS users, count(*) AS events "
       "FROM raw GROUP BY 1")
H = 3_600_000
WINDOW_HOURS = 24
GOAL_APPEND, GOAL_RECOMPUTE, LATE_MAX = 1.3, 10.0, 3
WAYS = ("append", "restate", "recompute")
LABEL = {"append": "append (`mode = \"append\"`)", "restate": "restate (`mode = \"restate\"`)",
         "recompute": "24 h recompute (hand-written PySpark)"}

JOB = """\
[job]
name = "{name}"
sql = "agg.sql"

[[inputs]]
table = "{raw}"
view = "raw"
mode = "consumer"
layout = "{layout}"
format = "jsonl"
schema = "{schema}"
lookback = "{lookback}"

[output]
table = "{out}"
time_column = "hour"
mode = "{mode}"
"""


# -- the raw directory: the demo's mix, as JSON lines --------------------------------------------------------


class Raw:
    """The plain raw directory another tool writes, fed the mix's drops as they arrive."""

    def __init__(self, root: Path, staging: Path, mix, scale: int = 1):
        self.root, self.staging, self.mix, self.scale = root, staging, mix, scale
        self.applied = 0
        self.events: dict[str, int] = {}  # visible file (relative path) -> its events
        self.by_dir: dict[str, list[str]] = defaultdict(list)  # hour directory -> its visible files

    @staticmethod
    def name(d) -> str:
        return f"{d.name}.jsonl"

    def _place(self, d, name: str, mtime_ms: int) -> None:
        tmp = self.staging / name
        tmp.write_text("".join(json.dumps({"ts": e.time_ms, "user": e.user, "action": e.action,
                                           "id": e.event_id if self.scale == 1 else f"{e.event_id}-{k}"}) + "\n"
                               for e in d.events for k in range(self.scale)))
        os.utime(tmp, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
        target = self.root / d.directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, target)

    def arrive_until(self, moment_ms: int) -> int:
        """Everything that lands by ``moment_ms`` (the demo's ``arrive_until``, every file a foreign one)."""
        n = 0
        for d in self.mix.drops:  # a hidden upload is there, hidden, from when it starts
            if d.pattern == "hidden_renamed" and d.written_ms <= moment_ms < d.arrival_ms:
                if not (self.root / d.directory / f".{self.name(d)}").exists():
                    self._place(d, f".{self.name(d)}", d.written_ms)
        drops = self.mix.drops
        while self.applied < len(drops) and drops[self.applied].arrival_ms <= moment_ms:
            d = drops[self.applied]
            if d.pattern == "hidden_renamed":
                hidden = self.root / d.directory / f".{self.name(d)}"
                if not hidden.exists():
                    self._place(d, hidden.name, d.written_ms)
                os.rename(hidden, self.root / d.directory / self.name(d))  # a rename keeps the old mtime
            else:  # an ingest-written file's mtime is its commit time: its arrival
                self._place(d, self.name(d), d.mtime_ms if d.mtime_ms is not None else d.arrival_ms)
            rel = f"{d.directory}/{self.name(d)}"
            self.events[rel] = len(d.events) * self.scale
            self.by_dir[d.directory].append(rel)
            self.applied += 1
            n += 1
        return n

    def truth(self) -> dict[int, tuple[int, int]]:
        """hour start (ms) -> (distinct users, events), from the mix's events (all arrived by the last run)."""
        users, events = defaultdict(set), defaultdict(int)
        for d in self.mix.drops:
            for e in d.events:
                h = e.time_ms - e.time_ms % H
                users[h].add(e.user)
                events[h] += self.scale
        return {h: (len(users[h]), events[h]) for h in users}


# -- CPU of the driver JVM ---------------------------------------------------------------------------------------


def _jvm_pid(spark) -> int | None:
    """The pid of the session's driver JVM (the py4j gateway's process: spark-submit execs java)."""
    proc = getattr(spark.sparkContext._gateway, "proc", None)  # noqa: SLF001
    if proc is None:
        return None
    pid = proc.pid
    try:
        if "java" in Path(f"/proc/{pid}/comm").read_text():
            return pid
        for p in Path("/proc").iterdir():  # a wrapper: its java child
            if p.name.isdigit():
                stat = (p / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid and "java" in (p / "comm").read_text():
                    return int(p.name)
    except OSError:
        return None
    return None


def _cpu(pid: int | None) -> float:
    """This process's CPU seconds plus the JVM's (user + system, every thread of each)."""
    own = time.process_time()
    if pid is None:
        return own
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return own + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the three ways ------------------------------------------------------------------------------------------------


def _recompute(spark, raw: Raw, out: Path, hour: int, hour_dirs: list[str]) -> dict:
    """The last 24 hour directories read whole, the SQL, their hours overwritten."""
    from pyspark.sql import functions as F

    first = max(0, hour - WINDOW_HOURS + 1)
    dirs = [hour_dirs[h] for h in range(first, hour + 1) if hour_dirs[h] in raw.by_dir]
    spark.read.schema(SCHEMA).json([str(raw.root / d) for d in dirs]).createOrReplaceTempView("raw")
    (spark.sql(SQL).withColumn("dt", F.date_format(F.timestamp_millis("hour"), "yyyyMMddHH"))
     .write.mode("overwrite").option("partitionOverwriteMode", "dynamic").partitionBy("dt").parquet(str(out)))
    files = [f for d in dirs for f in raw.by_dir[d]]
    return {"hours": len(dirs), "files": len(files), "events": sum(raw.events[f] for f in files), "late": None}


def _trib(job, mode: str, spark, t_ms: int, raw: Raw, own: str, before: dict[str, int]) -> dict:
    """One scheduled run of a trib job; what it read (new files; restate: the complete input it recomputed)."""
    from tributary_read.etl.run import run_job

    rep = run_job(job, t_ms, spark=spark).to_json()
    restated = rep["output"].get("restated")
    new = [f for f in raw.events if f not in before]
    if mode == "restate":
        parts = [r["partition"] for r in restated]
        files = [f for p in parts for f in raw.by_dir.get(p, [])]
        return {"hours": len(parts), "files": len(files), "events": sum(raw.events[f] for f in files),
                "late": sum(1 for p in parts if p < own), "reported_files": rep["inputs"][0]["files"]}
    touched = {f.rsplit("/", 1)[0] for f in new}
    return {"hours": len(touched), "files": rep["inputs"][0]["files"], "events": sum(raw.events[f] for f in new),
            "late": sum(1 for p in touched if p < own)}


# -- the checks at the end ---------------------------------------------------------------------------------------


def _rows_dir(root: Path, col: str = "hour") -> list[tuple[int, int, int]]:
    """What a directory reader sees (hidden names skipped, as Hive and Spark skip them)."""
    import pyarrow.dataset as ds

    tab = ds.dataset(str(root), format="parquet", partitioning="hive", ignore_prefixes=[".", "_"]).to_table()
    return sorted(zip(tab[col].to_pylist(), tab["users"].to_pylist(), tab["events"].to_pylist()))


def _rows_manifest(root: Path) -> list[tuple[int, int, int]]:
    import pyarrow.parquet as pq

    from tributary_read.read.resolve import manifest_files
    from tributary_read.table.config import Table

    out = []
    for f in manifest_files(Table.load(str(root)), 0).files:
        tab = pq.read_table(str(root / f.path), columns=["hour", "users", "events"])
        out += zip(tab["hour"].to_pylist(), tab["users"].to_pylist(), tab["events"].to_pylist())
    return sorted(out)


def check(spark, raw: Raw, work: Path) -> dict:
    """Every way's output against the mix's answer and a from-scratch recompute over the final raw files."""
    truth = raw.truth()
    want = sorted((h, u, e) for h, (u, e) in truth.items())
    t0 = time.perf_counter()
    dirs = sorted(raw.by_dir)
    spark.read.schema(SCHEMA).json([str(raw.root / d) for d in dirs]).createOrReplaceTempView("raw")
    scratch = sorted((int(r[0]), int(r[1]), int(r[2])) for r in spark.sql(SQL).collect())
    scratch_s = time.perf_counter() - t0
    restate_m, restate_d = _rows_manifest(work / "restate"), _rows_dir(work / "restate")
    recompute = sorted((int(h), int(u), int(e)) for h, u, e in _rows_dir(work / "recompute-out"))
    append = _rows_manifest(work / "append")
    by_hour: dict[int, list] = defaultdict(list)
    for h, u, e in append:
        by_hour[h].append((u, e))
    split = {h: rows for h, rows in by_hour.items() if len(rows) > 1}
    wrong = {h: rows for h, rows in by_hour.items() if sum(u for u, _ in rows) != truth[h][0]}
    from tributary_read.cli.main import cli
    from click.testing import CliRunner

    verify = CliRunner().invoke(cli, ["verify", str(work / "restate")])
    return {
        "hours": len(want), "scratch_s": round(scratch_s, 1), "scratch_equal_truth": scratch == want,
        "restate_manifest_equal": restate_m == scratch, "restate_directory_equal": restate_d == scratch,
        "recompute_equal": recompute == scratch, "restate_verify_exit": verify.exit_code,
        "append_rows": len(append), "append_split_hours": len(split),
        "append_wrong_distinct_hours": len(wrong),
        "append_events_equal": {h: sum(e for _, e in rows) for h, rows in by_hour.items()} ==
        {h: e for h, (_, e) in truth.items()},
        "append_overcount": sum(sum(u for u, _ in rows) - truth[h][0] for h, rows in wrong.items()),
        "append_example": next(([h, rows, truth[h][0]] for h, rows in sorted(split.items())), None),
    }


# -- the report ----------------------------------------------------------------------------------------------------


def _sum(runs: list[dict], key: str) -> float:
    return sum(r[key] for r in runs)


def summarize(runs: dict[str, list[dict]]) -> dict:
    n = len(runs["restate"])
    late = [runs["restate"][i]["late"] for i in range(n)]
    few = [i for i in range(n) if late[i] <= LATE_MAX]
    out: dict = {"runs": n, "late_histogram": {str(k): late.count(k) for k in sorted(set(late))}}
    for way in WAYS:
        r = runs[way]
        out[way] = {k: round(_sum(r, k), 2) for k in ("wall", "cpu", "hours", "files", "events")}
        out[way]["median_wall"] = round(statistics.median(x["wall"] for x in r), 3)
        out[way]["median_cpu"] = round(statistics.median(x["cpu"] for x in r), 3)
    ra, rr = runs["append"], runs["restate"]
    out["few_late_runs"] = len(few)
    for k in ("wall", "cpu"):
        out[f"restate_vs_append_{k}"] = sum(rr[i][k] for i in few) / sum(ra[i][k] for i in few)
        out[f"restate_vs_append_{k}_median"] = statistics.median(rr[i][k] / ra[i][k] for i in few)
        out[f"recompute_vs_restate_{k}"] = out["recompute"][k] / out["restate"][k]
        full = range(WINDOW_HOURS - 1, n)  # the recompute's window full: every run after the first day
        if full:
            out[f"recompute_vs_restate_{k}_full"] = (sum(runs["recompute"][i][k] for i in full)
                                                     / sum(rr[i][k] for i in full))
    out["full_window_runs"] = max(0, n - WINDOW_HOURS + 1)
    by_late = {}
    for k in sorted(set(late)):
        idx = [i for i in range(n) if late[i] == k]
        by_late[str(k)] = {"runs": len(idx), "append_wall": sum(ra[i]["wall"] for i in idx) / len(idx),
                           "restate_wall": sum(rr[i]["wall"] for i in idx) / len(idx),
                           "recompute_wall": sum(runs["recompute"][i]["wall"] for i in idx) / len(idx),
                           "append_cpu": sum(ra[i]["cpu"] for i in idx) / len(idx),
                           "restate_cpu": sum(rr[i]["cpu"] for i in idx) / len(idx)}
    out["by_late"] = by_late
    return out


def report(res: dict) -> str:
    s, c, m = res["summary"], res["check"], res["machine"]
    n = s["runs"]
    rows = []
    for way in WAYS:
        w = s[way]
        rows.append([LABEL[way], f"{w['wall']:.1f}", f"{w['cpu']:.1f}", f"{w['median_wall']:.2f}",
                     f"{w['median_cpu']:.2f}", f"{w['hours'] / n:.1f}", f"{w['files'] / n:.1f}",
                     f"{w['events'] / n:,.0f}"])
    few = s["few_late_runs"]
    goal_a = max(s["restate_vs_append_wall"], s["restate_vs_append_cpu"])
    goal_r = min(s["recompute_vs_restate_wall"], s["recompute_vs_restate_cpu"])
    ok = "met" if goal_a <= GOAL_APPEND else "**MISSED**"
    ok_r = "met" if goal_r >= GOAL_RECOMPUTE else "**MISSED**"
    equal = c["restate_manifest_equal"] and c["restate_directory_equal"] and c["scratch_equal_truth"]
    late_rows = [[k, v["runs"], f"{v['append_wall']:.2f}", f"{v['restate_wall']:.2f}",
                  f"{v['restate_wall'] / v['append_wall']:.2f}x", f"{v['append_cpu']:.2f}", f"{v['restate_cpu']:.2f}",
                  f"{v['restate_cpu'] / v['append_cpu']:.2f}x", f"{v['recompute_wall']:.2f}"]
                 for k, v in s["by_late"].items()]
    full = (f" (in the {s['full_window_runs']} run(s) after the first day, its window full: "
            f"{s['recompute_vs_restate_wall_full']:.1f}x wall, {s['recompute_vs_restate_cpu_full']:.1f}x CPU)"
            if s["full_window_runs"] else "")
    scaled = f" (each of the mix's events written {res['scale']} times)" if res["scale"] > 1 else ""
    ex = c["append_example"]
    example = (f" E.g. hour {iso_h(ex[0])}: rows {', '.join(f'({u} users, {e} events)' for u, e in ex[1])}; "
               f"the hour had {ex[2]} distinct users." if ex else "")
    return "\n".join([
        f"## Restate against append and against a 24-hour recompute (`benchmarks/bench_restate.py`), {m['date'][:10]}",
        "",
        f"{res['days']} day{'s' if res['days'] > 1 else ''} of the demo's late-file mix (`tributary_read/demo/mix.py`, seed {res['seed']}: "
        f"{res['files']:,} JSON-lines files, {res['events']:,} events"
        f"{scaled}, "
        f"{res['late_files']:,} of the files late) "
        f"in a plain `{LAYOUT}` directory ({res['fs']}), an hourly `count(DISTINCT user)` run {n} times by each "
        "way, in one run, on one in-process `local[2]` SparkSession (the work of each way, no process or JVM "
        "start-up; the order rotates each hour). CPU-s: this Python process plus the driver JVM. Hours, files "
        "and events read are per run, from the files on disk when it ran (restate: the complete input of each "
        f"hour it recomputed). `{res['command']}`, {m['date']}, {m['nproc']} CPUs ({m['cpu']}), load average "
        f"{m['loadavg']} at the start, {res['loadavg_end']} at the end, git {m['git']}; {res['total_s']:.0f} s "
        f"in all (Spark start-up {res['spark_start_s']:.1f} s and a warm-up of each way over 4 hours of another "
        f"raw directory, {res['warm_up_s']:.1f} s, not counted).",
        "",
        md_table(["way", "wall s, all runs", "CPU-s, all runs", "median wall s", "median CPU-s", "hours read / run",
                  "files read / run", "events read / run"], rows),
        "",
        f"- restate / append, in the {few} of {n} runs with {LATE_MAX} or fewer late partitions: "
        f"{s['restate_vs_append_wall']:.2f}x wall, {s['restate_vs_append_cpu']:.2f}x CPU (per-run medians "
        f"{s['restate_vs_append_wall_median']:.2f}x, {s['restate_vs_append_cpu_median']:.2f}x); goal <= "
        f"{GOAL_APPEND}x: {ok}.",
        f"- 24 h recompute / restate, all runs: {s['recompute_vs_restate_wall']:.1f}x wall, "
        f"{s['recompute_vs_restate_cpu']:.1f}x CPU, {s['recompute']['events'] / s['restate']['events']:.1f}x the "
        f"events read, {s['recompute']['hours'] / s['restate']['hours']:.1f}x the hours written{full}; goal >= "
        f"{GOAL_RECOMPUTE:.0f}x cheaper: {ok_r}.",
        f"- restate equals a from-scratch recompute over the final raw files ({c['hours']} hours; the "
        f"recompute took {c['scratch_s']} s), through its manifest and as a directory reader sees it: "
        f"{'yes' if equal else '**NO**'}; `trib verify` exit {c['restate_verify_exit']}. The 24 h recompute "
        f"equals it too: {'yes' if c['recompute_equal'] else '**NO**'}.",
        f"- append: {c['append_rows']} rows for {c['hours']} hours; {c['append_split_hours']} hours hold more than "
        f"one row, and in {c['append_wrong_distinct_hours']} the distinct counts add up to more users than the "
        f"hour had ({c['append_overcount']:,} too many in all); its event counts "
        f"{'add up' if c['append_events_equal'] else 'do not add up'} (a count is additive, a distinct count "
        f"is not).{example}",
        "",
        "Runs by the number of late partitions in them (restate's recomputed hours before the run's own; each "
        "run also computes the next hour, whose first file lands on its boundary; means per run, seconds):",
        "",
        md_table(["late partitions", "runs", "append wall", "restate wall", "ratio", "append CPU", "restate CPU",
                  "ratio", "24 h recompute wall"], late_rows),
    ])


def simulate(spark, work: Path, mix, args, pid: int | None, quiet: bool = False) -> tuple[dict, Raw]:
    """Every hour of ``mix``: what arrives by its run lands, then each way runs (the order rotating)."""
    from tributary_read.etl.job import Job
    from tributary_read.table.config import Table, TableConfig
    from tributary_read.table.layout import Layout

    work.mkdir()
    raw = Raw(work / "raw", work / "staging", mix, args.scale)
    raw.root.mkdir()
    raw.staging.mkdir()
    (work / "agg.sql").write_text(SQL + "\n")
    jobs = {}
    for mode in ("append", "restate"):
        Table.create(str(work / mode), TableConfig(Layout(LAYOUT, PARTITION), format="parquet"))
        path = work / f"{mode}.toml"
        path.write_text(JOB.format(name=f"bench-{mode}", raw=raw.root, layout=LAYOUT, schema=SCHEMA,
                                   lookback=f"{args.days + 3}d", out=work / mode, mode=mode))
        jobs[mode] = Job.load(str(path))
    hour_dirs = [time.strftime("%Y_%m_%d/%H", time.gmtime((mix.base_ms + h * H) / 1000)) for h in range(mix.hours)]
    runs: dict[str, list[dict]] = {w: [] for w in WAYS}
    for h in range(mix.hours):
        before = dict(raw.events)
        raw.arrive_until(mix.run_at(h))
        own, t = hour_dirs[h], mix.hour_end(h)
        for way in WAYS[h % 3:] + WAYS[:h % 3]:
            c0, w0 = _cpu(pid), time.perf_counter()
            if way == "recompute":
                got = _recompute(spark, raw, work / "recompute-out", h, hour_dirs)
            else:
                got = _trib(jobs[way], way, spark, t, raw, own, before)
            got.update(wall=time.perf_counter() - w0, cpu=_cpu(pid) - c0)
            runs[way].append(got)
        if not quiet:
            a, r, x = (runs[w][-1] for w in WAYS)
            print(f"run {h + 1}/{mix.hours} ({iso_h(t)}): {r['late']} late; append {a['wall']:.2f} s, restate "
                  f"{r['wall']:.2f} s ({r['hours']} h), recompute {x['wall']:.2f} s", file=sys.stderr, flush=True)
    return runs, raw


def iso_h(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:00Z", time.gmtime(ms / 1000))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, default=30, help="days of hourly runs (30: 720 runs per way)")
    ap.add_argument("--seed", type=int, default=2002, help="the mix's seed (2002, the demo's)")
    ap.add_argument("--scale", type=int, default=1,
                    help="write each of the mix's events this many times (1: the demo's volume; same files, "
                         "same arrivals, same distinct users)")
    ap.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    ap.add_argument("--quick", action="store_true", help="one day (24 runs per way)")
    ap.add_argument("--no-check", action="store_true", help="report only; do not exit 1 when restate is wrong")
    ap.add_argument("--dir", help="scratch directory parent (default benchmarks/out)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--markdown", help="also write the markdown section here")
    args = ap.parse_args(argv)
    if args.quick:
        args.days = 1

    from tributary_read.demo.mix import build

    hours = args.days * 24
    now = int(time.time() * 1000)
    base = now - now % H - (hours + 2) * H  # the last run lies an hour or two in the past
    mix = build(hours, base, args.seed)
    info = machine_info()
    t_all = time.perf_counter()
    t0 = time.perf_counter()
    spark = bench_session(args.master, "bench-restate", **{"spark.sql.session.timeZone": "UTC"})
    spark_start = time.perf_counter() - t0
    pid = _jvm_pid(spark)
    with WorkDir(args.dir, prefix="bench-restate-", keep=args.keep) as work:
        t0 = time.perf_counter()  # every way's code warm (Spark's first jobs, trib's imports), untimed
        simulate(spark, work / "warm-up", build(4, base, args.seed + 1), args, pid, quiet=True)
        warm_s = time.perf_counter() - t0
        runs, raw = simulate(spark, work / "run", mix, args, pid)
        res_check = check(spark, raw, work / "run")
        fs = fs_type(work)
        n_files, n_events = len(raw.events), sum(raw.events.values())
    spark.stop()
    late_files = sum(1 for d in mix.drops if d.pattern not in ("on_time", "on_time_foreign", "boundary"))
    shown = shown_args(sys.argv[1:] if argv is None else argv)
    result = {
        "machine": info, "days": args.days, "seed": args.seed, "fs": fs, "files": n_files, "events": n_events,
        "late_files": late_files, "spark_start_s": round(spark_start, 1), "warm_up_s": round(warm_s, 1),
        "scale": args.scale, "jvm_pid_found": pid is not None,
        "total_s": round(time.perf_counter() - t_all, 1), "loadavg_end": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "summary": summarize(runs), "check": res_check, "runs": runs,
        "command": " ".join([".venv/bin/python", "benchmarks/bench_restate.py", *shown]),
    }
    emit(report(result), result, args)
    c = res_check
    bad = [k for k in ("scratch_equal_truth", "restate_manifest_equal", "restate_directory_equal", "recompute_equal")
           if not c[k]] + (["trib verify"] if c["restate_verify_exit"] else [])
    if bad and not args.no_check:
        print(f"check failed: {', '.join(bad)}", file=sys.stderr)
        sys.exit(1)
    return result


if __name__ == "__main__":
    main()
