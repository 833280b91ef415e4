"""``trib hive create-table``: the EXTERNAL Hive table from the trib table's own properties.

Created through the session's HiveServer2, then read back: the committed rows come out of Hive.
Idempotent; an existing table that differs is reported and left as it was.
"""

from __future__ import annotations

import json
import uuid

import pytest

from conftest import invoke_trib
from helpers import LAYOUT, PARTITION, make_source

pytestmark = pytest.mark.integration


def _table(tmp_path, fmt: str, n: int = 50):
    root = tmp_path / f"t-{fmt}"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--format", fmt,
                check=True)
    src = make_source(tmp_path / "src.jsonl", n, hours=3)
    invoke_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts", check=True)
    return root


def _create(root, hive, ms, *extra):
    return invoke_trib("hive", "create-table", str(root), "--hive-table", hive, "--metastore", ms, "--json", *extra)


@pytest.fixture
def hs2(hive_services, hs2_cursor):
    names = []
    yield f"hs2://127.0.0.1:{hive_services.hs2_port}", names, hs2_cursor
    for n in names:
        hs2_cursor.execute(f"DROP TABLE IF EXISTS {n}")


@pytest.mark.parametrize("fmt", ["parquet", "text"])
def test_create_read_back_and_idempotent(tmp_path, hs2, fmt):
    ms, names, cur = hs2
    root = _table(tmp_path, fmt)
    hive = f"default.ct_{fmt}_{uuid.uuid4().hex[:8]}"
    names.append(hive)
    extra = ["--columns", "line STRING"] if fmt == "text" else []
    r = _create(root, hive, ms, *extra)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["created"] is True and "CREATE EXTERNAL TABLE" in out["ddl"]
    if fmt == "parquet":  # inferred from the committed files' footers
        assert "`id` BIGINT" in out["ddl"] and "`msg` STRING" in out["ddl"]
    invoke_trib("partitions", "sync", str(root), "--hive-table", hive, "--metastore", ms, check=True)
    cur.execute(f"SELECT count(*), count(DISTINCT dt) FROM {hive}")
    assert cur.fetchall() == [(50, 3)]
    if fmt == "parquet":
        cur.execute(f"SELECT min(id), max(id) FROM {hive}")
        assert cur.fetchall() == [(0, 49)]
    again = _create(root, hive, ms, *extra)
    assert again.returncode == 0 and json.loads(again.stdout)["exists"] is True


def test_jsonl_columns_inferred_dry_run(tmp_path, hs2):
    ms, _, _ = hs2
    root = _table(tmp_path, "jsonl")
    r = _create(root, f"default.ct_json_{uuid.uuid4().hex[:8]}", ms, "--dry-run")
    assert r.returncode == 0, r.stderr
    ddl = json.loads(r.stdout)["ddl"]
    assert "`id` BIGINT, `ts` BIGINT, `msg` STRING" in ddl and "org.apache.hive.hcatalog.data.JsonSerDe" in ddl
    assert "PARTITIONED BY (`dt` STRING)" in ddl


def test_a_differing_table_is_reported_never_altered(tmp_path, hs2):
    ms, names, cur = hs2
    root = _table(tmp_path, "text")
    hive = f"default.ct_diff_{uuid.uuid4().hex[:8]}"
    names.append(hive)
    cur.execute(f"CREATE EXTERNAL TABLE {hive} (a INT) PARTITIONED BY (dt STRING) STORED AS TEXTFILE "
                f"LOCATION 'file://{tmp_path}/elsewhere'")
    r = _create(root, hive, ms, "--columns", "line STRING")
    assert r.returncode == 5 and r.stderr.count("\n") == 1, r.stderr
    assert "columns: expected [('line', 'string')], found [('a', 'int')]" in r.stderr
    assert "location: expected" in r.stderr
    cur.execute(f"DESCRIBE {hive}")
    assert [row[0] for row in cur.fetchall()][0] == "a"  # unchanged


def test_columns_of_a_table_over_foreign_json_files(tmp_path, hs2):
    """A table made over other tools' JSON files has no commit: its columns come from those files
    (once exit 1, ``'Table' object has no attribute 'root'``)."""
    ms, _, _ = hs2
    root = tmp_path / "flume"
    for hour, n in (("00", 2), ("01", 3)):
        d = root / "2020_06_24" / hour
        d.mkdir(parents=True)
        (d / "FlumeData.1592960400000.json").write_text(
            "".join(json.dumps({"id": i, "ok": True, "msg": "m", "score": 1.5}) + "\n" for i in range(n)))
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--format", "jsonl",
                check=True)
    r = _create(root, f"default.ct_foreign_{uuid.uuid4().hex[:8]}", ms, "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "(`id` BIGINT, `ok` BOOLEAN, `msg` STRING, `score` DOUBLE)" in json.loads(r.stdout)["ddl"]
    empty = tmp_path / "empty"
    invoke_trib("table", "create", str(empty), "--layout", LAYOUT, "--partition", PARTITION, "--format", "jsonl",
                check=True)
    r = _create(empty, "default.ct_none", ms, "--dry-run")
    assert r.returncode == 3 and "has no files to infer columns from: give --columns" in r.stderr, r.stderr


@pytest.mark.parametrize("args,code,message", [
    ([], 3, "cannot be inferred: give --columns"),
    (["--columns", "a STRING, 9b INT"], 3, "bad column '9b INT'"),
    (["--columns", "dt STRING"], 3, "also a partition key"),
    (["--columns", "a STRING", "--delimiter", "ab"], 3, "one character"),
])
def test_bad_input(tmp_path, hs2, args, code, message):
    ms, _, _ = hs2
    root = _table(tmp_path, "text", n=3)
    r = _create(root, "default.ct_bad", ms, *args)
    assert (r.returncode, r.stderr.count("\n")) == (code, 1), r.stderr
    assert message in r.stderr


def test_missing_root(tmp_path, hive_services):
    """(A thrift:// metastore creates the table too: tests/test_thrift_create_table.py.)"""
    r = _create(tmp_path / "nope", "default.x", "spark")
    assert r.returncode == 4 and r.stderr.count("\n") == 1, r.stderr
