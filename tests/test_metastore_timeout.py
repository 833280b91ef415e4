"""Every metastore call is bounded by ``?timeout=`` (issue 25, item 8).

A real TCP server on 127.0.0.1 accepts and never answers (tests/faultproxy.py
``SilentServer``): the connect succeeds and every read waits, as with a hung
metastore. ``trib partitions sync`` and an ETL run against it end with exit 8
within a few seconds instead of holding the run (and the ETL's lock) for
10 minutes per call; the ETL's commit stands and its lock is released.
No JVM: the ETL's hour is empty, so it commits without Spark.
"""

from __future__ import annotations

import json
import time

import pytest
from conftest import invoke_trib
from etl_data import table_job_text
from faultproxy import SilentServer
from helpers import one_line_error

from tributary_read.table.config import Table, TableConfig
from tributary_read.table.layout import Layout

pytestmark = pytest.mark.unit

LAYOUT = Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")
T = "2024-01-01T05:00:00Z"


def _table_with_a_file(root):
    t = Table.create(str(root), TableConfig(LAYOUT, format="jsonl"))
    d = root / "2024_01_01" / "04"
    d.mkdir(parents=True)
    (d / "a.jsonl").write_text('{"id": 1}\n')
    return t


@pytest.mark.parametrize("scheme", ["thrift", "hs2"])
def test_partitions_sync_against_a_silent_metastore_exits_8_within_the_timeout(tmp_path, scheme):
    _table_with_a_file(tmp_path / "root")
    with SilentServer() as server:
        t0 = time.monotonic()
        p = invoke_trib("partitions", "sync", str(tmp_path / "root"), "--hive-table", "default.t",
                        "--metastore", f"{scheme}://127.0.0.1:{server.port}?timeout=2s")
        took = time.monotonic() - t0
    line = one_line_error(p, 8, "within 2s", "?timeout=")
    assert f"127.0.0.1:{server.port}" in line
    assert took < 15, f"the call was not bounded: {took:.1f}s"


def test_the_default_timeout_is_60s_and_a_bad_timeout_is_bad_input(tmp_path):
    from tributary_read.hive.uri import DEFAULT_TIMEOUT_S, MetastoreURI

    assert DEFAULT_TIMEOUT_S == 60.0
    assert MetastoreURI.parse("thrift://h:9083").timeout() == 60.0
    assert MetastoreURI.parse("thrift://h:9083?timeout=2s").timeout() == 2.0
    assert MetastoreURI.parse("hs2://h:1?timeout=5").timeout() == 5.0  # bare: seconds, as URIs always meant
    assert MetastoreURI.parse("hs2://h:1?timeout=1m").timeout() == 60.0
    _table_with_a_file(tmp_path / "root")
    for bad in ("soon", "0", "-1s", "1.5ms"):
        p = invoke_trib("partitions", "sync", str(tmp_path / "root"), "--hive-table", "t",
                        "--metastore", f"thrift://127.0.0.1:1?timeout={bad}")
        one_line_error(p, 3, "bad timeout")


def test_an_etl_run_that_times_out_exits_8_releases_its_lock_and_its_commit_stands(tmp_path):
    Table.create(str(tmp_path / "raw"), TableConfig(LAYOUT, format="jsonl"))  # an empty hour: no Spark
    out = Table.create(str(tmp_path / "events"), TableConfig(LAYOUT, format="parquet"))
    (tmp_path / "q.sql").write_text("SELECT * FROM raw")
    job = tmp_path / "job.toml"
    with SilentServer() as server:
        text = table_job_text("hourly", tail=f"""\
            [hive]
            table = "default.events"
            metastore = "thrift://127.0.0.1:{server.port}?timeout=2s"
            """)
        job.write_text(text)
        t0 = time.monotonic()
        p = invoke_trib("etl", "run", str(job), "--schedule-time", T, "--full-sync", "-q")
        assert time.monotonic() - t0 < 20
        one_line_error(p, 8, "did not answer", "within 2s")
        # The Hive table is looked up before the commit (issue 26): a hung metastore commits nothing.
        assert out.log.latest_version() == 0
        # The lock was released: a second run proceeds (to the lookup again, and the same bounded failure)
        p = invoke_trib("etl", "run", str(job), "--schedule-time", T, "--full-sync", "-q")
        one_line_error(p, 8, "within 2s")
    # and without the hung metastore the run commits once; its rerun commits nothing twice
    job.write_text(text.split("[hive]")[0])
    doc = json.loads(invoke_trib("etl", "run", str(job), "--schedule-time", T, "--json", check=True).stdout)
    assert doc["version"] == 1 and out.log.read_commit(1).transaction.app_id == "etl:hourly"
    doc = json.loads(invoke_trib("etl", "run", str(job), "--schedule-time", T, "--json", check=True).stdout)
    assert doc["already_committed"] is True and doc["version"] == 1
    assert out.log.latest_version() == 1

