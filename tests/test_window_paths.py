"""Issue 25, item 5: seed 002's mtime window holds in every Spark SQL path, or the query is refused.

One text Hive table, two hour partitions, files with known modification times (five in the first
hour, one of them inside the window: the issue's "5 rows instead of 1"). Each path a long-lived
session or a script may take runs through ``trib sql`` (exit codes) and, for the session that keeps
its SETs, through the Spark Thrift Server: a cached table, a view made before the SET lines,
``REFRESH``, a partition-pruned query, a DataFrame view of a converted Parquet table, and
``dip.*`` keys that disagree with ``tributary.input.*`` keys left in the session.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import datetime, timezone

import pytest

from conftest import hs2_connect, invoke_trib
from tributary_read.hive_udfs import registry as udfs

pytestmark = pytest.mark.integration

S, E = 1592928000000, 1592931599000  # the seed's window: [2020-06-24 00:00:00, 00:59:59] +08:00
#: partition -> {file key: mtime}; exactly one file per partition is inside [S, E]
FILES = {
    "2020062400": {"a": S - 86_400_000, "b": S - 1, "c": S + 60_000, "d": E + 1, "e": E + 86_400_000},
    "2020062401": {"f": S - 1000, "g": E, "h": E + 1000},
}
INSIDE = sorted(f"{dt}_{k}" for dt, files in FILES.items() for k, m in files.items() if S <= m <= E)
EVERY = sorted(f"{dt}_{k}" for dt, files in FILES.items() for k in files)
SEED_SET = ("set dip.mapreduce.input.fileinputformat.sync=true;\n"
            f"set dip.mapreduce.input.fileinputformat.starttime={S};\n"
            f"set dip.mapreduce.input.fileinputformat.endtime={E};\n")


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat().replace("+00:00", "Z")


@pytest.fixture(scope="module")
def table(spark, tmp_path_factory):
    db = f"window_paths_{uuid.uuid4().hex[:8]}"
    base = tmp_path_factory.mktemp("window-paths")
    spark.sql(f"CREATE DATABASE {db}")
    spark.sql(f"CREATE EXTERNAL TABLE {db}.logs (col1 STRING) PARTITIONED BY (dt STRING) "
              f"ROW FORMAT DELIMITED FIELDS TERMINATED BY '\\t' LOCATION '{base.as_uri()}'")
    for dt, files in FILES.items():
        hour = base / dt
        hour.mkdir()
        for key, m in files.items():
            path = hour / f"{key}.log"
            path.write_text(f"{dt}_{key}\n")
            os.utime(path, ns=(m * 1_000_000, m * 1_000_000))
        spark.sql(f"ALTER TABLE {db}.logs ADD PARTITION (dt = '{dt}') LOCATION '{hour.as_uri()}'")
    yield db
    spark.sql("CLEAR CACHE")
    spark.sql(f"DROP DATABASE IF EXISTS {db} CASCADE")


@pytest.fixture
def session(spark):
    """trib sql runs on the shared session: no window, no cache, no temp view left behind."""
    yield spark
    _window_off(spark)
    spark.sql("CLEAR CACHE")
    for view in spark.catalog.listTables("global_temp") + spark.catalog.listTables():
        if view.isTemporary:
            spark.catalog.dropTempView(view.name)
    spark.sql("USE default")
    spark.sql("SELECT 1").collect()  # analysis with sync off restores the Parquet/ORC conversion


def _window_off(spark) -> None:
    """What trib sql's SET lines left in the shared session (as a long-lived session keeps them)."""
    for key in [*udfs.PROPERTIES, "hive.input.format"]:
        spark.conf.unset(key)


def _sql(tmp_path, db: str, text: str):
    script = tmp_path / f"q-{uuid.uuid4().hex[:6]}.sql"
    script.write_text(text)
    return invoke_trib("-q", "sql", "-f", str(script), "--database", db, "--json")


def _rows(r) -> list[str]:
    assert r.returncode == 0, r.stderr
    return sorted(row[0] for row in json.loads(r.stdout)["rows"])


def test_the_plain_query_reads_exactly_the_window(table, session, tmp_path):
    assert _rows(_sql(tmp_path, table, "SELECT col1 FROM logs")) == EVERY
    assert _rows(_sql(tmp_path, table, SEED_SET + "SELECT col1 FROM logs")) == INSIDE


def test_a_cached_table_is_refused_with_sync_on_and_read_again_once_uncached(table, session, tmp_path):
    r = _sql(tmp_path, table, "CACHE TABLE logs;\n" + SEED_SET + "SELECT col1 FROM logs")
    assert r.returncode == 3, r.stderr
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "cached table" in line and "UNCACHE TABLE" in line, line
    # The cache is still there (a long-lived session): UNCACHE, and the window holds.
    assert _rows(_sql(tmp_path, table, SEED_SET + f"UNCACHE TABLE {table}.logs;\nSELECT col1 FROM logs")) == INSIDE
    # A DataFrame cached by the user's own code, with sync off: the same refusal once it is on.
    _window_off(session)
    session.sql(f"SELECT col1 FROM {table}.logs").cache().count()
    r = _sql(tmp_path, table, SEED_SET + "SELECT col1 FROM logs")
    assert r.returncode == 3 and "cached DataFrame" in r.stderr, r.stderr


