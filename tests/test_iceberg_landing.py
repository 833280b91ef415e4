"""``trib iceberg sync ROOT --consumer NAME``: a landing zone other tools write Parquet into, registered in Iceberg.

A foreign writer (pyarrow) writes Parquet files into hour directories; each sync registers what the consumer
delivers as one snapshot per plan, and after each step pyiceberg's scan and DuckDB's ``iceberg_scan`` return
exactly the records written, partition column ``dt`` included (the layout's value, never NULL), each file once.
Late files into old hours are added once; a sync killed -9 at each of its steps and rerun registers each file
once; two syncs at once register a plan once; refused files commit nothing and leave the plan pending.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import REPO, TRIB, invoke_trib, run_trib
from helpers import LAYOUT, PARTITION
from test_iceberg import _duckdb_rows, _iceberg, _ingest, _live_paths, _pyiceberg_rows, _stopped, _sync, _table

pytest.importorskip("pyiceberg")

pytestmark = pytest.mark.integration

NAME = "db.landing"


def _write(root: Path, hour: str, name: str, ids, rows: Counter | None = None, **extra) -> Path:
    """A foreign writer's Parquet file ``root/hour/name`` of ``ids``; its (id, dt) added to ``rows``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = root / hour / name
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = {"id": list(ids), "name": [f"n{i}" for i in ids], **extra}
    pq.write_table(pa.table(cols), path)
    if rows is not None:
        rows.update((i, hour.replace("_", "").replace("/", "")) for i in ids)
    return path


def _land(root: Path, cat: str, *extra: str, consumer: str = "ice", name: str = NAME, code: int = 0,
          process: bool = False, env: dict | None = None):
    args = ("iceberg", "sync", str(root), "--consumer", consumer, "--table", name, "--catalog", cat,
            "--layout", LAYOUT, "--partition", PARTITION, "--min-age", "0s", *extra, "--json")
    proc = run_trib(*args, env=env) if process else invoke_trib(*args)
    if code is None:
        return proc
    assert proc.returncode == code, proc.stderr
    return json.loads(proc.stdout) if code == 0 else proc.stderr


def _check(cat: str, rows: Counter, name: str = NAME) -> None:
    """Both readers return exactly the records written, each file listed once."""
    ice = _iceberg(cat, name)
    assert _pyiceberg_rows(ice) == rows
    assert _duckdb_rows(ice) == rows
    assert set(_live_paths(ice).values()) == {1}


def _plans(cat: str, name: str = NAME) -> list[str]:
    return [s.summary["trib.plan"] for s in _iceberg(cat, name).snapshots()]


def _pending(root: Path) -> str | None:
    show = json.loads(invoke_trib("consumer", "show", str(root), "ice", "--json", check=True).stdout)
    return show["pending"]["plan_id"] if show["pending"] else None


def test_a_landing_zone_is_registered_plan_by_plan_late_files_once(tmp_path):
    root, cat, rows = tmp_path / "land", f"sqlite:///{tmp_path / 'cat.db'}", Counter()
    _write(root, "2024_01_01/00", "a.parquet", range(0, 5), rows)
    _write(root, "2024_01_01/01", "b.parquet", range(5, 8), rows)
    out = _land(root, cat)
    assert [p["files"] for p in out["plans"]] == [2] and out["plans"][0]["records"] == 8
    _check(cat, rows)
    snap = _iceberg(cat, NAME).current_snapshot().summary
    assert snap["trib.landing"] == root.as_uri() and snap["trib.consumer"] == "ice"
    assert snap["trib.plan"] == out["plans"][0]["plan_id"]
    assert _iceberg(cat, NAME).spec().fields[0].name == "dt"

    # A late file in an old hour (past the lookback: its partition is sealed), a new hour, and a late
    # column: one snapshot, the column added, the old rows NULL in it.
    _write(root, "2024_01_01/00", "late.parquet", range(100, 103), rows, score=[0.5, 1.5, 2.5])
    _write(root, "2024_01_02/00", "c.parquet", range(200, 202), rows)
    out = _land(root, cat)
    assert [p["files"] for p in out["plans"]] == [2]
    _check(cat, rows)
    scores = _iceberg(cat, NAME).scan(selected_fields=("id", "score")).to_arrow().to_pylist()
    assert {r["id"]: r["score"] for r in scores}[101] == 1.5 and {r["id"]: r["score"] for r in scores}[0] is None

    # A rerun with nothing new registers nothing; a file not yet old enough waits, and is said so.
    before = _plans(cat)
    assert _land(root, cat)["plans"] == [] and _plans(cat) == before
    _write(root, "2024_01_02/01", "young.parquet", range(300, 301))
    proc = _land(root, cat, "--min-age", "1h", code=None)
    assert proc.returncode == 0 and json.loads(proc.stdout)["deferred"] >= 1 and "held back" in proc.stderr
    assert _plans(cat) == before
    _check(cat, rows)
    assert _pending(root) is None


