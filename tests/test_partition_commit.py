"""Partition commit after writer commits: ``trib partitions configure|commit`` and ``trib ingest``."""

from __future__ import annotations

import json
import socket
import time
import uuid

import pytest

from conftest import hs2_connect, run_trib
from helpers import BASE_MS, LAYOUT, PARTITION, make_source
from tributary_read.hive.model import TableName
from tributary_read.hive.state import STATE_DIR
from tributary_read.table.layout import Layout

pytestmark = pytest.mark.integration

LAY = Layout(LAYOUT, PARTITION)
HOUR = 3_600_000


@pytest.fixture
def hive_table(hive_services, tmp_path):
    conn = hs2_connect(hive_services)
    cur = conn.cursor()
    name = TableName("default", f"c_{uuid.uuid4().hex[:10]}")
    root = tmp_path / "root"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--format", "text",
             check=True)
    cur.execute(f"CREATE EXTERNAL TABLE {name.sql} (line STRING) PARTITIONED BY (dt STRING) "
                f"STORED AS TEXTFILE LOCATION 'file://{root}'")
    yield name, root, cur
    cur.execute(f"DROP TABLE IF EXISTS {name.sql}")
    conn.close()


def _hs2(services) -> str:
    return f"hs2://127.0.0.1:{services.hs2_port}?user=trib"


def _source(path, hours: list[int], per_hour: int = 3):
    with open(path, "w") as f:
        i = 0
        for h in hours:
            for k in range(per_hour):
                f.write(json.dumps({"id": i, "ts": BASE_MS + h * HOUR + k * 1000}) + "\n")
                i += 1
    return path


def _ingest(root, src, *extra, check=False):
    app = [] if "--app-id" in extra else ["--app-id", "a"]
    return run_trib("ingest", str(root), "--source", str(src), *app, "--time-field", "ts", "--json", *extra,
                    check=check)


def _marked(root) -> list[str]:
    return sorted(str(p.parent.relative_to(root)) for p in root.rglob("_SUCCESS"))


def _hour_path(h: int) -> str:
    return LAY.for_time(BASE_MS + h * HOUR).path


def test_configure_shows_sets_and_removes(tmp_path):
    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    shown = json.loads(run_trib("partitions", "configure", str(root), "--json", check=True).stdout)
    assert shown["partition_commit"]["policies"] == []
    p = run_trib("partitions", "configure", str(root), "--policy", "success-file", "--policy", "metastore",
                 "--hive-table", "db.t", "--metastore", "hs2://h:10000", "--delay", "1h", "--clock", "event",
                 "--json", check=True)
    want = {"policies": ["success-file", "metastore"], "hive_table": "db.t", "metastore": "hs2://h:10000",
            "delay_ms": HOUR, "clock": "event", "success_file": "_SUCCESS"}
    assert json.loads(p.stdout)["partition_commit"] == want
    assert json.loads((root / "_tributary" / "table.json").read_text())["partition_commit"] == want
    assert json.loads(run_trib("table", "show", str(root), "--json", check=True).stdout)["partition_commit"] == want
    assert not [f for f in (root / "_tributary").iterdir() if f.name.endswith(".tmp")]
    for args, msg in [(["--policy", "metastore", "--off"], None),
                      (["--policy", "bogus"], "Invalid value"),
                      (["--success-file", "SUCCESS"], "must be a plain name starting with '_'"),
                      (["--hive-table", "a;b"], "bad Hive table name"),
                      (["--metastore", "mysql://x"], "unknown metastore")]:
        if msg is None:
            continue
        p = run_trib("partitions", "configure", str(root), *args)
        assert p.returncode in (2, 3) and msg in p.stderr, (args, p.stderr)
    p = run_trib("partitions", "configure", str(root), "--off", "--json", check=True)
    assert json.loads(p.stdout)["partition_commit"]["policies"] == []
    p = run_trib("partitions", "configure", str(root), "--policy", "metastore")
    assert p.returncode == 3 and "needs --hive-table and --metastore" in p.stderr
    p = run_trib("partitions", "commit", str(root))
    assert p.returncode == 3 and "no partition-commit policy" in p.stderr


