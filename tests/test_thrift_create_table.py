"""``trib hive create-table --metastore thrift://``: the table the HiveServer2 path's DDL makes, through
the metastore's own ``create_table`` (issue 29, item 5).

One trib table, two Hive tables over it: one created with SQL through the suite's HiveServer2, one
through its metastore's Thrift API. Read back through HiveServer2 (``DESCRIBE FORMATTED``) and through
the metastore (every field trib reads), they are the same table but for who made it and when; a
partition sync over ``thrift://`` then makes the thrift-created table's rows count through HiveServer2.
An ETL job with ``[hive] create = true`` and a ``thrift://`` metastore creates its table on its first run.
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import re
import uuid

import pytest

from conftest import invoke_trib
from test_create_table import _table
from test_etl_hive_first_run import readme_block, run_block, write_events

from tributary_read.hive.model import TableName
from tributary_read.hive.thrift_metastore import ThriftMetastore

pytestmark = pytest.mark.integration

N = 50  # the rows _table ingests
#: Rows of DESCRIBE FORMATTED that differ by nature: the table's name and when it was made; who made it
#: (HiveServer2's session user, the OS user through the API: the owner Hive's own client sets); and
#: "Created By", which Spark answers from the version it writes into the tables it creates itself
#: (``spark.sql.create.version``, one of its own ``spark.sql.*`` parameters a table made without Spark
#: lacks). transient_lastDdlTime, the metastore's clock, is masked in the properties row.
_BY_NATURE = {"Table", "Created Time", "Owner", "Created By"}
#: Per format: create-table's extra arguments (columns where none can be inferred, a delimiter).
EXTRA = {"text": ["--columns", "line STRING", "--delimiter", "|"],
         "csv": ["--columns", "id STRING, ts STRING, msg STRING"],
         "parquet": [], "jsonl": []}


def _create(root, hive: str, ms: str, fmt: str, *more):
    r = invoke_trib("hive", "create-table", str(root), "--hive-table", hive, "--metastore", ms, *EXTRA[fmt],
                    "--json", *more)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _describe(cur, name: str) -> dict[str, list]:
    """DESCRIBE FORMATTED's rows: the ones both tables share, and the ones that differ by nature.

    A column's comment "from deserializer" is masked: Spark reads the columns of a table it made from
    its own schema parameters, and those of any other from the table's SerDe, which OpenCSVSerde
    answers with that comment (the columns themselves are the same: all STRING, as that SerDe reads).
    """
    cur.execute(f"DESCRIBE FORMATTED {name}")
    rows = [tuple("" if v in (None, "from deserializer") else
                  re.sub(r"transient_lastDdlTime=\d+", "transient_lastDdlTime=T", str(v)) for v in r)
            for r in cur.fetchall()]
    return {"same": [r for r in rows if r[0] not in _BY_NATURE], "by_nature": [r for r in rows if r[0] in _BY_NATURE]}


def _as_stored(ms: ThriftMetastore, name: str):
    """Every field trib reads of the table, without its name, time and Spark's own ``spark.sql.*`` keys."""
    info = ms.table_info(TableName.parse(name))
    props = {k: v for k, v in info.properties.items() if not k.startswith("spark.sql.") and k != "transient_lastDdlTime"}
    return dataclasses.replace(info, name=None, created=None, properties=props)


@pytest.fixture
def pair(hive_services, hs2_cursor):
    names: list[str] = []
    ms = ThriftMetastore("127.0.0.1", hive_services.hms_port)
    yield (f"hs2://127.0.0.1:{hive_services.hs2_port}", hive_services.metastore_uri, hs2_cursor, ms, names)
    ms.close()
    for n in names:
        hs2_cursor.execute(f"DROP TABLE IF EXISTS {n}")


@pytest.mark.parametrize("fmt", ["text", "csv", "parquet"])
def test_thrift_and_hs2_create_the_same_table_and_the_rows_read_back(tmp_path, pair, fmt):
    hs2, thrift, cur, ms, names = pair
    root = _table(tmp_path, fmt)
    by_sql, by_api = (f"default.ct_{fmt}_{kind}_{uuid.uuid4().hex[:6]}" for kind in ("sql", "api"))
    names += [by_sql, by_api]
    made_sql, made_api = _create(root, by_sql, hs2, fmt), _create(root, by_api, thrift, fmt)
    assert (made_sql["created"], made_sql["through"], made_sql["ddl_is_equivalent"]) == (True, "sql", False)
    assert (made_api["created"], made_api["through"], made_api["ddl_is_equivalent"]) == (True, "metastore api", True)
    assert made_api["ddl"].replace(by_api.split(".")[1], "T") == made_sql["ddl"].replace(by_sql.split(".")[1], "T")

    sql, api = _describe(cur, by_sql), _describe(cur, by_api)
    assert api["same"] == sql["same"]
    assert ("Owner", getpass.getuser(), "") in api["by_nature"]
    assert _as_stored(ms, by_api) == _as_stored(ms, by_sql)
    assert made_api["definition"]["serde_params"] == ms.table_info(TableName.parse(by_api)).serde_params

    sync = invoke_trib("partitions", "sync", str(root), "--hive-table", by_api, "--metastore", thrift, "--json")
    assert sync.returncode == 0, sync.stderr
    cur.execute(f"SELECT count(*), count(DISTINCT dt) FROM {by_api}")
    assert cur.fetchall() == [(N, 3)]
    again = _create(root, by_api, thrift, fmt)
    assert (again["exists"], again["created"]) == (True, False)


