"""``trib iceberg sync`` end to end: real trib tables written by trib's CLI, a real SQLite catalog, and the two
readers that must agree with trib's own: pyiceberg's scan and DuckDB's ``iceberg_scan`` (its extension loaded
from the ``duckdb-ext-iceberg`` package, nothing downloaded).

After each step (ingest, late files into old partitions, ``trib compact``, ``trib expire``) the Iceberg table
holds exactly the rows trib's reader returns, partition column ``dt`` included and never NULL; a rerun
registers nothing; a mirror killed -9 at each of its steps and rerun holds each live file exactly once. Those
two run on SQLite, PostgreSQL and a Hive metastore (tests/test_iceberg_hive.py: what only Hive has).
"""

from __future__ import annotations

import glob
import json
import os
import signal
import site
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import REPO, TRIB, invoke_trib, run_trib
from helpers import LAYOUT, PARTITION

pytest.importorskip("pyiceberg")

pytestmark = pytest.mark.integration

HOUR = 3_600_000
#: Event hours relative to the current hour: two old enough to expire (>3 days), two recent.
OLD, RECENT = (-100, -99), (-3, -2)


def _now_hour() -> int:
    return int(time.time() * 1000) // HOUR * HOUR


def _table(tmp_path: Path, fmt: str = "parquet") -> Path:
    root = tmp_path / f"t-{fmt}"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--format", fmt,
                check=True)
    return root


def _ingest(root: Path, tmp_path: Path, hours, per: int, start_id: int, extra: str | None = None) -> None:
    """One ``trib ingest`` of ``per`` records into each of ``hours`` (relative to now); ``extra``: a late field."""
    src = tmp_path / f"src{start_id}.jsonl"
    base = _now_hour()
    rows = []
    for h_i, h in enumerate(hours):
        for j in range(per):
            row = {"id": start_id + h_i * per + j, "ts": base + h * HOUR + j * 1000, "name": f"n{j}"}
            if extra:
                row[extra] = j * 0.5
            rows.append(json.dumps(row))
    src.write_text("\n".join(rows) + "\n")
    invoke_trib("ingest", str(root), "--source", str(src), "--app-id", f"a{start_id}", "--time-field", "ts",
                check=True)


def _catalog(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'catalog' / 'iceberg.db'}"


def _sync(root: Path, catalog: str, name: str = "db.events", code: int = 0) -> dict:
    proc = invoke_trib("iceberg", "sync", str(root), "--table", name, "--catalog", catalog, "--json")
    assert proc.returncode == code, proc.stderr
    return json.loads(proc.stdout) if code == 0 else {"stderr": proc.stderr}


def _trib_rows(root: Path) -> Counter:
    """(id, dt) of every row trib's reader returns: ``trib files --all``, each file with its partition."""
    import pyarrow.parquet as pq

    plan = json.loads(invoke_trib("files", str(root), "--all", "--json", check=True).stdout)
    rows: Counter = Counter()
    for f in plan["files"]:
        ids = pq.read_table(root / f["path"], columns=["id"]).column("id").to_pylist()
        rows.update((i, f["partition"]["dt"]) for i in ids)
    return rows


def _iceberg(catalog: str, name: str = "db.events"):
    from tributary_read.iceberg.catalog import open_catalog

    return open_catalog(catalog).load_table(name)


def _pyiceberg_rows(ice) -> Counter:
    t = ice.scan(selected_fields=("id", "dt")).to_arrow()
    assert t.column("dt").null_count == 0
    return Counter(zip(t.column("id").to_pylist(), t.column("dt").to_pylist()))