def test_enabling_the_metastore_policy_forgets_which_commits_were_mounted(tmp_path):
    """Commits made while the policy was off were mounted nowhere: the next pass must read the whole log."""
    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    mark = root / "_tributary" / "partition-commit" / "mark.json"
    mark.parent.mkdir(parents=True)
    doc = {"format": "tributary-manifest", "format_version": 1, "kind": "partition-commit", "through_ms": 5,
           "watermark_ms": 0, "mounted_version": 7}
    mark.write_text(json.dumps(doc))
    run_trib("partitions", "configure", str(root), "--policy", "success-file", check=True)
    assert json.loads(mark.read_text())["mounted_version"] == 7  # the metastore policy is still off
    run_trib("partitions", "configure", str(root), "--policy", "metastore", "--hive-table", "db.t",
             "--metastore", "hs2://h:10000", check=True)
    assert "mounted_version" not in json.loads(mark.read_text())
    assert json.loads(mark.read_text())["through_ms"] == 5
    mark.write_text(json.dumps(doc))
    run_trib("partitions", "configure", str(root), "--metastore", "hs2://other:10000", check=True)
    assert json.loads(mark.read_text())["mounted_version"] == 7  # same Hive table, another address
    run_trib("partitions", "configure", str(root), "--hive-table", "db.u", check=True)
    assert "mounted_version" not in json.loads(mark.read_text())


def test_ingest_mounts_the_partitions_it_commits(hive_services, hive_table, tmp_path):
    name, root, cur = hive_table
    run_trib("partitions", "configure", str(root), "--policy", "metastore", "--hive-table", str(name),
             "--metastore", _hs2(hive_services), check=True)
    src = make_source(tmp_path / "s.jsonl", 600, hours=12)
    p = _ingest(root, src, "--commit-every", "100")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["commits"] == 6 and out["partition_commit"]["error"] is None
    assert len(out["partition_commit"]["added"]) == 12
    cur.execute(f"SHOW PARTITIONS {name.sql}")
    assert len(cur.fetchall()) == 12
    cur.execute(f"SELECT count(*) FROM {name.sql}")
    assert cur.fetchall() == [(600,)]  # every committed record, through HS2

    # The committer told the sync state where the partitions are: no DESCRIBE needed.
    sync = run_trib("partitions", "sync", str(root), "--json", check=True)  # target from the policy
    plan = json.loads(sync.stdout)
    assert plan["summary"]["described"] == 0 and plan["add"] == []
    assert all(e["reason"] == "files unknown since the partition was committed" for e in plan["refresh"])
    assert json.loads(run_trib("partitions", "sync", str(root), "--json", check=True).stdout)["statements"] == 0

    # A second ingest into the same hours adds nothing; the records are there.
    src2 = make_source(tmp_path / "s2.jsonl", 50, seed=9, hours=12)
    out = json.loads(run_trib("ingest", str(root), "--source", str(src2), "--app-id", "b", "--time-field", "ts",
                              "--json", check=True).stdout)
    assert out["partition_commit"]["added"] == []
    cur.execute(f"SELECT count(*) FROM {name.sql}")
    assert cur.fetchall() == [(650,)]

    # One commit into 20 hours (a backfill: one listing, not 20 lookups) after hour 0 was moved away by hand:
    # the 12 existing hours are refreshed, hour 0 is moved back, 8 hours are added.
    cur.execute(f"ALTER TABLE {name.sql} PARTITION (dt='{LAY.for_time(BASE_MS).values['dt']}') "
                f"SET LOCATION 'file://{tmp_path}'")
    out = json.loads(_ingest(root, _source(tmp_path / "wide.jsonl", list(range(20)), 1), "--app-id", "w",
                             check=True).stdout)["partition_commit"]
    specs = [LAY.for_time(BASE_MS + h * HOUR).spec for h in range(20)]
    assert out["added"] == specs[12:] and out["refreshed"] == specs[:12] and out["relocated"] == specs[:1]
    cur.execute(f"SELECT count(*) FROM {name.sql}")
    assert cur.fetchall() == [(670,)]


