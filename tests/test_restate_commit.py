"""The restate commit: whole partitions recomputed as one commit, swapped into place in one step.

Real local files throughout. What must hold: the commit removes exactly the partition's files in the
state it lands on (a compaction meanwhile included) and counts its records before and after; every
reader of the log reads it back the same way (commit, state, checkpoint); a directory reader lists
the old partition or the new one, never both, whoever finishes the swap and however often; a reader
of new data never takes a restate's files for appended records, and a reader behind it still gets
the records its range added.
"""

from __future__ import annotations

import json
import os
import threading

import pytest

from helpers import LAYOUT, PARTITION
from tributary_read.errors import InvalidInputError, ManifestCorruptError, RestatedInputError, StorageError, \
    VerificationError
from tributary_read.io.memory import MemoryStorage
from tributary_read.read.resolve import manifest_files
from tributary_read.table.config import Table, TableConfig
from tributary_read.table.layout import Layout
from tributary_read.table.log import commit_path
from tributary_read.table.manifest import OP_RESTATE, Commit, FileEntry, Restatement, Transaction
from tributary_read.table.renames import roll_forward
from tributary_read.table.restatement import check_storage
from tributary_read.table.restate_swap import finish_restate, marker, prepare, staging_dir
from tributary_read.table.state import TableState

pytestmark = pytest.mark.unit

P1, P2 = "2026_11_28/06", "2026_11_28/07"


def _table(tmp_path, interval: int = 100) -> Table:
    return Table.create(str(tmp_path / "t"), TableConfig(Layout(LAYOUT, PARTITION), checkpoint_interval=interval))


def _part(d: str) -> dict:
    day, hour = d.split("/")
    return {"dt": day.replace("_", "") + hour}


def _append(t: Table, d: str, name: str, lines: int, app: str = "writer", offset: int = 0) -> FileEntry:
    path = f"{d}/{name}"
    t.storage.makedirs(d)
    t.storage.write(path, b"".join(b'{"n":%d}\n' % i for i in range(lines)))
    e = FileEntry(path, t.storage.info(path).size, lines, _part(d))
    t.log.commit([e], Transaction(app, {"src": offset}))
    return e


def _restate(t: Table, parts: dict[str, int], run: str = "r1", app: str = "etl:job", at: int = 1) -> Commit:
    """Stage a new file of ``lines`` records in each partition's staging directory, commit the restate."""
    files, restated = [], []
    for d, lines in parts.items():
        staging = staging_dir(d, run)
        prepare(t.storage, staging)
        name = f"part-{run}.jsonl"
        t.storage.write(f"{staging}/{name}", b"".join(b'{"new":%d}\n' % i for i in range(lines)))
        files.append(FileEntry(f"{d}/{name}", t.storage.info(f"{staging}/{name}").size, lines, _part(d),
                               staged=f"{staging}/{name}"))
        restated.append(Restatement(_part(d), d, staging, 0, lines))
    t.storage.sync_many(durable_paths(files))
    return t.log.commit(files, Transaction(app, {"schedule": at}), restated=restated)


def durable_paths(files) -> list[str]:
    """What a writer syncs before the commit: each staged file and its staging directory's marker."""
    dirs = {os.path.dirname(f.staged) for f in files}
    return [f.staged for f in files] + [f"{d}/{marker(d)}" for d in sorted(dirs)]


def _visible(t: Table, d: str) -> list[str]:
    """What a directory reader lists in partition ``d``: names not starting with '.' or '_'."""
    full = t.storage.abspath(d)
    return sorted(n for n in os.listdir(full) if not n.startswith((".", "_"))) if os.path.isdir(full) else []


def test_a_restate_removes_the_partitions_files_counts_both_sides_and_reads_back_alike(tmp_path):
    t = _table(tmp_path, interval=3)
    a = _append(t, P1, "a.jsonl", 3)
    b = _append(t, P1, "b.jsonl", 4, offset=1)
    other = _append(t, P2, "c.jsonl", 5, offset=2)
    c = _restate(t, {P1: 9})
    assert c.operation == OP_RESTATE and {f.path for f in c.removed} == {a.path, b.path}
    (r,) = c.restated
    assert (r.records_before, r.records_after) == (7, 9)
    raw = json.loads(t.storage.read(commit_path(c.version)))
    assert raw["format_version"] == 3 and raw["restated"][0]["records_before"] == 7
    assert t.log.read_commit(c.version) == c
    state = t.log.state()
    assert set(state.files) == {other.path, f"{P1}/part-r1.jsonl"}
    assert state.removed[a.path].restated == r.staging
    # The checkpoint (interval 3: written at version 3; force one at the restate too) says the same.
    cp = TableState.from_json(json.dumps(state.to_json()).encode(), "checkpoint")
    assert cp.removed[a.path].restated == r.staging and set(cp.files) == set(state.files)
    assert state.to_json()["format_version"] == 3


