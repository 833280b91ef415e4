"""The manifest log: contiguous versions, checkpoints, app transactions, conflicts."""

from __future__ import annotations

import json

import pytest

from tributary_read.errors import AlreadyCommittedError, CommitConflictError, ManifestCorruptError
from tributary_read.table.layout import Layout
from tributary_read.table.log import LAST_CHECKPOINT, checkpoint_path, commit_path
from tributary_read.table.manifest import Commit, FileEntry, Transaction
from tributary_read.table.config import Table, TableConfig

from helpers import LAYOUT, PARTITION

pytestmark = pytest.mark.unit


def _table(root, interval=10) -> Table:
    return Table.create(root, TableConfig(Layout(LAYOUT, PARTITION), checkpoint_interval=interval))


def _entry(i: int) -> FileEntry:
    return FileEntry(f"2020_06_24/01/f{i}.jsonl", 10 + i, 1, {"dt": "2020062401"})


class CountingStorage:
    """Wraps a real storage and counts reads, to prove checkpoint reads are bounded."""

    def __init__(self, inner):
        self._inner, self.reads = inner, 0

    def read(self, rel):
        self.reads += 1
        return self._inner.read(rel)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def test_versions_are_contiguous_and_checkpointed(any_root):
    t = _table(any_root, interval=10)
    for i in range(35):
        c = t.log.commit([_entry(i)], Transaction(f"app{i % 3}", {"src": i}))
        assert c.version == i + 1
    assert t.log.latest_version() == 35
    assert t.storage.exists(checkpoint_path(30)) and not t.storage.exists(checkpoint_path(35))
    assert json.loads(t.storage.read(LAST_CHECKPOINT)) == {"version": 30}
    st = t.log.state()
    assert st.version == 35 and len(st.files) == 35
    assert {a: s.transaction.offsets["src"] for a, s in st.apps.items()} == {"app0": 33, "app1": 34, "app2": 32}
    # State at an older version comes from an older checkpoint plus its tail.
    old = t.log.state(15)
    assert old.version == 15 and len(old.files) == 15 and old.apps["app2"].version == 15


def test_state_reads_a_bounded_number_of_files(tmp_path):
    t = _table(str(tmp_path / "t"), interval=20)
    for i in range(205):
        t.log.commit([_entry(i)], Transaction("a", {"src": i}))
    counting = CountingStorage(t.storage)
    t.log.storage = counting
    app = t.log.last_transaction("a")
    assert app.transaction.offsets == {"src": 204}
    # hint + checkpoint 200 + commits 201..205 (+1 probe miss), not 205 commits.
    assert counting.reads <= 8


def test_a_state_read_again_applies_only_the_new_commits_and_never_outlives_its_log(tmp_path):
    """The process's state memo (table/statememo.py): the second read of a state costs the memo's commit and
    the new ones, gives what a fresh read gives, and a table made again under the same URI is read anew."""
    import shutil

    from tributary_read.table import statememo

    root = str(tmp_path / "t")
    t = _table(root, interval=20)
    for i in range(45):
        t.log.commit([_entry(i)], Transaction("a", {"src": i}))
    first = t.log.state()
    t.log.commit([_entry(45)], Transaction("a", {"src": 45}))
    counting = CountingStorage(Table.load(root).storage)
    again = Table.load(root)  # another instance of the same table shares the memo
    again.log.storage = counting
    got = again.log.state()
    # commit 45 (the memo's, checked), 46, the probe of 47, 46 again (the new memo's digest): no checkpoint, no tail
    assert counting.reads <= 4
    statememo.forget()
    fresh = Table.load(root).log.state()
    assert (got.version, dict(got.files), dict(got.apps)) == (fresh.version, dict(fresh.files), dict(fresh.apps))
    assert got.version == first.version + 1 == 46
    # Removed and made again under the same URI with other commits: the memo's commit differs, read anew.
    shutil.rmtree(root)
    t = _table(root, interval=20)
    for i in range(100, 146):
        t.log.commit([_entry(i)], Transaction("b", {"src": i}))
    st = Table.load(root).log.state()
    assert st.version == 46 and set(st.apps) == {"b"} and _entry(100).path in st.files


