"""``trib partitions sync`` against the session's real metastore and HiveServer2.

The acceptance flow (500+ hourly directories) runs through the CLI and HS2; the
sync behaviours run in-process through both metastore backends.
"""

from __future__ import annotations

import json
import shutil
import socket
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest

from conftest import hs2_connect, invoke_trib, run_trib
from helpers import LAYOUT, PARTITION, make_source
from tributary_read.hive.model import TableName
from tributary_read.io.location import same_location
from tributary_read.hive.state import STATE_DIR, StateStore
from tributary_read.hive.sync import SyncOptions, sync
from tributary_read.table.layout import Layout
from tributary_read.table.config import Table, TableConfig

pytestmark = pytest.mark.integration

START = datetime(2024, 1, 1, tzinfo=timezone.utc)
LAY = Layout(LAYOUT, PARTITION)
HOSTILE = ["2024_01_01/0'1", "2024_01_01/0`1", "2024_01_01/01;DROP TABLE x", "2024_01..01/00", "2024_01_01/0 1",
           "2024_01_01/٠١", "٢٠٢٤_٠١_٠١/٠٠", "2024_01_01/25", "2024_02_30/00", "2024_01_01/01/nested"]


def _lines(h: int) -> int:
    return h % 3 + 1


def make_table(root, hours: int) -> Table:
    """A text table with one file per hour directory; hour h holds h % 3 + 1 lines."""
    t = Table.create(str(root), TableConfig(LAY, format="text"))
    for h in range(hours):
        write_hour(root, h)
    return t


def write_hour(root, h: int, name: str = "part-0.txt", extra: str = "") -> None:
    d = root / LAY.for_time(int((START + timedelta(hours=h)).timestamp() * 1000)).path
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text("".join(f"h{h} line {i}\n" for i in range(_lines(h))) + extra)


def hour_dir(root, h: int):
    return root / LAY.for_time(int((START + timedelta(hours=h)).timestamp() * 1000)).path


def hour_dt(h: int) -> str:
    return LAY.for_time(int((START + timedelta(hours=h)).timestamp() * 1000)).values["dt"]


def assert_mounted(hive_services, name, root, hours: int) -> None:
    """The metastore's partitions of ``name`` are exactly hours 0..hours-1, each at its hour's directory, with
    Hive's file count and total size of that directory (one ``get_partitions`` call to the metastore)."""
    from tributary_read.hive.thrift_metastore import ThriftMetastore

    ms = ThriftMetastore("127.0.0.1", hive_services.hms_port)
    try:
        parts = {p.values["dt"]: p for p in ms.list_partitions(name, with_locations=True)}
    finally:
        ms.close()
    assert sorted(parts) == sorted(hour_dt(h) for h in range(hours))
    for h in range(hours):
        p, d = parts[hour_dt(h)], hour_dir(root, h)
        assert same_location(p.location, f"file://{d}"), (h, p.location)
        sizes = [f.stat().st_size for f in d.iterdir()]
        assert (p.stats.num_files, p.stats.total_size) == (len(sizes), sum(sizes)), (h, p.stats)


@pytest.fixture
def hive_table(hive_services, tmp_path):
    """A fresh EXTERNAL Hive table over tmp_path/root; yields (name, root, cursor)."""
    conn = hs2_connect(hive_services)
    cur = conn.cursor()
    name = TableName("default", f"s_{uuid.uuid4().hex[:10]}")
    root = tmp_path / "root"
    root.mkdir()
    cur.execute(f"CREATE EXTERNAL TABLE {name.sql} (line STRING) PARTITIONED BY (dt STRING) "
                f"STORED AS TEXTFILE LOCATION 'file://{root}'")
    yield name, root, cur
    cur.execute(f"DROP TABLE IF EXISTS {name.sql}")
    conn.close()


def _show(cur, name) -> list[str]:
    cur.execute(f"SHOW PARTITIONS {name.sql}")
    return sorted(r[0] for r in cur.fetchall())


def _cli_sync(hive_services, root, name, *extra):
    """``trib partitions sync`` through the CLI, in this process (the process itself is not under test here)."""
    return invoke_trib("partitions", "sync", str(root), "--hive-table", str(name),
                    "--metastore", f"hs2://127.0.0.1:{hive_services.hs2_port}?user=trib", "--json", *extra)