def test_the_swap_shows_directory_readers_the_old_or_the_new_partition_once(tmp_path):
    t = _table(tmp_path)
    _append(t, P1, "a.jsonl", 3)
    _append(t, P1, "b.jsonl", 4, offset=1)
    c = _restate(t, {P1: 9, P2: 2})  # P2 is new: its staging directory is renamed into place
    assert _visible(t, P1) == ["a.jsonl", "b.jsonl"] and _visible(t, P2) == []  # committed, not swapped yet
    assert sorted(finish_restate(t, c)) == [P1, P2]
    assert _visible(t, P1) == ["part-r1.jsonl"] and _visible(t, P2) == ["part-r1.jsonl"]
    staging = c.restated[0].staging
    assert sorted(n for n in os.listdir(t.storage.abspath(staging)) if not n.startswith(".")) == ["a.jsonl", "b.jsonl"]
    assert finish_restate(t, c) == [] and roll_forward(t, c.files) == []  # done once, never swapped back
    assert _visible(t, P1) == ["part-r1.jsonl"]


def test_two_processes_finishing_the_same_swap_make_it_once(tmp_path):
    t = _table(tmp_path)
    _append(t, P1, "a.jsonl", 3)
    c = _restate(t, {P1: 2})
    results: list = []
    barrier = threading.Barrier(8)

    def finish():
        other = Table.load(t.uri)  # each its own table object, as separate readers have
        barrier.wait()
        results.append(roll_forward(other, c.files))

    threads = [threading.Thread(target=finish) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(map(len, results)) == [0] * 7 + [1]
    assert _visible(t, P1) == ["part-r1.jsonl"]


def test_the_restate_removes_what_the_state_holds_when_it_lands_a_compaction_meanwhile_included(tmp_path):
    t = _table(tmp_path)
    a = _append(t, P1, "a.jsonl", 3)
    b = _append(t, P1, "b.jsonl", 4, offset=1)
    # A compaction lands between the restate's read and its commit: the restate removes its output.
    from tributary_read.table.manifest import SourceFile

    t.storage.write(f"{P1}/m.jsonl", t.storage.read(a.path) + t.storage.read(b.path))
    merged = FileEntry(f"{P1}/m.jsonl", a.size + b.size, 7, _part(P1),
                       sources=(SourceFile(a.path, 1, 3), SourceFile(b.path, 2, 4)))
    t.log.commit([merged], removed=[a, b], replace=True)
    c = _restate(t, {P1: 5})
    assert [f.path for f in c.removed] == [merged.path] and c.restated[0].records_before == 7


def test_a_restate_that_would_leave_a_stray_file_is_refused_and_commits_nothing(tmp_path):
    t = _table(tmp_path)
    _append(t, P1, "a.jsonl", 3)
    staging = staging_dir(P1, "bad")
    prepare(t.storage, staging)
    t.storage.write(f"{staging}/x.jsonl", b"{}\n")
    stray = FileEntry(f"{P2}/x.jsonl", 3, 1, _part(P2), staged=f"{staging}/x.jsonl")  # P2 is not restated
    with pytest.raises(VerificationError, match="not in a partition the restate commit restates"):
        t.log.commit([stray], Transaction("etl:job", {"schedule": 1}),
                     restated=[Restatement(_part(P1), P1, staging, 0, 1)])
    assert t.log.latest_version() == 1


def test_a_corrupt_restate_commit_is_refused_by_every_reader(tmp_path):
    t = _table(tmp_path)
    _append(t, P1, "a.jsonl", 3)
    c = _restate(t, {P1: 2})
    raw = json.loads(t.storage.read(commit_path(c.version)))
    raw["restated"][0]["records_after"] = 3  # its files hold 2
    with pytest.raises(ManifestCorruptError, match="says 3 -> 3 records, its files 3 -> 2"):
        Commit.decode(json.dumps(raw).encode(), "x")
    raw["restated"][0]["records_after"] = 2
    raw["operation"] = "append"  # a restate's partitions on another operation
    with pytest.raises(ManifestCorruptError):
        Commit.decode(json.dumps(raw).encode(), "x")


def test_what_caused_a_restate_is_kept_in_its_commit_and_a_commit_without_it_reads_as_unknown(tmp_path):
    """Each restated partition may record what caused it (an ETL run's inputs): read back the same from the log;
    a commit of a trib from before the field reads as not recorded (None); a malformed one is corrupt. The
    commit stays version 3 and a checkpoint carries no such field (it keeps no restated partitions)."""
    from tributary_read.table.manifest import RestateInput

    t = _table(tmp_path)
    _append(t, P1, "a.jsonl", 3)
    staging = staging_dir(P1, "r1")
    prepare(t.storage, staging)
    t.storage.write(f"{staging}/part-r1.jsonl", b'{"n":1}\n')
    f = FileEntry(f"{P1}/part-r1.jsonl", t.storage.info(f"{staging}/part-r1.jsonl").size, 1, _part(P1),
                  staged=f"{staging}/part-r1.jsonl")
    t.storage.sync_many(durable_paths([f]))
    cause = RestateInput("raw", ("2026_11_28/06/late.jsonl",), 12, ("2026_11_28/05",))
    c = t.log.commit([f], Transaction("etl:job", {"schedule": 1}),
                     restated=[Restatement(_part(P1), P1, staging, 0, 1, (cause,))])
    raw = json.loads(t.storage.read(commit_path(c.version)))
    assert raw["format_version"] == 3 and raw["restated"][0]["inputs"] == [
        {"view": "raw", "files": ["2026_11_28/06/late.jsonl"], "files_total": 12, "restated": ["2026_11_28/05"]}]
    assert t.log.read_commit(c.version).restated[0].inputs == (cause,)
    assert "inputs" not in json.dumps(t.log.state().to_json())
    older = {**raw, "restated": [{k: v for k, v in raw["restated"][0].items() if k != "inputs"}]}
    assert Commit.decode(json.dumps(older).encode(), "x").restated[0].inputs is None
    for bad in ([{"view": "raw", "files": ["a", "b"], "files_total": 1}], [{"view": 1, "files": [], "files_total": 0}],
                {"view": "raw"}):
        corrupt = {**raw, "restated": [{**raw["restated"][0], "inputs": bad}]}
        with pytest.raises(ManifestCorruptError):
            Commit.decode(json.dumps(corrupt).encode(), "x")


def test_a_reader_of_new_data_is_refused_at_a_restate_and_a_reader_behind_it_gets_its_records(tmp_path):
    t = _table(tmp_path)
    a = _append(t, P1, "a.jsonl", 3)  # v1
    b = _append(t, P1, "b.jsonl", 4, offset=1)  # v2
    c = _restate(t, {P1: 9})  # v3
    with pytest.raises(RestatedInputError, match="version 3 restates 1 partition"):
        manifest_files(t, 1, 3)
    # Versions 1..2, before the swap: the old files where they are; after it: where the swap set them aside.
    before = manifest_files(t, 0, 2)
    assert sorted(f.path.rpartition("/")[0].rpartition("/")[2] + "/" + os.path.basename(f.path)
                  for f in before.files) == ["06/a.jsonl", "06/b.jsonl"]
    finish_restate(t, c)
    after = manifest_files(t, 1, 2)
    (f,) = after.files
    assert c.restated[0].staging in f.path and f.path.endswith("b.jsonl")
    # The whole table, from the start: the current partitions, the restate's files once.
    assert sorted(os.path.basename(x.path) for x in manifest_files(t).files) == ["part-r1.jsonl"]


def test_a_store_that_cannot_swap_directories_moves_a_restated_partition_and_never_swaps(tmp_path):
    """Such a store is not refused: its restates move the partition (tests/test_restate_move.py)."""
    from tributary_read.table.restate_swap import moves

    st = MemoryStorage("memory://restate-test")
    check_storage(st)
    assert moves(st) and not moves(_table(tmp_path).storage)
    with pytest.raises(StorageError, match="cannot swap two directories"):
        st.exchange_dirs("a", "b")


def test_verify_knows_the_set_aside_files_and_the_markers_and_waits_for_a_pending_swap(tmp_path):
    from tributary_read.table.maintenance import verify

    t = _table(tmp_path)
    _append(t, P1, "part-20261128060000-0000abcd-000001.jsonl", 3)
    c = _restate(t, {P1: 2})
    pending = verify(t)
    assert [p.problem for p in pending.problems] == ["pending_roll_forward"]  # committed, not swapped yet
    finish_restate(t, c)
    report = verify(t)
    assert report.ok and not report.orphans and not report.untracked, report.to_json()
    assert [os.path.basename(f.path) for f in report.removed] == ["part-20261128060000-0000abcd-000001.jsonl"]
    assert [os.path.basename(f.path) for f in report.markers] == [".trib-06.restate-r1"]


def test_the_cli_refuses_a_version_range_a_window_and_a_consumer_over_a_restate_in_one_line(tmp_path):
    from conftest import run_trib

    t = _table(tmp_path)
    _append(t, P1, "a.jsonl", 3)
    first = run_trib("files", t.uri, "--consumer", "late", "--json", check=True)  # delivered version 1
    run_trib("consumer", "ack", t.uri, "late", json.loads(first.stdout)["plan_id"], check=True)
    finish_restate(t, _restate(t, {P1: 2}))
    for args in (("--mode", "manifest", "--since-version", "1"),
                 ("--mode", "mtime", "--start", "2000-01-01T00:00:00Z", "--end", "2100-01-01T00:00:00Z"),
                 ("--consumer", "late")):
        p = run_trib("files", t.uri, *args)
        assert p.returncode == 3, (args, p.stdout, p.stderr)
        assert "restate" in p.stderr and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr


def test_clean_removes_an_abandoned_staging_directory_and_keeps_every_committed_one(tmp_path):
    from tributary_read.table.maintenance import clean

    t = _table(tmp_path)
    _append(t, P1, "a.jsonl", 3)
    c = _restate(t, {P1: 2}, run="kept")
    finish_restate(t, c)  # the set-aside directory .06.restate-kept holds a.jsonl: a reader behind may need it
    dead = staging_dir(P2, "crashed")  # a restate that staged a file and died before its commit
    prepare(t.storage, dead)
    t.storage.write(f"{dead}/part-20261128070000-0000abcd-000001.jsonl", b"{}\n")
    gone = clean(t, 0)
    assert sorted(os.path.basename(v.path) for v in gone) == [".trib-07.restate-crashed",
                                                             "part-20261128070000-0000abcd-000001.jsonl"]
    assert not os.path.exists(t.storage.abspath(dead))
    assert os.path.exists(t.storage.abspath(f"{c.restated[0].staging}/a.jsonl"))
    assert os.path.exists(t.storage.abspath(f"{P1}/.trib-06.restate-kept"))


def test_a_checkpoint_of_a_first_restate_not_swapped_yet_is_version_3(tmp_path):
    t = _table(tmp_path)
    _restate(t, {P1: 2})  # P1 computed for the first time: nothing removed, its files still staged
    state = t.log.state()
    assert not state.removed and state.to_json()["format_version"] == 3


def test_a_restated_table_gets_its_checkpoints(tmp_path):
    """A checkpoint of a state that holds a restate is version 3; the log writes it at its interval like any other
    (it was refused as a document without the common header, silently, and every state was read from version 0)."""
    from tributary_read.table.log import LAST_CHECKPOINT, checkpoint_path

    t = _table(tmp_path, interval=2)
    _append(t, P1, "a.jsonl", 3)
    c = _restate(t, {P1: 9})  # version 2: a checkpoint is due
    assert c.version == 2 and t.storage.exists(checkpoint_path(2))
    assert json.loads(t.storage.read(LAST_CHECKPOINT)) == {"version": 2}
    assert json.loads(t.storage.read(checkpoint_path(2)))["format_version"] == 3
    fresh = Table.load(t.uri)
    assert fresh.log.last_checkpoint() == 2 and fresh.log.state() == t.log.state()
    assert set(fresh.log.state().files) == {f"{P1}/part-r1.jsonl"}


_WRITER = """
import sys
sys.path.insert(0, {tests!r})
from test_restate_commit import _restate
from tributary_read.table.config import Table
from tributary_read.table.restate_swap import finish_restate
t = Table.load({root!r})
finish_restate(t, _restate(t, {{{p1!r}: 9, {p2!r}: 4}}, run="killed"))
"""


@pytest.mark.integration
@pytest.mark.parametrize("point", ["restate.before_swap", "restate.after_swap"])
def test_kill9_between_the_commit_and_the_swaps_then_racing_readers_finish_them_once(tmp_path, point):
    """A real writer SIGKILLed at each crash point of the swap; then four real `trib files` processes at once
    (each finishes what it finds not swapped): every partition is swapped exactly once, `trib verify` passes."""
    import subprocess
    import sys

    from conftest import REPO, TRIB, run_trib

    t = _table(tmp_path)
    _append(t, P1, "part-20261128060000-0000abcd-000001.jsonl", 3)
    _append(t, P2, "part-20261128070000-0000abcd-000001.jsonl", 5, offset=1)
    env = {**os.environ, "TRIB_CRASH_AT": point, "PYTHONPATH": str(REPO)}
    code = _WRITER.format(tests=str(REPO / "tests"), root=t.uri, p1=P1, p2=P2)
    w = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert w.returncode == -9, w.stderr
    assert t.log.read_commit(3).operation == OP_RESTATE
    before = {d: _visible(t, d) for d in (P1, P2)}
    # The first swap may have landed (after_swap): a partition is old or new, never both.
    assert all(v in (["part-20261128060000-0000abcd-000001.jsonl"], ["part-20261128070000-0000abcd-000001.jsonl"],
                     ["part-killed.jsonl"]) for v in before.values()), before
    readers = [subprocess.Popen([*map(str, TRIB), "files", t.uri, "--mode", "manifest", "--all"], env={**os.environ,
                                "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(4)]
    outs = [r.communicate(timeout=120) for r in readers]
    assert all(r.returncode == 0 for r in readers), outs
    assert {d: _visible(t, d) for d in (P1, P2)} == {P1: ["part-killed.jsonl"], P2: ["part-killed.jsonl"]}
    assert all(o.split() == [f"{P1}/part-killed.jsonl", f"{P2}/part-killed.jsonl"] for o, _ in outs), outs
    assert run_trib("verify", t.uri).returncode == 0


def test_a_compaction_after_a_restate_stopped_before_its_swap_swaps_it_in_first(tmp_path):
    from conftest import invoke_trib

    t = _table(tmp_path)
    _append(t, P1, "part-20261128060000-0000abcd-000001.jsonl", 3)
    staging = staging_dir(P1, "r2")
    prepare(t.storage, staging)
    files = []
    for i in range(2):  # two small files for the compaction to merge
        name = f"part-20261128060000-0000abce-00000{i}.jsonl"
        t.storage.write(f"{staging}/{name}", b'{"n":1}\n{"n":2}\n')
        files.append(FileEntry(f"{P1}/{name}", 16, 2, _part(P1), staged=f"{staging}/{name}"))
    t.storage.sync_many(durable_paths(files))
    t.log.commit(files, Transaction("etl:job", {"schedule": 2}), restated=[Restatement(_part(P1), P1, staging, 0, 4)])
    done = invoke_trib("compact", t.uri, "--min-files", "2", "--min-age", "0s")
    assert done.returncode == 0, done.stderr
    (live,) = t.log.state().files.values()
    assert live.records == 4 and live.sources and _visible(t, P1) == [os.path.basename(live.path)]
    assert invoke_trib("verify", t.uri).returncode == 0


def test_finishing_an_older_restate_after_a_newer_one_of_the_same_partition_changes_nothing(tmp_path):
    t = _table(tmp_path)
    _append(t, P1, "a.jsonl", 3)
    first = _restate(t, {P1: 2}, run="one", at=1)
    finish_restate(t, first)
    second = _restate(t, {P1: 5}, run="two", at=2)
    finish_restate(t, second)
    assert finish_restate(t, first) == [] and finish_restate(t, second) == []  # a rerun of either schedule time
    assert _visible(t, P1) == ["part-two.jsonl"]
    # The same partition with its restate's files gone under both names: an error, not a silent skip.
    import shutil

    third = _restate(t, {P1: 1}, run="three", at=3)
    shutil.rmtree(t.storage.abspath(third.restated[0].staging))
    os.remove(t.storage.abspath(f"{P1}/.trib-06.restate-two"))
    with pytest.raises(VerificationError, match="holds the restate's marker"):
        finish_restate(t, third)


def test_a_file_system_that_refuses_the_swap_is_found_before_any_work(tmp_path):
    """The class says a local disk can swap directories; the mount under the table is asked by doing it once.
    A file system that refuses RENAME_EXCHANGE (NFS) is played by a local storage whose swap fails as it does."""
    import errno

    from tributary_read.io.local import LocalStorage

    class NoExchange(LocalStorage):
        def exchange_dirs(self, a, b, unless=None):
            raise self._wrap("cannot swap directories", a, OSError(errno.EINVAL, "Invalid argument"))

    t = _table(tmp_path)
    check_storage(t.storage)  # this machine's file system swaps
    with pytest.raises(InvalidInputError, match="the file system refused"):
        check_storage(NoExchange(t.storage.root))
    assert not [n for n in os.listdir(t.storage.abspath("_tributary")) if n.startswith(".swap-probe")]
