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
    # Every partition directory with files is handed on once, in partition time order (local disks list
    # each leaf on its own, oldest first); one without files is only in the leaves.
    parts = [(start, rel) for rel, start, _, _, _ in got]
    assert parts == sorted(parts) and len({r for _, r in parts}) == len(parts)
    assert {r for _, r in parts} == {f.directory for f in whole.files}
    assert {"2023_11_13/05", "2023_11_16/00"} <= set(listing.leaves) - {r for _, r in parts}
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
    assert {rel for rel, *_ in got} == {f.directory for f in whole.files}


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
    assert listing.leaves == whole.leaves  # an object store lists a day at a time: any order, every directory
    assert len({rel for rel, *_ in got}) == len(got)


def test_the_cap_takes_the_oldest_directories_that_fit_whatever_order_they_come_in():
    """ListingCap against its definition: sort by partition time, take while they fit (the first always)."""
    import random

    from tributary_read.read.backlog import ListingCap
    from tributary_read.read.fileset import ResolvedFile

    rng = random.Random(32)
    for trial in range(300):
        dirs = [(rng.randrange(50) * 3_600_000, f"d{i:03d}", rng.choice([0, 1, 2, 5, 9, 30]))
                for i in range(rng.randrange(1, 40))]
        cap = rng.choice([0, 1, 5, 10, 25, 100])
        want_taken, taken, stop = set(), 0, False
        for start, d, n in sorted(dirs):
            if not n:
                continue
            if stop or (cap and taken and taken + n > cap):
                stop = True
                continue
            taken += n
            want_taken.add(d)
        order = dirs[:]
        rng.shuffle(order)
        c, kept = ListingCap(cap), set()
        for start, d, n in order:
            files = [ResolvedFile(f"{d}/f{j}", 10, {}) for j in range(n)]
            left = c.admit(d, start, files)
            if n and d not in left:
                kept.add(d)
            kept -= set(left)
        assert kept == want_taken, (trial, cap, dirs)
        left_dirs = [(s, d) for s, d, n in dirs if n and d not in want_taken]
        b = c.backlog()
        assert b["partitions"] == len(left_dirs)
        assert b["files"] == sum(n for s, d, n in dirs if n and d not in want_taken)
        assert b["bytes"] == 10 * b["files"]
        assert b["oldest_partition"] == (min(left_dirs)[1] if left_dirs else None)


def test_a_directory_whose_only_file_is_a_link_is_still_reported_every_run(tmp_path):
    """A withheld file keeps its directory from being skipped by its mtime: every plan reports it again."""
    import json
    import time

    from conftest import invoke_trib

    root = tmp_path / "t"
    old = int(time.time() * 1000) - 3 * 3_600_000
    put(root, "2023_11_14/22/c.log", old)
    (root / "2023_11_15" / "01").mkdir(parents=True)
    os.symlink(root / "2023_11_14/22/c.log", root / "2023_11_15/01/link.log")
    os.utime(root / "2023_11_15" / "01", ns=(old * 1_000_000,) * 2)
    for run in range(3):
        p = invoke_trib("files", str(root), "--layout", LAYOUT, "--consumer", "c", "--json")
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        assert [s["path"] for s in doc["skipped"]] == ["2023_11_15/01/link.log"], (run, doc["skipped"])
        assert invoke_trib("consumer", "ack", str(root), "c", doc["plan_id"]).returncode == 0
