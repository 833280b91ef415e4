"""``--metastore thrift://HOST:PORT``: partitions through the Hive Metastore's own Thrift API, end to end.

The behaviour suite (tests/test_metastore.py, the sync behaviours of tests/test_partitions_sync.py)
runs through this backend too, via the ``metastore`` fixture; here: the CLI, rows read back through
HiveServer2, and bad input.
"""

from __future__ import annotations

import json

import pytest

from conftest import _free_ports, run_trib
from test_partitions_sync import _lines, _show, hive_table, make_table, write_hour  # noqa: F401 - fixture

pytestmark = pytest.mark.integration


def _sync(hive_services, root, name, *extra):
    return run_trib("partitions", "sync", str(root), "--hive-table", str(name),
                    "--metastore", hive_services.metastore_uri, "--json", *extra)


def test_sync_through_thrift_then_query_through_hs2(hive_services, hive_table):
    name, root, cur = hive_table
    hours = 200
    make_table(root, hours)
    p = _sync(hive_services, root, name)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert len(out["add"]) == hours and out["statements"] == 1  # one add_partitions_req
    assert len(_show(cur, name)) == hours
    cur.execute(f"SELECT count(*) FROM {name.sql}")
    assert cur.fetchall() == [(sum(_lines(h) for h in range(hours)),)]

    write_hour(root, 3, name="part-late.txt")  # a late file in an old partition
    write_hour(root, hours)  # and a new hour
    p = _sync(hive_services, root, name)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert [a["partition"] for a in out["add"]] == [f"dt=20240109{hours - 192:02d}"]
    assert [r["partition"] for r in out["refresh"]] == ["dt=2024010103"]
    again = json.loads(_sync(hive_services, root, name).stdout)
    assert not (again["add"] or again["refresh"] or again["drop"])


@pytest.mark.parametrize("uri_suffix,code,message", [
    ("?auth=PLAIN", 3, "unknown metastore auth 'PLAIN'"),
    ("?colour=blue", 3, "unknown option(s) colour"),
    ("?timeout=soon", 3, "bad timeout"),
])
def test_bad_options_are_one_line(hive_services, tmp_path, uri_suffix, code, message):
    make_table(tmp_path / "root", 1)
    p = run_trib("partitions", "sync", str(tmp_path / "root"), "--hive-table", "default.t",
                 "--metastore", hive_services.metastore_uri + uri_suffix)
    assert (p.returncode, p.stderr.count("\n")) == (code, 1), p.stderr
    assert message in p.stderr


def test_unreachable_metastore_and_missing_table(hive_services, tmp_path):
    make_table(tmp_path / "root", 1)
    port = _free_ports(1)[0]
    p = run_trib("partitions", "sync", str(tmp_path / "root"), "--hive-table", "default.t",
                 "--metastore", f"thrift://127.0.0.1:{port}?timeout=2")
    assert p.returncode == 8 and p.stderr.count("\n") == 1 and "cannot reach the metastore" in p.stderr
    p = run_trib("partitions", "sync", str(tmp_path / "root"), "--hive-table", "default.nosuch_tbl",
                 "--metastore", hive_services.metastore_uri)
    assert p.returncode == 4 and "does not exist" in p.stderr, p.stderr


def test_client_encodes_with_the_c_codec(hive_services):
    """A batch of 1000 partitions encodes ~10x faster through thrift's fastbinary: same bytes, C code."""
    from thrift.protocol import TBinaryProtocol

    from tributary_read.hive.thrift_metastore import ThriftMetastore

    with ThriftMetastore.from_uri(hive_services.metastore_uri) as ms:
        proto = ms._client._oprot
        assert isinstance(proto, TBinaryProtocol.TBinaryProtocolAccelerated)
        assert proto._fast_encode is not None and proto._fast_decode is not None  # fastbinary is built here
        assert ms.database_exists("default")  # and a call still round-trips through it
