"""The local walker (tributary_read.io.localwalk) on real directories: what it returns and reports."""

from __future__ import annotations

import os

import pytest

from tributary_read.io.local import LocalStorage
from tributary_read.io.localwalk import DIRECTORY, FILE, UNKNOWN
from tributary_read.io.localwalk import VALID_LENGTH_SUFFIX as WALK_SUFFIX
from tributary_read.io.storage import BAD_NAME_REASON, LINK_REASON
from tributary_read.read.visibility import VALID_LENGTH_SUFFIX

pytestmark = pytest.mark.unit

S = 1_000_000_000  # ns per second


def _touch(path, mtime_s: int, data: bytes = b"") -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.utime(path, ns=(mtime_s * S, mtime_s * S))


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "t"
    _touch(root / "d" / "a.log", 100, b"abc")
    _touch(root / "d" / "b.log", 200)
    _touch(root / "d" / "_b.log.valid-length", 50, b"1")
    _touch(root / "top.log", 100)
    os.symlink("top.log", root / "linked.log")
    os.symlink("d", root / "linked_dir")
    os.symlink("nowhere", root / "dangling")
    os.mkfifo(root / "fifo")
    with open(os.path.join(os.fsencode(root), b"bad\xff.log"), "wb"):
        pass
    return root


def test_entries_links_and_bad_names(tree):
    st = LocalStorage(str(tree))
    entries, unlisted = st.list_infos("", True)
    got = {e.path[len(st.root) + 1 :]: (e.type, e.size, e.mtime_ns) for e in entries}
    assert got["d"][0] == DIRECTORY and got["d"][1] is None
    assert got["d/a.log"] == (FILE, 3, 100 * S)
    assert got["top.log"] == (FILE, 0, 100 * S)
    # a linked file reads as pyarrow returned it (its target's stat), for the caller to report
    assert got["linked.log"] == (FILE, 0, 100 * S) and st.links(["linked.log", "top.log"]) == {"linked.log"}
    assert got["fifo"][0] == UNKNOWN
    assert "dangling" not in got and "linked_dir" not in got
    assert not any(p.startswith("linked_dir/") for p in got)  # never entered
    reasons = {u.path: (u.reason, u.is_dir) for u in unlisted}
    assert reasons == {"linked_dir": (LINK_REASON, True), "bad\\xff.log": (BAD_NAME_REASON, False)}
    assert {e.base_name for e in entries if e.path.endswith("a.log")} == {"a.log"}
    assert entries.seen == len(entries)
    assert entries.links == [st.root + "/linked.log"]  # so the listing need not lstat every file


def test_window_hint_keeps_sidecars_and_directories(tree):
    st = LocalStorage(str(tree))
    bad = os.path.join(os.fsencode(tree), b"d", b"old\xfe.log")
    with open(bad, "wb"):
        pass
    os.utime(bad, ns=(10 * S, 10 * S))
    entries, unlisted = st.list_infos("d", True, (150 * S, 250 * S))
    names = sorted(e.base_name for e in entries)
    assert names == ["_b.log.valid-length", "b.log"]  # the sidecar's own mtime (50 s) is outside
    assert entries.seen == 3
    # an undecodable name is reported whatever its mtime, as without the hint
    assert [(u.path, u.reason) for u in unlisted] == [("d/old\\xfe.log", BAD_NAME_REASON)]
    entries, _ = st.list_infos("", False, (150 * S, 250 * S))
    assert "d" in {e.base_name for e in entries}  # directories whatever their mtime


def test_missing_dir_is_empty_and_a_file_is_an_error(tree):
    st = LocalStorage(str(tree))
    assert st.list_infos("nope", True) == ([], [])
    from tributary_read.errors import StorageError

    with pytest.raises(StorageError, match="cannot list"):
        st.list_infos("top.log", True)


def test_linked_root_is_listed(tree, tmp_path):
    os.symlink(tree, tmp_path / "alias")
    entries, _ = LocalStorage(str(tmp_path / "alias")).list_infos("d", False)
    assert sorted(e.base_name for e in entries) == ["_b.log.valid-length", "a.log", "b.log"]


def test_sidecar_suffix_is_the_read_rule():
    assert WALK_SUFFIX == VALID_LENGTH_SUFFIX
