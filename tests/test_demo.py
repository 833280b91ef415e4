"""`trib demo` end to end: a real raw table, the local Hive pair, real Spark, both hourly jobs, and the hourly
distinct users three ways (naive, append, restate), each checked against a model of the arrival mix.

The demo runs in this process on the session's Hive pair (starting another pair costs two JVMs):
the main run on the session's Spark Connect server (``--spark sc://…``, the warm server cataloged
by that pair), the rerun on the classic driver (the session's SparkSession). `make demo` runs it
standalone, starting and stopping its own pair (and, with ``--spark connect``, its own server).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import invoke_trib
from tributary_read.demo.mix import NAIVE_LAG_MS, build

HOURS = 3
LATE = ("late_fresh", "late_ingest", "preserved_mtime", "hidden_renamed")


@pytest.fixture(scope="module")
def demo_run(spark_connect, hive_services, tmp_path_factory):
    """The demo over the session's Spark Connect server: DDL, the naive SQL and its UDFs, trib's job, tallies."""
    work = tmp_path_factory.mktemp("demo")
    r = invoke_trib("demo", "--hours", str(HOURS), "--dir", str(work), "--hive-dir", hive_services.dir,
                    "--spark", spark_connect.remote, "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["spark"] == spark_connect.remote
    yield work, out


def test_trib_captures_everything_once_and_naive_loses_the_late_patterns(demo_run):
    _, out = demo_run
    mix = build(HOURS, 0, 2002)  # the same seed: the same files and events, whatever the base hour
    assert out["expected"] == len(mix.events()) and out["files"] == len(mix.drops)
    trib, naive = out["trib"], out["naive"]
    assert (trib["captured"], trib["duplicates"], trib["lost"], trib["unexpected"]) == (out["expected"], 0, 0, 0)
    assert trib["captured_share"] == 1.0
    assert naive["duplicates"] == 0 and naive["unexpected"] == 0
    by = naive["by_pattern"]
    for p in LATE:  # an hour or more late: the previous-hour job never reads them
        assert by[p]["expected"] > 0 and by[p]["lost"] == by[p]["expected"], (p, by[p])
    for p in ("on_time", "on_time_foreign", "boundary"):
        assert by[p]["lost"] == 0, (p, by[p])
    stragglers = [d for d in mix.drops if d.pattern == "straggler"]
    late_stragglers = sum(len(d.events) for d in stragglers if d.arrival_ms - mix.hour_end(d.hour) > NAIVE_LAG_MS)
    assert by["straggler"]["lost"] == late_stragglers
    assert naive["lost"] == sum(v["lost"] for v in by.values()) > 0
    assert all(v["lost"] == 0 for v in trib["by_pattern"].values())


def _users_by_run(mix) -> dict[int, dict]:
    """Per hour, from the mix alone: the exact distinct users and events, what the naive job counted (the files
    in its partition by its run), and the files each cycle's run delivered (all that had arrived by then)."""
    def cycle(d) -> int:
        return next(c for c in range(mix.hours) if d.arrival_ms <= mix.run_at(c))

    hours: dict[int, dict] = {h: {"users": set(), "events": 0, "naive": set(), "naive_events": 0, "late": False,
                                  "runs": defaultdict(lambda: [set(), 0])} for h in range(mix.hours)}
    for d in mix.drops:
        h, users = hours[d.hour], {e.user for e in d.events}
        h["users"] |= users
        h["events"] += len(d.events)
        if d.arrival_ms <= mix.run_at(d.hour):
            h["naive"] |= users
            h["naive_events"] += len(d.events)
        else:
            h["late"] = True
        run = h["runs"][cycle(d)]
        run[0] |= users
        run[1] += len(d.events)
    return hours


def test_distinct_users_three_ways_restate_exact_append_split_naive_short(demo_run):
    """The hourly count(DISTINCT user): restate holds one exact row per hour; append one row per run that reached
    the hour (their users do not add up); naive one row short of every file that landed after its run."""
    _, out = demo_run
    u = out["users"]
    mix = build(HOURS, 0, 2002)
    model = _users_by_run(mix)
    late = sorted(h for h, m in model.items() if m["late"])
    split = sorted(h for h, m in model.items() if len(m["runs"]) > 1)
    dts = [e["dt"] for e in u["hours"]]
    assert dts == sorted(dts) and len(set(dts)) == HOURS
    assert late and set(late) <= set(split)  # a late file always splits an hour; the run at :05 sees the next's too
    for h, m in model.items():
        e = u["hours"][h]
        assert e["hour"] == h
        exact = [len(m["users"]), m["events"]]
        assert e["exact"] == exact, (h, e)  # counted from the raw files through Hive: the mix's own events
        assert e["restate"] == [exact], (h, e)
        assert e["naive"] == [[len(m["naive"]), m["naive_events"]]], (h, e)
        runs = sorted(([len(s), n] for s, n in m["runs"].values()), reverse=True)
        assert e["append"] == runs, (h, e)
        assert sum(n for _, n in e["append"]) == m["events"]  # every event once: the events add up, users do not
        assert bool(e["late_files"]) == m["late"]
    assert (u["restate"]["right"], u["restate"]["wrong"], u["restate"]["rows"]) == (HOURS, 0, HOURS)
    assert u["append"]["wrong_hours"] == split and u["append"]["rows"] == sum(len(m["runs"]) for m in model.values())
    assert u["naive"]["wrong_hours"] == late and u["naive"]["rows"] == HOURS
    ex = u["example"]
    assert ex in late and ex in u["append"]["wrong_hours"]


