"""The in-memory store end to end: a trib table in ``memory://``, written, committed and resolved in-process.

The behaviour suite (tests/test_storage.py, ``any_storage``) holds the memory
store to the same contract as local disk and S3; these tests show that the
table layers on top need nothing else from it.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import REPO
from tributary_read import Layout, Table, TableConfig, TableWriter
from tributary_read.errors import InvalidInputError
from tributary_read.io.memory import MemoryStorage
from tributary_read.io.storage import BACKENDS, open_storage, register_storage
from tributary_read.read.partition_filter import PartitionFilter
from tributary_read.read.resolve import manifest_files, mtime_files, resolve
from tributary_read.read.window import TimeWindow
from tributary_read.table.retention import expire

pytestmark = pytest.mark.unit

H = 3_600_000
T0 = 1_592_956_800_000  # 2020-06-24T00:00:00Z
LAYOUT = Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")


@pytest.fixture
def root() -> str:
    return f"memory://trib-tests/t-{uuid.uuid4().hex[:12]}"


def _lines(storage, path: str) -> list[dict]:
    return [json.loads(x) for x in storage.read(path).splitlines()]


def test_writer_commits_and_readers_resolve_a_memory_table(root):
    table = Table.create(root, TableConfig(layout=LAYOUT))
    assert isinstance(table.storage, MemoryStorage)
    w = TableWriter(table)
    for i in range(30):
        w.write(json.dumps({"i": i}).encode(), T0 + (i % 3) * H)
    first = w.commit()
    for i in range(30, 40):
        w.write(json.dumps({"i": i}).encode(), T0 + 5 * H)
    second = w.commit()
    assert (first.version, second.version) == (1, 2)

    # A second open of the same URI (another reader in this process) sees the commits.
    reopened = Table.load(root)
    fs = manifest_files(reopened)
    assert sorted(f.path.rsplit("/", 1)[0] for f in fs.files) == [
        "2020_06_24/00", "2020_06_24/01", "2020_06_24/02", "2020_06_24/05"]
    records = sorted(r["i"] for f in fs.files for r in _lines(reopened.storage, f.path))
    assert records == list(range(40))
    assert fs.root == root and fs.uri(fs.files[0]) == f"{root}/{fs.files[0].path}"
    assert fs.hadoop_root is None  # Spark cannot reach this process's memory
    with pytest.raises(InvalidInputError, match="Spark and Hive cannot read it"):
        fs.hadoop_uri(fs.files[0])

    only_new = manifest_files(reopened, since_version=1)
    assert [f.path for f in only_new.files] == [f.path for f in second.files]
    assert [f.path for f in resolve(root, mode="manifest", since_version=1).files] == [
        f.path for f in second.files]


def test_mtime_windows_and_partition_walks_list_a_memory_table(root):
    table = Table.create(root, TableConfig(layout=LAYOUT, format="parquet", compression="snappy"))
    w = TableWriter(table)
    w.write_table(pa.table({"ts": [T0, T0 + H, T0 + 2 * H], "v": [1, 2, 3]}), "ts")
    commit = w.commit()
    # Everything just written lies in a window around now; a directory of another layout is reported.
    table.storage.write("stray/part-0", b"x")
    now = commit.timestamp_ms
    listed = mtime_files(root, TimeWindow(now - 60_000, now + 60_000))
    assert sorted(f.path for f in listed.files) == sorted(f.path for f in commit.files)
    assert any(s.path == "stray/part-0" for s in listed.skipped)
    hour1 = mtime_files(root, TimeWindow(now - 60_000, now + 60_000),
                        partitions=PartitionFilter.parse("dt=2020062401", LAYOUT))
    assert [f.path.rsplit("/", 1)[0] for f in hour1.files] == ["2020_06_24/01"]
    path = hour1.files[0].path
    assert pq.read_table(table.storage.open_input(path)).column("v").to_pylist() == [2]
    assert pq.read_table(io.BytesIO(table.storage.read(path))).column("v").to_pylist() == [2]


def test_expire_deletes_files_and_their_empty_partitions(root):
    table = Table.create(root, TableConfig(layout=LAYOUT))
    w = TableWriter(table)
    w.write(b'{"old": 1}', T0)
    w.write(b'{"new": 1}', int(time.time() * 1000))
    new_day = max(f.path for f in w.commit().files).split("/")[0]
    assert new_day != "2020_06_24"
    result = expire(table, older_than_ms=24 * H, grace_ms=0)
    assert [v.path.rsplit("/", 1)[0] for v in result.deleted] == ["2020_06_24/00"]
    # The emptied partition and its day are gone for listings, as rmdir leaves them on disk.
    assert [d.path for d in table.storage.list_dirs()] == sorted([new_day, "_tributary"])
    assert [f.path for f in manifest_files(table).files] == [f.path for f in table.storage.list(new_day)]


def test_concurrent_writers_get_distinct_versions(root):
    Table.create(root, TableConfig(layout=LAYOUT))
    versions: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def writer(k: int) -> None:
        try:
            w = TableWriter(Table.load(root))  # each its own Storage, as separate processes have
            barrier.wait()
            for n in range(5):
                w.write(json.dumps({"k": k, "n": n}).encode(), T0 + k * H)
                versions.append(w.commit().version)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    assert not errors, errors
    assert sorted(versions) == list(range(1, 21))
    storage = Table.load(root).storage
    got = sorted((r["k"], r["n"]) for f in manifest_files(Table.load(root)).files for r in _lines(storage, f.path))
    assert got == [(k, n) for k in range(4) for n in range(5)]


@pytest.mark.parametrize("uri", ["memory://", "memory:///", "memory://a/../b", "memory://../x"])
def test_memory_uri_needs_a_name(uri):
    with pytest.raises(InvalidInputError, match="memory URI"):
        open_storage(uri)


def test_memory_roots_are_separate_and_shared_by_uri(root):
    a, b = open_storage(root + "/a"), open_storage(root + "/b")
    a.write("x", b"1")
    assert b.list() == [] and not b.exists("x")
    assert open_storage(root + "//a/").read("x") == b"1"  # the same root however it is spelled
    assert [f.path for f in open_storage(root).list()] == ["a/x"]


def test_register_storage_adds_a_scheme(monkeypatch, root):
    monkeypatch.setitem(BACKENDS, "scratch", None)  # restored after the test
    register_storage("scratch", lambda u, options: MemoryStorage("scratch/" + u.netloc + u.path))
    s = open_storage("scratch://t1/x")
    s.write("f", b"1")
    assert isinstance(s, MemoryStorage) and open_storage("memory://scratch/t1/x").read("f") == b"1"
    for bad in ("", "S3", "x://"):
        with pytest.raises(InvalidInputError):
            register_storage(bad, lambda u, o: None)


def test_opening_a_local_table_imports_no_other_backend(tmp_path):
    code = ("import sys; from tributary_read.io.storage import open_storage; "
            f"open_storage({str(tmp_path)!r}).list(); "
            "print(' '.join(m for m in ('boto3', 'hdfs', 'tributary_read.io.s3', 'tributary_read.io.hdfs', "
            "'tributary_read.io.memory') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == ""
