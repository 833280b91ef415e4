"""verify / clean / recover through the CLI (run in this process), and tables over foreign data."""

from __future__ import annotations

import json
import os
import time

import pytest
from conftest import invoke_trib
from helpers import LAYOUT, PARTITION, make_source, snapshot

from tributary_read.table.layout import Layout
from tributary_read.table.manifest import Transaction
from tributary_read.table.config import Table, TableConfig
from tributary_read.write.writer import TableWriter

pytestmark = pytest.mark.unit


def _create(root, *extra):
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, *extra, check=True)


def test_commit_landed_but_renames_did_not(tmp_path):
    """The crash window of the rename protocol: verify flags it, recover rolls forward."""
    root = tmp_path / "t"
    _create(root, "--protocol", "rename")
    t = Table.load(str(root))
    w = TableWriter(t)
    for i in range(10):
        w.write(json.dumps({"id": i}).encode(), 1_592_960_400_000 + i * 600_000)
    files = w.flush()
    # Exactly what TableWriter.commit does before its renames: the process "dies" here.
    t.log.commit(files, Transaction("etl", {"src": 9}), protocol="rename")
    assert all(f.staged and (root / f.staged).exists() and not (root / f.path).exists() for f in files)

    v = invoke_trib("verify", str(root), "--json")
    assert v.returncode == 9
    assert {p["problem"] for p in json.loads(v.stdout)["problems"]} == {"pending_roll_forward"}
    r = json.loads(invoke_trib("recover", str(root), "--app-id", "etl", "--json", check=True).stdout)
    assert r["offsets"] == {"src": 9} and sorted(r["rolled_forward"]) == sorted(f.path for f in files)
    assert invoke_trib("verify", str(root)).returncode == 0
    assert all((root / f.path).exists() and not (root / f.staged).exists() for f in files)


def test_verify_reports_missing_and_resized_files(tmp_path):
    root = tmp_path / "t"
    _create(root)
    src = make_source(tmp_path / "s.jsonl", 200, hours=3)
    invoke_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts", check=True)
    files = json.loads(invoke_trib("files", str(root), "--all", "--json", check=True).stdout)["files"]
    os.remove(root / files[0]["path"])
    with open(root / files[1]["path"], "ab") as f:
        f.write(b"extra\n")
    v = invoke_trib("verify", str(root), "--json")
    assert v.returncode == 9
    problems = {p["path"]: p["problem"] for p in json.loads(v.stdout)["problems"]}
    assert problems == {files[0]["path"]: "missing", files[1]["path"]: "size_mismatch"}


def test_verify_does_not_call_trib_state_untracked(tmp_path):
    """A consumer's plan, the ETL's lock and a stray file under _tributary/: only the stray is reported."""
    root = tmp_path / "t"
    _create(root)
    src = make_source(tmp_path / "s.jsonl", 10, hours=1)
    invoke_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts", check=True)
    invoke_trib("files", str(root), "--consumer", "etl", check=True)  # leaves a pending plan file
    (root / "_tributary" / "etl").mkdir()
    (root / "_tributary" / "etl" / "hourly.lock").write_text("")
    (root / "_tributary" / "stray.bin").write_text("x")
    v = json.loads(invoke_trib("verify", str(root), "--json", check=True).stdout)
    assert [u["path"] for u in v["untracked"]] == ["_tributary/stray.bin"] and v["orphans"] == []


def test_clean_deletes_only_old_trib_orphans(tmp_path):
    root = tmp_path / "t"
    # Foreign data written by another tool before the table existed.
    (root / "2020_06_24" / "01").mkdir(parents=True)
    foreign = root / "2020_06_24" / "01" / "202006240100-node1.log"
    foreign.write_text("foreign\n")
    _create(root)
    src = make_source(tmp_path / "s.jsonl", 100, hours=2)
    invoke_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts", check=True)
    # Orphans: files a crashed writer left behind, one old, one fresh.
    old = root / "2020_06_24" / "01" / "part-20200624010000-deadbeef-000001.jsonl"
    fresh = root / "2020_06_24" / "02" / ".part-20200624020000-deadbeef-000002.jsonl.inprogress"
    old.write_text("{}\n")
    fresh.write_text("{}\n")
    week_ago = time.time() - 7 * 86400
    os.utime(old, (week_ago, week_ago))
    os.utime(foreign, (week_ago, week_ago))

    v = json.loads(invoke_trib("verify", str(root), "--json", check=True).stdout)
    assert sorted(o["path"] for o in v["orphans"]) == sorted(
        str(p.relative_to(root)) for p in (old, fresh))
    assert [u["path"] for u in v["untracked"]] == [str(foreign.relative_to(root))]

    committed = {k: h for k, h in snapshot(root).items() if k.startswith("2020") and "part-2026" in k}
    dry = json.loads(invoke_trib("clean", str(root), "--dry-run", "--json", check=True).stdout)
    assert [d["path"] for d in dry["deleted"]] == [str(old.relative_to(root))] and old.exists()
    invoke_trib("clean", str(root), check=True)
    assert not old.exists() and fresh.exists() and foreign.read_text() == "foreign\n"
    after = snapshot(root)
    assert all(after.get(k) == h for k, h in committed.items())
    invoke_trib("clean", str(root), "--older-than", "0s", check=True)
    assert not fresh.exists() and foreign.exists()
    assert invoke_trib("verify", str(root)).returncode == 0


