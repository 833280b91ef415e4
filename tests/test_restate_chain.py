"""A chain of three restate jobs over many schedule times, late data of every pattern, kill -9 in a third of runs.

raw JSON lines (a plain directory another tool writes) -> ``events`` (the records, one job) -> ``hourly``
(``count(DISTINCT user)`` per hour, mounted in Hive) -> ``daily`` (a daily aggregate over the hourly rows).
Files land late in every way a raw directory sees: into an older hour with a fresh mtime, with an mtime
older than anything read, under a hidden name renamed late, into a partition sealed past the consumer's
lookback, and rewritten in place after they were read. A third of the runs is killed with SIGKILL at one
of the run's steps and run again.

At the end the hourly and daily tables equal a from-scratch recompute of the raw files, read through
trib's manifest, through HiveServer2 and as a directory reader sees them; and every run recomputed
exactly the partitions its late data touched: the events job the hours of the files it read, each job
downstream the partitions the one before it restated in that schedule time, and nothing else.

``TRIB_RESTATE_CHAIN_TIMES`` sets the number of schedule times: 48 by default, the trial the feature was
accepted on (each run costs a warm Spark job of its own: 3.6 minutes on 2 quiet cores, 6 beside the rest of
the suite), about 16 of them killed; 16 for a quicker look, which still sees every pattern.
``TRIB_TEST_SEED`` sets the seed.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import run_trib
from etl_data import H, LAY, LAYOUT, create_output_table, spark_section
from tributary_read.table.config import Table, TableConfig
from tributary_read.table.layout import Layout

pytestmark = pytest.mark.usefixtures("warm_spark")

DAY = 24 * H
DAILY = Layout("{yyyy}_{MM}_{dd}", "dt={yyyy}{MM}{dd}")
#: The steps a killed run dies at (tributary_read.faults); the metastore's only where the job has [hive].
#: The late patterns, one per schedule time in turn ("sealed": a partition past the 6-hour lookback).
LATE = ("late_dir", "old_mtime", "late_rename", "rewrite", "sealed")
POINTS = ("etl.before_commit", "restate.before_swap", "restate.after_swap", "etl.after_commit", "etl.before_ack")

JOBS = {
    "events": ("raw", "SELECT id, user, ts FROM raw"),
    "hourly": ("events", "SELECT CAST(ts - ts % 3600000 AS BIGINT) AS ts, count(DISTINCT user) AS users, "
                         "count(*) AS events FROM events GROUP BY 1"),
    "daily": ("hourly", "SELECT CAST(ts - ts % 86400000 AS BIGINT) AS ts, sum(events) AS events, max(users) AS peak "
                        "FROM hourly GROUP BY 1"),
}


def _jobs(tmp: Path, hive_table: str, hs2_port: int) -> dict[str, Path]:
    create_output_table(tmp / "events")
    create_output_table(tmp / "hourly")
    Table.create(str(tmp / "daily"), TableConfig(DAILY, format="parquet"))
    out = {}
    for name, (source, sql) in JOBS.items():
        (tmp / f"{name}.sql").write_text(sql + "\n")
        lines = ["[job]", f'name = "{name}"', f'sql = "{name}.sql"', "", "[[inputs]]", f'table = "{tmp / source}"',
                 f'view = "{source}"', 'mode = "consumer"']
        if source == "raw":  # the plain directory: its layout, format and schema; a short lookback seals hours
            lines += [f'layout = "{LAYOUT}"', 'format = "jsonl"', 'schema = "id BIGINT, user STRING, ts BIGINT"',
                      'min_age = "0s"', 'lookback = "6h"']
        lines += ["", "[output]", f'table = "{tmp / name}"', 'time_column = "ts"', 'mode = "restate"', ""]
        if name == "hourly":
            lines += ["[hive]", f'table = "{hive_table}"', "create = true",
                      f'metastore = "hs2://127.0.0.1:{hs2_port}?user=trib"', ""]
        lines.append(spark_section())
        (tmp / f"{name}.toml").write_text("\n".join(lines))
        out[name] = tmp / f"{name}.toml"
    return out


class Source:
    """The raw directory and its arrivals: each schedule time lands its hour's files and some late ones."""

    def __init__(self, root: Path, t0: int, rng: random.Random):
        self.root, self.t0, self.rng, self.next_id = root, t0, rng, 0
        self.written: list[Path] = []
        self.hidden: list[tuple[int, Path, Path]] = []  # (schedule to rename at, hidden, visible)

    def _file(self, hour: int, name: str, n: int) -> Path:
        d = self.root / LAY.for_time(self.t0 + hour * H).path
        d.mkdir(parents=True, exist_ok=True)
        rows = []
        for _ in range(n):
            self.next_id += 1
            rows.append({"id": self.next_id, "user": f"u{self.rng.randrange(40)}",
                         "ts": self.t0 + hour * H + self.rng.randrange(H)})
        p = d / name
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return p

    def land(self, k: int) -> list[str]:
        """The arrivals before schedule time ``k`` (hour ``k - 1`` closes): returns the patterns used."""
        used = []
        self.written.append(self._file(k - 1, f"w-{k}.jsonl", 5))
        for at, hidden, visible in [h for h in self.hidden if h[0] == k]:
            hidden.rename(visible)  # keeps its old mtime
            self.hidden.remove((at, hidden, visible))
            used.append("late_rename")
        if k < 3:
            return used
        pattern = LATE[(k - 3) % len(LATE)]  # each pattern in turn: a short run still sees every one
        if pattern == "sealed" and k <= 8:
            pattern = "late_dir"
        old = self.rng.randrange(max(0, k - 5), k - 1)
        if pattern == "late_dir":
            self.written.append(self._file(old, f"late-{k}.jsonl", 3))
        elif pattern == "old_mtime":
            p = self._file(old, f"old-{k}.jsonl", 3)
            os.utime(p, (self.t0 / 1000, self.t0 / 1000))  # older than anything read
            self.written.append(p)
        elif pattern == "late_rename":
            p = self._file(old, f".w-{k}.jsonl.tmp", 3)  # a writer's hidden in-progress name
            self.hidden.append((k + self.rng.randrange(1, 4), p, p.with_name(f"renamed-{k}.jsonl")))
        elif pattern == "sealed":
            self.written.append(self._file(self.rng.randrange(0, k - 8), f"sealed-{k}.jsonl", 2))
        elif pattern == "rewrite":
            victim = self.rng.choice(self.written[:-1])
            victim.write_text("".join(json.dumps({"id": 10_000_000 + k * 10 + i, "user": f"r{k}-{i}",
                                                  "ts": json.loads(victim.read_text().splitlines()[0])["ts"]}) + "\n"
                                      for i in range(2)))
        used.append(pattern)
        return used

    def truth(self) -> tuple[dict, dict]:
        """From every visible raw file now: hour -> (users, events); day -> (events, peak users)."""
        users, events = defaultdict(set), defaultdict(int)
        for p in self.root.rglob("*.jsonl"):
            if p.name.startswith("."):
                continue
            for line in p.read_text().splitlines():
                r = json.loads(line)
                h = r["ts"] - r["ts"] % H
                users[h].add(r["user"])
                events[h] += 1
        hourly = {h: (len(users[h]), events[h]) for h in users}
        daily: dict[int, list] = defaultdict(lambda: [0, 0])
        for h, (u, e) in hourly.items():
            daily[h - h % DAY][0] += e
            daily[h - h % DAY][1] = max(daily[h - h % DAY][1], u)
        return hourly, {d: tuple(v) for d, v in daily.items()}


