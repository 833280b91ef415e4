"""Tables over foreign data (tracking manifest|listing|both) and periodic full scans.

Real files, the real CLI in subprocesses, and the library's simulation clock
(``Consumer.plan(now_ms=...)``) where hours must pass.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

from conftest import run_trib
from helpers import put
from tributary_read import FileEntry, Layout, Table, TableConfig, TableWriter
from tributary_read.read.consumer import Consumer
from tributary_read.errors import InvalidInputError, UntrackedDataError
from tributary_read.read.resolve import Source, resolve
from tributary_read.read.tracking import is_written

pytestmark = pytest.mark.integration

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
PARTITION = "dt={yyyy}{MM}{dd}{HH}"
H = 3_600_000
NOW = int(datetime.now(timezone.utc).timestamp() * 1000)
T0 = NOW - NOW % H - 24 * H  # inside the consumers' 7-day horizon


def hour_dir(ms: int) -> str:
    return f"{datetime.fromtimestamp(ms / 1000, timezone.utc):%Y_%m_%d/%H}"


def trib_json(*args: str) -> dict:
    proc = run_trib(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def names(doc) -> list[str]:
    return [f["path"] for f in doc["files"]]


def foreign_dir(root: Path, n: int = 3) -> list[str]:
    """What Flume or rsync leaves: files of any name in the hourly directories."""
    paths = [f"{hour_dir(T0 + h * H)}/FlumeData.{1000 + h}.log" for h in range(n)]
    for h, p in enumerate(paths):
        put(root, p, T0 + h * H + 60_000, f"foreign {h}\n".encode())
    return paths


def create(root: Path, *extra: str):
    return run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, *extra)


def write_trib(table: Table, hours: range, commit: bool = True) -> list[str]:
    w = TableWriter(table)
    for h in hours:
        w.write(json.dumps({"h": h}).encode(), T0 + h * H + 1)
    paths = sorted(e.path for e in w.flush())
    if commit:
        w.commit()
    return paths


# -- tracking is decided at create ---------------------------------------------------
def test_create_over_foreign_files_tracks_both_and_reads_them(tmp_path):
    root = tmp_path / "flume"
    files = foreign_dir(root)
    proc = create(root)
    assert proc.returncode == 0, proc.stderr
    assert "tracking both" in proc.stdout and "3 files written by other tools" in proc.stdout
    assert json.loads((root / "_tributary/table.json").read_text())["tracking"] == "both"
    assert "tracking  both" in run_trib("table", "show", str(root)).stdout
    # Before: auto picked the (empty) manifest and answered 0 files without a word.
    doc = trib_json("files", str(root), "--all")
    assert doc["mode"] == "both" and names(doc) == files and "untracked" not in doc
    plan = trib_json("files", str(root), "--consumer", "etl")
    assert plan["tracking"] == "both" and names(plan) == files


def test_create_over_an_empty_directory_tracks_both(tmp_path):
    # A raw table made before its feed starts: files other tools drop in later are delivered (issue 19).
    proc = create(tmp_path / "new", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["tracking"] == "both"
    assert TableConfig(layout=Layout(LAYOUT, PARTITION)).tracking == "both"  # the library's default too
    # A table.json written before tracking existed reads as manifest.
    t = Table.create(str(tmp_path / "old"), TableConfig(layout=Layout(LAYOUT, PARTITION)))
    p = tmp_path / "old/_tributary/table.json"
    d = json.loads(p.read_text())
    del d["tracking"]
    p.write_text(json.dumps(d))
    assert Table.load(t.uri).config.tracking == "manifest"
    d["tracking"] = ["both"]
    p.write_text(json.dumps(d))
    proc = run_trib("files", str(tmp_path / "old"), "--all")
    assert proc.returncode == 6 and "tracking" in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_explicit_manifest_tracking_over_foreign_files_warns_at_create(tmp_path):
    root = tmp_path / "flume"
    foreign_dir(root, 2)
    proc = create(root, "--tracking", "manifest")
    assert proc.returncode == 0 and "tracking manifest" in proc.stdout
    assert "2 files written by other tools" in proc.stderr and "--tracking both" in proc.stderr


# -- untracked data is never a silent 0 ------------------------------------------------
def test_manifest_tracked_table_with_foreign_files_warns_and_reports(tmp_path):
    root = tmp_path / "t"
    foreign_dir(root, 3)
    assert create(root, "--tracking", "manifest").returncode == 0
    for mode in ("auto", "manifest"):
        # Without the opt-out a read that would leave them behind fails (exit 13, one line naming the fix).
        proc = run_trib("files", str(root), "--all", "--mode", mode, "--json")
        assert proc.returncode == 13 and len(proc.stderr.splitlines()) == 1
        assert json.loads(proc.stdout)["error"]["class"] == "UntrackedDataError"  # --json: only the error object
        assert "3 files in the table are not tracked" in proc.stderr
        assert f"trib table set file://{root} --tracking both" in proc.stderr and "--allow-untracked" in proc.stderr
        proc = run_trib("files", str(root), "--all", "--mode", mode, "--json", "--allow-untracked")
        assert proc.returncode == 0
        doc = json.loads(proc.stdout)
        assert doc["count"] == 0 and doc["untracked"]["count"] == 3 and doc["untracked"]["unit"] == "files"
        assert "3 files in the table are not tracked" in proc.stderr
        assert f"trib table set file://{root} --tracking both" in proc.stderr
    proc = run_trib("files", str(root), "--consumer", "etl", "--allow-untracked")
    assert proc.returncode == 0
    assert proc.stdout == "" and "3 files in the table are not tracked" in proc.stderr
    # With the opt-out, a non-empty manifest answer probes only its own partitions: a
    # foreign file written into the same hour as trib's files is reported too.
    t = Table.load(str(root))
    write_trib(t, range(0, 1))
    assert run_trib("files", str(root), "--all").returncode == 13
    doc = trib_json("files", str(root), "--all", "--allow-untracked")
    assert doc["count"] == 1 and doc["untracked"]["count"] == 1
    assert doc["untracked"]["scope"] == "partitions of the answer"
    assert all(not is_written(p) for p in doc["untracked"]["examples"])
    # A file committed under a foreign name (another writer using the library's
    # log) is tracked: never counted as untracked.
    other = f"{hour_dir(T0)}/spark-00000.jsonl"
    put(root, other, T0, b'{"x": 1}\n')
    t.log.commit([FileEntry(other, 9, 1, {"dt": hour_dir(T0).replace("_", "").replace("/", "")})])
    doc = trib_json("files", str(root), "--since-version", "0", "--allow-untracked")
    assert other in names(doc) and doc["untracked"]["count"] == 1
    assert other not in doc["untracked"]["examples"]
    # A version range after commit 1 would not have held the foreign file written a day
    # before it, had it been committed: out of the read's scope, neither warned nor refused.
    doc = trib_json("files", str(root), "--since-version", "1")
    assert names(doc) == [other] and "untracked" not in doc


def test_set_tracking_both_widens_a_manifest_consumer_without_redelivery(tmp_path):
    root = tmp_path / "t"
    assert create(root, "--tracking", "manifest").returncode == 0
    t = Table.load(str(root))
    trib_files = write_trib(t, range(0, 3))
    c = Consumer(Source.open(str(root)), "etl")
    p = c.plan()
    assert [f.path for f in p.files] == trib_files and p.mode == "manifest"
    c.ack(p.plan_id)
    foreign = foreign_dir(root, 2)
    with pytest.raises(UntrackedDataError):
        c.plan()
    assert c.plan(allow_untracked=True).files == ()
    assert c.plan(allow_untracked=True).fileset().untracked.count == 2
    c.reset("discard-plan", execute=True)
    doc = trib_json("table", "set", str(root), "--tracking", "both")
    assert (doc["previous_tracking"], doc["tracking"]) == ("manifest", "both")
    c = Consumer(Source.open(str(root)), "etl")
    p = c.plan()
    assert p.mode == "both" and [f.path for f in p.files] == foreign  # trib files were delivered already
    st = c.ack(p.plan_id).state
    assert st.mode == "both" and st.manifest_version == 1
    assert sorted(f"{d}/{n}" for d, e in st.ledger.items() for n in e["files"]) == foreign
    assert c.plan().files == ()


def test_listing_tracked_table_reports_its_commits(tmp_path):
    root = tmp_path / "t"
    foreign = foreign_dir(root, 2)
    assert create(root, "--tracking", "listing").returncode == 0
    write_trib(Table.load(str(root)), range(0, 2))
    proc = run_trib("files", str(root), "--all", "--json")
    doc = json.loads(proc.stdout)
    assert doc["mode"] == "mtime" and names(doc) == foreign  # never a trib-named file by listing
    assert doc["untracked"] == {"count": 1, "unit": "commits", "scope": "log", "examples": [],
                                "fix": f"to read them too: trib table set file://{root} --tracking both"}
    assert "the table's log holds 1 commits" in proc.stderr
    # An explicit --mode mtime is the raw window: every visible file.
    assert len(trib_json("files", str(root), "--all", "--mode", "mtime")["files"]) == 4


# -- both: every file exactly once, one way ------------------------------------------------
def test_mixed_table_delivers_each_file_once_through_one_way(tmp_path):
    root = tmp_path / "t"
    foreign = foreign_dir(root, 2)
    assert create(root).returncode == 0
    t = Table.load(str(root))
    committed = write_trib(t, range(0, 2))
    # The race: trib files written (visible under final names: the explicit direct protocol;
    # rename would hide them) but committed only after the plan read the log. The listing
    # never takes them...
    w = TableWriter(t, protocol="direct")
    w.write(b'{"late": 1}', T0 + 5 * H)
    late = [e.path for e in w.flush()]
    assert (root / late[0]).exists()
    c = Consumer(Source.open(str(root)), "etl")
    p = c.plan()
    assert sorted(f.path for f in p.files) == sorted(foreign + committed) and p.versions == (0, 1)
    w.commit()
    c.ack(p.plan_id)
    # ...and the manifest delivers them in the next plan, once.
    p = c.plan()
    assert [f.path for f in p.files] == late and p.versions == (1, 2)
    c.ack(p.plan_id)
    assert c.plan().files == ()
    # The stateless answer splits the same way.
    fs = resolve(str(root))
    assert fs.mode == "both" and Counter(f.path for f in fs.files) == Counter(foreign + committed + late)
    # One state file holds both positions.
    st = c.current()
    assert st.manifest_version == 2 and sum(len(e["files"]) for e in st.ledger.values()) == 2
    with pytest.raises(InvalidInputError, match="have no versions"):
        resolve(str(root), since_version=1)


def test_both_needs_a_table(tmp_path):
    put(tmp_path, f"{hour_dir(T0)}/x.log", T0)
    proc = run_trib("files", str(tmp_path), "--all", "--layout", LAYOUT, "--mode", "both")
    assert proc.returncode == 3 and "needs a trib table" in proc.stderr
    proc = run_trib("table", "set", str(tmp_path), "--tracking", "both")
    assert proc.returncode == 4


# -- a directory whose mtime goes back ---------------------------------------------------------
def _mtime_set_back(root: Path, name: str) -> str:
    """Add a file, then put the directory's mtime back where it was (touch -r, rsync -a)."""
    d = root / hour_dir(T0)
    before = os.stat(d).st_mtime_ns
    p = put(root, f"{hour_dir(T0)}/{name}", T0 + 30 * 60_000)
    os.utime(d, ns=(before, before))
    return str(p.relative_to(root))


