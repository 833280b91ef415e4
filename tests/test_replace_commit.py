"""The replace commit (issue 28, section 2 and 3): compaction changes no data, and no manifest reader
counts a record twice or loses one across it.

Each original file holds distinct record ids; a compacted file holds the union of its sources'. A
read's records are the ids of what it delivers, so "exactly once" is a multiset equality, checked
over random interleavings of appends, compactions (of compacted files too), expiries and reads.
"""

from __future__ import annotations

import json
import random

import pytest
from conftest import invoke_trib
from helpers import LAYOUT, PARTITION

from tributary_read.errors import CommitConflictError, CompactedAwayError, ManifestCorruptError, \
    UnsupportedFormatVersionError, VerificationError
from tributary_read.read.resolve import manifest_files
from tributary_read.table import manifest, statememo
from tributary_read.table.config import Table, TableConfig
from tributary_read.table.layout import Layout
from tributary_read.table.log import checkpoint_path, commit_path
from tributary_read.table.manifest import Commit, FileEntry, SourceFile
from tributary_read.table.renames import REPLACED_DIR, finish_replace, replaced_path

pytestmark = pytest.mark.unit

HOURS = ("2020062400", "2020062401", "2020062402")


class World:
    """A table whose files are real (a few bytes each) and whose records are known by id."""

    def __init__(self, root, interval: int = 4):
        self.t = Table.create(str(root), TableConfig(Layout(LAYOUT, PARTITION), checkpoint_interval=interval))
        self.ids: dict[str, list[int]] = {}  # original path -> its record ids
        self.next_id = 0
        self.n = 0
        self.set_aside = False  # what trib compact does after its commit: the originals leave the directory

    def path(self, dt: str, name: str) -> str:
        return f"{dt[:4]}_{dt[4:6]}_{dt[6:8]}/{dt[8:]}/{name}"

    def append(self, dt: str, records: int) -> Commit:
        self.n += 1
        p = self.path(dt, f"part-20200624000000-{self.n:08x}-{self.n:06d}.jsonl")  # named as trib's writer names
        self.ids[p] = list(range(self.next_id, self.next_id + records))
        self.next_id += records
        self.t.storage.write(p, b"x" * records)
        return self.t.log.commit([FileEntry(p, records, records, {"dt": dt})])

    def compact(self, inputs: list[FileEntry]) -> Commit:
        """One compacted file for ``inputs`` (one partition), its sources flattened, as trib compact commits."""
        self.n += 1
        dt = inputs[0].partition["dt"]
        p = self.path(dt, f"part-20200624000000-{self.n:08x}-{self.n:06d}.jsonl")
        versions = self.versions()
        sources = tuple(s for f in inputs for s in (f.sources or (SourceFile(f.path, versions[f.path], f.records),)))
        records = sum(f.records for f in inputs)
        self.t.storage.write(p, b"y" * records)
        out = FileEntry(p, records, records, {"dt": dt}, sources=sources)
        c = self.t.log.commit([out], removed=inputs, replace=True)
        if self.set_aside:
            finish_replace(self.t, c.files, c.removed)
        return c

    def versions(self) -> dict[str, int]:
        return {f.path: c.version for c in self.t.log.commits() for f in c.new_data}

    def records(self, entries) -> list[int]:
        out: list[int] = []
        for f in entries:
            for p in ([s.path for s in f.sources] if f.sources else [f.path]):
                out.extend(self.ids[p.removeprefix(REPLACED_DIR + "/")])
        return sorted(out)

    def read(self, since: int, until: int | None = None) -> list[int]:
        fs = manifest_files(self.t, since, until)
        state = {f.path: f for f in self.t.log.state().files.values()}
        entries = []
        for rf in fs.files:  # back to the log's entries, to know what a compacted file holds
            path = rf.path.removeprefix(REPLACED_DIR + "/")
            e = state.get(path) or next(f for c in self.t.log.commits() for f in c.files if f.path == path)
            entries.append(e)
        return self.records(entries)

    def added_between(self, since: int, until: int, expired: set[str]) -> list[int]:
        return sorted(i for c in self.t.log.commits(since, until) for f in c.new_data
                      if f.path not in expired for i in self.ids[f.path])


def test_a_replace_that_would_change_the_records_is_refused_and_nothing_lands(tmp_path):
    w = World(tmp_path / "t")
    a, b = (w.append("2020062400", 3).files[0], w.append("2020062400", 4).files[0])
    v = w.t.log.latest_version()
    bad = [FileEntry("2020_06_24/00/c.jsonl", 1, 6, {"dt": "2020062400"},
                     sources=(SourceFile(a.path, 1, 3), SourceFile(b.path, 2, 3)))]
    with pytest.raises(VerificationError, match="keep the records"):
        w.t.log.commit(bad, removed=[a, b], replace=True)
    half = [FileEntry("2020_06_24/00/c.jsonl", 1, 3, {"dt": "2020062400"}, sources=(SourceFile(a.path, 1, 3),))]
    with pytest.raises(VerificationError, match="exactly the originals"):
        w.t.log.commit(half + [FileEntry("2020_06_24/00/d.jsonl", 1, 4, {"dt": "2020062400"},
                                         sources=(SourceFile("2020_06_24/00/other.jsonl", 1, 4),))],
                       removed=[a, b], replace=True)
    assert w.t.log.latest_version() == v


