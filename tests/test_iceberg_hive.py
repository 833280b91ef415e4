"""``trib iceberg sync`` into a Hive metastore catalog (``thrift://HOST:PORT``): the session's metastore (``trib hive
up``'s, Hive 2.3 from the pyspark wheel), pyiceberg's HiveCatalog, whose commits take the metastore's table lock.

The main flow (ingest, late files, compaction, expiry) and a mirror killed -9 at each step run on this metastore
in tests/test_iceberg.py (its ``any_catalog``); here, what only a Hive catalog has: a table that mirrors its own
commits into it, a table lock left held by a commit that died, a metastore that stops answering, a metastore
table of another format by the name, HiveServer2's port given for the metastore's, and the Iceberg tables kept
in a database of their own, so other tests' ``SHOW TABLES`` do not see them.
"""

from __future__ import annotations

import os
import signal

import pytest
from conftest import invoke_trib
from test_iceberg import OLD, RECENT, _check, _ingest, _sync, _table
from test_iceberg_auto import _set

pytest.importorskip("pyiceberg")

pytestmark = pytest.mark.integration

#: The mirror's database: its own, never ``default`` (where other tests list tables).
NS = "trib_iceberg"


def test_a_hive_catalog_mirrors_a_tables_own_commits_and_each_failure_is_one_line(tmp_path, hive_services,
                                                                                   hs2_cursor):
    cat, name = hive_services.metastore_uri, f"{NS}.events"
    # A table that mirrors each of its own commits into the metastore (trib table set --iceberg).
    root = _table(tmp_path)
    assert _set(root, "--iceberg", name, "--iceberg-catalog", cat)["iceberg"]["catalog"] == cat
    _ingest(root, tmp_path, (*OLD, *RECENT), 2, 0)
    _ingest(root, tmp_path, OLD, 1, 100)  # late files into old partitions
    invoke_trib("compact", str(root), "--min-age", "0s", "--min-files", "2", check=True)
    _check(root, cat, name)

    # The table lock of a commit killed before its unlock (taken by hand here, never released): the sync ends
    # with one line, exit 5, after pyiceberg's wait for it (~14 s), not a retry per lost race; once the
    # metastore frees it (its housekeeping, after hive.txn.timeout; by hand here), the next sync goes on.
    from hive_metastore.ttypes import UnlockRequest

    from tributary_read.iceberg.catalog import open_catalog

    hive = open_catalog(cat)
    with hive._client as client:
        held = client.lock(hive._create_lock_request(NS, "events"))
    _set(root, "--no-iceberg")
    _ingest(root, tmp_path, RECENT, 1, 200)
    err = _sync(root, cat, name, code=5)["stderr"]
    assert "lock on it is still held" in err and err.count("\n") == 1, err
    with hive._client as client:
        client.unlock(UnlockRequest(lockid=held.lockid))
    assert _sync(root, cat, name)["version"] == 4
    _check(root, cat, name)

    # A metastore that stops answering (stopped by SIGSTOP, ?timeout=2s): one line, exit 8, nothing registered.
    _ingest(root, tmp_path, RECENT, 1, 300)
    os.kill(hive_services.hms_pid, signal.SIGSTOP)
    try:
        err = _sync(root, f"{cat}?timeout=2s", name, code=8)["stderr"]
    finally:
        os.kill(hive_services.hms_pid, signal.SIGCONT)
    assert "did not answer within 2s" in err and err.count("\n") == 1, err
    assert _sync(root, cat, name)["version"] == 5

    # The metastore holds it as an Iceberg table in its own database only.
    hs2_cursor.execute(f"SHOW TABLES IN {NS}")
    assert [r[1] for r in hs2_cursor.fetchall()] == ["events"]
    hs2_cursor.execute("SHOW TABLES IN default LIKE 'events'")
    assert hs2_cursor.fetchall() == []
    # A metastore table of another format by the name asked for: refused with one line, left alone.
    hs2_cursor.execute(f"CREATE TABLE {NS}.plain (id BIGINT) STORED AS PARQUET")
    err = _sync(root, cat, f"{NS}.plain", code=3)["stderr"]
    assert "not an Iceberg table" in err and err.count("\n") == 1
    # HiveServer2's port where the metastore's was meant: told in words, as trib partitions sync tells it.
    err = _sync(root, f"thrift://127.0.0.1:{hive_services.hs2_port}", name, code=8)["stderr"]
    assert "is not a Hive metastore" in err and err.count("\n") == 1
