"""``trib iceberg sync`` into a Hive metastore catalog (``thrift://HOST:PORT``): the session's metastore (``trib hive
up``'s, Hive 2.3 from the pyspark wheel), pyiceberg's HiveCatalog, whose commits take the metastore's table lock.

After an ingest, late files, a compaction, an expiry, mirrors killed -9 around the catalog commit and a table lock
left held (and in a table that mirrors its own commits), pyiceberg's scan and DuckDB's ``iceberg_scan`` read the
rows trib reads, partition column included; the Iceberg tables live in a database of their own, so other tests'
``SHOW TABLES`` do not see them.
"""

from __future__ import annotations

import pytest
from conftest import invoke_trib, run_trib
from test_iceberg import OLD, RECENT, _check, _ingest, _iceberg, _sync, _table
from test_iceberg_auto import _set

pytest.importorskip("pyiceberg")

pytestmark = pytest.mark.integration

#: The mirror's database: its own, never ``default`` (where other tests list tables).
NS = "trib_iceberg"


def test_a_mirror_into_the_hive_metastore_follows_every_commit_and_survives_kill_9(tmp_path, hive_services,
                                                                                    hs2_cursor):
    cat, name = hive_services.metastore_uri, f"{NS}.events"
    root = _table(tmp_path)
    _ingest(root, tmp_path, (*OLD, *RECENT), 4, 0)
    assert _sync(root, cat, name)["version"] == 1
    _check(root, cat, name)

    _ingest(root, tmp_path, OLD, 2, 100)  # late files into old partitions
    _ingest(root, tmp_path, RECENT, 2, 200, extra="score")  # and a late field: a new column
    assert [s["version"] for s in _sync(root, cat, name)["snapshots"]] == [2, 3]
    _check(root, cat, name)
    assert "score" in {f.name for f in _iceberg(cat, name).schema().fields}

    invoke_trib("compact", str(root), "--min-age", "0s", "--min-files", "2", check=True)
    assert [s["operation"] for s in _sync(root, cat, name)["snapshots"]] == ["replace"]
    _check(root, cat, name)
    invoke_trib("expire", str(root), "--older-than", "3d", check=True)
    assert [s["operation"] for s in _sync(root, cat, name)["snapshots"]] == ["expire"]
    _check(root, cat, name)

    # Killed -9 on either side of the catalog commit (the metastore lock is taken and released inside it),
    # before and after the read-back: each rerun registers each commit exactly once.
    for i, point in enumerate(("iceberg-listed", "iceberg-prepared", "iceberg-committed", "iceberg-read-back")):
        _ingest(root, tmp_path, RECENT, 1, 1000 + i)
        killed = run_trib("iceberg", "sync", str(root), "--table", name, "--catalog", cat,
                          env={"TRIB_CRASH_AT": point})
        assert killed.returncode == -9, (point, killed.stderr)
        assert _sync(root, cat, name)["version"] == 6 + i, point
        _check(root, cat, name)
    assert [s.summary["trib.version"] for s in _iceberg(cat, name).snapshots()] == [str(v) for v in range(1, 10)]

    # The table lock of a commit killed before its unlock (taken by hand here, never released): the sync ends
    # with one line, exit 5, after pyiceberg's wait for it (~14 s), not a retry per lost race; once the
    # metastore frees it (its housekeeping, after hive.txn.timeout; by hand here), the next sync goes on.
    from hive_metastore.ttypes import UnlockRequest

    from tributary_read.iceberg.catalog import open_catalog

    hive = open_catalog(cat)
    with hive._client as client:
        held = client.lock(hive._create_lock_request(NS, "events"))
    _ingest(root, tmp_path, RECENT, 1, 2000)
    err = _sync(root, cat, name, code=5)["stderr"]
    assert "lock on it is still held" in err and err.count("\n") == 1, err
    with hive._client as client:
        client.unlock(UnlockRequest(lockid=held.lockid))
    assert _sync(root, cat, name)["version"] == 10
    _check(root, cat, name)

    # A table that mirrors each of its own commits into the metastore (trib table set --iceberg).
    (tmp_path / "auto").mkdir()
    auto = _table(tmp_path / "auto")
    assert _set(auto, "--iceberg", f"{NS}.auto", "--iceberg-catalog", cat)["iceberg"]["catalog"] == cat
    _ingest(auto, tmp_path, (*OLD, *RECENT), 2, 5000)
    _check(auto, cat, f"{NS}.auto")

    # The metastore holds them as Iceberg tables in their own database only.
    hs2_cursor.execute(f"SHOW TABLES IN {NS}")
    assert sorted(r[1] for r in hs2_cursor.fetchall()) == ["auto", "events"]
    hs2_cursor.execute("SHOW TABLES IN default LIKE 'events'")
    assert hs2_cursor.fetchall() == []
    # A metastore table of another format by the name asked for: refused with one line, left alone.
    hs2_cursor.execute(f"CREATE TABLE {NS}.plain (id BIGINT) STORED AS PARQUET")
    err = _sync(root, cat, f"{NS}.plain", code=3)["stderr"]
    assert "not an Iceberg table" in err and err.count("\n") == 1
    # HiveServer2's port where the metastore's was meant: told in words, as trib partitions sync tells it.
    err = _sync(root, f"thrift://127.0.0.1:{hive_services.hs2_port}", name, code=8)["stderr"]
    assert "is not a Hive metastore" in err and err.count("\n") == 1