def test_readers_see_the_compacted_file_once_and_a_range_after_it_nothing(tmp_path):
    w = World(tmp_path / "t")
    for n in (3, 4, 5):
        w.append("2020062400", n)
    files = list(w.t.log.state().files.values())
    r = w.compact(files)
    assert r.operation == "replace" and r.replaces == (1, 2, 3) and r.new_data == ()
    everything = list(range(12))
    assert w.read(0) == everything  # the whole state: the compacted file, not the originals
    assert [f.path for f in manifest_files(w.t).files] == [r.files[0].path]
    assert w.read(0, 4) == everything  # all its sources in range: the compacted file
    assert [f.path for f in manifest_files(w.t, 0, 4).files] == [r.files[0].path]
    assert w.read(3) == []  # the replace commit itself: no new data
    assert w.read(1) == list(range(3, 12))  # part of its sources: the originals, still on storage
    assert sorted(f.path for f in manifest_files(w.t, 1).files) == sorted(f.path for f in files[1:])


def test_a_range_that_needs_cleaned_originals_is_refused_naming_the_compaction(tmp_path):
    w = World(tmp_path / "t")
    for n in (3, 4):
        w.append("2020062401", n)
    files = list(w.t.log.state().files.values())
    w.compact(files)
    for f in files:
        w.t.storage.delete(f.path)  # what trib clean does after the grace period
    assert w.read(0) == list(range(7))
    with pytest.raises(CompactedAwayError, match=r"compacted into .* at version 3 .* versions 1\.\.2"):
        manifest_files(w.t, 1)
    p = invoke_trib("files", str(w.t.uri), "--since-version", "1", "--mode", "manifest")
    assert p.returncode == 3 and "compacted into" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_two_compactions_of_the_same_files_one_lands_and_an_expired_file_is_never_resurrected(tmp_path):
    w = World(tmp_path / "t")
    for n in (2, 2, 2):
        w.append("2020062400", n)
    files = list(w.t.log.state().files.values())
    w.compact(files[:2])
    with pytest.raises(CommitConflictError, match="another compaction replaced it"):
        w.compact(files[1:])
    w.t.log.commit([], removed=[files[2]])  # trib expire
    with pytest.raises(CommitConflictError, match="trib expire removed it"):
        w.compact([files[2], next(f for f in w.t.log.state().files.values() if f.sources)])
    assert w.read(0) == [0, 1, 2, 3]


def test_an_older_trib_refuses_a_compacted_table_instead_of_reading_both_copies(tmp_path, monkeypatch):
    w = World(tmp_path / "t", interval=4)
    for n in (1, 1, 1):
        w.append("2020062400", n)
    w.compact(list(w.t.log.state().files.values()))  # version 4: a checkpoint of the compacted state
    assert json.loads(w.t.storage.read(commit_path(4)))["format_version"] == 2
    assert json.loads(w.t.storage.read(checkpoint_path(4)))["format_version"] == 2
    assert json.loads(w.t.storage.read(commit_path(1)))["format_version"] == 1
    monkeypatch.setattr(manifest, "READABLE_VERSIONS", frozenset({1}))  # the build before compaction
    statememo.forget()  # ... in a process of its own, which has read no state yet
    with pytest.raises(UnsupportedFormatVersionError, match="upgrade trib"):
        w.t.log.state()
    with pytest.raises(UnsupportedFormatVersionError):
        list(w.t.log.commits(0))


def test_a_tampered_replace_commit_is_corrupt(tmp_path):
    w = World(tmp_path / "t")
    for n in (2, 3):
        w.append("2020062400", n)
    w.compact(list(w.t.log.state().files.values()))
    d = json.loads(w.t.storage.read(commit_path(3)))
    d["files"][0]["records"] = 4
    d["files"][0]["sources"][0]["records"] = 1
    with pytest.raises(ManifestCorruptError, match="keep the records"):
        Commit.decode(json.dumps(d).encode(), "3.json")