def test_a_jsonl_table_mounts_on_the_local_pair_and_reads_back(hive_services, tmp_path):
    """The DDL names hive-hcatalog-core's JsonSerDe, as a real Hive needs; the local pair (the wheel's Hive
    2.3, no hcatalog) once failed with exit 8, "JsonSerDe not found". Gzip files, columns inferred."""
    root, ms = tmp_path / "events", f"hs2://127.0.0.1:{hive_services.hs2_port}"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--format", "jsonl",
                "--compression", "gzip", check=True)
    src = make_source(tmp_path / "src.jsonl", 40, hours=2)
    invoke_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts", check=True)
    name = f"default.json_{uuid.uuid4().hex[:8]}"
    conn = hs2_connect(hive_services)
    cur = conn.cursor()
    try:
        made = invoke_trib("hive", "create-table", str(root), "--hive-table", name, "--metastore", ms)
        assert made.returncode == 0, made.stderr
        synced = invoke_trib("partitions", "sync", str(root), "--hive-table", name, "--metastore", ms, "--json")
        assert synced.returncode == 0, synced.stderr
        assert len(json.loads(synced.stdout)["add"]) == 2
        cur.execute(f"SELECT id, ts, msg, dt, typeof(id), typeof(msg) FROM {name} ORDER BY id")
        rows = cur.fetchall()
        want = [json.loads(line) for line in src.read_text().splitlines()]
        assert [(r[0], r[1], r[2]) for r in rows] == [(w["id"], w["ts"], w["msg"]) for w in want]
        assert {r[4:] for r in rows} == {("bigint", "string")} and {r[3] for r in rows} == {"2020062401",
                                                                                             "2020062402"}
    finally:
        cur.execute(f"DROP TABLE IF EXISTS {name}")
        conn.close()


# -- acceptance: 500+ hourly directories through the CLI and HS2 -------------------------
def test_sync_504_hours_through_hiveserver2(hive_services, hive_table):
    name, root, cur = hive_table
    hours = 504  # 21 days
    make_table(root, hours)
    (root / "README").write_text("not data\n")  # a file outside any partition directory

    p = _cli_sync(hive_services, root, name)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert set(out) >= {"add", "relocate", "drop", "refresh", "skipped"}
    assert len(out["add"]) == hours and not (out["relocate"] or out["drop"] or out["refresh"])
    assert out["add"][0] == {"partition": "dt=2024010100", "values": {"dt": "2024010100"},
                             "directory": "2024_01_01/00", "location": f"file://{root}/2024_01_01/00",
                             "files": 1, "bytes": len("h0 line 0\n")}
    assert out["statements"] == 1  # one batched ADD (batch 1000)
    assert len(_show(cur, name)) == hours

    # Every partition, as the metastore holds it, is its hour's directory with that directory's files: one
    # listing of the 504 partitions with their locations and Hive's own file statistics (which the metastore
    # took by listing each location when the partitions were added).
    assert_mounted(hive_services, name, root, hours)
    # And what HiveServer2 reads from them is the files' rows, partition by partition, on partitions spread
    # over the three weeks. A scan of all 504 reads nothing more per partition, and costs Spark's Thrift
    # Server a task per partition that deserializes every partition's reader (quadratic: minutes under load).
    sample = [0, 1, 71, 167, 250, 335, 420, hours - 1]
    dts = {hour_dt(h): h for h in sample}
    cur.execute(f"SELECT dt, line FROM {name.sql} WHERE dt IN ({', '.join(repr(d) for d in dts)})")
    rows = sorted(cur.fetchall())
    assert Counter(dt for dt, _ in rows) == {dt: _lines(h) for dt, h in dts.items()}
    files = sorted((hour_dt(h), line) for h in sample for f in hour_dir(root, h).glob("part-*.txt")
                   for line in f.read_text().splitlines())
    assert rows == files

    # A second sync plans nothing and runs no statement.
    again = json.loads(_cli_sync(hive_services, root, name).stdout)
    assert again["summary"]["add"] == again["summary"]["refresh"] == again["summary"]["drop"] == 0
    assert again["statements"] == 0 and again["summary"]["described"] == 0

    # New data in an old hour is a refresh; a new hour is an add; --dry-run changes nothing.
    write_hour(root, 3, "part-1.txt")
    write_hour(root, hours)
    before_state = StateStore(Table.load(str(root)).storage, f"{STATE_DIR}/{name}").versions()
    dry = json.loads(_cli_sync(hive_services, root, name, "--dry-run").stdout)
    assert [e["partition"] for e in dry["add"]] == ["dt=2024012200"]
    assert [(e["partition"], e["reason"]) for e in dry["refresh"]] == [("dt=2024010103", "files changed since the "
                                                                                         "last sync")]
    assert dry["applied"] is False and len(_show(cur, name)) == hours
    assert StateStore(Table.load(str(root)).storage, f"{STATE_DIR}/{name}").versions() == before_state
    applied = json.loads(_cli_sync(hive_services, root, name).stdout)
    assert applied["summary"]["add"] == 1 and applied["summary"]["refresh"] == 1
    cur.execute(f"SELECT count(*) FROM {name.sql} WHERE dt = '2024010103'")
    assert cur.fetchall() == [(2 * _lines(3),)]

    # Deleted directories are dropped only with --drop.
    for h in (0, 1, 2):
        shutil.rmtree(hour_dir(root, h))
    kept = json.loads(_cli_sync(hive_services, root, name).stdout)
    assert kept["drop"] == [] and len(_show(cur, name)) == hours + 1
    assert sum("is gone (pass --drop" in s["reason"] for s in kept["skipped"]) == 3
    dropped = json.loads(_cli_sync(hive_services, root, name, "--drop").stdout)
    assert [e["partition"] for e in dropped["drop"]] == ["dt=2024010100", "dt=2024010101", "dt=2024010102"]
    assert len(_show(cur, name)) == hours - 2
    final = json.loads(_cli_sync(hive_services, root, name, "--drop").stdout)
    assert final["statements"] == 0


