"""A file truncated or rewritten after it was committed or listed stops the read before Spark reads it.

Spark reads whatever bytes a path holds: a committed jsonl file cut at a line reads as fewer records,
exit 0. ``read_files`` compares every file's size with its FileSet's first (one batched stat), and
``trib etl run`` goes through it. Real tables and files, the session's ``spark`` fixture, ``trib etl
run`` in this process on it (no JVM per run), tiny data.
"""

from __future__ import annotations

import json
import os

import pytest
from conftest import invoke_trib
from helpers import one_line_error
from test_etl_unreadable import T, _ids, _setup
from test_spark_read import HOURLY, _put, _rows, _sidecar, _write

from tributary_read.errors import ChangedFileError, VerificationError
from tributary_read.read.resolve import resolve
from tributary_read.spark.read import read_files
from tributary_read.table.config import Table, TableConfig

pytestmark = pytest.mark.integration


def test_a_committed_file_cut_or_grown_is_exit_9_before_spark_and_an_untouched_one_reads_as_before(spark, tmp_path):
    root = tmp_path / "t"
    t = Table.create(str(root), TableConfig(HOURLY, tracking="manifest"))
    _write(t, _rows(40))
    fs = resolve(t)
    assert len(fs.files) == 2
    # untouched: every record once, as before the check
    assert sorted(r.id for r in read_files(spark, fs).collect()) == list(range(40))

    f = fs.files[0]
    path = root / f.path
    data = path.read_bytes()
    cut = data[: data.index(b"\n", len(data) // 2) + 1]  # whole lines: Spark alone reads fewer rows, exit 0
    path.write_bytes(cut)
    assert spark.read.json(str(path)).count() < 20
    with pytest.raises(VerificationError) as e:
        read_files(spark, fs)
    msg = str(e.value)
    assert e.value.exit_code == 9 and "\n" not in msg
    assert f.path in msg and f"holds {len(cut)} bytes but its commit says {len(data)}" in msg
    assert f"trib verify {fs.root}" in msg
    # `trib verify` names the same problem: one comparison, the same answer
    v = json.loads(invoke_trib("verify", str(root), "--json").stdout)
    assert [(p["path"], p["problem"], p["actual_size"]) for p in v["problems"]] == [(f.path, "size_mismatch", len(cut))]

    # grown past its commit's size (a whole-file entry): as wrong
    extra = b'{"id": 999, "ts": 1704067200000, "msg": "extra"}\n'
    path.write_bytes(data + extra)
    with pytest.raises(VerificationError, match=f"holds {len(data) + len(extra)} bytes but its commit says {len(data)}"):
        read_files(spark, fs)
    path.write_bytes(data)
    assert sorted(r.id for r in read_files(spark, fs).collect()) == list(range(40))


def test_a_listed_file_that_changed_is_exit_15_and_a_valid_length_may_grow(spark, tmp_path):
    root = tmp_path / "flink"
    body = b"".join(json.dumps({"id": i}).encode() + b"\n" for i in range(4))
    whole, capped = root / "2024_01_01/05/part-0-0", root / "2024_01_01/06/part-1-0"
    _put(str(whole), body)
    _put(str(capped), body + b'{"id": 66')
    _sidecar(str(capped), len(body))
    fs = resolve(str(root), layout=HOURLY)
    opts = {"format": "jsonl"}
    assert sorted(r.id for r in read_files(spark, fs, options=opts).collect()) == [0, 0, 1, 1, 2, 2, 3, 3]

    with open(capped, "ab") as out:  # the writer goes on past the valid length: still read up to it
        out.write(b'}\n{"id": 67}\n')
    assert sorted(r.id for r in read_files(spark, fs, options=opts).collect()) == [0, 0, 1, 1, 2, 2, 3, 3]

    whole.write_bytes(body[:-10])
    with pytest.raises(ChangedFileError, match=f"part-0-0 holds {len(body) - 10} bytes but was listed with "
                                               f"{len(body)}") as e:
        read_files(spark, fs, options=opts)
    assert e.value.exit_code == 15 and "look at it" in str(e.value)
    whole.write_bytes(body)
    capped.write_bytes(body[:-3])
    with pytest.raises(ChangedFileError, match=f"fewer than the {len(body)} to be read"):
        read_files(spark, fs, options=opts)


def test_etl_run_over_a_truncated_committed_input_is_exit_9_and_commits_nothing(tmp_path, spark):
    raw, out, job, files = _setup(tmp_path)
    cut = raw / files[1]
    data = cut.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    before = Table.load(str(out)).log.state().version

    p = invoke_trib("etl", "run", str(job), "--schedule-time", T, "-q")
    one_line_error(p, 9, f"committed file file://{cut} holds {len(data) // 2} bytes but its commit says {len(data)}",
                   f"trib verify file://{raw}")
    assert Table.load(str(out)).log.state().version == before and _ids(out) == []

    cut.write_bytes(data)  # restored: the same plan reads every record once
    invoke_trib("etl", "run", str(job), "--schedule-time", T, "-q", check=True)
    assert _ids(out) == list(range(15))
    assert os.path.getsize(cut) == len(data)


def test_on_s3_the_check_stats_in_batches_and_names_the_changed_file(s3_root):
    """More files than one ``stat_many`` batch, on a real S3-protocol server: all looked at, in order."""
    from tributary_read.io.storage import open_storage
    from tributary_read.read.sizes import REMOTE_BATCH, check_sizes

    st = open_storage(s3_root)
    n = REMOTE_BATCH + 6
    for i in range(n):
        st.write(f"2024_01_01/{i % 3:02d}/f{i:03d}.jsonl", b'{"id": %d}\n' % i)
    fs = resolve(s3_root, layout=HOURLY)
    assert len(fs.files) == n
    check_sizes(fs)  # nothing changed
    last = fs.files[-1]  # in the last batch
    st.write(last.path, b"{}\n")
    with pytest.raises(ChangedFileError, match=f"{last.path} holds 3 bytes but was listed with {last.size}"):
        check_sizes(fs)

    t = Table.create(f"{s3_root}/t", TableConfig(HOURLY, tracking="manifest"))
    _write(t, _rows(4, hours=1))
    (f,) = resolve(t).files
    t.storage.write(f.path, b"\n")
    with pytest.raises(VerificationError, match=f"holds 1 bytes but its commit says {f.size}"):
        check_sizes(resolve(t))