def _by_manifest(root: Path, cols: tuple[str, ...]) -> list[tuple]:
    import pyarrow.parquet as pq

    from tributary_read.read.resolve import manifest_files

    out = []
    for f in manifest_files(Table.load(str(root)), 0).files:
        t = pq.read_table(str(root / f.path), columns=list(cols)).to_pydict()
        out += list(zip(*(t[c] for c in cols)))
    return sorted(tuple(int(x) for x in r) for r in out)


def _by_directory(root: Path, cols: tuple[str, ...]) -> list[tuple]:
    import pyarrow.dataset as ds

    t = ds.dataset(str(root), format="parquet", ignore_prefixes=[".", "_"]).to_table(columns=list(cols)).to_pydict()
    return sorted(tuple(int(x) for x in r) for r in zip(*(t[c] for c in cols)))


def _run(job: Path, when: int, crash: str | None = None) -> dict | None:
    env = {"TRIB_CRASH_AT": crash} if crash else None
    r = run_trib("etl", "run", str(job), "--schedule-time", str(when), "--json", "-q", env=env)
    if crash:
        assert r.returncode == -9, (job.name, crash, r.returncode, r.stderr[-2000:])
        return None
    assert r.returncode == 0, (job.name, r.stderr[-3000:])
    return json.loads(r.stdout)