def test_jsonl_through_the_api_is_what_its_ddl_says(tmp_path, pair):
    """The thrift-created table is checked against its own definition, field by field, and against the
    text table's storage rows (the same TEXTFILE); its rows reading back through the pair's own JsonSerDe
    is tests/test_partitions_sync.py's."""
    hs2, thrift, cur, ms, names = pair
    root = _table(tmp_path, "jsonl")
    name = f"default.ct_jsonl_{uuid.uuid4().hex[:6]}"
    names.append(name)
    dry = invoke_trib("hive", "create-table", str(root), "--hive-table", name, "--metastore", thrift, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    first, ddl = dry.stdout.split("\n", 1)
    assert first.startswith("-- would be created through the metastore API (create_table) of " + thrift)
    assert ddl.startswith("CREATE EXTERNAL TABLE") and "org.apache.hive.hcatalog.data.JsonSerDe" in ddl
    assert "would create" in dry.stderr and "through the metastore API" in dry.stderr
    with pytest.raises(Exception, match="does not exist"):
        ms.table_info(TableName.parse(name))  # a dry run creates nothing

    made = _create(root, name, thrift, "jsonl")
    d = made["definition"]
    info = ms.table_info(TableName.parse(name))
    assert [list(c) for c in info.columns] == d["columns"] == [["id", "bigint"], ["ts", "bigint"], ["msg", "string"]]
    assert [list(c) for c in info.partition_columns] == d["partition_keys"] == [["dt", "string"]]
    assert (info.serde, info.serde_params, info.input_format) == (d["serde"], d["serde_params"], d["input_format"])
    assert info.table_type == "EXTERNAL" and info.location == d["location"]
    assert {k: info.properties[k] for k in d["parameters"]} == {"EXTERNAL": "TRUE", "tributary.format": "jsonl"}
    rows = dict((r[0], r[1]) for r in _describe(cur, name)["same"])
    assert rows["Serde Library"] == "org.apache.hive.hcatalog.data.JsonSerDe"
    assert rows["InputFormat"] == "org.apache.hadoop.mapred.TextInputFormat"
    assert rows["OutputFormat"] == "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat"
    assert rows["Storage Properties"] == "[serialization.format=1]" and rows["Type"] == "EXTERNAL"


def test_missing_database_and_differing_table_over_thrift(tmp_path, pair):
    hs2, thrift, cur, ms, names = pair
    root = _table(tmp_path, "parquet")
    r = invoke_trib("hive", "create-table", str(root), "--hive-table", f"nodb_{uuid.uuid4().hex[:6]}.t",
                    "--metastore", thrift)
    assert r.returncode == 3 and r.stderr.count("\n") == 1 and "CREATE DATABASE" in r.stderr, r.stderr
    name = f"default.ct_diff_{uuid.uuid4().hex[:6]}"
    names.append(name)
    _create(root, name, thrift, "parquet")
    r = invoke_trib("hive", "create-table", str(root), "--hive-table", name, "--metastore", thrift,
                    "--columns", "other STRING")
    assert r.returncode == 5 and "columns: expected [('other', 'string')]" in r.stderr, r.stderr


def test_an_etl_job_with_create_and_a_thrift_metastore_creates_its_table(tmp_path, hive_services, hs2_cursor):
    hive = f"default.hourly_t_{uuid.uuid4().hex[:8]}"
    write_events(tmp_path / "events.jsonl")
    try:
        results = run_block(readme_block(), tmp_path, {"/data/": f"{tmp_path}/data/", "default.hourly": hive,
                                                       "hs2://127.0.0.1:10000": hive_services.metastore_uri})
        failed = {k: (r.returncode, r.stderr[-800:]) for k, r in results.items() if r.returncode != 0}
        assert not failed, failed
        doc = json.loads(next(r for k, r in results.items() if k.startswith("trib etl run") and "--json" in k).stdout)
        assert doc["hive_table"]["missing"] == f"table {hive}" and doc["hive"]["added"] == ["dt=2024010104"]
        hs2_cursor.execute(f"SELECT dt, count(*) FROM {hive} GROUP BY dt")
        assert hs2_cursor.fetchall() == [("2024010104", 30)]
        hs2_cursor.execute(f"DESCRIBE FORMATTED {hive}")
        rows = dict((r[0], r[1]) for r in hs2_cursor.fetchall())
        assert rows["Type"] == "EXTERNAL" and rows["Owner"] == getpass.getuser()  # made through the API
    finally:
        hs2_cursor.execute(f"DROP TABLE IF EXISTS {hive}")


def test_a_thrift_uri_at_the_hiveserver2_port_names_the_wrong_port(tmp_path, hive_services):
    """thrift:// pointed at HiveServer2 once said only "check auth=NOSASL against hive.metastore.sasl.enabled"."""
    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", "{yyyy}_{MM}_{dd}/{HH}", "--partition", "dt={yyyy}{MM}{dd}{HH}",
                "--format", "text", check=True)
    port = hive_services.hs2_port
    r = invoke_trib("hive", "create-table", str(root), "--hive-table", "default.x", "--columns", "line STRING",
                    "--metastore", f"thrift://127.0.0.1:{port}", "--dry-run")
    assert r.returncode == 8 and r.stderr.count("\n") == 1, r.stderr
    assert f"127.0.0.1:{port} is not a Hive metastore" in r.stderr and "as HiveServer2 does" in r.stderr
    assert f"hs2://127.0.0.1:{port}" in r.stderr and "NOSASL" not in r.stderr