def test_success_file_on_the_processing_clock(tmp_path):
    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    run_trib("partitions", "configure", str(root), "--policy", "success-file", "--delay", "10m", check=True)
    src = _source(tmp_path / "s.jsonl", [0, 1, 2])
    now_ms = int(time.time() * 1000)
    with open(src, "a") as f:  # and one record in the current hour, which is not over yet
        f.write(json.dumps({"id": 99, "ts": now_ms}) + "\n")
    out = json.loads(_ingest(root, src).stdout)
    assert out["partition_commit"]["success_files"] == [_hour_path(0), _hour_path(1), _hour_path(2)]
    assert _marked(root) == [_hour_path(0), _hour_path(1), _hour_path(2)]
    assert (root / _hour_path(0) / "_SUCCESS").read_bytes() == b""
    # Hidden from readers: trib files does not list it as data.
    files = json.loads(run_trib("files", str(root), "--all", "--json", check=True).stdout)["files"]
    assert not [f for f in files if f["path"].endswith("_SUCCESS")]
    # Idempotent: nothing new to mark.
    again = json.loads(run_trib("partitions", "commit", str(root), "--json", check=True).stdout)
    assert again["success_files"] == []
    assert json.loads(run_trib("partitions", "commit", str(root), "--all", "--json", check=True).stdout)[
        "success_files"] == []


def test_success_file_on_the_event_clock(tmp_path):
    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    run_trib("partitions", "configure", str(root), "--policy", "success-file", "--clock", "event", "--delay", "1h",
             check=True)
    out = json.loads(_ingest(root, _source(tmp_path / "a.jsonl", [0, 1, 2, 3, 5])).stdout)
    # Watermark: the start of hour 5, so hours ending at least 1 h before it are complete.
    assert out["partition_commit"]["success_files"] == [_hour_path(h) for h in (0, 1, 2, 3)]
    out = json.loads(run_trib("ingest", str(root), "--source", str(_source(tmp_path / "b.jsonl", [9])),
                              "--app-id", "b", "--time-field", "ts", "--json", check=True).stdout)
    assert out["partition_commit"]["success_files"] == [_hour_path(5)]  # hours 6-8 hold no data
    dry = json.loads(run_trib("partitions", "commit", str(root), "--dry-run", "--json", check=True).stdout)
    assert dry["success_files"] == [] and dry["watermark_ms"] == LAY.for_time(BASE_MS + 9 * HOUR).start_ms
    # A late record into an old, already complete hour: marked at once (it is past due).
    (root / _hour_path(2) / "_SUCCESS").unlink()
    run_trib("ingest", str(root), "--source", str(_source(tmp_path / "c.jsonl", [2], 1)), "--app-id", "c",
             "--time-field", "ts", check=True)
    assert _hour_path(2) in _marked(root)


def test_metastore_down_during_ingest_then_catch_up(hive_services, hive_table, tmp_path):
    name, root, cur = hive_table
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"hs2://127.0.0.1:{s.getsockname()[1]}"
        run_trib("partitions", "configure", str(root), "--policy", "metastore", "--hive-table", str(name),
                 "--metastore", dead, check=True)
        p = _ingest(root, _source(tmp_path / "s.jsonl", [0, 1]), "--commit-every", "2")
    assert p.returncode == 8
    assert "records committed, but the partition commit failed: cannot reach HiveServer2" in p.stderr
    assert f"trib partitions commit {root}" in p.stderr
    assert json.loads(p.stdout)["records"] == 6  # the data commit landed all the same
    files = json.loads(run_trib("files", str(root), "--all", "--json", check=True).stdout)["files"]
    assert sum(f["records"] for f in files) == 6

    run_trib("partitions", "configure", str(root), "--metastore", _hs2(hive_services), check=True)
    dry = json.loads(run_trib("partitions", "commit", str(root), "--dry-run", "--json", check=True).stdout)
    assert dry["added"] == ["dt=2020062401", "dt=2020062402"]
    cur.execute(f"SHOW PARTITIONS {name.sql}")
    assert cur.fetchall() == []
    out = json.loads(run_trib("partitions", "commit", str(root), "--json", check=True).stdout)
    assert out["added"] == ["dt=2020062401", "dt=2020062402"]
    cur.execute(f"SELECT count(*) FROM {name.sql}")
    assert cur.fetchall() == [(6,)]
    assert (root / STATE_DIR / str(name)).is_dir()


