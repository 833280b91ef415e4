"""Listing on Spark executors returns the FileSet the local listing returns (issue 10, section 1).

Trees hold what a listing must get right: odd names, hidden and in-progress
files, files outside partition directories, a linked file and a linked
directory, a name that is not UTF-8, ``.valid-length`` sidecars (one
malformed), several partitions. Each comparison runs on the shared
``local[2,2]`` session and checks that executors did run the listing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import put
from tributary_read.errors import InvalidInputError, StorageError
from tributary_read.io.storage import open_storage
from tributary_read.read.resolve import plain_layout, resolve
from tributary_read.read.window import TimeWindow

T0 = 1592956800000  # 2020-06-24T00:00Z
H = 3_600_000
HOURLY = plain_layout("{yyyy}_{MM}_{dd}/{HH}")
NAMES = ("a.log", "b b.log", "ü-é.log", "k=v%20.log", "#x.log")


def odd_tree(root: Path) -> None:
    for h in range(6):
        for j, name in enumerate(NAMES):
            put(root, f"2020_06_2{4 + h // 3}/{h % 3:02d}/{name}", T0 + h * H + j * 1000)
    for rel in ("2020_06_24/00/_SUCCESS", "2020_06_24/00/.part.inprogress", "2020_06_24/00/_tmp/hidden.log",
                "2020_06_24/00/nested/y.log", "2020_06_24/oops/z.log", "stray.log", ".hidden/x.log"):
        put(root, rel, T0 + H)
    put(root, "2020_06_24/01/flink.log", T0 + H, b"0123456789")
    put(root, "2020_06_24/01/_flink.log.valid-length", T0 - 10 * H, b"4")  # outside any window: still applies
    put(root, "2020_06_24/01/bad.log", T0 + H, b"0123")
    put(root, "2020_06_24/01/_bad.log.valid-length", T0 + H, b"four")
    os.symlink("../00/a.log", root / "2020_06_24/02/link.log")
    os.symlink("../2020_06_24/00", root / "2020_06_25/03")
    with open(os.fsencode(str(root / "2020_06_25/00")) + b"/bad\xffname.log", "wb") as f:
        f.write(b"x\n")


def assert_same(local, remote, *, split: bool = False) -> None:
    """Equal FileSets; the stats differ only in timings (and, when a tree was split deeper, list calls)."""
    for k in ("mode", "files", "plan", "root", "skipped", "untracked", "format", "hadoop_root"):
        assert getattr(remote, k) == getattr(local, k), k
    drop = {"seconds", "listed_dirs"} if split else {"seconds"}
    assert remote.stats.keys() == local.stats.keys()
    assert {k: v for k, v in remote.stats.items() if k not in drop} == \
           {k: v for k, v in local.stats.items() if k not in drop}


def on_executors(spark, fn):
    """fn()'s result, checking that it ran at least one Spark job."""
    sc = spark.sparkContext
    group = f"trib-listing-{os.urandom(4).hex()}"
    sc.setJobGroup(group, "test")
    try:
        out = fn()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert sc.statusTracker().getJobIdsForGroup(group), "no Spark job ran: the driver listed alone"
    return out


def test_executor_listing_equals_local_listing(spark, tmp_path):
    from tributary_read.spark.listing import list_on_executors

    root = tmp_path / "t"
    odd_tree(root)
    full = resolve(str(root), mode="mtime", layout=HOURLY)
    assert len(full.files) == 31 and full.files[0].path == "2020_06_24/00/#x.log"
    assert {s.path for s in full.skipped} >= {"stray.log", "2020_06_24/02/link.log", "2020_06_25/03",
                                              "2020_06_24/01/bad.log", "2020_06_25/00/bad\\xffname.log"}
    assert_same(full, on_executors(spark, lambda: list_on_executors(spark, str(root), layout=HOURLY)),
                split=True)

    window = TimeWindow(T0 + H, T0 + 2 * H)
    local = resolve(str(root), mode="mtime", layout=HOURLY, window=window)
    assert {f.path: f.valid_length for f in local.files}["2020_06_24/01/flink.log"] == 4
    assert_same(local, on_executors(spark, lambda: list_on_executors(spark, str(root), layout=HOURLY,
                                                                     window=window)), split=True)

    rng = "dt>=2020062401,dt<=2020062500"  # candidate directories, no walk
    local = resolve(str(root), mode="mtime", layout=HOURLY, partitions=rng)
    assert local.stats["strategy"] == "candidates" and len(local.files) == 16
    assert_same(local, on_executors(spark, lambda: list_on_executors(spark, str(root), layout=HOURLY,
                                                                     partitions=rng)))