@pytest.mark.parametrize("every", [None, 0])
def test_directory_mtime_set_back_is_caught_by_the_periodic_full_scan(tmp_path, every):
    root = tmp_path / "logs"
    put(root, f"{hour_dir(T0)}/a.log", T0)
    old = T0 - 2 * H
    os.utime(root / hour_dir(T0), ns=(old * 1_000_000, old * 1_000_000))
    src = Source.open(str(root), layout=Layout(LAYOUT, PARTITION))
    c = Consumer(src, "c")
    now = NOW
    p = c.plan(now_ms=now, full_scan_every_ms=every)
    assert [f.path for f in p.files] == [f"{hour_dir(T0)}/a.log"] and p.fileset().plan["full_scan"]
    c.ack(p.plan_id, now_ms=now)
    new = _mtime_set_back(root, "b.log")
    now += H
    p = c.plan(now_ms=now)  # the directory looks unchanged: skipped
    assert p.files == () and p.stats["unchanged_dirs"] == 1 and not p.fileset().plan["full_scan"]
    c.ack(p.plan_id, now_ms=now)
    now += 23 * H
    p = c.plan(now_ms=now)
    if every is None:  # default: 24 h after the last full scan, a plan lists everything
        assert [f.path for f in p.files] == [new] and p.stats["full_scan"] == "periodic"
        c.ack(p.plan_id, now_ms=now)
        assert c.current().last_full_scan_ms == now and c.plan(now_ms=now + H).stats["full_scan"] is None
    else:  # off: only an explicit --full-scan finds it
        assert p.files == () and p.stats["full_scan"] is None
        assert c.current().full_scan_every_ms == 0
        c.ack(p.plan_id, now_ms=now)
        p = c.plan(now_ms=now + H, full_scan=True)
        assert [f.path for f in p.files] == [new] and p.stats["full_scan"] == "requested"


def test_full_scan_every_on_the_cli(tmp_path):
    root = tmp_path / "logs"
    put(root, f"{hour_dir(T0)}/a.log", T0)
    plan = trib_json("files", str(root), "--layout", LAYOUT, "--consumer", "c", "--full-scan-every", "off")
    assert plan["full_scan_every_ms"] == 0
    trib_json("consumer", "ack", str(root), "c", plan["plan_id"])
    show = trib_json("consumer", "show", str(root), "c")
    assert show["full_scan_every_ms"] == 0 and show["last_full_scan_ms"] == plan["created_ms"]
    assert "only with --full-scan" in run_trib("consumer", "show", str(root), "c").stdout
    proc = run_trib("files", str(root), "--consumer", "c", "--full-scan-every", "soon")
    assert proc.returncode == 3 and "is not a duration" in proc.stderr
    proc = run_trib("files", str(root), "--all", "--layout", LAYOUT, "--full-scan-every", "1h")
    assert proc.returncode == 3 and "goes with --consumer" in proc.stderr
