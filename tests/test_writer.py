"""TableWriter.write_table (Arrow batches into Parquet) on every storage backend."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import invoke_trib

from tributary_read import BadRecordError, InvalidInputError, Layout, RollPolicy, Table, TableConfig, TableWriter
from tributary_read.io.storage import open_storage

pytestmark = pytest.mark.unit

H = 3_600_000
LAYOUT = Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")


def _table(root: str, **kw) -> Table:
    return Table.create(root, TableConfig(layout=LAYOUT, format="parquet", compression="snappy", **kw))


def _read(root: str, path: str) -> pq.ParquetFile:
    return pq.ParquetFile(io.BytesIO(open_storage(root).read(path)))


def test_rows_go_to_the_hour_of_their_time_and_batches_share_row_groups(any_root):
    table = _table(any_root)
    w = TableWriter(table)
    start = 1_592_956_800_000  # 2020-06-24T00:00Z
    # 10 batches, each spread over 3 hours in shuffled order: every batch hits every file.
    for b in range(10):
        ts = [start + ((i * 7919 + b) % 3) * H + i for i in range(300)]
        w.write_table(pa.table({"ts": ts, "batch": [b] * 300, "i": list(range(300))}), "ts")
    commit = w.commit()
    assert sorted(f.path.rsplit("/", 1)[0] for f in commit.files) == ["2020_06_24/00", "2020_06_24/01",
                                                                       "2020_06_24/02"]
    assert sum(f.records for f in commit.files) == 3000
    for f in commit.files:
        pf = _read(any_root, f.path)
        # Ten routed slices per file, but one row group: slices are buffered, not written one by one.
        assert pf.metadata.num_row_groups == 1
        t = pf.read()
        assert t.num_rows == f.records
        hour = int(f.path.split("/")[1])
        assert all(hour == (x - start) // H for x in t.column("ts").to_pylist())
        assert dict(f.partition) == {"dt": f"20200624{hour:02d}"}
        pairs = list(zip(t.column("batch").to_pylist(), t.column("i").to_pylist()))
        assert pairs == sorted(pairs), "rows keep their input order within a partition"


def test_times_before_1970_floor_to_their_own_hour(tmp_path):
    table = _table(str(tmp_path))
    w = TableWriter(table)
    w.write_table(pa.table({"ts": [-1, 0, -H, -H - 1], "v": [1, 2, 3, 4]}), "ts")
    got = {f.path.rsplit("/", 1)[0]: _read(str(tmp_path), f.path).read().column("v").to_pylist()
           for f in w.commit().files}
    assert got == {"1969_12_31/23": [1, 3], "1970_01_01/00": [2], "1969_12_31/22": [4]}


@pytest.mark.parametrize("batch, why", [
    (pa.table({"ts": pa.array([1, None], pa.int64()), "v": [1, 2]}), "null values"),
    (pa.table({"time": [1, 2]}), "not in the batch"),
])
def test_a_batch_without_usable_times_is_refused_and_nothing_is_committed(tmp_path, batch, why):
    table = _table(str(tmp_path))
    w = TableWriter(table)
    with pytest.raises(BadRecordError, match=why):
        w.write_table(batch, "ts")
    assert table.log.latest_version() == 0


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_an_arrow_batch_into_a_line_format_table_is_an_input_error_and_opens_no_file(tmp_path, fmt):
    """Found by mypy: a line sink has no write_table, so this was an AttributeError after a file was opened."""
    table = Table.create(str(tmp_path), TableConfig(layout=LAYOUT, format=fmt))
    w = TableWriter(table)
    with pytest.raises(InvalidInputError, match=f"write_table takes Parquet tables; this table's format is {fmt}"):
        w.write_table(pa.table({"ts": [1], "v": [1]}), "ts")
    assert w.commit() is None and table.log.latest_version() == 0
    assert [f.path for f in table.storage.list() if not f.path.startswith("_tributary/")] == []


def test_a_schema_change_within_a_file_is_an_input_error(tmp_path):
    table = _table(str(tmp_path))
    w = TableWriter(table)
    w.write_table(pa.table({"ts": [1], "v": [1]}), "ts")
    with pytest.raises(InvalidInputError, match="schema"):
        w.write_table(pa.table({"ts": [2], "v": ["not a number"]}), "ts")


def test_files_roll_by_record_count(tmp_path):
    table = _table(str(tmp_path))
    w = TableWriter(table, roll=RollPolicy(max_records=1000))
    for b in range(5):
        w.write_table(pa.table({"ts": [b * 1000 + i for i in range(1000)]}), "ts")
    files = w.commit().files
    assert len(files) == 5 and all(f.records == 1000 for f in files)


def test_files_uri_json_adds_full_uris(tmp_path):
    root = tmp_path / "logs"
    (root / "2020_06_24" / "00").mkdir(parents=True)
    (root / "2020_06_24" / "00" / "a.log").write_text("x\n")
    p = invoke_trib("files", str(root), "--all", "--layout", "{yyyy}_{MM}_{dd}/{HH}", "--mode", "mtime", "--uri", "--json",
                 check=True)
    [f] = json.loads(p.stdout)["files"]
    assert f["path"] == "2020_06_24/00/a.log"
    assert f["uri"] == f"file://{root}/2020_06_24/00/a.log"


@pytest.mark.unit
@pytest.mark.parametrize("compression", ["gzip", "none"])
def test_a_line_sinks_append_reports_the_roll_size_exactly_as_bytes_written(compression):
    """The writer's per-record path asks LineSink.append whether the file is full instead of bytes_written:
    both must agree at every record, across the sink's 1 MiB drains, so size rolling stays exact."""
    import random

    from tributary_read.io.sinks import LineSink

    rng = random.Random(7)
    for max_bytes in (1, 300_000, 700_000):
        sink = LineSink(io.BytesIO(), compression).limit(max_bytes)
        for _ in range(20_000):
            line = b"x" * rng.randrange(0, 200) + bytes(rng.randrange(256) for _ in range(rng.randrange(20)))
            assert sink.append(line) == (sink.bytes_written >= max_bytes)


def test_abort_closes_every_file_and_never_raises_when_a_delete_fails(tmp_path):
    """abort() runs while another error is handled: a delete it cannot do leaves an orphan for
    `trib clean`, never replaces that error (and its exit code), and never stops it closing the other
    files (a stream left to its destructor uploads there, holding the GIL)."""
    from tributary_read import StorageError

    table = _table(str(tmp_path))
    w = TableWriter(table)
    start = 1_592_956_800_000
    w.write_table(pa.table({"ts": [start + h * H for h in range(3)]}), "ts")
    sinks = [f.sink for f in w._open.values()]
    assert len(sinks) == 3

    def refuse(rel):
        raise StorageError(f"cannot delete {rel}: denied")

    table.storage.delete = refuse  # type: ignore[method-assign]
    w.abort()
    assert all(s.raw.closed for s in sinks)
    assert not w._open and not w._closed


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_sink_that_fails_to_open_closes_its_stream(fmt):
    """open_sink closes the stream it was given when the sink cannot be made, for every caller (the writer's
    data and dead-letter files, compaction's output): never left to its destructor, which uploads there."""
    from tributary_read.io.sinks import open_sink

    raw = pa.BufferOutputStream()
    with pytest.raises(KeyError):
        open_sink(raw, fmt, "no-such-codec")
    assert raw.closed