def test_a_sync_killed_at_each_step_registers_each_file_once(tmp_path):
    root, cat, rows = tmp_path / "land", f"sqlite:///{tmp_path / 'cat.db'}", Counter()
    _write(root, "2024_01_01/00", "first.parquet", range(0, 2), rows)
    _land(root, cat)
    for i, point in enumerate(("iceberg-consumer-planned", "iceberg-consumer-prepared", "iceberg-consumer-committed")):
        _write(root, "2024_01_01/00", f"late{i}.parquet", range(10 * (i + 1), 10 * (i + 1) + 2), rows)
        _write(root, f"2024_01_0{i + 2}/05", "new.parquet", range(100 * (i + 1), 100 * (i + 1) + 3), rows)
        killed = _land(root, cat, code=None, process=True, env={"TRIB_CRASH_AT": point})
        assert killed.returncode == -9, (point, killed.stderr)
        pending = _pending(root)
        assert pending is not None, point  # never acked before its snapshot committed
        committed = _plans(cat)[-1] == pending
        assert committed == (point == "iceberg-consumer-committed"), point
        out = _land(root, cat)
        assert [p["plan_id"] for p in out["plans"]] == [pending], point  # the same plan, not a new one
        assert out["plans"][0]["registered"] == ("before" if committed else "now"), point
        assert out["plans"][0]["files"] == 2 and out["plans"][0]["records"] == 5, point
        assert _plans(cat).count(pending) == 1 and _pending(root) is None, point
        _check(cat, rows)

    # Killed after its snapshot, then its plan dropped by hand: the next plan would deliver its files again,
    # and they would be registered twice: refused, nothing committed.
    _write(root, "2024_01_09/00", "x.parquet", range(900, 902))
    assert _land(root, cat, code=None, process=True, env={"TRIB_CRASH_AT": "iceberg-consumer-committed"}).returncode == -9
    invoke_trib("consumer", "reset", str(root), "ice", "--discard-plan", "--execute", check=True)
    before = _plans(cat)
    err = _land(root, cat, code=6)
    assert "would be registered twice" in err and err.count("\n") == 1 and _plans(cat) == before