def test_mass_drop_is_refused_unless_forced(hive_services, hive_table):
    name, root, cur = hive_table
    make_table(root, 40)
    assert _cli_sync(hive_services, root, name).returncode == 0
    for h in range(5):  # 12.5% of the partitions: a listing that lost a day looks like this
        shutil.rmtree(hour_dir(root, h))
    p = _cli_sync(hive_services, root, name, "--drop")
    assert p.returncode == 11, p.stderr
    assert "refusing to drop 5 of 40 partitions" in p.stderr and p.stderr.count("\n") == 1
    assert json.loads(p.stdout)["refused"] and len(_show(cur, name)) == 40  # the plan is printed, nothing applied
    p = _cli_sync(hive_services, root, name, "--drop", "--max-drop-fraction", "0.2")
    assert p.returncode == 0 and len(_show(cur, name)) == 35
    for h in range(5, 40):
        shutil.rmtree(hour_dir(root, h))
    assert _cli_sync(hive_services, root, name, "--drop").returncode == 11
    p = _cli_sync(hive_services, root, name, "--drop", "--force")
    assert p.returncode == 0, p.stderr
    assert _show(cur, name) == []


def test_hostile_directory_names_are_skipped_and_reported(hive_services, hive_table):
    name, root, cur = hive_table
    make_table(root, 3)
    for d in HOSTILE:
        (root / d).mkdir(parents=True, exist_ok=True)
        (root / d / "data.txt").write_text("evil\n")
    canary = TableName("default", f"x_{uuid.uuid4().hex[:8]}")
    cur.execute(f"CREATE TABLE {canary.sql} (a INT)")
    try:
        p = _cli_sync(hive_services, root, name)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout)
        skipped = {s.get("directory"): s["reason"] for s in out["skipped"]}
        for d in HOSTILE:
            assert d in skipped, (d, skipped)
        assert skipped["2024_01_01/01/nested"].startswith("nested inside partition directory")
        assert len(out["add"]) == 3
        assert _show(cur, name) == ["dt=2024010100", "dt=2024010101", "dt=2024010102"]
        cur.execute(f"SHOW TABLES IN default LIKE '{canary.name}'")
        assert len(cur.fetchall()) == 1  # nothing was injected
    finally:
        cur.execute(f"DROP TABLE IF EXISTS {canary.sql}")


def test_foreign_partitions_are_left_alone(hive_services, hive_table):
    name, root, cur = hive_table
    make_table(root, 2)
    (root / "manual").mkdir()
    cur.execute(f"ALTER TABLE {name.sql} ADD PARTITION (dt='manual') LOCATION 'file://{root}/manual'")
    out = json.loads(_cli_sync(hive_services, root, name, "--drop", "--force").stdout)
    assert out["drop"] == []
    assert any(s.get("partition") == "dt=manual" and "left alone" in s["reason"] for s in out["skipped"])
    assert "dt=manual" in _show(cur, name)