def test_three_restate_jobs_stay_exact_through_late_data_and_kill9(tmp_path, hive_services, hs2_cursor):
    times = int(os.environ.get("TRIB_RESTATE_CHAIN_TIMES", "48"))
    rng = random.Random(int(os.environ.get("TRIB_TEST_SEED", "45")))
    now = int(time.time() * 1000)
    t0 = now - now % DAY - 3 * DAY  # whole days back: the daily job's days are complete, inside the lookback
    assert t0 + (times + 1) * H <= now, "the schedule must lie in the past"
    hive = f"default.chain_{uuid.uuid4().hex[:8]}"
    jobs = _jobs(tmp_path, hive, hive_services.hs2_port)
    src = Source(tmp_path / "raw", t0, rng)
    patterns, kills = defaultdict(int), 0
    try:
        for k in range(1, times + 1):
            for p in src.land(k):
                patterns[p] += 1
            when = t0 + k * H
            restated: dict[str, list[str]] = {}
            for name, job in jobs.items():
                if rng.random() < 1 / 3:
                    kills += 1
                    _run(job, when, crash=rng.choice(POINTS + (("etl.during_sync",) if name == "hourly" else ())))
                rep = _run(job, when)
                restated[name] = [r["partition"] for r in rep["output"]["restated"]]
            # every run recomputed exactly what its input's new data touched, nothing else
            assert restated["hourly"] == restated["events"], (k, restated)
            assert restated["daily"] == sorted({p.split("/")[0] for p in restated["hourly"]}), (k, restated)
        assert kills >= times * 3 // 4 and all(patterns[p] for p in LATE[:4]), (kills, dict(patterns))
        assert patterns["sealed"] or times < 12, dict(patterns)
        hourly, daily = src.truth()
        want_h = sorted((h, u, e) for h, (u, e) in hourly.items())
        want_d = sorted((d, e, u) for d, (e, u) in daily.items())
        cols_h, cols_d = ("ts", "users", "events"), ("ts", "events", "peak")
        assert _by_manifest(tmp_path / "hourly", cols_h) == want_h == _by_directory(tmp_path / "hourly", cols_h)
        assert _by_manifest(tmp_path / "daily", cols_d) == want_d == _by_directory(tmp_path / "daily", cols_d)
        hs2_cursor.execute(f"SELECT ts, users, events FROM {hive}")
        assert sorted(tuple(int(x) for x in r) for r in hs2_cursor.fetchall()) == want_h
        for name in JOBS:
            v = run_trib("verify", str(tmp_path / name))
            assert v.returncode == 0, (name, v.stdout + v.stderr)
    finally:
        hs2_cursor.execute(f"DROP TABLE IF EXISTS {hive}")
