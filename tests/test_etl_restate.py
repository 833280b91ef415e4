"""A restate job end to end through ``trib etl run``: late and changed input recomputes the partitions it feeds.

The newcomer's job from the restatement issue: an hourly ``count(DISTINCT user)`` over raw JSON lines
read by a consumer. Append mode leaves two partial rows in an hour that a late file reaches (their
distinct counts cannot be added); a restate job replaces the hour with one row over all its files.
Every output is checked against the answer computed from the raw files on disk, read three ways:
through trib's manifest, and as a directory reader (pyarrow's dataset, which skips hidden names as
Hive and Spark do) sees the partition directories.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import run_trib
from helpers import one_line_error
from etl_data import H, LAY, LAYOUT, create_output_table, iso, spark_section
from tributary_read.etl.report import iso_z
from tributary_read.table.config import Table

pytestmark = pytest.mark.usefixtures("warm_spark")

SQL = ("SELECT CAST(ts - ts % 3600000 AS BIGINT) AS ts, count(DISTINCT user) AS users, count(*) AS events "
       "FROM raw GROUP BY 1\n")


def _job(tmp_path: Path, mode: str, extra: str = "", hive: str = "", output: str = "", out: str | None = None) -> Path:
    """The job file (``output``: more ``[output]`` keys; ``out``: the output's root, else beside it, created)."""
    (tmp_path / "agg.sql").write_text(SQL)
    path = tmp_path / f"{mode}.toml"
    root = out or str(tmp_path / mode)
    path.write_text("\n".join([
        "[job]", f'name = "{mode}"', 'sql = "agg.sql"', "",
        "[[inputs]]", f'table = "{tmp_path / "raw"}"', 'view = "raw"', 'mode = "consumer"', f'layout = "{LAYOUT}"',
        'format = "jsonl"', 'schema = "id BIGINT, user STRING, ts BIGINT"', 'min_age = "0s"', extra, "",
        "[output]", f'table = "{root}"', 'time_column = "ts"', f'mode = "{mode}"', output, "", hive,
        spark_section()]))
    if out is None and not (tmp_path / mode / "_tributary").exists():
        create_output_table(tmp_path / mode)
    return path


class Raw:
    """The raw directory another tool writes: hour directories of JSON-lines files."""

    def __init__(self, root: Path, t0: int):
        self.root, self.t0, self.next_id = root, t0, 0

    def write(self, hour: int, name: str, users: list[str], mtime_ms: int | None = None) -> Path:
        d = self.root / LAY.for_time(self.t0 + hour * H).path
        d.mkdir(parents=True, exist_ok=True)
        lines = []
        for i, u in enumerate(users):
            self.next_id += 1
            lines.append(json.dumps({"id": self.next_id, "user": u, "ts": self.t0 + hour * H + i * 1000}))
        p = d / name
        p.write_text("\n".join(lines) + "\n")
        if mtime_ms is not None:
            os.utime(p, (mtime_ms / 1000, mtime_ms / 1000))
        return p

    def truth(self) -> dict[int, tuple[int, int]]:
        """hour start (ms) -> (distinct users, events), from every file on disk now."""
        users, events = defaultdict(set), defaultdict(int)
        for p in self.root.rglob("*.jsonl"):
            for line in p.read_text().splitlines():
                r = json.loads(line)
                h = r["ts"] - r["ts"] % H
                users[h].add(r["user"])
                events[h] += 1
        return {h: (len(users[h]), events[h]) for h in users}


def _rows_by_manifest(root: Path) -> list[tuple[int, int, int]]:
    import pyarrow.parquet as pq

    from tributary_read.read.resolve import manifest_files
    from tributary_read.table.config import Table

    t = Table.load(str(root))
    out = []
    for f in manifest_files(t, 0).files:
        tab = pq.read_table(str(root / f.path)).to_pydict()
        out += [(int(ts), u, e) for ts, u, e in zip(tab["ts"], tab["users"], tab["events"])]
    return sorted(out)


def _rows_by_directory(root: Path) -> list[tuple[int, int, int]]:
    """What a directory reader sees: every visible Parquet file under the partition directories."""
    import pyarrow.dataset as ds

    tab = ds.dataset(str(root), format="parquet", ignore_prefixes=[".", "_"]).to_table().to_pydict()
    return sorted((int(ts), u, e) for ts, u, e in zip(tab["ts"], tab["users"], tab["events"]))


def _run(job: Path, t0: int, k: int) -> dict:
    r = run_trib("etl", "run", str(job), "--schedule-time", str(t0 + k * H), "--json", "-q")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_late_and_changed_files_recompute_their_hours_once_and_append_mode_does_not(tmp_path):
    now = int(time.time() * 1000)
    t0 = now - now % H - 30 * H
    raw = Raw(tmp_path / "raw", t0)
    jobs = {m: _job(tmp_path, m) for m in ("append", "restate")}

    raw.write(0, "a.jsonl", ["u1", "u2", "u3"])
    raw.write(1, "a.jsonl", ["u1", "u4"])
    reports = {m: _run(j, t0, 2) for m, j in jobs.items()}
    restates = [reports["restate"]]  # each restate commit's report, for trib metrics' totals
    # first computed: a restate reads exactly what an append reads
    assert reports["restate"]["inputs"][0]["files"] == reports["append"]["inputs"][0]["files"] == 2
    assert [r["records_before"] for r in reports["restate"]["output"]["restated"]] == [0, 0]

    late = raw.write(1, "late.jsonl", ["u4", "u5", "u1"])  # fresh mtime, into hour 1 already computed
    raw.write(0, "old.jsonl", ["u9"], mtime_ms=t0 - 5 * H)  # an old mtime: a window that ran misses it
    raw.write(2, "a.jsonl", ["u1"])
    dry = run_trib("etl", "run", str(jobs["restate"]), "--schedule-time", str(t0 + 3 * H), "--dry-run", "--json")
    assert json.loads(dry.stdout)["output"]["partitions"] == [LAY.for_time(t0 + h * H).path for h in (0, 1, 2)]
    reports = {m: _run(j, t0, 3) for m, j in jobs.items()}
    rep = reports["restate"]
    restates.append(rep)
    assert rep["inputs"][0]["files"] == 3  # new files only, as in append mode
    restated = {r["partition"]: r for r in rep["output"]["restated"]}
    assert sorted(restated) == [LAY.for_time(t0 + h * H).path for h in (0, 1, 2)]
    assert restated[LAY.for_time(t0 + H).path]["records_before"] == 1  # one row per hour, replaced by one
    # each names the files that caused it, relative to the input's root
    causes = {p: (r["cause"], [(i["view"], i["files"], i["files_total"]) for i in r["inputs"]])
              for p, r in restated.items()}
    assert causes == {LAY.for_time(t0 + h * H).path: ("input", [("raw", [f"{LAY.for_time(t0 + h * H).path}/{n}"], 1)])
                      for h, n in ((0, "old.jsonl"), (1, "late.jsonl"), (2, "a.jsonl"))}
    from tributary_read.etl.restated import cause_text  # the text report's words for it

    assert cause_text(restated[LAY.for_time(t0 + H).path]) == f"raw: {LAY.for_time(t0 + H).path}/late.jsonl"

    late.write_text(json.dumps({"id": 999, "user": "u7", "ts": t0 + H}) + "\n")  # rewritten in place, shorter
    (tmp_path / "raw" / LAY.for_time(t0).path / "old.jsonl").unlink()  # a delivered file removed
    rep = _run(jobs["restate"], t0, 4)
    restates.append(rep)
    assert sorted(r["partition"] for r in rep["output"]["restated"]) == [LAY.for_time(t0 + h * H).path for h in (0, 1)]
    # the Airflow operator's asset event for this report marks the hours, by their partition keys
    from tributary_read.airflow.assets import asset_event

    assert sorted((r["partition_key"], r["partition"]) for r in asset_event(rep)[0]["restated"]) == \
        [(LAY.for_time(t0 + h * H).values["dt"], LAY.for_time(t0 + h * H).path) for h in (0, 1)]
    # the rewritten and the removed file are what caused them
    assert sorted(f for r in rep["output"]["restated"] for i in r["inputs"] for f in i["files"]) == \
        [f"{LAY.for_time(t0 + h * H).path}/{n}" for h, n in ((0, "old.jsonl"), (1, "late.jsonl"))]

    truth = raw.truth()
    want = sorted((h, u, e) for h, (u, e) in truth.items())
    assert _rows_by_manifest(tmp_path / "restate") == want
    assert _rows_by_directory(tmp_path / "restate") == want
    # append mode: hour 1 holds two partial rows whose distinct counts no reader can add up
    hour1 = [r for r in _rows_by_manifest(tmp_path / "append") if r[0] == t0 + H]
    assert len(hour1) == 2
    assert run_trib("verify", str(tmp_path / "restate")).returncode == 0

    again = _run(jobs["restate"], t0, 4)  # a rerun of a committed schedule time changes nothing
    assert again["already_committed"] and _rows_by_manifest(tmp_path / "restate") == want
    # the commit keeps what caused each partition: a rerun names the same files, as do its asset events
    assert again["output"]["restated"] == rep["output"]["restated"]
    assert asset_event(again)[0]["restated"] == asset_event(rep)[0]["restated"]
    quiet = _run(jobs["restate"], t0, 5)  # nothing new: nothing recomputed, an empty commit
    assert quiet["output"]["restated"] == [] and _rows_by_directory(tmp_path / "restate") == want
    # trib metrics: every restated partition and its records, each commit once (the rerun added nothing)
    from tributary_read.metrics.probe import etl_samples

    counted = {s.family: s.value for s in etl_samples(Table.load(str(tmp_path / "restate")))}
    entries = [r for x in restates for r in x["output"]["restated"]]
    assert (counted["trib_etl_restated_partitions_total"], counted["trib_etl_restated_records_before_total"],
            counted["trib_etl_restated_records_after_total"]) == \
        (len(entries), sum(r["records_before"] for r in entries), sum(r["records_after"] for r in entries)) != (0, 0, 0)


def test_files_landing_in_or_rewritten_in_sealed_partitions_recompute_them(tmp_path):
    """Past the consumer's lookback a partition is sealed: a file landing there (with any mtime) or rewritten
    there is found by its digest and compared with the files the seal keeps; a restate job recomputes it
    where an append job would hold it back (exit 17)."""
    now = int(time.time() * 1000)
    t0 = now - now % H - 30 * H
    raw = Raw(tmp_path / "raw", t0)
    job = _job(tmp_path, "restate", 'lookback = "2h"')
    raw.write(0, "a.jsonl", ["u1", "u2"])
    raw.write(1, "a.jsonl", ["u1"])
    _run(job, t0, 2)
    raw.write(0, "late.jsonl", ["u3"], mtime_ms=t0 - H)  # sealed, and an mtime older than anything delivered
    rows = [{"id": 500, "user": "u8", "ts": t0 + H + 5}, {"id": 501, "user": "u9", "ts": t0 + H}]
    (tmp_path / "raw" / LAY.for_time(t0 + H).path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rep = _run(job, t0, 3)
    assert sorted(r["partition"] for r in rep["output"]["restated"]) == [LAY.for_time(t0 + h * H).path for h in (0, 1)]
    # found by their digests, not delivered as new files: still named as what caused each hour
    assert [i["files"] for r in rep["output"]["restated"] for i in r["inputs"]] == \
        [[f"{LAY.for_time(t0 + h * H).path}/{n}"] for h, n in ((0, "late.jsonl"), (1, "a.jsonl"))]
    want = sorted((h, u, e) for h, (u, e) in raw.truth().items())
    assert _rows_by_manifest(tmp_path / "restate") == want == _rows_by_directory(tmp_path / "restate")


DAILY_SQL = ("SELECT CAST(ts - ts % 86400000 AS BIGINT) AS ts, sum(events) AS events, max(users) AS peak "
             "FROM hourly GROUP BY 1\n")


def _daily_job(tmp_path: Path, mode: str, hourly: Path) -> Path:
    from tributary_read.table.config import Table, TableConfig
    from tributary_read.table.layout import Layout

    (tmp_path / "daily.sql").write_text(DAILY_SQL)
    out = tmp_path / f"daily-{mode}"
    Table.create(str(out), TableConfig(Layout("{yyyy}_{MM}_{dd}", "dt={yyyy}{MM}{dd}"), format="parquet"))
    path = tmp_path / f"daily-{mode}.toml"
    path.write_text("\n".join([
        "[job]", f'name = "daily-{mode}"', 'sql = "daily.sql"', "",
        "[[inputs]]", f'table = "{hourly}"', 'view = "hourly"', 'mode = "consumer"', "",
        "[output]", f'table = "{out}"', 'time_column = "ts"', f'mode = "{mode}"', "", spark_section()]))
    return path


def test_a_restated_hour_recomputes_the_day_downstream_and_an_append_job_is_refused(tmp_path):
    now = int(time.time() * 1000)
    t0 = now - now % (24 * H) - 2 * 24 * H + H  # 01:00 two days ago (UTC): hours 0 and 1 share a day
    raw = Raw(tmp_path / "raw", t0)
    hourly = _job(tmp_path, "restate")
    daily = _daily_job(tmp_path, "restate", tmp_path / "restate")
    appender = _daily_job(tmp_path, "append", tmp_path / "restate")

    raw.write(0, "a.jsonl", ["u1", "u2"])
    raw.write(1, "a.jsonl", ["u1"])
    _run(hourly, t0, 2)
    first = _run(daily, t0, 2)
    assert first["output"]["restated"]
    assert _run(appender, t0, 2)["output"]["files"] >= 1  # the first plan holds no restate yet

    raw.write(1, "late.jsonl", ["u3", "u4", "u5"])  # hour 1 restated upstream: the day follows
    _run(hourly, t0, 3)
    rep = _run(daily, t0, 3)
    assert [r["partition"] for r in rep["output"]["restated"]] == [LAY.for_time(t0 + H).path.split("/")[0]]
    (cause,) = rep["output"]["restated"][0]["inputs"]  # the hour the upstream restate recomputed, and its new file
    assert cause["view"] == "hourly" and cause["restated"] == [LAY.for_time(t0 + H).path] and cause["files_total"] == 1

    truth = raw.truth()
    days: dict[int, list] = defaultdict(lambda: [0, 0])
    for h, (u, e) in truth.items():
        day = days[h - h % (24 * H)]
        day[0] += e
        day[1] = max(day[1], u)
    import pyarrow.dataset as ds

    tab = ds.dataset(str(tmp_path / "daily-restate"), format="parquet", ignore_prefixes=[".", "_"]).to_table()
    got = sorted(zip(tab["ts"].to_pylist(), tab["events"].to_pylist(), tab["peak"].to_pylist()))
    assert got == sorted((d, e, u) for d, (e, u) in days.items())

    # an append job over a table with restatements would count the restated hour twice: refused, nothing committed
    r = run_trib("etl", "run", str(appender), "--schedule-time", str(t0 + 3 * H), "-q")
    one_line_error(r, 3, "input hourly:", "restated 1 partition(s)", "output mode is restate",
                   'say restated = "read" in its [[inputs]]')
    assert Table.load(str(tmp_path / "daily-append")).log.latest_version() == 1  # its first run's commit only
    # said knowingly: the restated hour's new file is read as new rows (its day is appended to again)
    appender.write_text(appender.read_text().replace('view = "hourly"', 'view = "hourly"\nrestated = "read"'))
    rep = _run(appender, t0, 3)
    assert rep["inputs"][0]["files"] == 1 and rep["output"]["records"] == 1

    # the input table's retention expires hour 0 (its log remembers the removal): a backfill of the day, fed by
    # hour 1 alone now, would lose hour 0's part of it; refused, nothing committed, unless said knowingly
    older = (int(time.time() * 1000) - (t0 + 2 * H)) // 1000 + 1800  # hour 0 ended an hour before hour 1
    e = run_trib("expire", str(tmp_path / "restate"), "--older-than", f"{older}s", "--grace", "0s")
    assert e.returncode == 0, e.stdout + e.stderr
    day = LAY.for_time(t0).path.split("/")[0]
    v = Table.load(str(tmp_path / "daily-restate")).log.latest_version()
    r = run_trib("etl", "run", str(daily), "--restate", day, "-q")
    one_line_error(r, 3, f"{day} of", "1 input file(s) that are gone", "nothing was committed",
                   "--drop-removed-input")
    assert Table.load(str(tmp_path / "daily-restate")).log.latest_version() == v
    r = run_trib("etl", "run", str(daily), "--restate", day, "--drop-removed-input", "--json", "-q")
    assert r.returncode == 0, r.stderr
    hour1 = truth[t0 + H]
    tab = ds.dataset(str(tmp_path / "daily-restate"), format="parquet", ignore_prefixes=[".", "_"]).to_table()
    assert sorted(zip(tab["ts"].to_pylist(), tab["events"].to_pylist(), tab["peak"].to_pylist())) == \
        [(t0 - H, hour1[1], hour1[0])]


POINTS = ("etl.before_commit", "restate.before_swap", "restate.after_swap", "etl.after_commit", "etl.during_sync",
          "etl.before_ack")


def _hive_rows(cur, table: str) -> list[tuple[int, int, int]]:
    """The table through HiveServer2. Spark's Thrift server caches a table's file listing per session: a session
    that read the table before a restate swapped a partition must refresh it (docs/hive.md)."""
    cur.execute(f"REFRESH TABLE {table}")
    cur.execute(f"SELECT ts, users, events FROM {table}")
    return sorted((int(a), int(b), int(c)) for a, b, c in cur.fetchall())


def _partition_stats(hive_services, table: str, directory: Path) -> tuple[tuple[int, int], tuple[int, int]]:
    """(files, bytes) the metastore holds for the partition at ``directory``, and what a lister sees there."""
    from tributary_read.hive.model import TableName
    from tributary_read.hive.thrift_metastore import ThriftMetastore

    ms = ThriftMetastore("127.0.0.1", hive_services.hms_port)
    try:
        (p,) = [p for p in ms.list_partitions(TableName.parse(table), with_locations=True)
                if p.location.rstrip("/").endswith(str(directory))]
    finally:
        ms.close()
    visible = [f for f in directory.iterdir() if not f.name.startswith((".", "_"))]
    return (p.stats.num_files, p.stats.total_size), (len(visible), sum(f.stat().st_size for f in visible))


def test_kill9_at_each_step_of_a_restate_then_rerun_leaves_each_hour_whole(tmp_path, hive_services, hs2_cursor):
    """A restate run killed at each of its steps, the metastore's among them: a directory reader then sees each
    partition as it was or as recomputed (never both files, never none), and the rerun of the same schedule time
    finishes it once; HiveServer2 then counts every hour as recomputed, its statistics refreshed."""
    import uuid

    now = int(time.time() * 1000)
    t0 = now - now % H - 30 * H
    raw = Raw(tmp_path / "raw", t0)
    table = f"default.restate_{uuid.uuid4().hex[:8]}"
    job = _job(tmp_path, "restate", hive=f'[hive]\ntable = "{table}"\ncreate = true\n'
               f'metastore = "hs2://127.0.0.1:{hive_services.hs2_port}?user=trib"\n')
    raw.write(0, "a.jsonl", ["u1", "u2"])
    _run(job, t0, 1)
    for k, point in enumerate(POINTS, start=2):
        before = _rows_by_directory(tmp_path / "restate")
        raw.write(0, f"late-{k}.jsonl", [f"v{k}", "u1"])  # hour 0 again, and hour k-1 anew
        raw.write(k - 1, "a.jsonl", ["u1"])
        want = sorted((h, u, e) for h, (u, e) in raw.truth().items())
        r = run_trib("etl", "run", str(job), "--schedule-time", str(t0 + k * H), "-q", env={"TRIB_CRASH_AT": point})
        assert r.returncode == -9, (point, r.returncode, r.stderr[-2000:])
        seen = _rows_by_directory(tmp_path / "restate")
        hour0 = [x for x in seen if x[0] == t0]
        assert hour0 in ([x for x in before if x[0] == t0], [x for x in want if x[0] == t0]), (point, seen)
        rep = _run(job, t0, k)
        assert rep["already_committed"] == (point != "etl.before_commit"), point
        assert _rows_by_manifest(tmp_path / "restate") == want == _rows_by_directory(tmp_path / "restate"), point
    v = run_trib("verify", str(tmp_path / "restate"))
    assert v.returncode == 0, v.stdout + v.stderr
    try:
        assert _hive_rows(hs2_cursor, table) == want
        held, seen = _partition_stats(hive_services, table, tmp_path / "restate" / LAY.for_time(t0).path)
        assert held == seen, (held, seen)  # restated six times: its statistics are the last version's
    finally:
        hs2_cursor.execute(f"DROP TABLE IF EXISTS {table}")


def test_a_backfill_recomputes_the_hours_it_covers_after_a_fix_to_the_sql(tmp_path):
    now = int(time.time() * 1000)
    t0 = now - now % H - 30 * H
    raw = Raw(tmp_path / "raw", t0)
    job = _job(tmp_path, "restate", 'lookback = "2h"')  # every hour here is sealed: a removed one is retention
    for h in range(3):
        raw.write(h, "a.jsonl", ["u1", "u2", f"x{h}"])
    _run(job, t0, 3)
    before = _rows_by_manifest(tmp_path / "restate")
    (tmp_path / "agg.sql").write_text(SQL.replace("count(*) AS events", "count(*) * 10 AS events"))  # the fix
    start, end = iso(t0 + H), iso(t0 + 3 * H)
    r = run_trib("etl", "run", str(tmp_path / "restate.toml"), "--restate", f"{start}/{end}", "--json", "-q")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert [x["partition"] for x in rep["output"]["restated"]] == [LAY.for_time(t0 + h * H).path for h in (1, 2)]
    assert rep["transaction"]["app_id"] == "etl-restate:restate" and rep["acked"] == []
    assert {(x["cause"], x["interval"]["start"], x["interval"]["end"]) for x in rep["output"]["restated"]} == \
        {("backfill", iso_z(t0 + H), iso_z(t0 + 3 * H))} and "inputs" not in rep["output"]["restated"][0]
    after = _rows_by_directory(tmp_path / "restate")
    assert after == [before[0]] + [(h, u, e * 10) for h, u, e in before[1:]]  # hour 0 untouched
    # one partition by its value; a scheduled run goes on as before (its consumer did not move)
    r = run_trib("etl", "run", str(tmp_path / "restate.toml"), "--restate", f"dt={LAY.for_time(t0).values['dt']}",
                 "-q")
    assert r.returncode == 0 and _rows_by_manifest(tmp_path / "restate")[0] == (t0, 3, 30), r.stderr
    # the text report names the partition, its records and its cause
    assert f"restated {LAY.for_time(t0).path}: 1 -> 1 records (backfill {iso_z(t0)}/{iso_z(t0 + H)})" in r.stdout, \
        r.stdout
    raw.write(3, "a.jsonl", ["u1"])

    def concurrent_backfill():  # the scheduled run holds the job's lock: a backfill beside it is refused
        one_line_error(run_trib("etl", "run", str(job), "--restate", f"{start}/{end}", "-q"), 5, "in progress")

    assert _stopped_then(job, t0 + 4 * H, "etl.before_commit", None, concurrent_backfill) == 0
    assert [x["partition"] for x in _run(job, t0, 4)["output"]["restated"]] == [LAY.for_time(t0 + 3 * H).path]
    assert run_trib("verify", str(tmp_path / "restate")).returncode == 0
    from tributary_read.metrics.probe import etl_samples  # the backfills' partitions are counted with the runs'

    counted = {s.family: s.value for s in etl_samples(Table.load(str(tmp_path / "restate")))}
    assert counted["trib_etl_restated_partitions_total"] == 3 + 2 + 1 + 1

    # no input and no records there: nothing to do, nothing committed
    idle = run_trib("etl", "run", str(tmp_path / "restate.toml"), "--restate",
                    "2021-01-01T00:00:00Z/2021-01-01T02:00:00Z", "--json", "-q")
    assert idle.returncode == 0 and json.loads(idle.stdout)["version"] is None, idle.stderr
    for bad, words in [(f"{end}/{start}", "start must be before"), ("2026_99", "give START/END"),
                       ("2026-11-28T00:00:00/2026-11-28T01:00:00", "--restate '2026-11-28T00:00:00/")]:
        one_line_error(run_trib("etl", "run", str(tmp_path / "restate.toml"), "--restate", bad), 3, words)
    both = run_trib("etl", "run", str(tmp_path / "restate.toml"), "--restate", bad, "--schedule-time", start)
    assert both.returncode == 2 and "one of them" in both.stderr, both.stderr  # a usage error, as a missing one
    # an hour that holds records but whose input retention removed (its consumer saw it go): refused
    import shutil

    shutil.rmtree(tmp_path / "raw" / LAY.for_time(t0).path)
    assert _run(job, t0, 5)["output"]["restated"] == []  # a sealed partition emptied is retention: not recomputed
    v = Table.load(str(tmp_path / "restate")).log.latest_version()
    r = run_trib("etl", "run", str(tmp_path / "restate.toml"), "--restate", f"{iso(t0)}/{iso(t0 + H)}", "-q")
    one_line_error(r, 3, "no input file feeds", "nothing was committed")
    assert Table.load(str(tmp_path / "restate")).log.latest_version() == v
    # a late file into that emptied hour: recomputed from it alone the hour would lose its records; held back
    raw.write(0, "after-retention.jsonl", ["z1"])
    raw.write(5, "a.jsonl", ["u1"])
    hour0 = [x for x in _rows_by_manifest(tmp_path / "restate") if x[0] == t0]
    r = run_trib("etl", "run", str(job), "--schedule-time", str(t0 + 6 * H), "--json", "-q")
    one_line_error(r, 17, f"output partition {LAY.for_time(t0).path} holds 1 record(s)", "held back",
                   "restore those input files and the next run recomputes it from all of them, losing nothing",
                   f"--restate {LAY.for_time(t0).path} replaces its 1 record(s) with what the input holds now")
    assert [x["partition"] for x in json.loads(r.stdout)["output"]["restated"]] == [LAY.for_time(t0 + 5 * H).path]
    assert [x for x in _rows_by_manifest(tmp_path / "restate") if x[0] == t0] == hour0
    raw.write(0, "a.jsonl", ["u1", "u2", "x0"])  # restored: the next run recomputes the hour from both files
    rep = _run(job, t0, 7)
    assert [x["partition"] for x in rep["output"]["restated"]] == [LAY.for_time(t0).path]
    assert [x for x in _rows_by_directory(tmp_path / "restate") if x[0] == t0] == [(t0, 4, 40)]
    # a file of that hour its consumer delivered is gone since: recomputed from the rest, the hour would lose what
    # it gave; refused, nothing committed, unless the call says to drop it
    (tmp_path / "raw" / LAY.for_time(t0).path / "after-retention.jsonl").unlink()
    v = Table.load(str(tmp_path / "restate")).log.latest_version()
    r = run_trib("etl", "run", str(tmp_path / "restate.toml"), "--restate", LAY.for_time(t0).path, "-q")
    one_line_error(r, 3, f"{LAY.for_time(t0).path} of", "hold 1 record(s)", "1 input file(s) that are gone",
                   "nothing was committed", "say so by --drop-removed-input")
    assert Table.load(str(tmp_path / "restate")).log.latest_version() == v
    r = run_trib("etl", "run", str(tmp_path / "restate.toml"), "--restate", LAY.for_time(t0).path,
                 "--drop-removed-input", "--json", "-q")
    assert r.returncode == 0, r.stderr
    assert [x for x in _rows_by_manifest(tmp_path / "restate") if x[0] == t0] == [(t0, 3, 30)]


def _stopped_then(job: Path, when: int, point: str, sig: int | None, before_cont=None) -> int:
    """Run ``job`` stopped at ``point`` (``TRIB_STOP_AT``); there send ``sig`` (pending until it runs again) and
    call ``before_cont``; resume it at every stop. Its exit status."""
    import signal
    import subprocess

    from conftest import REPO, TRIB

    env = {**os.environ, "TRIB_STOP_AT": point, "PYTHONPATH": str(REPO)}
    p = subprocess.Popen([*TRIB, "etl", "run", str(job), "--schedule-time", str(when), "-q"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    first = True
    while True:
        _, status = os.waitpid(p.pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            return os.waitstatus_to_exitcode(status)
        if first:
            if sig is not None:
                os.kill(p.pid, sig)
            if before_cont is not None:
                before_cont()
            first = False
        os.kill(p.pid, signal.SIGCONT)


def test_sigterm_sigint_and_hive_down_after_the_commit_are_finished_by_the_rerun(tmp_path, hive_services, hs2_cursor):
    """SIGTERM before the commit and before the swap, SIGINT after the commit, and a metastore that stops answering
    after the commit: each run ends with its own exit code, nothing is half visible, and the rerun of the schedule
    time finishes it once (HiveServer2 then counts the recomputed hours)."""
    import signal
    import uuid

    from faultproxy import StallingRelay

    now = int(time.time() * 1000)
    t0 = now - now % H - 30 * H
    raw = Raw(tmp_path / "raw", t0)
    table = f"default.restate_{uuid.uuid4().hex[:8]}"
    direct = f"hs2://127.0.0.1:{hive_services.hs2_port}?user=trib"
    job = _job(tmp_path, "restate", hive=f'[hive]\ntable = "{table}"\ncreate = true\nmetastore = "{direct}"\n')
    raw.write(0, "a.jsonl", ["u1", "u2"])
    _run(job, t0, 1)
    try:
        for k, (point, sig, code) in enumerate([("etl.before_commit", signal.SIGTERM, 143),
                                                ("restate.before_swap", signal.SIGTERM, 143),
                                                ("etl.after_commit", signal.SIGINT, 130)], start=2):
            raw.write(0, f"late-{k}.jsonl", [f"v{k}"])
            assert _stopped_then(job, t0 + k * H, point, sig) == code, point
            _run(job, t0, k)
            want = sorted((h, u, e) for h, (u, e) in raw.truth().items())
            assert _rows_by_directory(tmp_path / "restate") == want == _hive_rows(hs2_cursor, table), point

        raw.write(0, "late-hive.jsonl", ["w1"])
        with StallingRelay(hive_services.hs2_port) as relay:
            down = _job(tmp_path, "restate", hive=f'[hive]\ntable = "{table}"\ncreate = true\n'
                        f'metastore = "hs2://127.0.0.1:{relay.port}?user=trib&timeout=3s"\n')
            assert _stopped_then(down, t0 + 5 * H, "etl.after_commit", None, relay.stall) == 8  # MetastoreError
        want = sorted((h, u, e) for h, (u, e) in raw.truth().items())
        assert _rows_by_directory(tmp_path / "restate") == want  # committed and swapped in; Hive behind
        _job(tmp_path, "restate", hive=f'[hive]\ntable = "{table}"\ncreate = true\nmetastore = "{direct}"\n')  # back
        rep = _run(job, t0, 5)
        assert rep["already_committed"] and _hive_rows(hs2_cursor, table) == want
    finally:
        hs2_cursor.execute(f"DROP TABLE IF EXISTS {table}")


def test_other_tools_files_and_a_linked_partition_hold_it_back_until_moved_out_then_the_next_run_recomputes_it(
        tmp_path):
    """A partition the swap would take other tools' data from (or that is a symbolic link) is held back, the rest
    committed (exit 17), and recomputed by the next run once the way is clear, though its late file was acked; a
    backfill refuses it. Another tool's marker (``_SUCCESS``) is carried into the recomputed partition."""
    import shutil

    now = int(time.time() * 1000)
    t0 = now - now % H - 30 * H
    raw = Raw(tmp_path / "raw", t0)
    job = _job(tmp_path, "restate")
    out = tmp_path / "restate"
    for h in range(3):
        raw.write(h, "a.jsonl", ["u1", f"x{h}"])
    _run(job, t0, 3)
    hours = [LAY.for_time(t0 + h * H).path for h in range(3)]
    (out / hours[0] / "_SUCCESS").write_text("")  # another tool's markers: carried over
    (out / hours[0] / ".notes.crc").write_text("crc")
    (out / hours[1] / "other.csv").write_text("1,2\n")  # another tool's data: a directory reader counts it
    (out / hours[1] / "other-tool").mkdir()
    aside = tmp_path / "elsewhere"
    aside.mkdir()
    shutil.move(str(out / hours[2]), str(aside / "h2"))  # the partition is a link to its data
    (out / hours[2]).symlink_to(aside / "h2")
    before = _rows_by_manifest(out)
    for h in range(3):
        raw.write(h, "late.jsonl", ["u2", "u3"])

    r = run_trib("etl", "run", str(job), "--schedule-time", str(t0 + 4 * H), "--json", "-q")
    line = one_line_error(r, 17, f"files trib did not write lie in output partition {hours[1]} (other-tool/, other.csv)",
                          "held back, the rest committed; move them out of the table and the next run recomputes it",
                          f"output partition {hours[2]} is a symbolic link", "make it a real directory")
    assert line.count("held back") == 2, line
    assert [x["partition"] for x in json.loads(r.stdout)["output"]["restated"]] == [hours[0]]
    assert sorted(p.name for p in (out / hours[0]).iterdir() if p.name.startswith((".", "_"))
                  and not p.name.startswith(".trib-")) == [".notes.crc", "_SUCCESS"]
    set_aside = [p for p in out.glob(f"{hours[0].split('/')[0]}/.*restate-*") if p.is_dir()]
    assert set_aside and not any((p / "_SUCCESS").exists() for p in set_aside)  # moved back, not left twice
    assert [x for x in _rows_by_manifest(out) if x[0] != t0] == [x for x in before if x[0] != t0]  # held: as was
    assert (out / hours[1] / "other.csv").read_text() == "1,2\n" and (out / hours[2]).is_symlink()

    v = Table.load(str(out)).log.latest_version()  # a backfill refuses them, nothing committed
    b = run_trib("etl", "run", str(job), "--restate", f"{iso(t0 + H)}/{iso(t0 + 3 * H)}", "-q")
    one_line_error(b, 3, f"output partition {hours[1]} (other-tool/, other.csv)", f"{hours[2]} is a symbolic link",
                   "nothing was committed", "run the backfill again")
    assert Table.load(str(out)).log.latest_version() == v

    (out / hours[1] / "other.csv").rename(tmp_path / "other.csv")  # the way out: moved out of the table
    (out / hours[1] / "other-tool").rmdir()
    (out / hours[2]).unlink()
    shutil.move(str(aside / "h2"), str(out / hours[2]))
    rep = _run(job, t0, 5)  # no new input: the held partitions are recomputed all the same
    assert [(x["partition"], x["held_back"]) for x in rep["output"]["restated"]] == [(h, True) for h in hours[1:]]
    want = sorted((h, u, e) for h, (u, e) in raw.truth().items())
    assert _rows_by_manifest(out) == want == _rows_by_directory(out)

    raw.write(0, "late-2.jsonl", ["u4"])  # entries another tool adds between the carry-over and the swap: moved back

    def appear():
        (out / hours[0] / "_appeared").write_text("")
        (out / hours[0] / "appeared.txt").write_text("")

    assert _stopped_then(job, t0 + 6 * H, "restate.before_swap", None, appear) == 0
    assert [r.directory for r in Table.load(str(out)).log.read_commit(v + 2).restated] == [hours[0]]  # held: once
    assert {"_SUCCESS", ".notes.crc", "_appeared", "appeared.txt"} <= {p.name for p in (out / hours[0]).iterdir()}
    assert not [p for p in out.glob(f"{hours[0].split('/')[0]}/.*restate-*/*") if not p.name.startswith(
        (".trib-", "part-"))]


def _location(hive_services, table: str, directory: str) -> str:
    """The location the metastore holds for the partition of ``directory`` (its layout directory)."""
    from tributary_read.hive.model import TableName
    from tributary_read.hive.thrift_metastore import ThriftMetastore

    ms = ThriftMetastore("127.0.0.1", hive_services.hms_port)
    try:
        return ms.describe_partition(TableName.parse(table), dict(LAY.parse(directory).values)).location
    finally:
        ms.close()


def test_a_moved_restate_shows_hive_the_recomputed_hour_and_a_kill9_before_the_move_is_finished_by_the_rerun(
        tmp_path, hive_services, hs2_cursor, s3_env):
    """Where the output cannot swap directories (S3, HDFS; here a local table with restate_by = "move", as the
    suite's Hive cannot read s3a://), a restated hour's new files stay in a directory of their own and the sync
    moves the partition's location there: HiveServer2 and trib's reader count the hour exactly, before the move
    (killed between the commit and the sync) the old version, whole; a plain directory reader of the root sees
    none of it (docs/etl.md); a daily restate job downstream recomputes the moved hour's day from the moved files. On S3 a restate job without a [hive] section is refused by `trib etl check`."""
    import uuid

    now = int(time.time() * 1000)
    t0 = now - now % H - 30 * H
    raw = Raw(tmp_path / "raw", t0)
    raw.write(0, "a.jsonl", ["u1", "u2"])
    raw.write(1, "a.jsonl", ["u1"])
    s3 = f"s3://trib/t-{uuid.uuid4().hex[:12]}"
    create_output_table(s3)
    one_line_error(run_trib("etl", "check", str(_job(tmp_path, "restate", out=s3))), 3,
                   "cannot swap directories", "stale partitions", "add a [hive] section")
    table = f"default.moved_{uuid.uuid4().hex[:8]}"
    job = _job(tmp_path, "restate", output='restate_by = "move"', hive=f'[hive]\ntable = "{table}"\ncreate = true\n'
               f'metastore = "hs2://127.0.0.1:{hive_services.hs2_port}?user=trib"\n')
    hour0 = LAY.for_time(t0).path
    _run(job, t0, 2)
    first = sorted((h, u, e) for h, (u, e) in raw.truth().items())
    out = tmp_path / "restate"
    try:
        assert _hive_rows(hs2_cursor, table) == first == _rows_by_manifest(out)
        plain = lambda: [p for p in out.rglob("*.parquet")  # noqa: E731 - what a plain directory reader reads
                         if not any(n.startswith((".", "_")) for n in p.relative_to(out).parts)]
        assert plain() == []  # every hour lies in a hidden directory of its own: a plain reader of the root sees none
        placed = _location(hive_services, table, hour0)
        assert f"/.{hour0.rpartition('/')[2]}.restate-" in placed  # its directory of the first computation

        daily = _daily_job(tmp_path, "restate", out)  # downstream: a daily restate job over the moved hourly table
        _run(daily, t0, 2)

        raw.write(0, "late.jsonl", ["u3", "u1"])  # hour 0 again: restated, moved
        want = sorted((h, u, e) for h, (u, e) in raw.truth().items())
        r = run_trib("etl", "run", str(job), "--schedule-time", str(t0 + 3 * H), "-q",
                     env={"TRIB_CRASH_AT": "etl.after_commit"})
        assert r.returncode == -9, r.stderr[-2000:]
        assert _rows_by_manifest(out) == want  # committed: trib's reader has the new hour
        assert _hive_rows(hs2_cursor, table) == first  # Hive still on the old version, whole: its files are there
        rep = _run(job, t0, 3)  # the rerun finds the commit and moves the location
        assert rep["already_committed"] and rep["hive"]["relocated"] == [LAY.parse(hour0).spec], rep["hive"]
        moved = _location(hive_services, table, hour0)
        assert moved != placed and f"/.{hour0.rpartition('/')[2]}.restate-" in moved
        assert _hive_rows(hs2_cursor, table) == want == _rows_by_manifest(out) and plain() == []
        day = 24 * H
        days = {d: (sum(e for h, _, e in want if h - h % day == d), max(u for h, u, _ in want if h - h % day == d))
                for d in {h - h % day for h, _, _ in want}}
        restated = _run(daily, t0, 3)["output"]["restated"]  # the moved hour's day, recomputed downstream
        assert [r["partition"] for r in restated] == [hour0.split("/")[0]]
        import pyarrow.dataset as ds

        tab = ds.dataset(str(tmp_path / "daily-restate"), format="parquet", ignore_prefixes=[".", "_"]).to_table()
        got = sorted(zip(tab["ts"].to_pylist(), tab["events"].to_pylist(), tab["peak"].to_pylist()))
        assert got == sorted((d, e, u) for d, (e, u) in days.items())  # swapped in (a local output): read as a directory

        full = run_trib("etl", "run", str(job), "--schedule-time", str(t0 + 4 * H), "--full-sync", "--json", "-q")
        assert full.returncode == 0, full.stderr  # a full sync derives the location from the state: kept there
        assert not json.loads(full.stdout)["hive"].get("relocated") and _location(hive_services, table, hour0) == moved
        assert _hive_rows(hs2_cursor, table) == want
        v = run_trib("verify", str(out))
        assert v.returncode == 0, v.stdout + v.stderr
    finally:
        hs2_cursor.execute(f"DROP TABLE IF EXISTS {table}")
