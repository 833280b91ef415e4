"""A restate on a store that cannot swap directories (S3, HDFS): the partition moves.

The new files are committed where they were written, in the partition's hidden staging directory,
and stay there; the old files stay in the partition's directory, removed like any removed file.
What must hold: the commit is checked as strictly as a swapped one; trib's readers take the moved
files as the partition's (manifest reads, partition files of a later restate, the partitions a commit
touched); the state says where each moved partition's files are, a checkpoint included, whatever
a later restate or ``trib clean`` does. In-process, on the memory store (it cannot swap either).
"""

from __future__ import annotations

import json
import posixpath
import uuid

import pytest

from helpers import LAYOUT, PARTITION
from tributary_read.errors import VerificationError
from tributary_read.read.resolve import manifest_files, partition_files
from tributary_read.table.config import Table, TableConfig
from tributary_read.table.layout import Layout
from tributary_read.table.manifest import Commit, FileEntry, Restatement, Transaction
from tributary_read.table.renames import roll_forward_commit
from tributary_read.table.restatement import check_storage, restatements
from tributary_read.table.restate_swap import in_staging, logical_dir, moves, partition_dir, staging_dir
from tributary_read.table.state import TableState

pytestmark = pytest.mark.unit

P1, P2 = "2026_11_28/06", "2026_11_28/07"


def _table() -> Table:
    return Table.create(f"memory://move-{uuid.uuid4().hex[:8]}", TableConfig(Layout(LAYOUT, PARTITION)))


def _append(t: Table, d: str, name: str, lines: int, offset: int) -> FileEntry:
    path = f"{d}/{name}"
    t.storage.write(path, b"".join(b'{"n":%d}\n' % i for i in range(lines)))
    e = FileEntry(path, t.storage.info(path).size, lines, t.layout.parse(d).values)
    t.log.commit([e], Transaction("writer", {"src": offset}))
    return e


def _restate(t: Table, parts: dict[str, int], run: str, at: int) -> Commit:
    """What a restate's writer does where the store cannot swap: each new file written, and committed, in
    the partition's staging directory; then the restate commit and its roll-forward."""
    files = []
    for d, lines in parts.items():
        if not lines:
            continue
        path = in_staging(staging_dir(d, run), f"{d}/part-{run}.jsonl")
        t.storage.write(path, b"".join(b'{"new":%d}\n' % i for i in range(lines)))
        files.append(FileEntry(path, t.storage.info(path).size, lines, t.layout.parse(d).values))
    restated = restatements(t.storage, run, {d: t.layout.parse(d) for d in parts}, files)
    c = t.log.commit(files, Transaction("etl:job", {"schedule": at}), restated=restated)
    assert roll_forward_commit(t, c) == []  # nothing to swap, nothing to rename
    return c


def test_a_moved_restate_leaves_the_new_files_in_their_directory_and_readers_take_them_as_the_partitions():
    t = _table()
    assert moves(t.storage)
    check_storage(t.storage)  # no swap needed: accepted (a job must keep a Hive table: etl/restate.py)
    a = _append(t, P1, "a.jsonl", 3, 0)
    other = _append(t, P2, "c.jsonl", 5, 1)
    c = _restate(t, {P1: 9}, "r1", 1)
    (r,) = c.restated
    assert r.moved and (r.records_before, r.records_after) == (3, 9) and r.staging == "2026_11_28/.06.restate-r1"
    (new,) = c.files
    assert new.path == f"{r.staging}/part-r1.jsonl" and new.staged is None and logical_dir(new.path) == P1
    assert t.log.read_commit(c.version) == c  # every reader checks it alike
    state = t.log.state()
    assert state.removed[a.path].restated is None  # not set aside: it stays where it was
    assert t.storage.exists(a.path) and partition_dir(state, P1) == r.staging and partition_dir(state, P2) == P2
    cp = TableState.from_json(json.dumps(state.to_json()).encode(), "checkpoint")
    assert cp.locations == {P1: r.staging} and state.to_json()["format_version"] == 3
    # trib's readers: the table's files are the new one and the untouched partition's
    assert sorted(f.path for f in manifest_files(t).files) == sorted([new.path, other.path])
    assert [f.path for f in partition_files(t, c.version, {P1: t.layout.parse(P1)})] == [new.path]

    # restated again: the files in the first directory are removed, the partition moves on
    c2 = _restate(t, {P1: 4}, "r2", 2)
    assert [f.path for f in c2.removed] == [new.path] and c2.restated[0].records_before == 9
    assert partition_dir(t.log.state(), P1) == c2.restated[0].staging

    # emptied by a third: the partition keeps a directory of its own (its marker only), so Hive shows it empty
    c3 = _restate(t, {P1: 0}, "r3", 3)
    state = t.log.state()
    assert not [f for f in state.files if logical_dir(f) == P1] and partition_dir(state, P1) == c3.restated[0].staging