def test_table_alias_from_trib_toml(tmp_path):
    root = tmp_path / "data" / "events"
    (tmp_path / "trib.toml").write_text(f'[tables.events]\nroot = "{root}"\n')
    invoke_trib("table", "create", "events", "--layout", LAYOUT, "--partition", PARTITION, check=True, cwd=tmp_path)
    src = make_source(tmp_path / "s.jsonl", 10)
    invoke_trib("ingest", "events", "--source", str(src), "--app-id", "a", "--time-field", "ts",
             check=True, cwd=tmp_path)
    show = json.loads(invoke_trib("table", "show", "events", "--json", check=True, cwd=tmp_path).stdout)
    assert show["root"] == f"file://{root}" and show["latest_version"] == 1


def test_parquet_and_gzip_tables(tmp_path):
    import gzip

    import pyarrow.parquet as pq

    src = make_source(tmp_path / "s.jsonl", 500, hours=4)
    for fmt, comp in (("parquet", "zstd"), ("jsonl", "gzip"), ("text", "zstd")):
        root = tmp_path / f"t-{fmt}"
        _create(root, "--format", fmt, "--compression", comp)
        invoke_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts", check=True)
        files = json.loads(invoke_trib("files", str(root), "--all", "--json", check=True).stdout)["files"]
        n = 0
        for f in files:
            p = root / f["path"]
            if fmt == "parquet":
                assert p.suffix == ".parquet"
                n += pq.read_table(p).num_rows
                assert set(pq.read_table(p).column_names) == {"id", "ts", "msg"}
            elif comp == "gzip":
                assert p.name.endswith(".jsonl.gz")
                n += len(gzip.decompress(p.read_bytes()).splitlines())
            else:
                import pyarrow as pa
                assert p.name.endswith(".txt.zst")
                with pa.CompressedInputStream(pa.OSFile(str(p)), "zstd") as s:
                    n += len(s.read().splitlines())
        assert n == 500
        assert sum(f["records"] for f in files) == 500


def test_roll_by_records_and_size(tmp_path):
    root = str(tmp_path / "t")
    t = Table.create(root, TableConfig(Layout(LAYOUT, PARTITION)))
    from tributary_read.table.config import RollPolicy

    w = TableWriter(t, roll=RollPolicy(max_bytes=0, max_records=7, inactivity_s=0))
    for i in range(20):
        w.write(b'{"x": 1}', 1_592_960_400_000)
    assert [f.records for f in w.flush()] == [7, 7, 6]
    w.commit()
    w = TableWriter(t, roll=RollPolicy(max_bytes=2048, max_records=0, inactivity_s=0))
    for i in range(1000):
        w.write(b"y" * 99, 1_592_960_400_000)
    files = w.flush()
    assert len(files) > 1 and sum(f.records for f in files) == 1000


def test_roll_by_inactivity(tmp_path):
    t = Table.create(str(tmp_path / "t"), TableConfig(Layout(LAYOUT, PARTITION)))
    from tributary_read.table.config import RollPolicy

    now = [0.0]
    w = TableWriter(t, roll=RollPolicy(max_bytes=0, max_records=0, inactivity_s=30), clock=lambda: now[0])
    w.write(b"a", 1_592_960_400_000)            # partition 01
    now[0] = 20.0
    w.write(b"b", 1_592_960_400_000 + 3_600_000)  # partition 02
    now[0] = 40.0
    w.roll_idle()  # 01 idle for 40 s -> closed; 02 idle for 20 s -> open
    assert [f.partition["dt"] for f in w._closed and [e for e, _ in w._closed]] == ["2020062401"]
    assert list(w._open) == ["2020_06_24/02"]