def test_ingest_refreshes_late_partitions_and_moves_them_back_as_the_etl_does(hive_services, hive_table, tmp_path):
    """The metastore policy mounts through mount_commit, the ETL's Hive step: Hive's statistics follow late files."""
    from tributary_read.hive.thrift_metastore import ThriftMetastore

    name, root, cur = hive_table
    thrift = f"thrift://127.0.0.1:{hive_services.hms_port}"
    run_trib("partitions", "configure", str(root), "--policy", "metastore", "--hive-table", str(name),
             "--metastore", thrift, check=True)
    h0, s0, s1 = _hour_path(0), LAY.for_time(BASE_MS).spec, LAY.for_time(BASE_MS + HOUR).spec

    def stats(h: int):
        d = root / _hour_path(h)
        files = [f for f in d.iterdir() if not f.name.startswith((".", "_"))]
        with ThriftMetastore("127.0.0.1", hive_services.hms_port) as ms:
            p = ms.describe_partition(name, LAY.for_time(BASE_MS + h * HOUR).values)
        return (p.stats.num_files, p.stats.total_size), (len(files), sum(f.stat().st_size for f in files)), p

    out = json.loads(_ingest(root, _source(tmp_path / "a.jsonl", [0, 1])).stdout)["partition_commit"]
    assert out["added"] == [s0, s1] and out["refreshed"] == [] and out["error"] is None
    hive, files, _ = stats(0)
    assert hive == files and files[0] == 1

    # A late file into hour 0 (another producer, one commit): Hive's numFiles/totalSize count both files.
    p = run_trib("ingest", str(root), "--source", str(_source(tmp_path / "late.jsonl", [0], 2)), "--app-id", "late",
                 "--time-field", "ts", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)["partition_commit"]
    assert out["added"] == [] and out["refreshed"] == [s0] and out["relocated"] == []
    hive, files, _ = stats(0)
    assert hive == files and files[0] == 2
    cur.execute(f"SELECT count(*) FROM {name.sql}")
    assert cur.fetchall() == [(8,)]

    # Moved away by hand: the next commit into the hour moves it back to its directory, as the ETL does.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    value = LAY.for_time(BASE_MS).values["dt"]
    cur.execute(f"ALTER TABLE {name.sql} PARTITION (dt='{value}') SET LOCATION 'file://{elsewhere}'")
    assert stats(0)[2].location.rstrip("/").endswith("elsewhere")
    out = json.loads(run_trib("ingest", str(root), "--source", str(_source(tmp_path / "b.jsonl", [0], 1)),
                              "--app-id", "b", "--time-field", "ts", "--json", check=True).stdout)["partition_commit"]
    assert out["relocated"] == [s0] and out["refreshed"] == [s0]
    hive, files, p = stats(0)
    assert p.location.rstrip("/").endswith(h0) and hive == files and files[0] == 3
    cur.execute(f"SELECT count(*) FROM {name.sql}")
    assert cur.fetchall() == [(9,)]

    # Late data while the metastore is down: `trib partitions commit` refreshes what no run mounted.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        run_trib("partitions", "configure", str(root), "--metastore", f"thrift://127.0.0.1:{s.getsockname()[1]}",
                 check=True)
        p = _ingest(root, _source(tmp_path / "down.jsonl", [1], 2))
    assert p.returncode == 8, p.stderr
    run_trib("partitions", "configure", str(root), "--metastore", thrift, check=True)
    assert stats(1)[0] != stats(1)[1]  # stale: the ingest could not refresh them
    dry = json.loads(run_trib("partitions", "commit", str(root), "--dry-run", "--json", check=True).stdout)
    assert dry["added"] == [] and dry["refreshed"] == [s1]
    assert stats(1)[0] != stats(1)[1]
    done = json.loads(run_trib("partitions", "commit", str(root), "--json", check=True).stdout)
    assert done["added"] == [] and done["refreshed"] == [s1]
    assert stats(1)[0] == stats(1)[1]
    # Nothing left behind: the next pass has no commit to mount.
    again = json.loads(run_trib("partitions", "commit", str(root), "--json", check=True).stdout)
    assert again["added"] == [] and again["refreshed"] == []


