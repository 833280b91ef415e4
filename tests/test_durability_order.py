"""Data files, and the directories naming them, are durable before the manifest that names them.

The real fsync(2) and link(2) calls of a real write are recorded in the order they happen (each
still does its work): every data file a commit names, and every directory from its partition up to
the table's root, must have been fsynced before the link that publishes the commit's log entry.
Through the writer (the path of ingest, Kafka, the spool and the Spark writer's tasks), with files
rolled mid-batch, and through ``trib compact``.
"""

from __future__ import annotations

import json
import os
import threading

import pytest
from conftest import invoke_trib

from tributary_read import Layout, RollPolicy, Table, TableConfig, TableWriter

pytestmark = pytest.mark.unit

H = 3_600_000
LAYOUT = Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")
START = 1_717_200_000_000 - 2 * H  # 2024-05-31T22:00Z: two days, so a new day's directory too


@pytest.fixture
def calls(monkeypatch):
    """Every fsync (by the path of its descriptor) and link (by its target), in order, across threads."""
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()
    real_fsync, real_link = os.fsync, os.link

    def fsync(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        real_fsync(fd)
        with lock:
            seen.append(("fsync", path))

    def link(src, dst, *a, **kw):
        with lock:
            seen.append(("link", os.path.realpath(dst)))
        return real_link(src, dst, *a, **kw)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    return seen


def _assert_durable_before_manifest(root, staged: list[str], seen: list[tuple[str, str]]) -> None:
    root = os.path.realpath(root)
    links = [i for i, (kind, p) in enumerate(seen) if kind == "link" and "/_tributary/" in p]
    assert links, f"no manifest was published by link(2): {seen}"
    published = links[-1]
    synced = {p for kind, p in seen[:published] if kind == "fsync"}
    needed: set[str] = set()
    for rel in staged:
        path = os.path.join(root, rel)
        needed.add(path)
        d = os.path.dirname(path)
        while d != root:
            needed.add(d)
            d = os.path.dirname(d)
        needed.add(root)
    missing = sorted(needed - synced)
    assert not missing, f"not fsynced before the manifest landed: {missing}"


@pytest.mark.parametrize("fmt, compression", [("parquet", "snappy"), ("jsonl", "gzip")])
def test_the_writer_syncs_every_file_and_its_directories_before_the_manifest(tmp_path, calls, fmt, compression):
    root = tmp_path / "t"
    table = Table.create(str(root), TableConfig(layout=LAYOUT, format=fmt, compression=compression))
    w = TableWriter(table, roll=RollPolicy(max_records=150))  # rolled files are closed mid-batch
    for i in range(1_000):
        t = START + (i * 7919 % 5) * H + i
        w.write({"id": i, "ts": t} if fmt == "parquet" else json.dumps({"id": i, "ts": t}).encode(), t)
    calls.clear()  # the table's creation is not this commit's business
    commit = w.commit()
    staged = [f.staged or f.path for f in commit.files]
    assert len(staged) >= 10 and len({p.rsplit("/", 1)[0] for p in staged}) == 5
    _assert_durable_before_manifest(root, staged, calls)


def test_compaction_syncs_its_outputs_before_its_replace_commit(tmp_path, calls):
    root = tmp_path / "t"
    table = Table.create(str(root), TableConfig(layout=LAYOUT, format="jsonl", compression="gzip"))
    for c in range(4):
        w = TableWriter(table)
        for i in range(50):
            w.write(json.dumps({"c": c, "i": i}).encode(), START + (i % 2) * H + c)
        w.commit()
    calls.clear()
    done = json.loads(invoke_trib("compact", str(root), "--min-age", "0s", "--min-files", "2", "--json",
                                  check=True).stdout)
    outputs = [o["path"] for o in done["outputs"]]
    assert len(outputs) == 2
    staged = [f"{p.rsplit('/', 1)[0]}/.{p.rsplit('/', 1)[1]}.inprogress" for p in outputs]  # hidden until committed
    _assert_durable_before_manifest(root, staged, calls)


def test_only_the_local_store_calls_fsync():
    """One owner of durability: every other module goes through Storage.sync / sync_many."""
    import re
    from pathlib import Path

    import tributary_read

    pkg = Path(tributary_read.__file__).parent
    calls = re.compile(r"\bos\.(fsync|fdatasync|sync|syncfs)\(|\bsyncfs\b")
    offenders = [str(p.relative_to(pkg)) for p in pkg.rglob("*.py")
                 if p.name != "local.py" and calls.search(p.read_text())]
    assert offenders == [], f"fsync outside io/local.py (use Storage.sync_many): {offenders}"