def _duckdb_rows(ice, where: str = "") -> Counter:
    """(id, dt) of every row DuckDB's iceberg_scan returns (``where``: a SQL condition on the rows)."""
    import duckdb

    ext = glob.glob(os.path.join(site.getsitepackages()[0], "duckdb_ext", "extensions", f"v{duckdb.__version__}",
                                 "*"))
    assert ext, "duckdb-ext-iceberg does not match the installed duckdb"
    con = duckdb.connect(config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"})
    con.execute(f"LOAD '{ext[0]}/avro.duckdb_extension'")
    con.execute(f"LOAD '{ext[0]}/iceberg.duckdb_extension'")
    rows = con.execute(f"SELECT id, dt FROM iceberg_scan('{ice.metadata_location}')"
                       + (f" WHERE {where}" if where else "")).fetchall()
    assert all(dt is not None for _, dt in rows)
    return Counter(rows)


def _live_paths(ice) -> Counter:
    """Each live data file of the current snapshot, with how often its manifests list it."""
    entries = ice.inspect.entries().to_pylist()
    return Counter(e["data_file"]["file_path"] for e in entries if e["status"] != 2)  # 2: DELETED


def _trib_uris(root: Path) -> set[str]:
    plan = json.loads(invoke_trib("files", str(root), "--all", "--uri", "--json", check=True).stdout)
    return {f["uri"] for f in plan["files"]}


def _check(root: Path, catalog: str, name: str = "db.events") -> None:
    """The Iceberg table equals the trib table: the same rows through both readers, each file once."""
    ice = _iceberg(catalog, name)
    want = _trib_rows(root)
    assert _pyiceberg_rows(ice) == want
    assert _duckdb_rows(ice) == want
    live = _live_paths(ice)
    assert set(live) == _trib_uris(root) and set(live.values()) == {1}


@pytest.fixture(params=["sqlite", "postgresql", "hive"])
def any_catalog(request, tmp_path) -> str:
    """The embedded SQLite catalog, the same SQL catalog on a real PostgreSQL server (a database of its own), and
    the session's Hive metastore (``trib hive up``'s; each test's Iceberg tables have names of their own)."""
    if request.param == "hive":
        return request.getfixturevalue("hive_services").metastore_uri
    return _catalog(tmp_path) if request.param == "sqlite" else request.getfixturevalue("postgres_catalog")


def test_a_mirror_follows_ingest_late_files_compaction_and_expiry(tmp_path, any_catalog):
    root, cat = _table(tmp_path), any_catalog
    _ingest(root, tmp_path, (*OLD, *RECENT), 5, 0)
    out = _sync(root, cat)
    assert (out["start_version"], out["version"]) == (0, 1) and out["snapshots"][0]["added"] == 4
    _check(root, cat)

    # Late files into old partitions, a late field (a new column), two ingests: two snapshots in one sync.
    _ingest(root, tmp_path, OLD, 3, 100)
    _ingest(root, tmp_path, RECENT, 3, 200, extra="score")
    out = _sync(root, cat)
    assert [s["version"] for s in out["snapshots"]] == [2, 3]
    _check(root, cat)
    ice = _iceberg(cat)
    assert "score" in {f.name for f in ice.schema().fields}
    assert [s.summary["trib.version"] for s in ice.snapshots()] == ["1", "2", "3"]

    # A compaction: one overwrite snapshot, its originals deleted and the compacted files added together.
    invoke_trib("compact", str(root), "--min-age", "0s", "--min-files", "2", check=True)
    out = _sync(root, cat)
    assert [s["operation"] for s in out["snapshots"]] == ["replace"]
    assert out["snapshots"][0]["removed"] > out["snapshots"][0]["added"] > 0
    _check(root, cat)
    summary = _iceberg(cat).current_snapshot().summary
    assert summary.operation.value == "replace"  # the same records in fewer files: incremental readers skip it
    assert int(summary["total-records"]) == sum(_trib_rows(root).values())
    assert int(summary["total-data-files"]) == len(_trib_uris(root))
    assert int(summary["deleted-data-files"]) == out["snapshots"][0]["removed"]

    # An expiry: a delete snapshot of the old partitions' files.
    invoke_trib("expire", str(root), "--older-than", "3d", check=True)
    out = _sync(root, cat)
    assert [s["operation"] for s in out["snapshots"]] == ["expire"] and out["snapshots"][0]["removed"] > 0
    _check(root, cat)
    assert {dt for _, dt in _trib_rows(root)} == {dt for _, dt in _pyiceberg_rows(_iceberg(cat))}
    assert len({dt for _, dt in _trib_rows(root)}) == len(RECENT)

    # A rerun registers nothing: no snapshot, no entry twice. pyiceberg's commit retry, turned back on by
    # hand, is turned off again (it would re-apply a commit a concurrent mirror registered).
    with _iceberg(cat).transaction() as tx:
        tx.set_properties({"commit.retry.num-retries": "4", "gc.enabled": "true"})
    before = len(_iceberg(cat).snapshots())
    out = _sync(root, cat)
    assert _iceberg(cat).properties["commit.retry.num-retries"] == "0"
    assert _iceberg(cat).properties["gc.enabled"] == "false"  # Iceberg's maintenance never deletes trib's files
    assert out["snapshots"] == [] and out["start_version"] == out["version"] == 5
    assert len(_iceberg(cat).snapshots()) == before
    _check(root, cat)

    # Every kept snapshot reads: a compaction or an expiry expires the snapshots before it, which name the
    # files it moves aside or that trib clean deletes (time travel to one would fail on them).
    ice = _iceberg(cat)
    assert [s.summary["trib.version"] for s in ice.snapshots()] == ["5"]
    invoke_trib("clean", str(root), "--older-than", "0s", check=True)
    for snap in ice.snapshots():
        assert ice.scan(snapshot_id=snap.snapshot_id).to_arrow().num_rows == sum(_trib_rows(root).values())


def test_a_mirror_killed_at_each_step_resumes_exactly_once(tmp_path, any_catalog):
    root, cat = _table(tmp_path), any_catalog
    for k in range(3):
        _ingest(root, tmp_path, (OLD[0], RECENT[k % 2]), 2, 1000 * k)
    points = ("iceberg-listed", "iceberg-prepared", "iceberg-committed", "iceberg-read-back")
    for i, point in enumerate(points):
        name = f"db.killed{i}"
        args = ("iceberg", "sync", str(root), "--table", name, "--catalog", cat)
        killed = run_trib(*args, env={"TRIB_CRASH_AT": point})
        assert killed.returncode == -9, (point, killed.stderr)
        out = _sync(root, cat, name)
        assert out["version"] == 3, point
        ice = _iceberg(cat, name)
        assert [s.summary["trib.version"] for s in ice.snapshots()] == ["1", "2", "3"], point
        _check(root, cat, name)


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def test_two_mirrors_at_once_register_each_commit_once(tmp_path):
    """A mirror held between building its snapshot and the catalog commit while another mirror registers
    everything: its commit is refused by the catalog, it reads the other's snapshots back, and exits 0."""
    root, cat = _table(tmp_path), _catalog(tmp_path)
    for k in range(3):
        _ingest(root, tmp_path, (RECENT[k % 2],), 2, 1000 * k)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRIB_STOP_AT": "iceberg-prepared"}
    held = subprocess.Popen([*TRIB, "iceberg", "sync", str(root), "--table", "db.events", "--catalog", cat, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.time() + 60
        while not _stopped(held.pid) and time.time() < deadline:
            time.sleep(0.05)
        assert _stopped(held.pid), "the held mirror never reached iceberg-prepared"
        assert _sync(root, cat)["version"] == 3
    finally:
        held.send_signal(signal.SIGCONT)
    out, err = held.communicate(timeout=120)
    assert held.returncode == 0, err
    assert json.loads(out)["version"] == 3 and json.loads(out)["snapshots"] == []
    assert [s.summary["trib.version"] for s in _iceberg(cat).snapshots()] == ["1", "2", "3"]
    _check(root, cat)


def test_refusals_commit_nothing(tmp_path):
    cat = _catalog(tmp_path)
    text = _table(tmp_path, "jsonl")
    _ingest(text, tmp_path, RECENT, 2, 0)
    err = _sync(text, cat, code=3)["stderr"]
    assert err.count("\n") == 1 and "only Parquet tables mirror into Iceberg" in err

    # An Iceberg table that mirrors another trib table is refused, and stays as it was.
    one = _table(tmp_path)
    _ingest(one, tmp_path, RECENT, 2, 10)
    _sync(one, cat)
    other = tmp_path / "other"
    invoke_trib("table", "create", str(other), "--layout", LAYOUT, "--partition", PARTITION, "--format", "parquet",
                check=True)
    _ingest(other, tmp_path, RECENT, 2, 20)
    err = _sync(other, cat, code=3)["stderr"]
    assert "mirrors file://" in err and err.count("\n") == 1
    assert len(_iceberg(cat).snapshots()) == 1

    # A snapshot another tool wrote: the table no longer equals a trib version; refused, nothing added.
    ice = _iceberg(cat)
    ice.append(ice.scan().to_arrow().slice(0, 1))
    _ingest(one, tmp_path, RECENT, 2, 30)
    err = _sync(one, cat, code=3)["stderr"]
    assert "written by another tool" in err
    assert len(_iceberg(cat).snapshots()) == 2

    # A table another tool created.
    from tributary_read.iceberg.catalog import open_catalog

    c = open_catalog(cat)
    c.create_table("db.foreign", schema=ice.schema())
    err = _sync(one, cat, "db.foreign", code=3)["stderr"]
    assert "not created by trib iceberg sync" in err
    assert c.load_table("db.foreign").current_snapshot() is None

    # A catalog URI with a password (argv shows it to every user): refused, never echoed, nothing opened.
    err = _sync(one, "postgresql://u:s3cret@127.0.0.1:1/d", code=3)["stderr"]
    assert "~/.pgpass" in err and "s3cret" not in err and err.count("\n") == 1


def _parquet(table, path: str, ids: list[int]) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table.storage.makedirs(os.path.dirname(path))
    pq.write_table(pa.table({"id": ids}), table.storage.abspath(path))
    return table.storage.info(path).size


def test_a_restate_is_one_overwrite_and_its_files_are_revealed_before_iceberg_reads_them(tmp_path):
    """A restate committed but not yet swapped in (its writer stopped after the commit): the sync registers
    the partition's new files as one overwrite and finishes the swap, so Iceberg's paths exist."""
    from tributary_read.table.config import Table, TableConfig
    from tributary_read.table.layout import Layout
    from tributary_read.table.manifest import FileEntry, Restatement, Transaction
    from tributary_read.table.restate_swap import prepare, staging_dir

    cat = _catalog(tmp_path)
    t = Table.create(str(tmp_path / "r"), TableConfig(Layout(LAYOUT, PARTITION), format="parquet"))
    p1, p2 = "2026_11_28/06", "2026_11_28/07"
    for i, (d, ids) in enumerate(((p1, [1, 2]), (p1, [3]), (p2, [4, 5]))):
        path = f"{d}/part-{i}.parquet"
        t.log.commit([FileEntry(path, _parquet(t, path, ids), len(ids), {"dt": d.replace("_", "").replace("/", "")})],
                     Transaction("w", {"src": i}))
    root = Path(t.storage.abspath(""))
    _sync(root, cat)
    _check(root, cat)

    staging = staging_dir(p1, "r1")
    prepare(t.storage, staging)
    size = _parquet(t, f"{staging}/part-r1.parquet", [10, 20, 30, 40])
    new = FileEntry(f"{p1}/part-r1.parquet", size, 4, {"dt": "2026112806"}, staged=f"{staging}/part-r1.parquet")
    t.log.commit([new], Transaction("etl:job", {"schedule": 1}),
                 restated=[Restatement({"dt": "2026112806"}, p1, staging, 3, 4)])
    out = _sync(root, cat)
    assert [(s["operation"], s["added"], s["removed"]) for s in out["snapshots"]] == [("restate", 1, 2)]
    assert (root / p1 / "part-r1.parquet").is_file()  # swapped in by the sync, as trib's readers do
    _check(root, cat)
    assert sorted(i for i, _ in _pyiceberg_rows(_iceberg(cat))) == [4, 5, 10, 20, 30, 40]


def test_a_new_mirror_of_a_table_whose_first_commits_were_trimmed_starts_from_its_checkpoint(tmp_path):
    from tributary_read.table.config import Table, TableConfig
    from tributary_read.table.layout import Layout
    from tributary_read.table.manifest import FileEntry, Transaction

    cat = _catalog(tmp_path)
    t = Table.create(str(tmp_path / "r"), TableConfig(Layout(LAYOUT, PARTITION), format="parquet",
                                                      checkpoint_interval=2, log_retention_ms=0))
    for i in range(5):
        d = f"2026_11_28/0{6 + i % 2}"
        path = f"{d}/part-{i}.parquet"
        t.log.commit([FileEntry(path, _parquet(t, path, [i]), 1, {"dt": "20261128" + d[-2:]})],
                     Transaction("w", {"src": i}))
    root = Path(t.storage.abspath(""))
    invoke_trib("clean", str(root), "--older-than", "0s", check=True)
    assert t.log.oldest_version() == 4
    out = _sync(root, cat)
    assert [(s["version"], s["added"]) for s in out["snapshots"]] == [(4, 4), (5, 1)]
    _check(root, cat)


def test_without_the_extra_the_sync_names_it(tmp_path):
    """pyiceberg missing (blocked in sys.modules): exit 10, one line naming the extra; the import of trib and
    ``trib iceberg sync --help`` never needed it."""
    root = _table(tmp_path)
    code = ("import sys; sys.modules['pyiceberg'] = None; sys.argv = ['trib', *sys.argv[1:]]; "
            "from tributary_read.cli.main import main; main()")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = ["iceberg", "sync", str(root), "--table", "db.t", "--catalog", _catalog(tmp_path)]
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    assert proc.returncode == 10 and proc.stderr.count("\n") == 1, proc.stderr
    assert "pip install 'tributary-read[iceberg]'" in proc.stderr
    helped = subprocess.run([sys.executable, "-c", code, "iceberg", "sync", "--help"], capture_output=True,
                            text=True, env=env)
    assert helped.returncode == 0 and "NS.NAME" in helped.stdout


def test_many_commits_merge_manifests_keep_a_bounded_history_and_read_the_same(tmp_path):
    """45 one-file commits mirrored one sync each, then in one batch, with 8 snapshots kept: manifests merge
    (each live file listed once), the history stays at 8, the metadata of expired snapshots is deleted, a
    kept old snapshot reads as trib's table did at its version, and a compaction after it is one overwrite."""
    from tributary_read.errors import InvalidInputError
    from tributary_read.iceberg import appends, mirror
    from tributary_read.table.config import Table, TableConfig
    from tributary_read.table.layout import Layout
    from tributary_read.table.manifest import FileEntry, SourceFile, Transaction
    from tributary_read.table.renames import finish_replace

    cat = _catalog(tmp_path)
    t = Table.create(str(tmp_path / "m"), TableConfig(Layout(LAYOUT, PARTITION), format="parquet"))
    root = Path(t.storage.abspath(""))

    def write(i: int) -> None:
        d = f"2026_11_28/0{6 + i % 2}"
        path = f"{d}/part-{i}.parquet"
        t.log.commit([FileEntry(path, _parquet(t, path, [i]), 1, {"dt": "20261128" + d[-2:]})],
                     Transaction("w", {"src": i}))

    write(0)
    _sync(root, cat)  # the CLI creates the table; then the history is cut short to show it bounded
    with _iceberg(cat).transaction() as tx:
        tx.set_properties({appends.KEEP_PROPERTY: "8"})
    for i in range(1, 25):
        write(i)
        assert mirror.sync(t, "db.events", cat).version == i + 1
    for i in range(25, 45):
        write(i)
    out = mirror.sync(t, "db.events", cat)
    assert [s["version"] for s in out.snapshots] == list(range(26, 46))
    _check(root, cat)
    ice = _iceberg(cat)
    assert [s.summary["trib.version"] for s in ice.snapshots()] == [str(v) for v in range(38, 46)]
    manifests = ice.current_snapshot().manifests(ice.io)
    assert len(manifests) < 10  # 45 commits' manifests merged by tiers of 10

    # Nothing in the metadata directory that no kept snapshot names: expired lists and merged-away manifests
    # were deleted after their commits.
    named = set()
    for s in ice.snapshots():
        named.add(s.manifest_list)
        named.update(m.manifest_path for m in s.manifests(ice.io))
    meta = ice.metadata.location.removeprefix("file://") + "/metadata"
    assert {f"file://{p}" for p in glob.glob(f"{meta}/*.avro")} == named

    # Time travel to the oldest kept snapshot: trib's files at version 38.
    oldest = ice.snapshots()[0]
    old = ice.scan(snapshot_id=oldest.snapshot_id, selected_fields=("id", "dt")).to_arrow()
    assert sorted(old.column("id").to_pylist()) == list(range(38))

    # A compaction of one partition (as trib compact commits it): its files sit in merged manifests, which
    # pyiceberg's overwrite rewrites without them.
    inputs = [f for f in t.log.state().files.values() if f.partition["dt"] == "2026112806"]
    ids = sorted(int(f.path.rsplit("-", 1)[1].split(".")[0]) for f in inputs)
    path = "2026_11_28/06/compacted.parquet"
    sources = tuple(SourceFile(f.path, int(f.path.rsplit("-", 1)[1].split(".")[0]) + 1, 1) for f in inputs)
    c = t.log.commit([FileEntry(path, _parquet(t, path, ids), len(ids), {"dt": "2026112806"}, sources=sources)],
                     removed=inputs, replace=True)
    finish_replace(t, c.files, c.removed)  # the originals set aside, as trib compact does after its commit
    out = mirror.sync(t, "db.events", cat)
    assert [(s["operation"], s["added"], s["removed"]) for s in out.snapshots] == [("replace", 1, len(inputs))]
    _check(root, cat)
    assert _iceberg(cat).current_snapshot().summary.operation.value == "replace"

    # A history bound that is not a count is refused with one line naming the property; nothing is added.
    with _iceberg(cat).transaction() as tx:
        tx.set_properties({appends.KEEP_PROPERTY: "a week"})
    write(45)
    with pytest.raises(InvalidInputError, match="trib.snapshots-kept = 'a week' is not a count"):
        mirror.sync(t, "db.events", cat)
    assert _iceberg(cat).current_snapshot().summary["trib.version"] == "46"


def test_no_merge_writes_more_entries_than_its_bound(tmp_path, monkeypatch):
    """A merge stops at MERGE_MAX_FILES entries (the slowest sync and an overwrite's rewrite stay bounded), and
    every live file is still listed exactly once."""
    from tributary_read.iceberg import appends, mirror
    from tributary_read.table.config import Table, TableConfig
    from tributary_read.table.layout import Layout
    from tributary_read.table.manifest import FileEntry, Transaction

    monkeypatch.setattr(appends, "MERGE_MAX_FILES", 6)
    monkeypatch.setattr(appends, "MERGE_FANOUT", 3)
    cat = _catalog(tmp_path)
    t = Table.create(str(tmp_path / "m"), TableConfig(Layout(LAYOUT, PARTITION), format="parquet"))
    root = Path(t.storage.abspath(""))
    for i in range(40):
        path = f"2026_11_28/06/part-{i}.parquet"
        t.log.commit([FileEntry(path, _parquet(t, path, [i]), 1, {"dt": "2026112806"})], Transaction("w", {"s": i}))
        if i % 4 == 3:
            mirror.sync(t, "db.events", cat)
    ice = _iceberg(cat)
    sizes = [(m.added_files_count or 0) + (m.existing_files_count or 0) for m in ice.current_snapshot().manifests(ice.io)]
    assert sum(sizes) == 40 and max(sizes) <= 6 and len(sizes) < 20, sizes
    _check(root, cat)


def _hold(root: Path, cat: str, point: str) -> subprocess.Popen:
    """A ``trib iceberg sync`` stopped (SIGSTOP) at ``point``, to let the test act in that gap."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRIB_STOP_AT": point}
    held = subprocess.Popen([*TRIB, "iceberg", "sync", str(root), "--table", "db.events", "--catalog", cat, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 120
    while not _stopped(held.pid) and time.time() < deadline and held.poll() is None:
        time.sleep(0.05)
    assert _stopped(held.pid), f"the mirror never reached {point}"
    return held


def test_a_catalog_that_goes_down_mid_sync_loses_and_doubles_nothing(tmp_path, postgres_server, postgres_catalog):
    """The PostgreSQL catalog stopped before a sync, while a sync is between building a snapshot and committing
    it, and while it is between a committed batch and its next commit: one line each, exit 8 where nothing
    was sent and exit 12 where a catalog commit's outcome is unknown; once the catalog is back, a rerun
    registers each commit exactly once."""
    from tributary_read.iceberg.catalog import open_catalog

    root, cat = _table(tmp_path), postgres_catalog
    for k in range(3):
        _ingest(root, tmp_path, (OLD[0], RECENT[k % 2]), 2, 1000 * k)
    invoke_trib("compact", str(root), "--min-age", "0s", "--min-files", "2", check=True)  # version 4: a replace
    for point, landed, code in ((None, [], 8), ("iceberg-prepared", [], 12),
                                ("iceberg-committed", ["1", "2", "3"], 12)):
        held = _hold(root, cat, point) if point else None
        postgres_server.stop()
        try:
            if held is None:
                proc = invoke_trib("iceberg", "sync", str(root), "--table", "db.events", "--catalog", cat)
                returncode, err = proc.returncode, proc.stderr
            else:
                held.send_signal(signal.SIGCONT)
                _, err = held.communicate(timeout=120)
                returncode = held.returncode
            assert returncode == code, (point, err)
            assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
            assert ("may have landed" in err) == (code == 12), err
        finally:
            postgres_server.start()
        catalog = open_catalog(cat)
        if catalog.table_exists("db.events"):
            assert [s.summary["trib.version"] for s in _iceberg(cat).snapshots()] == landed, point
        out = _sync(root, cat)
        assert out["version"] == 4 and [s["version"] for s in out["snapshots"]] == list(range(len(landed) + 1, 5))
        assert [s.summary["trib.version"] for s in _iceberg(cat).snapshots()] == ["4"], point  # the replace
        # expired the snapshots before it: they name the files the compaction set aside
        _check(root, cat)
        catalog.drop_table("db.events")  # (not purge_table: it would delete trib's data files)


def test_a_table_on_s3_mirrors_with_s3_uris_that_pyiceberg_reads(tmp_path, s3_root, s3_server):
    """A trib table on S3 (moto): the mirror registers its files as ``s3://`` URIs, and pyiceberg, given only the
    store's endpoint and keys as FileIO properties, reads the rows trib reads, ``dt`` included."""
    from pyiceberg.catalog.sql import SqlCatalog

    from tributary_read.table.config import Table

    invoke_trib("table", "create", s3_root, "--layout", LAYOUT, "--partition", PARTITION, "--format", "parquet",
                check=True)
    src = tmp_path / "s3.jsonl"
    base = _now_hour()
    src.write_text("".join(json.dumps({"id": i, "ts": base - (i % 3) * HOUR, "name": f"s{i}"}) + "\n"
                           for i in range(30)))
    invoke_trib("ingest", s3_root, "--source", str(src), "--app-id", "s3", "--time-field", "ts", check=True)
    cat = _catalog(tmp_path)
    out = json.loads(invoke_trib("iceberg", "sync", s3_root, "--table", "db.s3", "--catalog", cat, "--json",
                                 check=True).stdout)
    assert out["version"] == 1
    import pyarrow.parquet as pq

    t = Table.load(s3_root)
    want: Counter = Counter()
    for f in t.log.state().files.values():
        with t.storage.open_input(f.path) as handle:
            want.update((i, f.partition["dt"]) for i in pq.read_table(handle, columns=["id"]).column("id").to_pylist())
    catalog = SqlCatalog("trib", uri=cat, warehouse=f"file://{tmp_path / 'catalog' / 'warehouse'}", **{
        "s3.endpoint": s3_server["endpoint_url"], "s3.access-key-id": "testing",
        "s3.secret-access-key": "testing", "s3.region": "us-east-1"})
    ice = catalog.load_table("db.s3")
    assert set(_live_paths(ice)) == {t.storage.uri_for(f.path) for f in t.log.state().files.values()}
    assert all(p.startswith("s3://trib/") for p in _live_paths(ice))
    assert _pyiceberg_rows(ice) == want and sum(want.values()) == 30