def test_compaction_keeps_hives_counts_and_refreshes_the_partitions_statistics(hive_services, hive_table, tmp_path):
    """Issue 28: partition locations unchanged, beeline-equal counts before and after, and the rewritten
    partitions' statistics refreshed through the table's partition commit."""
    name, root, cur = hive_table
    run_trib("partitions", "configure", str(root), "--policy", "metastore", "--hive-table", str(name),
             "--metastore", _hs2(hive_services), check=True)
    for k in range(6):
        src = _source(tmp_path / f"s{k}.jsonl", [0, 1, 2], per_hour=20 + k)
        assert _ingest(root, src, "--app-id", f"a{k}").returncode == 0
    from etl_data import Hs2

    beeline = Hs2(hive_services)
    counts = f"SELECT dt, count(*) FROM {name.sql} GROUP BY dt"
    cur.execute(f"SELECT dt, count(*) FROM {name.sql} GROUP BY dt ORDER BY dt")
    before = cur.fetchall()
    beeline_before = sorted(beeline.beeline(counts, 2))
    cur.execute(f"SHOW PARTITIONS {name.sql}")
    parts = sorted(r[0] for r in cur.fetchall())
    p = run_trib("compact", str(root), "--min-age", "0s", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["files_out"] == 3 and out["partition_commit"]["error"] is None
    assert sorted(out["partition_commit"]["refreshed"]) == parts
    cur.execute(f"SELECT dt, count(*) FROM {name.sql} GROUP BY dt ORDER BY dt")
    assert cur.fetchall() == before and sum(n for _, n in before) == 6 * 3 * 20 + 3 * 15
    assert sorted(beeline.beeline(counts, 2)) == beeline_before and len(beeline_before) == 3  # Hive's own shell
    cur.execute(f"SHOW PARTITIONS {name.sql}")
    assert sorted(r[0] for r in cur.fetchall()) == parts
    cur.execute(f"DESCRIBE FORMATTED {name.sql} PARTITION ({parts[0].replace('=', '=' + chr(39))}')")
    described = " ".join(str(c) for row in cur.fetchall() for c in row)
    assert f"file:{root}/{_hour_path(0)}" in described.replace("file://", "file:")  # the same location


def test_expire_removes_the_success_marker_of_the_partitions_it_expires(tmp_path):
    """A marker says "complete": left in an expired partition it tells downstream to read nothing.
    verify counts the markers as trib's own, not as another tool's files."""
    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    run_trib("partitions", "configure", str(root), "--policy", "success-file", check=True)
    src = _source(tmp_path / "s.jsonl", [0, 1, 2])
    assert _ingest(root, src).returncode == 0
    marked = _marked(root)
    assert len(marked) == 3
    v = json.loads(run_trib("verify", str(root), "--json", check=True).stdout)
    assert v["untracked"] == [] and v["markers"] == 3
    p = run_trib("expire", str(root), "--older-than", "1d", "--grace", "0s", "--json")
    assert p.returncode == 0 and "not in the log" not in p.stderr, p.stderr
    assert sorted(f.rpartition("/")[0] for f in json.loads(p.stdout)["unmarked"]) == marked
    assert _marked(root) == []
    assert run_trib("verify", str(root)).returncode == 0
