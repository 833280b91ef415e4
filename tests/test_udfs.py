"""trib's JVM library: the mtime-window filter's exact semantics, the Spark extension for Parquet/ORC
Hive tables, every UDF in Spark SQL and through HiveServer2, and ``trib udfs``.

Seed 002's verbatim scripts are tests/test_seed002.py; here each rule is pinned on its own.
"""

from __future__ import annotations

import json
import os
import uuid
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import pytest

from conftest import hs2_connect, run_trib
from tributary_read.hive_udfs import registry as udfs
from tributary_read.read.window import TimeWindow
from tributary_read.table.layout import parse_timezone

pytestmark = pytest.mark.integration

W0 = 1_700_000_000_000  # the window under test: [W0, W1], both inclusive
W1 = W0 + 3_600_000 - 1


def _touch(path: Path, text: str, mtime_ms: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, ns=(mtime_ms * 1_000_000,) * 2)


@pytest.fixture
def session(spark):
    """The shared session, left as found: no window set, conversions restored."""
    yield spark
    for key in udfs.PROPERTIES:
        spark.conf.unset(key)
    spark.sql("SELECT 1").collect()


@pytest.fixture
def text_table(session, tmp_path):
    """A partitioned Hive text table; each file's one row names the file."""
    name = f"default.pf_{uuid.uuid4().hex[:8]}"
    mtimes = {"w0-1": W0 - 1, "w0": W0, "w0+1": W0 + 1, "w1-1": W1 - 1, "w1": W1, "w1+1": W1 + 1,
              "w0-1s": W0 - 1000, "w1+1s": W1 + 1000}
    for i, (key, m) in enumerate(mtimes.items()):
        _touch(tmp_path / "t" / f"h={i % 2}" / f"{key}.txt", f"{key}\n", m)
    _touch(tmp_path / "t" / "h=0" / "_hidden.txt", "hidden\n", W0 + 5)
    _touch(tmp_path / "t" / "h=1" / "part-1.txt.inprogress", "inprogress\n", W0 + 5)
    _touch(tmp_path / "t" / "h=1" / "part-2.txt.tmp", "tmp\n", W0 + 5)
    session.sql(f"CREATE EXTERNAL TABLE {name} (k STRING) PARTITIONED BY (h INT) STORED AS TEXTFILE "
                f"LOCATION '{(tmp_path / 't').as_uri()}'")
    session.sql(f"MSCK REPAIR TABLE {name}")
    yield name
    session.sql(f"DROP TABLE IF EXISTS {name}")


def _keys(spark, sql: str) -> list[str]:
    return sorted(r[0] for r in spark.sql(sql).collect())


def test_closed_interval_on_mtime_and_off_means_unchanged(session, text_table):
    everything = _keys(session, f"SELECT k FROM {text_table}")
    assert "inprogress" in everything and "tmp" in everything  # sync off: Hive as it always was
    assert "hidden" not in everything  # Hadoop's own rule
    session.sql("SET dip.mapreduce.input.fileinputformat.sync=true")
    session.sql(f"SET dip.mapreduce.input.fileinputformat.starttime={W0}")
    session.sql(f"SET dip.mapreduce.input.fileinputformat.endtime={W1}")
    assert _keys(session, f"SELECT k FROM {text_table}") == sorted(["w0", "w0+1", "w1-1", "w1"])
    assert _keys(session, f"SELECT k FROM {text_table} WHERE h = 1") == sorted(
        k for k in ["w0", "w1-1"])  # pruned partitions still list through the filter
    session.sql("SET dip.mapreduce.input.fileinputformat.endtime=")  # open end: Long.MAX_VALUE
    assert _keys(session, f"SELECT k FROM {text_table}") == sorted(
        ["w0", "w0+1", "w1-1", "w1", "w1+1", "w1+1s"])
    session.sql("SET dip.mapreduce.input.fileinputformat.sync=false")
    assert _keys(session, f"SELECT k FROM {text_table}") == everything