def test_hiveserver2_down_fails_clearly(tmp_path):
    root = tmp_path / "root"
    make_table(root, 2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        p = run_trib("partitions", "sync", str(root), "--hive-table", "default.t", "--metastore",
                     f"hs2://127.0.0.1:{port}")
    assert p.returncode == 8
    assert p.stderr == f"trib: error: cannot reach HiveServer2 at 127.0.0.1:{port}: connection refused\n"
    assert not (root / "_tributary" / "hive").exists()


def test_bad_arguments(tmp_path, hive_services, hive_table):
    name, root, _ = hive_table
    make_table(root, 1)
    hs2 = f"hs2://127.0.0.1:{hive_services.hs2_port}"
    cases = [(["--hive-table", "db.t;drop", "--metastore", hs2], 3, "bad Hive table name"),
             (["--hive-table", str(name), "--metastore", "mysql://x"], 3, "unknown metastore"),
             (["--hive-table", str(name), "--metastore", f"{hs2}?auth=PAM"], 3, "unknown HiveServer2 auth"),
             (["--hive-table", "default.nosuch_tbl", "--metastore", hs2], 4, "does not exist"),
             (["--hive-table", str(name)], 3, "give --metastore")]
    for args, code, msg in cases:
        p = run_trib("partitions", "sync", str(root), *args, env={"TRIB_METASTORE": ""})
        assert p.returncode == code and msg in p.stderr, (args, p.returncode, p.stderr)


def test_wrong_partition_keys_are_refused(hive_services, hive_table):
    name, root, cur = hive_table
    other = TableName("default", f"k_{uuid.uuid4().hex[:8]}")
    cur.execute(f"CREATE EXTERNAL TABLE {other.sql} (line STRING) PARTITIONED BY (day STRING) "
                f"LOCATION 'file://{root}'")
    try:
        make_table(root, 1)
        p = _cli_sync(hive_services, root, other)
        assert p.returncode == 3 and "partitioned by (day) but the layout makes (dt)" in p.stderr
    finally:
        cur.execute(f"DROP TABLE IF EXISTS {other.sql}")


# -- the sync behaviours through both backends (in-process) -----------------------------
@pytest.fixture
def backend(metastore):
    return metastore


def test_sync_behaviour(backend, hive_table):
    name, root, cur = hive_table
    t = make_table(root, 48)
    (root / HOSTILE[0]).mkdir(parents=True)
    (root / HOSTILE[0] / "x.txt").write_text("x\n")

    r = sync(t, backend, name)
    assert (len(r.plan.add), r.plan.partitions, r.applied) == (48, 0, True)
    assert [s.name for s in r.plan.skipped] == [HOSTILE[0]]
    assert len(_show(cur, name)) == 48
    again = sync(t, backend, name)
    assert again.plan.empty and again.statements == 0

    write_hour(root, 48)
    write_hour(root, 49)
    dry = sync(t, backend, name, dry_run=True)
    assert len(dry.plan.add) == 2 and not dry.applied and len(_show(cur, name)) == 48

    write_hour(root, 7, "part-1.txt")
    r = sync(t, backend, name)
    assert len(r.plan.add) == 2 and [e.partition for e in r.plan.refresh] == ["dt=2024010107"]
    size = sum(f.stat().st_size for f in hour_dir(root, 7).iterdir())
    assert backend.describe_partition(name, {"dt": "2024010107"}).stats.size_bytes == size

    for h in (10, 11):
        shutil.rmtree(hour_dir(root, h))
    assert sync(t, backend, name).plan.drop == ()
    r = sync(t, backend, name, SyncOptions(drop=True))
    assert [e.partition for e in r.plan.drop] == ["dt=2024010110", "dt=2024010111"]
    assert len(_show(cur, name)) == 48

    for h in range(12, 24):
        shutil.rmtree(hour_dir(root, h))
    r = sync(t, backend, name, SyncOptions(drop=True))
    assert r.plan.refused and not r.applied and len(_show(cur, name)) == 48
    r = sync(t, backend, name, SyncOptions(drop=True, force=True))
    assert r.applied and len(_show(cur, name)) == 36
    assert sync(t, backend, name, SyncOptions(drop=True)).statements == 0


def test_relocations(backend, hive_table):
    name, root, cur = hive_table
    t = make_table(root, 12)
    sync(t, backend, name)
    elsewhere = root.parent / "elsewhere"
    elsewhere.mkdir()
    cur.execute(f"ALTER TABLE {name.sql} PARTITION (dt='2024010102') SET LOCATION 'file://{elsewhere}'")
    r = sync(t, backend, name, dry_run=True)
    if backend.lists_locations:  # locations come with the listing: always checked
        assert [e.partition for e in r.plan.relocate] == ["dt=2024010102"]
    else:  # HS2: the state remembers the location trib set; checking costs a DESCRIBE each
        assert r.plan.relocate == ()
        r = sync(t, backend, name, SyncOptions(check_locations=True), dry_run=True)
        assert r.plan.described == 12 and [e.partition for e in r.plan.relocate] == ["dt=2024010102"]
    r = sync(t, backend, name, SyncOptions(check_locations=True))
    assert same_location(r.plan.relocate[0].previous, f"file://{elsewhere}")
    assert [e.reason for e in r.plan.refresh] == ["relocated"]
    assert same_location(backend.describe_partition(name, {"dt": "2024010102"}).location,
                         f"file://{hour_dir(root, 2)}")

    # Moving most of a table is refused: usually the same files under another file-system name.
    base = f"file://{root.parent}/../{root.parent.name}/{root.name}"  # same directories, spelled differently
    r = sync(t, backend, name, SyncOptions(location_base=base))
    assert len(r.plan.relocate) == 12 and "pass --location-base" in r.plan.refused and not r.applied


def test_adopting_partitions_mounted_by_another_tool(backend, hive_table):
    """The seed's old mount service made the partitions: trib learns their locations once."""
    name, root, cur = hive_table
    t = make_table(root, 6)
    for h in range(6):
        dt = (START + timedelta(hours=h)).strftime("%Y%m%d%H")
        cur.execute(f"ALTER TABLE {name.sql} ADD PARTITION (dt='{dt}') LOCATION 'file://{hour_dir(root, h)}'")
    write_hour(root, 1, "late.txt")  # stats taken at ADD time are now stale
    r = sync(t, backend, name)
    assert r.plan.add == () and r.plan.relocate == ()
    assert r.plan.described == (0 if backend.lists_locations else 6)
    assert [e.partition for e in r.plan.refresh] == ["dt=2024010101"]
    assert sync(t, backend, name).plan.described == 0


def test_state_file(hive_services, hive_table, tmp_path):
    name, root, _ = hive_table
    make_table(root, 3)
    state_dir = tmp_path / "state"
    p = _cli_sync(hive_services, root, name, "--state-dir", str(state_dir))
    assert p.returncode == 0, p.stderr
    assert not (root / STATE_DIR).exists()  # a read-only root stays untouched
    (f,) = (state_dir / str(name)).iterdir()
    assert f.name == "state-00000000000000000001.json"
    doc = json.loads(f.read_text())
    assert doc["kind"] == "hive-sync" and doc["hive_table"] == str(name)
    loc, files, size, mtime = doc["partitions"]["dt=2024010100"]
    assert loc == f"file://{root}/2024_01_01/00" and files == 1 and size == len("h0 line 0\n") and mtime > 0


def test_a_restated_partition_reaches_hive_whole_after_the_swap_never_before(hive_services, hive_table):
    """A restate's new files are staged in a hidden sibling directory: Hive counts the old partition until the
    swap, the new one after it (the partition's location never changes), and the sync refreshes its statistics."""
    from test_restate_commit import P1, _append, _restate
    from tributary_read.table.restate_swap import finish_restate

    name, root, cur = hive_table
    t = Table.create(str(root), TableConfig(LAY, format="text"))
    _append(t, P1, "part-a.txt", 3)
    _append(t, P1, "part-b.txt", 4, offset=1)

    def count() -> int:
        cur.execute(f"SELECT count(*) FROM {name.sql} WHERE dt = '2026112806'")
        return cur.fetchall()[0][0]

    assert _cli_sync(hive_services, root, name).returncode == 0
    assert count() == 7
    c = _restate(t, {P1: 5})
    assert count() == 7  # committed, not swapped: the staging directory is hidden from Hive
    finish_restate(t, c)
    synced = _cli_sync(hive_services, root, name)
    assert synced.returncode == 0, synced.stderr
    assert count() == 5
    # Statistics: refreshed (through HiveServer2 here, Spark's ANALYZE; the thrift backend recounts Hive's own).
    assert [e["partition"] for e in json.loads(synced.stdout)["refresh"]] == ["dt=2026112806"], synced.stdout
    from tributary_read.hive.thrift_metastore import ThriftMetastore

    ms = ThriftMetastore("127.0.0.1", hive_services.hms_port)
    try:
        ms.refresh_stats(name, [{"dt": "2026112806"}])
        (p,) = ms.list_partitions(name, with_locations=True)
    finally:
        ms.close()
    d = root / P1
    visible = [f for f in d.iterdir() if not f.name.startswith((".", "_"))]
    assert same_location(p.location, f"file://{d}")  # the location never moved
    assert (p.stats.num_files, p.stats.total_size) == (1, sum(f.stat().st_size for f in visible)), p.stats