@pytest.mark.parametrize("seed", range(12))
def test_consecutive_reads_deliver_every_record_once_across_compaction_and_expiry(tmp_path, seed):
    """Random appends, compactions (of compacted files too), expiries and reads at random boundaries.

    Consecutive ranges (a consumer's plans) together deliver every record once, less expired ones;
    any range delivers exactly the records its commits added; the whole state holds each live
    record once. A small checkpoint interval makes ranges that end early settle by the state.
    """
    rng = random.Random(seed)
    w = World(tmp_path / "t", interval=rng.choice([2, 3, 50]))
    w.set_aside = seed % 2 == 0
    expired: set[str] = set()  # originals whose records left the table
    cuts = [0]
    for _ in range(40):
        op = rng.random()
        if op < 0.5:
            w.append(rng.choice(HOURS), rng.randint(1, 4))
        elif op < 0.8:
            dt = rng.choice(HOURS)
            live = [f for f in w.t.log.state().files.values() if f.partition["dt"] == dt]
            if len(live) >= 2:
                w.compact(rng.sample(live, rng.randint(2, len(live))))
        elif op < 0.87:
            live = list(w.t.log.state().files.values())
            if live:
                gone = rng.choice(live)
                w.t.log.commit([], removed=[gone])
                expired |= {s.path for s in gone.sources} or {gone.path}
        if rng.random() < 0.3:
            cuts.append(w.t.log.latest_version())
    latest = w.t.log.latest_version()
    cuts.append(latest)
    delivered: list[int] = []
    for a, b in zip(cuts, cuts[1:]):
        if b > a:
            delivered.extend(w.read(a, b if rng.random() < 0.5 else None) if b == latest else w.read(a, b))
    live_ids = sorted(i for p, ids in w.ids.items() if p not in expired for i in ids)
    assert sorted(delivered) == live_ids
    assert w.read(0) == live_ids
    for _ in range(10):
        a = rng.randint(0, latest)
        b = rng.randint(a, latest)
        assert w.read(a, b) == w.added_between(a, b, expired), (a, b)


def test_clean_keeps_replaced_originals_for_the_retention_and_while_a_pending_plan_names_them(tmp_path):
    w = World(tmp_path / "t")
    w.set_aside = True
    for n in (2, 3, 4):
        w.append("2020062402", n)
    root = str(w.t.uri)
    plan = invoke_trib("files", root, "--consumer", "c", "--json", check=True)  # handed out, not acked
    planned = {f["path"] for f in json.loads(plan.stdout)["files"]}
    for n in (5,):
        w.append("2020062402", n)
    originals = list(w.t.log.state().files.values())
    w.compact(originals)
    invoke_trib("clean", root, "--older-than", "0s", check=True)
    assert all(w.t.storage.exists(replaced_path(f.path)) for f in originals)  # within the retention: all kept
    invoke_trib("table", "set", root, "--compact", "retention=0s", check=True)
    invoke_trib("clean", root, "--older-than", "0s", check=True)
    assert {f.path for f in originals if w.t.storage.exists(replaced_path(f.path))} == planned  # the pending plan's stay
    ack = json.loads(plan.stdout)["plan_id"]
    invoke_trib("consumer", "ack", root, "c", ack, check=True)
    # Past the retention the consumer, behind the compaction, needs a cleaned original: refused, named.
    behind = invoke_trib("files", root, "--consumer", "c", "--json")
    assert behind.returncode == 3 and "was compacted into" in behind.stderr and "trib clean has deleted" in behind.stderr
    assert w.read(0) == list(range(14))
    invoke_trib("clean", root, "--older-than", "0s", check=True)
    assert not any(w.t.storage.exists(p) for f in originals for p in (f.path, replaced_path(f.path)))
    assert invoke_trib("verify", root).returncode == 0


def test_a_pending_plan_handed_out_again_after_a_compaction_names_where_its_files_are_now(tmp_path):
    w = World(tmp_path / "t")
    w.set_aside = True
    for n in (2, 3):
        w.append("2020062400", n)
    root = str(w.t.uri)
    first = json.loads(invoke_trib("files", root, "--consumer", "c", "--json", check=True).stdout)
    originals = list(w.t.log.state().files.values())
    out = w.compact(originals).files[0]
    assert not any(w.t.storage.exists(f.path) for f in originals)  # out of the partition directory
    assert all(w.t.storage.exists(replaced_path(f.path)) for f in originals)
    listed = invoke_trib("files", root, "--mode", "mtime", "--all", "--json", check=True)
    assert [f["path"] for f in json.loads(listed.stdout)["files"]] == [out.path]  # a directory reader's view
    again = json.loads(invoke_trib("files", root, "--consumer", "c", "--json", check=True).stdout)
    assert again["plan_id"] == first["plan_id"]
    assert sorted(f["path"] for f in again["files"]) == sorted(replaced_path(f.path) for f in originals)
    assert all(w.t.storage.exists(f["path"]) for f in again["files"])
    invoke_trib("clean", root, "--older-than", "0s", check=True)
    assert all(w.t.storage.exists(f["path"]) for f in again["files"])  # pending: kept
    invoke_trib("consumer", "ack", root, "c", again["plan_id"], check=True)
    nxt = json.loads(invoke_trib("files", root, "--consumer", "c", "--json", check=True).stdout)
    assert nxt["files"] == []  # the replace added no new data
