"""`trib demo` end to end: a real raw table, the local Hive pair, real Spark, both hourly jobs.

The demo runs in this process (the session's SparkSession and Hive pair: starting another pair
costs two JVMs); `make demo` runs it standalone, starting and stopping its own pair.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import invoke_trib
from tributary_read.demo.mix import NAIVE_LAG_MS, build

pytestmark = pytest.mark.integration
HOURS = 3
LATE = ("late_fresh", "late_ingest", "preserved_mtime", "hidden_renamed")


@pytest.fixture(scope="module")
def demo_run(spark, hive_services, tmp_path_factory):
    work = tmp_path_factory.mktemp("demo")
    r = invoke_trib("demo", "--hours", str(HOURS), "--dir", str(work), "--hive-dir", hive_services.dir, "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    yield work, json.loads(r.stdout)
    spark.sparkContext.setLogLevel("WARN")


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


def test_the_demo_leaves_a_report_and_the_hive_tables(demo_run, spark):
    work, out = demo_run
    page = Path(out["report"])
    assert page.parent == work and page.exists() and "trib-missed-chart" in page.read_text()
    lat = out["lateness"]
    assert lat["files"] == out["files"] and lat["arrival_from"]["commit"] > 0
    assert "only an incremental consumer catches 100%" in lat["consumer"]
    # what Hive users see: the trib DW through the metastore, every event once
    n = spark.sql("SELECT COUNT(1) AS n, COUNT(DISTINCT payload) AS d FROM trib_demo.dw_trib").collect()[0]
    assert n["n"] == n["d"] == out["expected"]
    parts = {r[0] for r in spark.sql("SHOW PARTITIONS trib_demo.ods_raw_log").collect()}
    assert len(parts) == HOURS


def test_a_rerun_starts_afresh_with_the_same_mix(demo_run, hive_services):
    work, first = demo_run
    r = invoke_trib("-q", "demo", "--hours", "1", "--dir", str(work), "--hive-dir", hive_services.dir, "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    again = json.loads(r.stdout)
    assert again["trib"]["lost"] == again["trib"]["duplicates"] == 0
    assert again["expected"] == len(build(1, 0, 2002).events())
