"""The benchmarks' raw baselines do the work trib does: same files, same codec and level, same fsyncs.

A baseline that compresses harder than trib, writes one file where trib writes 24, or skips the
fsyncs trib pays makes every published ratio wrong. These check it cheaply: the raw side's gzip
file is byte for byte trib's, its durable mode fsyncs every file and directory trib's commit does
(its no-fsync mode none), and each throughput benchmark routes its raw side through that code.
"""

from __future__ import annotations

import gzip
import inspect
import json
import os
import sys
import threading
import zlib
from pathlib import Path

import pytest

from tributary_read import Layout, Table, TableConfig, TableWriter
from tributary_read.io.sinks import GZIP_LEVEL

pytestmark = pytest.mark.unit

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import _common  # noqa: E402

H = 3_600_000
START = 1_717_200_000_000  # 2024-06-01T00:00Z
LINES = [json.dumps({"id": i, "ts": START + i * 3_607 % (3 * H), "msg": "x" * (i % 50)}).encode() for i in range(3_000)]


@pytest.fixture
def fsynced(monkeypatch):
    """The paths os.fsync is called on, in order (the real fsync still runs)."""
    seen: list[str] = []
    lock = threading.Lock()
    real = os.fsync

    def fsync(fd):
        real(fd)
        with lock:
            seen.append(os.readlink(f"/proc/self/fd/{fd}"))

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def test_the_raw_gzip_file_is_byte_for_byte_tribs_and_not_arrows_level_9(tmp_path):
    import pyarrow as pa

    layout = Layout("{yyyy}_{MM}_{dd}", "dt={yyyy}{MM}{dd}")
    table = Table.create(str(tmp_path / "t"), TableConfig(layout=layout, format="jsonl", compression="gzip"))
    w = TableWriter(table)
    for line in LINES:
        w.write(line, START)
    (entry,) = w.commit().files
    raw = _common.RawFiles(tmp_path / "raw", "jsonl", "gzip")
    for line in LINES:
        raw.line("2024_06_01", line)
    raw.close()
    mine = Path(raw.path("2024_06_01")).read_bytes()
    assert mine == (tmp_path / "t" / entry.path).read_bytes()  # same codec, level and chunking: the same bytes
    z = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    assert mine == z.compress(b"".join(x + b"\n" for x in LINES)) + z.flush()
    assert _common.trib_gzip_level() == GZIP_LEVEL
    out = pa.BufferOutputStream()  # what the old baselines wrote: Arrow's stream, level 9, other bytes
    with pa.CompressedOutputStream(out, "gzip") as s:
        s.write(gzip.decompress(mine))
    assert GZIP_LEVEL != 9 and out.getvalue().to_pybytes()[10:] != mine[10:]


@pytest.mark.parametrize("fmt, codec", [("jsonl", "gzip"), ("parquet", "snappy")])
def test_the_durable_raw_baseline_fsyncs_what_tribs_commit_does_and_the_other_nothing(tmp_path, fsynced, fmt,
                                                                                      codec):
    import pyarrow as pa

    def write(files):
        for i, line in enumerate(LINES):
            part = f"2024_06_01/{(START + i * 3_607 % (3 * H)) // H % 24:02d}"
            files.line(part, line) if fmt == "jsonl" else files.row(part, json.loads(line))
        return files.close()

    assert write(_common.RawFiles(tmp_path / "nofsync", fmt, codec, durable=False)) == 3 and fsynced == []
    raw_root = tmp_path / "raw"
    assert write(_common.RawFiles(raw_root, fmt, codec)) == 3
    raw = {os.path.relpath(p, raw_root) for p in fsynced}
    fsynced.clear()
    root = tmp_path / "t"
    layout = Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")
    table = Table.create(str(root), TableConfig(layout=layout, format=fmt, compression=codec))
    w = TableWriter(table)
    if fmt == "jsonl":
        for line in LINES:
            w.write(line, json.loads(line)["ts"])
    else:
        w.write_table(pa.Table.from_pylist([json.loads(x) for x in LINES]), "ts")
    files = w.commit().files
    trib = {os.path.relpath(p, root) for p in fsynced if "/_tributary/" not in p and not p.endswith("/_tributary")}
    # The same partitions, each file and each directory from it to the root (names aside: trib stages).
    assert {os.path.dirname(p) for p in raw if "part-" in p} == {os.path.dirname(f.path) for f in files}
    assert {p for p in raw if "part-" not in p} == {p for p in trib if "part-" not in p} == {
        ".", "2024_06_01", "2024_06_01/00", "2024_06_01/01", "2024_06_01/02"}
    assert len([p for p in raw if "part-" in p]) == len([p for p in trib if "part-" in p]) == 3


def test_every_throughput_benchmark_writes_its_raw_side_through_the_fair_files():
    import bench_compact
    import bench_kafka
    import bench_spool
    import bench_writer

    for fn in (bench_writer.raw_text, bench_writer.raw_parquet, bench_kafka.raw_worker, bench_spool.raw_worker):
        src = inspect.getsource(fn)
        assert "RawFiles(" in src or "RawBatches(" in src, fn.__qualname__
        assert "CompressedOutputStream" not in src and "ParquetWriter" not in src, fn.__qualname__
        assert inspect.signature(fn).parameters["durable"].default is True, fn.__qualname__
    for fn in (bench_kafka.raw_worker, bench_spool.raw_worker):  # files closed where trib commits
        assert "every" in inspect.signature(fn).parameters and ".counted()" in inspect.getsource(fn)
    assert "RawFiles(" in bench_compact.RAW_SCRIPT and "CompressedOutputStream" not in bench_compact.RAW_SCRIPT
    assert bench_kafka.commit_every_of([]) == _common.trib_commit_every() == 10_000
    for mod, fn in ((bench_writer, "main"), (bench_kafka, "run_variant"), (bench_spool, "run_variant"),
                    (bench_compact, "throughput")):  # each reports the ratio to raw without fsync too
        assert "raw_nofsync" in inspect.getsource(getattr(mod, fn)), mod.__name__


def test_bench_writer_runs_its_fair_sides_and_checks_trib_output(tmp_path, capsys):
    import bench_writer

    r = bench_writer.main(["-n", "2000", "--repeat", "1", "--dir", str(tmp_path)])
    for v in r["variants"].values():
        assert v["check"].startswith("OK"), v["check"]
        files = v["files"]
        assert v["raw_nofsync"]["fsyncs"] == 0
        assert v["raw"]["fsyncs"] == files + files + 2  # each file, its hour, the day, the root
        assert v["trib"]["fsyncs"] >= v["raw"]["fsyncs"]  # and the manifest commit's
        assert v["ratio_nofsync_median"] > 0