def test_stale_or_garbage_hint_is_only_a_starting_point(tmp_path):
    t = _table(str(tmp_path / "t"), interval=5)
    for i in range(23):
        t.log.commit([_entry(i)])
    t.storage.write(LAST_CHECKPOINT, b"garbage")
    assert t.log.latest_version() == 23 and len(t.log.state().files) == 23
    t.storage.write(LAST_CHECKPOINT, b'{"version": 5}')
    assert t.log.latest_version() == 23 and len(t.log.state().files) == 23


def test_same_app_racing_itself_is_a_conflict(any_root):
    t = _table(any_root)
    base = t.log.latest_version()
    t.log.commit([_entry(1)], Transaction("etl", {"src": 9}), base_version=base)
    # A second writer of the same app, with other offsets, that read the log before that commit.
    with pytest.raises(CommitConflictError, match="another writer of app 'etl'"):
        t.log.commit([_entry(2)], Transaction("etl", {"src": 8}), base_version=base)
    # A copy of the very same transaction: done already, and the race says by which version.
    with pytest.raises(AlreadyCommittedError, match="committed as version 1 by a concurrent copy") as e:
        t.log.commit([_entry(2)], Transaction("etl", {"src": 9}, {"meta": "is not identity"}), base_version=base)
    assert e.value.version == 1 and t.log.latest_version() == 1
    # Another app with the same stale view just lands on the next version.
    c = t.log.commit([_entry(3)], Transaction("other", {"src": 1}), base_version=base)
    assert c.version == 2 and t.log.latest_version() == 2


def test_writers_of_one_app_that_claim_disjoint_keys_all_land_and_overlapping_ones_are_fenced(any_root):
    """Kafka workers: one app id, each owning some partitions (offset keys)."""
    from tributary_read.errors import FencedError

    t = _table(any_root)
    base = t.log.latest_version()  # every worker read the log here
    a, b = frozenset({"kafka:t/0", "kafka:t/1"}), frozenset({"kafka:t/2"})
    t.log.commit([_entry(1)], Transaction("feed", {"kafka:t/0": 9}), base_version=base, claims=a)
    c = t.log.commit([_entry(2)], Transaction("feed", {"kafka:t/2": 4}), base_version=base, claims=b)
    assert c.version == 2
    # Worker a's next commit carries a key it did not commit before: what matters is what it claims.
    c = t.log.commit([_entry(3)], Transaction("feed", {"kafka:t/1": 7}), base_version=1, claims=a)
    assert c.version == 3
    # A rogue copy that read partitions 1 and 2 before version 2: fenced by the first commit after
    # its view that carries one of them (version 2, partition 2), whatever its own commit carries.
    with pytest.raises(FencedError, match="version 2 of app 'feed' committed kafka:t/2,") as e:
        t.log.commit([_entry(4)], Transaction("feed", {"kafka:t/1": 20}), base_version=1,
                     claims=frozenset({"kafka:t/1", "kafka:t/2"}))
    assert e.value.exit_code == 16 and t.log.latest_version() == 3
    st = t.log.state().apps["feed"]
    assert st.high == {"kafka:t/0": 9, "kafka:t/2": 4, "kafka:t/1": 7}


def test_a_commit_never_overwrites(any_root):
    t = _table(any_root)
    first = t.log.commit([_entry(1)])
    assert not t.storage.create_if_absent(commit_path(1), Commit(1, 0, (_entry(9),)).encode())
    assert t.log.read_commit(1) == first


def test_gap_in_log_is_reported(tmp_path):
    t = _table(str(tmp_path / "t"))
    for i in range(3):
        t.log.commit([_entry(i)])
    t.storage.delete(commit_path(2))
    with pytest.raises(ManifestCorruptError, match="gap"):
        list(t.log.commits(0, 3))
