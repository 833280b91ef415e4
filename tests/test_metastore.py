"""The metastore behaviour suite: one set of tests, run through HiveServer2 and through Spark's catalog.

Both backends talk to the session's real metastore; tables are created through
HiveServer2 (as a warehouse team would) and torn down after each test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from tributary_read.errors import InvalidInputError, MetastoreError, NoSuchHiveTableError
from tributary_read.hive.describe import parse_describe, stats_from
from tributary_read.hive.dialect import DIALECTS
from tributary_read.hive.model import TableName
from tributary_read.hive.sql import render_spec, sql_string
from tributary_read.io.location import same_location

pytestmark = pytest.mark.integration



@pytest.fixture
def ms(metastore):
    return metastore


@pytest.fixture
def table(hs2_cursor, tmp_path):
    """An empty EXTERNAL text table partitioned by dt, at tmp_path/data."""
    name = TableName("default", f"t_{uuid.uuid4().hex[:10]}")
    root = tmp_path / "data"
    root.mkdir()
    hs2_cursor.execute(f"CREATE EXTERNAL TABLE {name.sql} (line STRING) PARTITIONED BY (dt STRING) "
                       f"STORED AS TEXTFILE LOCATION 'file://{root}'")
    yield name, root
    hs2_cursor.execute(f"DROP TABLE IF EXISTS {name.sql}")


def _hour_dirs(root, n, lines=2):
    out = []
    for h in range(n):
        d = root / "2024_01_01" / f"{h:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "part-0.txt").write_text("".join(f"h{h} r{i}\n" for i in range(lines)))
        out.append(({"dt": f"20240101{h:02d}"}, f"file://{d}"))
    return out


def _locations(ms, name):
    return {p.values["dt"]: p.location for p in ms.list_partitions(name, with_locations=True)}


# -- the behaviour suite ------------------------------------------------------------------
def test_table_info(ms, table):
    name, root = table
    info = ms.table_info(name)
    assert info.partition_keys == ("dt",)
    assert info.columns == (("line", "string"),)
    assert same_location(info.location, f"file://{root}")
    assert info.external and info.table_type == "EXTERNAL"
    assert info.input_format == "org.apache.hadoop.mapred.TextInputFormat"
    assert info.serde == "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"


def test_add_in_batches_and_list_with_locations(ms, table):
    name, root = table
    parts = _hour_dirs(root, 24)
    assert ms.add_partitions(name, parts, batch_size=10) == 3  # 10 + 10 + 4 per statement
    assert sorted(p.values["dt"] for p in ms.list_partitions(name)) == [v["dt"] for v, _ in parts]
    locs = _locations(ms, name)
    assert all(same_location(locs[v["dt"]], loc) for v, loc in parts)
    # IF NOT EXISTS: adding again is a no-op, not an error.
    assert ms.add_partitions(name, parts[:3]) == 1
    assert len(ms.list_partitions(name)) == 24


def test_add_creates_a_missing_location_directory(ms, table):
    name, root = table
    missing = root / "2024_02_01" / "00"
    ms.add_partitions(name, [({"dt": "2024020100"}, f"file://{missing}")])
    assert missing.is_dir()


def test_drop_in_batches_keeps_files(ms, table):
    name, root = table
    parts = _hour_dirs(root, 8)
    ms.add_partitions(name, parts)
    assert ms.drop_partitions(name, [v for v, _ in parts[:5]], batch_size=2) == 3
    assert sorted(p.values["dt"] for p in ms.list_partitions(name)) == ["2024010105", "2024010106", "2024010107"]
    assert (root / "2024_01_01" / "00" / "part-0.txt").exists()  # EXTERNAL: unmounted, not deleted
    assert ms.drop_partitions(name, [{"dt": "2099010100"}]) == 1  # IF EXISTS


def test_set_locations(ms, table):
    name, root = table
    parts = _hour_dirs(root, 2)
    ms.add_partitions(name, parts)
    elsewhere = root / "moved"
    elsewhere.mkdir()
    ms.set_locations(name, [(parts[0][0], f"file://{elsewhere}")])
    assert same_location(_locations(ms, name)["2024010100"], f"file://{elsewhere}")
    assert same_location(ms.describe_partition(name, parts[0][0]).location, f"file://{elsewhere}")


def test_refresh_stats_follows_the_files(ms, table):
    name, root = table
    parts = _hour_dirs(root, 2)
    ms.add_partitions(name, parts)
    d = root / "2024_01_01" / "00"
    before = ms.describe_partition(name, parts[0][0]).stats
    assert before.size_bytes == (d / "part-0.txt").stat().st_size
    (d / "part-1.txt").write_text("late 1\nlate 2\nlate 3\n")
    (d / "_SUCCESS").write_text("")  # hidden: counted by no engine
    size = sum(f.stat().st_size for f in d.iterdir() if not f.name.startswith("_"))
    assert ms.refresh_stats(name, [parts[0][0]]) == 1
    after = ms.describe_partition(name, parts[0][0]).stats
    assert after.size_bytes == size  # what the engine's planner uses
    assert after.num_rows is None  # a row count from before the change would be wrong
    if ms.sets_hive_stats:  # Hive's own parameters, read by Hive, Trino, Impala
        assert (after.num_files, after.total_size) == (2, size)
    listed = next(p for p in ms.list_partitions(name, with_locations=True) if p.values == parts[0][0])
    if ms.lists_locations:
        assert listed.stats.size_bytes == size


def test_missing_partition_and_table(ms, table):
    name, _ = table
    assert ms.describe_partition(name, {"dt": "2099010100"}) is None
    with pytest.raises(NoSuchHiveTableError):
        ms.table_info(TableName("default", f"nosuch_{uuid.uuid4().hex[:8]}"))
    with pytest.raises(NoSuchHiveTableError):
        ms.list_partitions(TableName("default", f"nosuch_{uuid.uuid4().hex[:8]}"))


@pytest.mark.parametrize("value", ["1'; DROP TABLE x; --", "20240101`00", "2024 0101", "../2024", "٢٠٢٤٠١٠١٠٠",
                                   "a\nb", ""])
def test_hostile_values_never_reach_sql(ms, table, value):
    name, root = table
    ms.table_info(name)
    before = ms.statements
    with pytest.raises(InvalidInputError):
        ms.add_partitions(name, [({"dt": value}, f"file://{root}/x")])
    with pytest.raises(InvalidInputError):
        ms.drop_partitions(name, [{"dt": value}])
    assert ms.statements == before  # refused before anything was sent
    assert ms.list_partitions(name) == []


def test_locations_are_quoted(ms, table):
    name, root = table
    odd = root / "it's; a `dir`"  # quotes, semicolon, backticks, spaces in a *location*
    odd.mkdir()
    ms.add_partitions(name, [({"dt": "2024010100"}, f"file://{odd}")])
    assert same_location(_locations(ms, name)["2024010100"], f"file://{odd}")
    assert ms.table_info(name).partition_keys == ("dt",)


def test_engine_detected(ms):
    if ms.address.startswith("thrift://"):
        assert ms.dialect is DIALECTS["metastore"]  # no SQL engine at all
    else:
        assert ms.dialect is DIALECTS["spark"]  # Spark Thrift Server and SparkSession alike


# -- pure functions (no services) --------------------------------------------------------
def test_sql_string_escapes_and_refuses_control_characters():
    assert sql_string("it's") == "'it\\'s'"
    assert sql_string("a\\b") == "'a\\\\b'"
    with pytest.raises(InvalidInputError):
        sql_string("a\nb")


def test_render_spec_checks_keys_and_values():
    assert render_spec(["dt", "hr"], {"dt": "20240101", "hr": "01"}) == "`dt`='20240101', `hr`='01'"
    for bad in ({"dt": "x'y"}, {"hr": "01"}, {"dt": "a b"}, {"dt": "١"}):
        with pytest.raises(InvalidInputError):
            render_spec(["dt"], bad)


def test_table_names():
    assert TableName.parse("db.t").sql == "`db`.`t`"
    assert str(TableName.parse("T")) == "default.t"
    for bad in ("db.t;drop", "a.b.c", "`x`", "", "db."):
        with pytest.raises(InvalidInputError):
            TableName.parse(bad)


def test_same_location():
    assert same_location("file:/tmp/a/", "file:///tmp/a")
    assert same_location("hdfs://NN:8020/x", "hdfs://nn:8020/x/")
    assert not same_location("file:/tmp/a", "file:/tmp/b")
    assert not same_location(None, "file:/tmp/a")


def test_parse_describe_hive_format():
    """Hive 2/3 print ``Key:`` padded, and parameters one per row (Spark's format is covered live)."""
    rows = [("# col_name            ", "data_type           ", "comment             "),
            ("line                ", "string              ", ""), ("", None, None),
            ("# Partition Information", None, None), ("# col_name            ", "data_type           ", "comment"),
            ("dt                  ", "string              ", ""), ("", None, None),
            ("# Detailed Partition Information", None, None),
            ("Partition Value:    ", "[2024010100]        ", None),
            ("Database:           ", "default             ", None),
            ("Location:           ", "hdfs://nn:8020/logs/2024_01_01/00", None),
            ("Partition Parameters:", None, None), ("", "numFiles            ", "3                   "),
            ("", "totalSize           ", "1234                "), ("", "numRows             ", "-1"),
            ("", None, None), ("# Storage Information", None, None),
            ("SerDe Library:      ", "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe", None),
            ("Location:           ", "hdfs://nn:8020/logs", None)]
    d = parse_describe(rows)
    assert d.columns == [("line", "string")] and d.partition_keys == ["dt"]
    assert d.info["location"] == "hdfs://nn:8020/logs/2024_01_01/00"
    assert d.info["serde"].endswith("LazySimpleSerDe")
    s = stats_from(d.info, d.params)
    assert (s.size_bytes, s.num_files, s.total_size, s.num_rows) == (1234, 3, 1234, None)


def test_importing_does_not_import_engines():
    code = ("import sys, tributary_read, tributary_read.hive, tributary_read.hive.sync, tributary_read.hive.commit, "
            "tributary_read.hive.hs2, tributary_read.spark.catalog, cli.partitions\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'pyhive', 'py4j', 'thrift')]\n"
            "assert not bad, bad")
    env = {**os.environ, "PYTHONPATH": str(os.path.dirname(os.path.dirname(__file__)))}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_hs2_down_is_one_clear_error():
    from tributary_read.hive.hs2 import Hs2Metastore

    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(MetastoreError, match=f"cannot reach HiveServer2 at 127.0.0.1:{port}: connection refused"):
            Hs2Metastore("127.0.0.1", port, user="trib")


def test_hs2_auth_modes(hive_services, monkeypatch):
    """pyhive's modes pass through; Spark's HS2 runs hive.server2.authentication=NONE (SASL PLAIN)."""
    import importlib.util

    from tributary_read.errors import MetastoreAuthError, MissingDependencyError
    from tributary_read.hive.hs2 import Hs2Metastore

    hs2 = f"hs2://127.0.0.1:{hive_services.hs2_port}"
    monkeypatch.setenv("TRIB_HS2_PASSWORD", "secret")
    with Hs2Metastore.from_uri(f"{hs2}/default?auth=LDAP&user=analyst") as m:  # PLAIN with user + password
        assert m.dialect.name == "spark"
    monkeypatch.delenv("TRIB_HS2_PASSWORD")
    with pytest.raises(InvalidInputError, match="TRIB_HS2_PASSWORD"):
        Hs2Metastore.from_uri(f"{hs2}?auth=LDAP")
    with pytest.raises(MetastoreAuthError, match="closed the connection during the handshake: .*check auth=NOSASL "
                                                 "against its hive.server2.authentication"):
        Hs2Metastore.from_uri(f"{hs2}?auth=NOSASL&timeout=10")
    with Hs2Metastore.from_uri(f"{hs2}?engine=hive") as m:  # detection can be overridden
        assert m.dialect is DIALECTS["hive"]
    if not (importlib.util.find_spec("kerberos") or importlib.util.find_spec("sasl")):
        with pytest.raises(MissingDependencyError, match="auth=KERBEROS needs the GSSAPI library"):
            Hs2Metastore.from_uri(f"{hs2}?auth=KERBEROS")
    for bad, msg in [(f"hs2://u:pw@127.0.0.1:{hive_services.hs2_port}", "not in the URI"),
                     (f"{hs2}?autth=NONE", "unknown option"), (f"{hs2}?auth=PAM", "unknown HiveServer2 auth"),
                     ("hs2://:10000", "needs a host")]:
        with pytest.raises(InvalidInputError, match=msg):
            Hs2Metastore.from_uri(bad)