def test_clean_keeps_the_directory_a_moved_partition_lies_in():
    from tributary_read.table.maintenance import clean

    t = _table()
    _append(t, P1, "a.jsonl", 3, 0)
    c = _restate(t, {P1: 0}, "empty", 1)  # only the marker there: still the partition's directory
    assert clean(t, 0) == []
    assert t.storage.list(c.restated[0].staging)


def test_a_moved_restate_that_adds_a_file_outside_its_directory_is_refused():
    t = _table()
    _append(t, P1, "a.jsonl", 3, 0)
    path = f"{P1}/stray.jsonl"
    t.storage.write(path, b'{"n":1}\n')
    stray = FileEntry(path, t.storage.info(path).size, 1, t.layout.parse(P1).values)
    r = Restatement(t.layout.parse(P1).values, P1, staging_dir(P1, "x"), 0, 1, moved=True)
    with pytest.raises(VerificationError, match="nothing committed: .*stray.jsonl is not in .*, where .* moves"):
        t.log.commit([stray], Transaction("etl:job", {"schedule": 1}), restated=[r])
    assert t.log.latest_version() == 1


def test_a_restate_writer_on_s3_writes_into_the_new_directory_and_hive_is_pointed_there(s3_root):
    """On S3 (moto, through its HTTP API): the writer's files land in the partition's new directory, the commit
    names them there, the old files stay, and every Hive location comes from where the live files are."""
    from tributary_read.hive.sync import Locator
    from tributary_read.table.restatement import affected
    from tributary_read.write.writer import TableWriter

    t = Table.create(s3_root, TableConfig(Layout(LAYOUT, PARTITION), format="jsonl"))
    assert moves(t.storage)
    old = TableWriter(t)
    for ts in (0, 3_600_000):  # 1970_01_01/00 and /01
        old.write(b'{"old":1}', ts)
    (kept, stale) = sorted(f.path for f in old.commit(Transaction("writer", {"src": 1})).files)
    w = TableWriter(t, restate_run="r7")
    w.write(b'{"new":1}', 5)
    w.write(b'{"new":2}', 6)
    files = w.flush()
    d = "1970_01_01/00"
    # the table's rename protocol: hidden beside its final name, in the new directory, renamed there after the commit
    (new,) = files
    assert posixpath.dirname(new.path) == posixpath.dirname(new.staged) == staging_dir(d, "r7")
    c = t.log.commit(files, Transaction("etl:x", {"s": 1}),
                     restated=restatements(t.storage, "r7", affected(t.layout, [t.layout.parse(d)]), files))
    assert [(r.moved, r.records_before, r.records_after) for r in c.restated] == [(True, 1, 2)]
    assert roll_forward_commit(t, c) == [new.path] and roll_forward_commit(t, c) == []  # once, idempotent
    assert t.storage.exists(kept) and t.storage.exists(new.path)  # both stay: the old until `trib clean`
    where = Locator.of(t)
    assert where(d) == t.storage.uri_for(staging_dir(d, "r7"))
    assert where("1970_01_01/01") == t.storage.uri_for("1970_01_01/01")
    assert sorted(f.path for f in manifest_files(t).files) == sorted([new.path, stale])
    from tributary_read.table.maintenance import clean, verify

    report = verify(t)  # the old file is a removed one, the new directory's marker trib's own: nothing wrong
    assert not report.problems and not report.orphans and kept in {f.path for f in report.removed}
    assert clean(t, 0) == [] and t.storage.exists(new.path)


def test_swap_asked_where_the_store_cannot_swap_is_refused():
    from tributary_read.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match='swaps two directories in one step.*drop restate_by = "swap"'):
        check_storage(_table().storage, "swap")


def test_an_append_into_a_moved_partition_is_refused_and_other_partitions_take_appends():
    """Its file would lie beside the old files, where Hive no longer reads the partition."""
    from tributary_read.errors import InvalidInputError

    t = _table()
    _append(t, P1, "a.jsonl", 3, 0)
    c = _restate(t, {P1: 2}, "r1", 1)
    with pytest.raises(InvalidInputError, match=f"partition {P1} of .* moved it to {c.restated[0].staging}"):
        _append(t, P1, "late.jsonl", 1, 2)
    assert t.log.latest_version() == c.version
    _append(t, P2, "b.jsonl", 1, 3)
