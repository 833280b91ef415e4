"""`verify`, `clean` and `expire` agree on every corruption `verify` knows (issue 25, item 3).

Each case corrupts a real table the way an operator, a crash or a broken copy
would; `verify` exits 9, and `clean` (dry run or not) and `expire` refuse with
exit 9, one line naming the problem, and delete nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
from conftest import invoke_trib
from helpers import LAYOUT, PARTITION, grow_source, make_source, snapshot

from tributary_read.table.config import Table
from tributary_read.table.log import checkpoint_path, commit_path
from tributary_read.table.manifest import Transaction
from tributary_read.write.writer import TableWriter

pytestmark = pytest.mark.unit

ORPHAN = "2020_06_24/01/part-20200624010000-deadbeef-000001.jsonl"
WEEK_AGO = time.time() - 7 * 86400


def _table(tmp_path, *extra: str):
    """Four commits of real files through the CLI, and an old orphan `clean` would otherwise delete."""
    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, *extra, check=True)
    src = tmp_path / "s.jsonl"
    make_source(src, 40, hours=4)
    n = 40
    for _ in range(4):
        invoke_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts", check=True)
        grow_source(src, n, 40, hours=4)
        n += 40
    assert Table.load(str(root)).log.latest_version() == 4
    (root / ORPHAN).write_text("{}\n")
    for dirpath, _, names in os.walk(root):
        for name in names:  # everything is old enough to be cleaned, and the log to be trimmed
            os.utime(os.path.join(dirpath, name), (WEEK_AGO, WEEK_AGO))
    return root


def _data(root) -> dict[str, str]:
    return {k: h for k, h in snapshot(root).items() if not k.startswith("_tributary/")}


def _misname(root, src: str, dst: str) -> None:
    os.rename(root / src, root / dst)


def _rename_4_to_6(root):
    """The issue's repro: commit file 4 renamed to 6, its `version` still 4."""
    _misname(root, commit_path(4), commit_path(6))


def _rename_4_away(root):
    """Commit 4 under a name that is no commit's: readers stop at 3 and never see it."""
    _misname(root, commit_path(4), commit_path(4) + ".bak")


def _gap(root):
    os.remove(root / commit_path(2))


def _garbage(root):
    (root / commit_path(3)).write_text("{not json")


def _duplicate_beyond_a_gap(root):
    """Commit 2 copied into slot 6, past the missing 5: readers stop at 4 and never see it."""
    shutil.copy(root / commit_path(2), root / commit_path(6))


def _checkpoint_ahead(root):
    t = Table.load(str(root))
    (root / checkpoint_path(7)).write_bytes(json.dumps({**t.log.state().to_json(), "version": 7}).encode())


def _checkpoint_disagrees(root):
    t = Table.load(str(root))
    doc = t.log.state(2).to_json()
    doc["files"] = doc["files"][:-1]
    (root / checkpoint_path(2)).write_bytes(json.dumps(doc).encode())
    (root / "_tributary" / "_last_checkpoint").write_text(json.dumps({"version": 2}))


def _committed(root) -> list[str]:
    return sorted(Table.load(str(root)).log.state().files)


def _missing(root):
    os.remove(root / _committed(root)[0])


def _resized(root):
    with open(root / _committed(root)[0], "ab") as f:
        f.write(b"extra\n")