def test_two_syncs_at_once_register_a_plan_once(tmp_path):
    root, cat, rows = tmp_path / "land", f"sqlite:///{tmp_path / 'cat.db'}", Counter()
    _write(root, "2024_01_01/00", "a.parquet", range(0, 4), rows)
    _land(root, cat)
    _write(root, "2024_01_01/00", "late.parquet", range(10, 12), rows)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRIB_STOP_AT": "iceberg-consumer-prepared"}
    held = subprocess.Popen([*TRIB, "iceberg", "sync", str(root), "--consumer", "ice", "--table", NAME, "--catalog",
                             cat, "--min-age", "0s", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        deadline = time.time() + 60
        while not _stopped(held.pid) and time.time() < deadline:
            time.sleep(0.05)
        assert _stopped(held.pid), "the held sync never reached iceberg-consumer-prepared"
        assert [p["registered"] for p in _land(root, cat)["plans"]] == ["now"]
    finally:
        held.send_signal(signal.SIGCONT)
    out, err = held.communicate(timeout=120)
    assert held.returncode == 0, err
    assert all(p["registered"] == "before" for p in json.loads(out)["plans"])
    assert len(_plans(cat)) == len(set(_plans(cat))) == 2
    _check(cat, rows)


def test_refusals_register_nothing_and_leave_the_plan_pending(tmp_path):
    root, cat, rows = tmp_path / "land", f"sqlite:///{tmp_path / 'cat.db'}", Counter()
    _write(root, "2024_01_01/00", "a.parquet", range(0, 3), rows)
    _land(root, cat)

    def refused(code: int, needle: str, *extra: str) -> None:
        before, pending = _plans(cat), _pending(root)
        err = _land(root, cat, *extra, code=code)
        assert err.count("\n") == 1 and needle in err, err
        assert _plans(cat) == before
        assert _pending(root) is not None and (pending is None or _pending(root) == pending)

    # Not Parquet: exit 7, naming the way past it; skipped, the plan's other file is registered.
    bad = root / "2024_01_01/01/notes.parquet"
    bad.parent.mkdir(parents=True)
    bad.write_text("not parquet\n")
    _write(root, "2024_01_01/01", "b.parquet", range(10, 12), rows)
    refused(7, "is not readable Parquet")
    refused(7, "trib consumer skip")
    invoke_trib("consumer", "skip", str(root), "ice", "2024_01_01/01/notes.parquet", "--execute", check=True)
    assert _land(root, cat)["plans"][0]["files"] == 1
    _check(cat, rows)

    # A column whose type changed: exit 3 (SchemaChangeError), nothing registered.
    import pyarrow as pa
    import pyarrow.parquet as pq

    clash = root / "2024_01_02/00/clash.parquet"
    clash.parent.mkdir(parents=True)
    pq.write_table(pa.table({"id": ["x"], "name": ["n"]}), clash)
    refused(3, "do not fit the Iceberg table's schema")
    invoke_trib("consumer", "skip", str(root), "ice", "2024_01_02/00/clash.parquet", "--execute", check=True)
    _land(root, cat)

    # Nanosecond timestamps (pyarrow's default for pandas times), which Iceberg v2 has no type for: exit 3.
    pq.write_table(pa.table({"id": [7], "at": pa.array([1], pa.timestamp("ns"))}), clash.parent / "ns.parquet")
    refused(3, "timestamp[ns]")
    invoke_trib("consumer", "skip", str(root), "ice", "2024_01_02/00/ns.parquet", "--execute", check=True)
    _land(root, cat)

    # A file that changed after its plan was made: exit 15, never registered with the wrong size.
    _write(root, "2024_01_02/01", "grows.parquet", range(20, 22))
    invoke_trib("files", str(root), "--consumer", "ice", "--min-age", "0s", "--json", check=True)
    _write(root, "2024_01_02/01", "grows.parquet", range(20, 40))
    refused(15, "changed since plan")
    invoke_trib("consumer", "reset", str(root), "ice", "--discard-plan", "--execute", check=True)
    rows.update((i, "2024010201") for i in range(20, 40))
    _land(root, cat)
    _check(cat, rows)

    # A delivered file touched (rewritten as far as a listing can tell): its hour is held back, the rest
    # registered, exit 17 after the JSON; once replayed, the hour's file never delivered is registered, the
    # touched one not again.
    touched = root / "2024_01_01/00/a.parquet"
    os.utime(touched, (touched.stat().st_atime, touched.stat().st_mtime - 60))
    _write(root, "2024_01_01/00", "more.parquet", range(50, 52), rows)
    _write(root, "2024_01_03/00", "d.parquet", range(60, 62), rows)
    proc = _land(root, cat, code=None)
    assert proc.returncode == 17 and proc.stderr.count("\n") == 1 and "trib consumer replay" in proc.stderr
    assert [p["files"] for p in json.loads(proc.stdout)["plans"]] == [1]
    rows_now = rows - Counter((i, "2024010100") for i in range(50, 52))
    _check(cat, rows_now)
    invoke_trib("consumer", "replay", str(root), "ice", "--partition", "2024_01_01/00", "--execute", check=True)
    assert [p["files"] for p in _land(root, cat)["plans"]] == [1]
    _check(cat, rows)

    # One consumer, one Iceberg table: a second table fed from it would split the landing zone's files.
    err = _land(root, cat, name="db.other", code=3)
    assert "would split its input" in err and err.count("\n") == 1

    # A trib table's mirror and a landing zone's never take each other's Iceberg table.
    table = _table(tmp_path)
    _ingest(table, tmp_path, (-3,), 2, 0)
    err = _sync(table, cat, NAME, code=3)["stderr"]
    assert "mirrors landing zone" in err and err.count("\n") == 1
    _sync(table, cat, "db.events")
    err = _land(root, cat, consumer="ice2", name="db.events", code=3)
    assert "give this landing zone another Iceberg table" in err and err.count("\n") == 1
    err = _land(table, cat, code=3)
    assert "is a trib table" in err
    _check(cat, rows)


def test_a_catalog_down_during_a_plans_commit_leaves_it_pending_and_the_rerun_registers_it_once(tmp_path,
                                                                                              postgres_server, postgres_catalog):
    """The PostgreSQL catalog stopped while a sync holds a plan's snapshot before its catalog commit: one line,
    exit 12 (the commit's outcome unknown), the plan not acked; once the catalog is back, the rerun registers
    that same plan exactly once. With the catalog down before a sync: exit 8, nothing planned is lost."""
    root, cat, rows = tmp_path / "land", postgres_catalog, Counter()
    name = NAME
    _write(root, "2024_01_01/00", "a.parquet", range(0, 3), rows)
    _land(root, cat, name=name)
    _write(root, "2024_01_01/00", "late.parquet", range(10, 12), rows)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRIB_STOP_AT": "iceberg-consumer-prepared"}
    held = subprocess.Popen([*TRIB, "iceberg", "sync", str(root), "--consumer", "ice", "--table", name, "--catalog",
                             cat, "--min-age", "0s", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    deadline = time.time() + 60
    while not _stopped(held.pid) and time.time() < deadline and held.poll() is None:
        time.sleep(0.05)
    assert _stopped(held.pid), "the held sync never reached iceberg-consumer-prepared"
    pending = _pending(root)
    postgres_server.stop()
    try:
        held.send_signal(signal.SIGCONT)
        _, err = held.communicate(timeout=120)
        assert held.returncode == 12 and "may have landed" in err and err.count("\n") == 1, err
        assert _pending(root) == pending  # not acked
        down = _land(root, cat, name=name, code=8)
        assert "did not answer" in down and down.count("\n") == 1, down
        assert _pending(root) == pending
    finally:
        postgres_server.start()
    out = _land(root, cat, name=name)
    assert [p["plan_id"] for p in out["plans"]] == [pending] and out["plans"][0]["registered"] == "now"
    assert _plans(cat, name).count(pending) == 1 and _pending(root) is None
    _check(cat, rows, name)