@pytest.mark.unit
def test_the_three_ways_print_their_summary_and_an_hour_that_shows_why(capsys):
    """What `trib demo` prints of ``users`` (the run above checks the numbers; --json skips the printing)."""
    from tributary_read.cli.demo import _print_users
    from tributary_read.demo.users import compare

    mix = build(HOURS, 0, 2002)
    model = _users_by_run(mix)
    exact = {mix.dt(h): (len(m["users"]), m["events"]) for h, m in model.items()}
    rows = {"naive": {mix.dt(h): [(len(m["naive"]), m["naive_events"])] for h, m in model.items()},
            "append": {mix.dt(h): [(len(s), n) for s, n in m["runs"].values()] for h, m in model.items()},
            "restate": {dt: [r] for dt, r in exact.items()}}
    u = compare(mix, exact, rows)
    _print_users(u)
    out = capsys.readouterr().out
    ex = u["hours"][u["example"]]
    ways = ("naive", "append", "restate")
    table = {w[0]: w[1:] for w in map(str.split, out.splitlines()) if len(w) == 4 and w[0] in ways}
    assert table == {way: [str(u[way]["right"]), str(u[way]["wrong"]), str(u[way]["rows"])] for way in ways}
    assert table["restate"] == [str(HOURS), "0", str(HOURS)]
    assert f"append   {len(ex['append'])} rows, " + " + ".join(str(a) for a, _ in ex["append"]) in out
    assert f"exact {ex['exact'][0]} users in {ex['exact'][1]} events" in out


def test_the_demo_leaves_a_report_and_the_hive_tables(demo_run, hs2_cursor):
    work, out = demo_run
    page = Path(out["report"])
    assert page.parent == work and page.exists() and "trib-missed-chart" in page.read_text()
    lat = out["lateness"]
    assert lat["files"] == out["files"] and lat["arrival_from"]["commit"] > 0
    assert "only an incremental consumer catches 100%" in lat["consumer"]
    # what Hive users see (HiveServer2 on the same metastore): the trib DW, every event once
    hs2_cursor.execute("SELECT COUNT(1), COUNT(DISTINCT payload) FROM trib_demo.dw_trib")
    n, d = hs2_cursor.fetchall()[0]
    assert n == d == out["expected"]
    hs2_cursor.execute("SHOW PARTITIONS trib_demo.ods_raw_log")
    assert len(hs2_cursor.fetchall()) == HOURS
    # the restate job's table: one row per hour, the distinct users the demo counted
    hs2_cursor.execute("SELECT dt, users FROM trib_demo.dw_users_restate")
    assert sorted(hs2_cursor.fetchall()) == [(e["dt"], e["exact"][0]) for e in out["users"]["hours"]]


def test_a_rerun_on_the_classic_driver_starts_afresh_with_the_same_mix(demo_run, spark, hive_services):
    """The default --spark classic, on this process's SparkSession (the one the demo finds active)."""
    work, first = demo_run
    r = invoke_trib("-q", "demo", "--hours", "1", "--dir", str(work), "--hive-dir", hive_services.dir, "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    again = json.loads(r.stdout)
    assert again["spark"] == "classic"
    mix = build(1, 0, 2002)
    assert again["expected"] == len(mix.events())
    trib, naive = again["trib"], again["naive"]
    assert (trib["captured"], trib["duplicates"], trib["lost"], trib["unexpected"]) == (again["expected"], 0, 0, 0)
    # the naive SQL ran, its UDFs with it: one hour's only late file is a straggler within its lag
    assert (naive["captured"], naive["duplicates"], naive["lost"]) == (again["expected"], 0, 0)
    u = again["users"]  # one hour, nothing late, no next hour: all three ways one right row
    assert [(u[way]["right"], u[way]["rows"]) for way in ("naive", "append", "restate")] == [(1, 1)] * 3
    n = spark.sql("SELECT COUNT(1) AS n, COUNT(DISTINCT payload) AS d FROM trib_demo.dw_trib").collect()[0]
    assert n["n"] == n["d"] == again["expected"]  # the rerun's tables replaced the first run's


def test_a_server_on_another_catalog_is_refused_before_anything_is_built(spark_connect, tmp_path):
    """The server's catalog is the session's pair; a demo whose pair (DIR/hive) does not run cannot use it."""
    r = invoke_trib("demo", "--hours", "1", "--dir", tmp_path / "demo", "--spark", spark_connect.remote)
    assert r.returncode == 3, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "not the demo's Hive pair" in r.stderr and "trib spark up --hive-dir" in r.stderr
    assert not (tmp_path / "demo" / "raw").exists() and not (tmp_path / "demo" / "hive").exists()


@pytest.mark.unit
def test_a_bad_spark_or_a_server_not_answering_is_one_line(tmp_path):
    r = invoke_trib("demo", "--dir", tmp_path / "demo", "--spark", "yarn")
    assert r.returncode == 3 and "classic, connect, or" in r.stderr, r.stderr
    r = invoke_trib("demo", "--dir", tmp_path / "demo", "--spark", "sc://127.0.0.1:1")
    assert r.returncode == 8 and "nothing answers" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = invoke_trib("demo", "--dir", tmp_path / "demo", "--spark", "sc://127.0.0.1:1/;token=s3cr3t")
    assert r.returncode == 3 and "carries a secret" in r.stderr and "s3cr3t" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "demo" / "raw").exists()
