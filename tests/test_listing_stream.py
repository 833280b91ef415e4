"""A streaming scan (``scan(sink=)``) gives exactly what a whole scan gives, one directory at a time.

The listing consumer's planner streams so that a first plan over millions of
files holds one directory plus the cap (issue 32); these tests hold the
streamed answer to the whole one on a tree with everything a listing must
handle: sidecars, links, nested and unparsable directories, hidden files,
odd names, stray files above partition depth, empty partitions.
"""

from __future__ import annotations

import os

import pytest

from helpers import LAYOUT, PARTITION, put
from tributary_read.io.storage import open_storage
from tributary_read.read.listing import scan
from tributary_read.table.layout import Layout

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000


def _messy(root) -> None:
    # Hours out of name order on purpose: 2023_11_14/22 is older than 2023_11_15/01 but listed after it by name.
    for rel in ("2023_11_15/01/a.log", "2023_11_15/01/b.log", "2023_11_14/22/c.log", "2023_11_14/23/d e.log",
                "2023_11_14/23/ü.log", "2023_11_16/00/nested/x.log", "2023_11_14/23/.hidden", "2023_11_14/23/_tmp",
                "stray.log", "2023_11_15/stray.log", "notadate/01/y.log"):
        put(root, rel, T0)
    put(root, "2023_11_15/01/a.log", T0, b"one\ntwo\n")
    put(root, "2023_11_15/01/_a.log.valid-length", T0, b"4")  # a's readable bytes: "one\n"
    (root / "2023_11_13" / "05").mkdir(parents=True)  # an empty partition
    os.symlink(root / "2023_11_15/01/b.log", root / "2023_11_14/22/link.log")


def _streamed(storage, layout, **kw):
    got: list = []
    listing = scan(storage, layout, sink=lambda rel, part, mtime, files, skipped: got.append(
        (rel, part.start_ms if part else None, mtime, sorted(files), sorted(s.path for s in skipped))), **kw)
    return listing, got


def test_a_streamed_scan_is_the_whole_scan_one_directory_at_a_time_oldest_first(tmp_path):
    root = tmp_path / "t"
    _messy(root)
    storage, layout = open_storage(str(root)), Layout(LAYOUT, PARTITION)
    whole = scan(storage, layout)
    listing, got = _streamed(storage, layout)
    assert listing.files == []  # handed on, not kept
    streamed = sorted(f for _, _, _, files, _ in got for f in files)
    assert streamed == sorted(whole.files)
    assert sorted(s.path for s in listing.skipped) == sorted(s.path for s in whole.skipped)
    assert listing.leaves == whole.leaves and listing.partitions == whole.partitions
    # Every partition directory is handed on once, in partition time order; each file with its own directory.
    parts = [(start, rel) for rel, start, _, _, _ in got if start is not None]
    assert parts == sorted(parts) and len({r for _, r in parts}) == len(parts)
    assert {r for _, r in parts} == set(whole.leaves)
    for rel, _, mtime, files, _ in got:
        assert all(f.directory == rel for f in files)
        if rel in whole.leaves:
            assert mtime == whole.leaves[rel]
    assert any("link.log" in p for _, _, _, _, sk in got for p in sk)  # a link is skipped in its own directory
    assert [f.valid_length for f in streamed if f.path.endswith("/a.log")] == [4]  # its sidecar applied


def test_a_streamed_scan_skips_unchanged_directories_as_the_whole_one_does(tmp_path):
    root = tmp_path / "t"
    _messy(root)
    storage, layout = open_storage(str(root)), Layout(LAYOUT, PARTITION)
    first = scan(storage, layout)
    known = {d: m for d, m in first.leaves.items() if m is not None and d != "2023_11_15/01"}
    whole = scan(storage, layout, known_dirs=known)
    listing, got = _streamed(storage, layout, known_dirs=known)
    assert listing.unchanged == whole.unchanged and "2023_11_15/01" not in listing.unchanged
    assert sorted(f for *_, files, _ in got for f in files) == sorted(whole.files)
    assert {rel for rel, start, *_ in got if start is not None} == set(whole.leaves) - whole.unchanged


@pytest.mark.s3
@pytest.mark.integration
def test_a_streamed_scan_on_s3_is_the_whole_scan(s3_root, tmp_path):
    local = tmp_path / "t"
    for rel in ("2023_11_15/01/a.log", "2023_11_14/22/c.log", "2023_11_14/23/d e.log", "2023_11_16/00/nested/x.log",
                "stray.log", "notadate/01/y.log"):
        put(local, rel, T0)
    storage, layout = open_storage(s3_root), Layout(LAYOUT, PARTITION)
    for p in sorted(local.rglob("*")):
        if p.is_file():
            storage.write(str(p.relative_to(local)), p.read_bytes())
    whole = scan(storage, layout, parallel=4)
    listing, got = _streamed(storage, layout, parallel=4)
    assert sorted(f[:2] + f[3:] for *_, files, _ in got for f in files) == sorted(f[:2] + f[3:] for f in whole.files)
    assert sorted(s.path for s in listing.skipped) == sorted(s.path for s in whole.skipped)
    starts = [start for _, start, *_ in got if start is not None]
    assert starts == sorted(starts)