def test_deep_layouts_and_plain_directories_are_split_and_still_equal(spark, tmp_path):
    """One top-level directory a year: the driver descends before handing out; a plain tree too."""
    from tributary_read.spark.listing import list_on_executors, spark_lister

    root = tmp_path / "deep"
    deep = plain_layout("{yyyy}/{MM}/{dd}/{HH}")
    for h in range(30):
        put(root, f"2020/06/{24 + h // 24}/{h % 24:02d}/f {h}.log", T0 + h * H)
    put(root, "2020/06/24/_tmp/x.log", T0)
    put(root, "2020/_SUCCESS", T0)
    put(root, "2020/06/notes.txt", T0)
    local = resolve(str(root), mode="mtime", layout=deep)
    assert len(local.files) == 30 and [s.path for s in local.skipped] == ["2020/06/notes.txt"]
    remote = on_executors(spark, lambda: list_on_executors(spark, str(root), layout=deep, tasks=8))
    assert_same(local, remote, split=True)
    assert remote.stats["listed_dirs"] > local.stats["listed_dirs"]  # split below the single top directory
    # resolve takes the lister too; a plain directory without a layout lists every visible file
    plain = resolve(str(root), mode="mtime")
    assert_same(plain, on_executors(spark, lambda: resolve(str(root), mode="mtime",
                                                           lister=spark_lister(spark, tasks=64))), split=True)


def test_s3_listing_on_executors_equals_local(spark, s3_root):
    from tributary_read.spark.listing import list_on_executors

    st = open_storage(s3_root)
    for h in range(4):
        for name in ("a.log", "b b.log"):
            st.write(f"2020_06_24/{h:02d}/{name}", b"0123456789\n")
    st.write("2020_06_24/01/_a.log.valid-length", b"3")
    st.write("2020_06_24/02/_SUCCESS", b"")
    st.write("2020_06_24/oops/c.log", b"x")
    local = resolve(s3_root, mode="mtime", layout=HOURLY)
    assert len(local.files) == 8 and [s.path for s in local.skipped] == ["2020_06_24/oops/c.log"]
    assert {f.path: f.valid_length for f in local.files}["2020_06_24/01/a.log"] == 3
    remote = on_executors(spark, lambda: list_on_executors(spark, s3_root, layout=HOURLY))
    assert_same(local, remote, split=True)
    assert remote.hadoop_root.startswith("s3a://")


def test_executor_failures_and_unreachable_stores_are_one_clear_error(spark, tmp_path):
    from tributary_read.spark.listing import list_on_executors, spark_lister

    root = tmp_path / "t"
    put(root, "2020_06_24/00/a.log", T0)
    # An executor that cannot list (here: a file where a directory should be) fails its task,
    # Spark retries it, and the driver raises one StorageError naming the cause.
    with pytest.raises(StorageError, match="on Spark executors: StorageError: cannot list .*not a directory"):
        spark_lister(spark).list_many(open_storage(str(root)), ["2020_06_24/00/a.log"], None)
    mem = open_storage("memory://trib-listing-test")
    mem.write("2020_06_24/00/a.log", b"x")
    with pytest.raises(InvalidInputError, match="lives in this process only"):
        list_on_executors(spark, "memory://trib-listing-test", layout=HOURLY)