def test_views_made_before_the_set_lines_read_through_the_window(table, session, tmp_path):
    text = ("CREATE OR REPLACE TEMPORARY VIEW v AS SELECT col1, dt FROM logs;\n"
            f"CREATE OR REPLACE VIEW {table}.pv AS SELECT col1, dt FROM logs;\n"
            "SELECT count(*) FROM v")  # the views are analyzed (and any listing cached) before the SETs
    assert invoke_trib("-q", "sql", "-f", _write(tmp_path, text), "--database", table).returncode == 0
    assert _rows(_sql(tmp_path, table, SEED_SET + "SELECT col1 FROM v")) == INSIDE
    assert _rows(_sql(tmp_path, table, SEED_SET + "SELECT col1 FROM pv")) == INSIDE
    # A DataFrame view keeps its analyzed plan: over a text table, a Hive scan through the filter.
    _window_off(session)
    session.table(f"{table}.logs").createOrReplaceTempView("dfv")
    assert _rows(_sql(tmp_path, table, SEED_SET + "SELECT col1 FROM dfv")) == INSIDE


def test_refresh_and_a_partition_pruned_query_keep_the_window(table, session, tmp_path):
    assert _rows(_sql(tmp_path, table, SEED_SET + "REFRESH TABLE logs;\nSELECT col1 FROM logs")) == INSIDE
    assert _rows(_sql(tmp_path, table, "REFRESH TABLE logs;\n" + SEED_SET + "SELECT col1 FROM logs")) == INSIDE
    pruned = _sql(tmp_path, table, SEED_SET + "SELECT col1 FROM logs WHERE dt = '2020062400'")
    assert _rows(pruned) == [n for n in INSIDE if n.startswith("2020062400")] == ["2020062400_c"]
    ranged = _sql(tmp_path, table, SEED_SET + "SELECT col1 FROM logs WHERE dt >= '2020062401'")
    assert _rows(ranged) == ["2020062401_g"]


def test_a_dataframe_view_of_a_converted_parquet_table_is_refused(table, session, tmp_path):
    """Made with sync off, the view holds Spark's native Parquet relation, which applies no filter."""
    _window_off(session)
    session.sql(f"CREATE TABLE {table}.pq (col1 STRING) STORED AS PARQUET")
    session.sql(f"INSERT INTO {table}.pq VALUES ('x')")
    session.table(f"{table}.pq").createOrReplaceTempView("pqv")
    r = _sql(tmp_path, table, SEED_SET + "SELECT col1 FROM pqv")
    assert r.returncode == 3 and "native reader" in r.stderr, r.stderr


@pytest.mark.parametrize("left, seed_key, why", [
    (f"tributary.input.starttime={_iso(S - 3_600_000)}", "starttime", "another window's start"),
    (f"tributary.input.endtime={E - 1}", "endtime", "a window one ms shorter"),
    ("tributary.input.sync=false", "sync", "a window switched off"),
])
def test_keys_that_disagree_are_refused_naming_both(table, session, tmp_path, left, seed_key, why):
    r = _sql(tmp_path, table, f"set {left};\n" + SEED_SET + "SELECT col1 FROM logs")
    assert r.returncode == 3, (why, r.stderr)
    line = r.stderr.strip()
    assert f"tributary.input.{seed_key}=" in line and f"dip.mapreduce.input.fileinputformat.{seed_key}=" in line
    assert "disagree" in line and len(line.splitlines()) == 1, line


def test_keys_that_agree_are_one_window(table, session, tmp_path):
    text = (f"set tributary.input.starttime={_iso(S)};\nset tributary.input.endtime={E};\n"
            "set tributary.input.sync=true;\n" + SEED_SET + "SELECT col1 FROM logs")
    assert _rows(_sql(tmp_path, table, text)) == INSIDE


def test_thrift_server_session_with_a_leftover_key_refuses_then_reads_once_reset(table, hive_services):
    """The issue's case: a beeline session that ran a trib-keyed script earlier, then the seed's."""
    conn = hs2_connect(hive_services)
    try:
        cur = conn.cursor()
        cur.execute(f"USE {table}")
        for stmt in ("set tributary.input.sync=true", f"set tributary.input.starttime={_iso(S - 86_400_000)}",
                     f"set tributary.input.endtime={_iso(S - 1)}"):
            cur.execute(stmt)
        cur.execute("SELECT col1 FROM logs")
        assert sorted(r[0] for r in cur.fetchall()) == ["2020062400_a", "2020062400_b", "2020062401_f"]
        for stmt in SEED_SET.strip().rstrip(";").split(";\n"):
            cur.execute(stmt)
        with pytest.raises(Exception, match="disagree") as e:
            cur.execute("SELECT col1 FROM logs")
            cur.fetchall()
        assert "tributary.input.starttime" in str(e.value) and "dip.mapreduce.input.fileinputformat" in str(e.value)
        for key in ("sync", "starttime", "endtime"):
            cur.execute(f"RESET tributary.input.{key}")
        cur.execute("SELECT col1 FROM logs")
        assert sorted(r[0] for r in cur.fetchall()) == INSIDE
    finally:
        conn.close()


def _write(tmp_path, text: str) -> str:
    path = tmp_path / f"s-{uuid.uuid4().hex[:6]}.sql"
    path.write_text(text)
    return str(path)