def test_tributary_namespace_takes_iso(session, text_table):
    """(When both namespaces set a key they must agree: tests/test_window_paths.py.)"""
    start = datetime.fromtimestamp(W0 / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")
    session.sql("SET dip.mapreduce.input.fileinputformat.starttime=")  # empty: unset
    session.sql("SET tributary.input.sync=true")
    session.sql(f"SET tributary.input.starttime={start}")
    session.sql(f"SET tributary.input.endtime={W0 + 1}")
    assert _keys(session, f"SELECT k FROM {text_table}") == ["w0", "w0+1"]


@pytest.mark.parametrize("key,value", [("dip.mapreduce.input.fileinputformat.sync", "yes"),
                                       ("dip.mapreduce.input.fileinputformat.starttime", "2023-11-14"),
                                       ("tributary.input.endtime", "tomorrow")])
def test_a_bad_value_fails_the_query_never_reads_all(session, text_table, key, value):
    if not key.endswith("sync"):
        session.sql("SET tributary.input.sync=true")
    session.sql(f"SET {key}={value}")
    with pytest.raises(Exception, match=f"trib mtime window: {key}={value}"):
        session.sql(f"SELECT k FROM {text_table}").collect()


@pytest.mark.parametrize("fmt", ["PARQUET", "TEXTFILE"])
def test_natively_read_hive_tables_get_the_window(session, tmp_path, fmt):
    """Spark would read Parquet natively, past the filter: while sync is on it reads it via Hive."""
    name = f"default.pf_{fmt.lower()}_{uuid.uuid4().hex[:8]}"
    loc = tmp_path / "t"
    session.sql(f"CREATE EXTERNAL TABLE {name} (k STRING) STORED AS {fmt} LOCATION '{loc.as_uri()}'")
    try:
        for key, m in (("in", W0 + 10), ("out", W1 + 10)):
            session.sql(f"INSERT INTO {name} VALUES ('{key}')")
            newest = max((p for p in loc.iterdir() if not p.name.startswith((".", "_"))),
                         key=lambda p: p.stat().st_mtime_ns)
            os.utime(newest, ns=(m * 1_000_000,) * 2)
        assert _keys(session, f"SELECT k FROM {name}") == ["in", "out"]  # cached natively now
        session.sql("SET tributary.input.sync=true")
        session.sql(f"SET tributary.input.starttime={W0}")
        session.sql(f"SET tributary.input.endtime={W1}")
        assert _keys(session, f"SELECT k FROM {name}") == ["in"]
        session.sql("SET tributary.input.sync=false")
        assert _keys(session, f"SELECT k FROM {name}") == ["in", "out"]
        assert session.conf.get("spark.sql.hive.convertMetastoreParquet") == "true"  # restored
    finally:
        session.sql(f"DROP TABLE IF EXISTS {name}")


def test_orc_hive_tables_are_refused_not_read_whole(session, tmp_path):
    """Hive's OrcInputFormat lists files itself and applies no path filter: refuse, never read all."""
    name = f"default.pf_orc_{uuid.uuid4().hex[:8]}"
    session.sql(f"CREATE EXTERNAL TABLE {name} (k STRING) STORED AS ORC LOCATION '{(tmp_path / 't').as_uri()}'")
    try:
        session.sql(f"INSERT INTO {name} VALUES ('x')")
        session.sql("SET tributary.input.sync=true")
        session.sql(f"SET tributary.input.starttime={W0}")
        with pytest.raises(Exception, match="trib mtime window: Hive table .*OrcInputFormat"):
            session.sql(f"SELECT k FROM {name}").collect()
        session.sql("SET tributary.input.sync=false")
        assert _keys(session, f"SELECT k FROM {name}") == ["x"]
    finally:
        session.sql(f"DROP TABLE IF EXISTS {name}")


# -- functions ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fns(spark):
    assert udfs.register(spark) == list(udfs.FUNCTIONS)
    return spark


def _one(spark, expr: str):
    return spark.sql(f"SELECT {expr}").collect()[0][0]


def test_partition_value(fns):
    ms = 1592931599999  # 2020-06-24 00:59:59.999 +08:00
    assert _one(fns, f"trib_partition_value({ms}L, 'yyyyMMddHH')") == "2020062316"
    assert _one(fns, f"trib_partition_value({ms}L, 'yyyyMMddHH', 'Asia/Shanghai')") == "2020062400"
    assert _one(fns, "trib_partition_value(TIMESTAMP'2020-06-24 01:30:00 UTC', 'yyyy_MM_dd/HH')") == "2020_06_24/01"
    assert _one(fns, "trib_partition_value('2020-06-24T01:30:00Z', 'yyyyMMdd')") == "20200624"
    assert _one(fns, "trib_partition_value(CAST(NULL AS BIGINT), 'yyyyMMddHH')") is None
    # issue 25, item 10: what Python refuses, the jar refuses in the same words
    # (from a column: a constant is folded at analysis, where Spark replaces the message with its own)
    with pytest.raises(Exception, match="trib_partition_value 1592931599 looks like epoch seconds"):
        fns.sql("SELECT trib_partition_value(m, 'yyyyMMddHH') FROM VALUES (1592931599L) t(m)").collect()
    with pytest.raises(Exception, match=r"trib_partition_value: event time 253402297200000 ms is out of range"):
        fns.sql("SELECT trib_partition_value(m, 'yyyyMMddHH', 'Pacific/Kiritimati') "
                "FROM VALUES (253402297200000L) t(m)").collect()
    with pytest.raises(Exception, match="trib_window_start_ms period 99999999999999d is longer than 9999 years"):
        fns.sql("SELECT trib_window_start_ms('2024-01-01T05:00:00Z', p, '0', 'UTC') "
                "FROM VALUES ('99999999999999d') t(p)").collect()
    with pytest.raises(Exception, match="trib_partition_value: unknown time zone Mars/Base"):
        fns.sql(f"SELECT trib_partition_value({ms}L, 'yyyyMMddHH', z) FROM VALUES ('Mars/Base') t(z)").collect()


@pytest.mark.parametrize("schedule,period,lag,tz", [
    ("2020-06-24T01:05:00+08:00", "1h", "0ms", "Asia/Shanghai"),
    ("2020-06-24T01:05:00Z", "1h", "10m", "UTC"),
    ("2024-03-10T03:30:00-04:00", "1h", "0ms", "America/New_York"),  # spring forward
    ("2024-11-03T01:30:00-05:00", "2h", "0ms", "America/New_York"),  # fall back
    ("2024-11-03T12:00:00Z", "1d", "1h", "America/New_York"),
])
def test_window_bounds_equal_pythons(fns, schedule, period, lag, tz):
    from tributary_read.read.window import Schedule, parse_instant
    from tributary_read.timespec import parse_duration_ms

    z = parse_timezone(tz)
    w = Schedule(parse_duration_ms(period), parse_duration_ms(lag), tz=z).window(parse_instant(schedule, z))
    got = fns.sql(f"SELECT trib_window_start_ms('{schedule}', '{period}', '{lag}', '{tz}'), "
                  f"trib_window_end_ms('{schedule}', '{period}', '{lag}', '{tz}')").collect()[0]
    assert (got[0], got[1]) == (w.start_ms, w.end_ms)


def test_lateness(fns):
    assert _one(fns, "trib_lateness_ms(1592931600500L, 1592931599999L)") == 501
    assert _one(fns, "trib_lateness_ms(TIMESTAMP'2020-06-24 01:00:00 UTC', '2020-06-24T00:00:00Z')") == 3_600_000
    assert _one(fns, "trib_lateness_ms(NULL, 0L)") is None  # 1L: epoch seconds' look, refused as Python does


def test_file_mtime_gives_each_rows_arrival(fns, tmp_path):
    _touch(tmp_path / "a.txt", "a\nb\n", W0)
    _touch(tmp_path / "b.txt", "c\n", W1)
    rows = fns.sql(f"SELECT value, trib_file_mtime_ms(input_file_name()) FROM text.`{tmp_path.as_uri()}`").collect()
    assert sorted((r[0], r[1]) for r in rows) == [("a", W0), ("b", W0), ("c", W1)]
    with pytest.raises(Exception, match="trib_file_mtime_ms: no such file"):
        fns.sql(f"SELECT trib_file_mtime_ms(p) FROM VALUES ('{(tmp_path / 'gone.txt').as_uri()}') t(p)").collect()


def test_functions_through_hiveserver2_with_add_jar(hive_services):
    """Hive's route: ADD JAR, CREATE TEMPORARY FUNCTION, query (on the Spark Thrift Server)."""
    conn = hs2_connect(hive_services)
    try:
        cur = conn.cursor()
        cur.execute(f"ADD JAR {udfs.jar_path()}")
        for stmt in udfs.register_sql():
            cur.execute(stmt)
        cur.execute("SELECT trib_partition_value(1592931599999, 'yyyyMMddHH', 'Asia/Shanghai'), "
                    "trib_window_end_ms('2020-06-24T01:05:00+08:00', '1h'), "
                    "trib_lateness_ms(1592931600010, 1592931600004)")  # epoch ms: a bare 10 reads as seconds
        assert cur.fetchall() == [("2020062400", 1592931599999, 6)]
    finally:
        conn.close()


def test_spark_args_alone_give_the_functions_on_the_thrift_server(hive_services):
    """`trib hive up` starts the Spark Thrift Server with only `trib udfs spark-args`: a fresh
    session calls every function with no ADD JAR and no CREATE FUNCTION (the extension injects them)."""
    conn = hs2_connect(hive_services)
    try:
        cur = conn.cursor()
        cur.execute("SELECT trib_partition_value(1592960400000, 'yyyyMMddHH'), "
                    "trib_window_start_ms('2020-06-24T01:05:00+08:00', '1h')")
        assert cur.fetchall() == [("2020062401", 1592928000000)]
        cur.execute("DESCRIBE FUNCTION trib_lateness_ms")
        assert "trib.udfs.LatenessUDF" in str(cur.fetchall())
    finally:
        conn.close()


def test_pyspark_session_has_the_functions_and_register_adds_none(spark):
    """sql_session builds with spark_conf(): the functions are there; register() runs no statement."""
    assert udfs.injected(spark)
    new = spark.newSession()  # every session of the application, as the Thrift Server's are
    assert new.sql("SELECT trib_partition_value(1592960400000, 'yyyyMMddHH')").collect()[0][0] == "2020062401"
    ran: list[str] = []

    class Recorder:
        def __getattr__(self, name):
            return getattr(spark, name)

        def sql(self, text):
            ran.append(text)
            return spark.sql(text)

    assert udfs.register(Recorder()) == list(udfs.FUNCTIONS) and ran == []


# -- the CLI ------------------------------------------------------------------------------
def test_udfs_jar_and_spark_args():
    out = json.loads(run_trib("udfs", "jar", "--json", check=True).stdout)
    assert out["path_filter"] == udfs.PATH_FILTER_CLASS and out["functions"] == udfs.FUNCTIONS
    with zipfile.ZipFile(out["jar"]) as z:
        names = set(z.namelist())
    for cls in [udfs.PATH_FILTER_CLASS, udfs.EXTENSIONS_CLASS, *udfs.FUNCTIONS.values()]:
        assert cls.replace(".", "/") + ".class" in names
    # Only trib/udfs/: the dev Hive pair's launcher (hive_udfs/java/trib/hive/) stays out of users' jar.
    assert {n.split("/")[1] for n in names if n.endswith(".class")} == {"udfs"}
    args = json.loads(run_trib("udfs", "spark-args", "--json", check=True).stdout)["args"]
    assert args == ["--jars", out["jar"],
                    "--conf", f"spark.hadoop.mapreduce.input.pathFilter.class={udfs.PATH_FILTER_CLASS}",
                    "--conf", f"spark.sql.extensions={udfs.EXTENSIONS_CLASS}"]
    plain = run_trib("udfs", "spark-args", check=True).stdout.strip()
    assert plain.startswith("--jars ") and udfs.EXTENSIONS_CLASS in plain


def test_udfs_jar_is_built_once_per_source_and_cached(tmp_path):
    env = {"TRIB_CACHE_DIR": str(tmp_path)}
    first = json.loads(run_trib("udfs", "jar", "--json", env=env, check=True).stdout)["jar"]
    assert first.startswith(str(tmp_path))
    stamp = os.stat(first).st_mtime_ns
    again = json.loads(run_trib("udfs", "jar", "--json", env=env, check=True).stdout)["jar"]
    assert again == first and os.stat(first).st_mtime_ns == stamp


def test_udfs_jar_without_a_jdk_is_one_line(tmp_path):
    r = run_trib("udfs", "jar", env={"TRIB_CACHE_DIR": str(tmp_path), "JAVA_HOME": str(tmp_path / "nojdk"),
                                     "PATH": "/nonexistent"})
    assert r.returncode == 10 and r.stderr.count("\n") == 1 and "java not found" in r.stderr


def test_udfs_register_permanent_through_hs2(hive_services, hs2_cursor):
    uri = f"hs2://127.0.0.1:{hive_services.hs2_port}"
    for _ in range(2):  # idempotent
        r = run_trib("udfs", "register", "--metastore", uri, "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["executed"] is True
    hs2_cursor.execute("SELECT default.trib_lateness_ms(1592931600010, 1592931600003)")  # epoch ms: 10 reads as seconds
    assert hs2_cursor.fetchall() == [(7,)]
    printed = run_trib("udfs", "register", check=True).stdout
    assert printed.count("CREATE TEMPORARY FUNCTION") == len(udfs.FUNCTIONS)