CASES = {
    # name: (corrupt, the problems verify reports)
    "commit_renamed_4_to_6": (_rename_4_to_6, {"corrupt_log_file", "log_gap", "unreachable_commits"}),
    "commit_under_another_name": (_rename_4_away, {"misnamed_commit"}),
    "log_gap": (_gap, {"log_gap"}),
    "duplicate_beyond_a_gap": (_duplicate_beyond_a_gap, {"corrupt_log_file", "log_gap", "unreachable_commits"}),
    "checkpoint_newer_than_log": (_checkpoint_ahead, {"checkpoint_mismatch"}),
    "checkpoint_disagrees": (_checkpoint_disagrees, {"checkpoint_mismatch"}),
    "missing_file": (_missing, {"missing"}),
    "resized_file": (_resized, {"size_mismatch"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_verify_clean_and_expire_agree(tmp_path, case):
    root = _table(tmp_path)
    corrupt, kinds = CASES[case]
    corrupt(root)
    before = snapshot(root)

    v = invoke_trib("verify", str(root), "--json")
    assert v.returncode == 9, v.stderr
    assert {p["problem"] for p in json.loads(v.stdout)["problems"]} == kinds

    for args in (("clean", str(root)), ("clean", str(root), "--dry-run"),
                 ("clean", str(root), "--older-than", "0s", "--log-retention", "0s"),
                 ("expire", str(root), "--older-than", "1d", "--grace", "0s"),
                 ("expire", str(root), "--older-than", "1d", "--dry-run")):
        proc = invoke_trib(*args)
        assert proc.returncode == 9, (args, proc.stdout, proc.stderr)
        line = proc.stderr.strip()
        assert "\n" not in line and line.startswith("trib: error: ") and "nothing deleted" in line, line
        assert any(k in line for k in kinds), line
        assert snapshot(root) == before, args  # not a data file, not a log file, not the orphan


def _duplicate(root):
    """Commit 3 copied into slot 5, which readers reach: it says version 3."""
    shutil.copy(root / commit_path(3), root / commit_path(5))


@pytest.mark.parametrize("corrupt,says", [(_garbage, "not valid JSON"), (_duplicate, "says version 3")])
def test_a_corrupt_commit_readers_reach_is_refused_alike(tmp_path, corrupt, says):
    """A commit readers reach cannot be read, so neither can the state: verify, clean and expire all stop
    with the corrupt log's exit 6 (as every reader does, tests/test_exit_codes.py), naming the file."""
    root = _table(tmp_path)
    corrupt(root)
    before = snapshot(root)
    for args in (("verify", str(root)), ("clean", str(root), "--older-than", "0s"),
                 ("clean", str(root), "--dry-run"), ("expire", str(root), "--older-than", "1d", "--grace", "0s")):
        proc = invoke_trib(*args)
        assert proc.returncode == 6 and says in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1
        assert snapshot(root) == before


def test_pending_renames_refuse_until_recovered(tmp_path):
    """The rename protocol's crash window: clean and expire refuse until `trib recover` finishes it."""
    root = _table(tmp_path, "--protocol", "rename")
    t = Table.load(str(root))
    w = TableWriter(t)
    w.write(json.dumps({"id": 1}).encode(), 1_592_960_400_000)
    files = w.flush()
    t.log.commit(files, Transaction("b", {"src": 1}), protocol="rename")  # the process "dies" before renaming
    before = snapshot(root)
    v = invoke_trib("verify", str(root), "--json")
    assert v.returncode == 9 and {p["problem"] for p in json.loads(v.stdout)["problems"]} == {"pending_roll_forward"}
    for args in (("clean", str(root), "--older-than", "0s"), ("expire", str(root), "--older-than", "1d")):
        proc = invoke_trib(*args)
        assert proc.returncode == 9 and "pending_roll_forward" in proc.stderr and "trib recover" in proc.stderr
        assert snapshot(root) == before
    invoke_trib("recover", str(root), "--app-id", "b", check=True)
    assert invoke_trib("verify", str(root)).returncode == 0
    invoke_trib("clean", str(root), check=True)
    assert not (root / ORPHAN).exists() and all((root / f.path).exists() for f in files)


def test_a_consistent_table_is_cleaned_and_expired(tmp_path):
    """The guard passes a whole table: the orphan goes, expire removes and deletes, verify stays ok."""
    root = _table(tmp_path)
    committed = _committed(root)
    invoke_trib("clean", str(root), check=True)
    assert not (root / ORPHAN).exists() and all((root / p).exists() for p in committed)
    invoke_trib("expire", str(root), "--older-than", "1d", "--grace", "0s", check=True)
    assert not any((root / p).exists() for p in committed)
    assert invoke_trib("verify", str(root)).returncode == 0


def test_files_of_a_misnamed_commit_are_referenced(tmp_path):
    """Whatever its name, a commit file's files are never orphans: verify does not list them as such."""
    root = _table(tmp_path)
    four = Table.load(str(root)).log.read_commit(4)
    _rename_4_away(root)
    v = json.loads(invoke_trib("verify", str(root), "--json").stdout)
    orphans = {o["path"] for o in v["orphans"]}
    assert orphans == {ORPHAN} and not {f.path for f in four.files} & orphans


def test_a_staged_copy_left_by_a_killed_writer_is_an_orphan_not_a_problem(tmp_path):
    """A writer killed between publishing a commit and discarding its staged copy (CI: a second SIGINT).

    The copy holds commit 4, which its version also holds: verify passes, lists
    the copy as an orphan, and clean removes it and nothing its commit names.
    """
    from tributary_read.io.storage import staged_name

    root = _table(tmp_path)
    copy = f"{commit_path(4).rsplit('/', 1)[0]}/{staged_name()}"
    shutil.copy(root / commit_path(4), root / copy)
    os.utime(root / copy, (WEEK_AGO, WEEK_AGO))
    committed = _committed(root)
    v = invoke_trib("verify", str(root), "--json")
    assert v.returncode == 0, v.stdout
    assert {o["path"] for o in json.loads(v.stdout)["orphans"]} == {ORPHAN, copy}
    invoke_trib("clean", str(root), check=True)
    assert not (root / copy).exists() and all((root / p).exists() for p in committed)
    assert invoke_trib("verify", str(root)).returncode == 0
