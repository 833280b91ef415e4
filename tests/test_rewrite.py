"""The compaction rewrite engine: real tables made by `trib table create` + `trib ingest`, rewritten.

Every check is on records: the multiset read from the committed inputs equals the
multiset read back from the output, and the output's entry says what a reader
will find (its size on storage, its record count). Faults are real failing
writes of a storage (ENOSPC from the stream), not stand-ins for the engine.
"""

from __future__ import annotations

import errno
import gzip
import io
import json
import os
import posixpath
import subprocess
import sys
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO, invoke_trib
from helpers import BASE_MS, LAYOUT, PARTITION, make_source

from tributary_read.errors import (
    InvalidInputError, SchemaConflictError, StorageError, TributaryError, VerificationError,
)
from tributary_read.io.local import LocalStorage
from tributary_read.read.visibility import is_visible
from tributary_read.table.config import Table
from tributary_read.table.manifest import KIND_DEAD_LETTER, FileEntry
from tributary_read.table.names import WRITTEN_NAME
from tributary_read.table.renames import roll_forward
from tributary_read.write.rewrite import Rewritten, group, merged_schema, rewrite
from tributary_read.write.writer import new_writer_id

pytestmark = pytest.mark.unit

COMBOS = [(fmt, c) for fmt in ("text", "jsonl", "csv") for c in ("none", "gzip", "zstd")] + [
    ("parquet", c) for c in ("none", "snappy", "gzip", "zstd")]
TIME_RE = {"text": r"^(\S+) ", "csv": r"^\d+,([^,]+),"}
N = 300


# -- making tables -----------------------------------------------------------------------------------
def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _source(path: Path, fmt: str, n: int, start: int = 0) -> Path:
    """n records over 2 hours; text and csv carry their time as text, jsonl/parquet as a field."""
    if fmt in ("jsonl", "parquet"):
        return make_source(path, n, hours=2)
    with open(path, "w") as f:
        for i in range(start, start + n):
            ts = _iso(BASE_MS + (i * 7_919_000) % 7_200_000)
            if fmt == "text":
                f.write(f"{ts} id={i} msg=event\t{i}\n")
            else:  # quoted commas and doubled quotes: a record is still one line
                f.write(f'{i},{ts},"event, {i} ""q"""\n')
    return path


def _create(root, fmt: str, compression: str, *extra: str) -> Table:
    invoke_trib("table", "create", root, "--layout", LAYOUT, "--partition", PARTITION, "--format", fmt,
                "--compression", compression, "--roll-records", "13", *extra, check=True)
    return Table.load(str(root))


def _ingest(root, src: Path, fmt: str, app: str = "rw") -> None:
    time = ["--time-field", "ts"] if fmt in ("jsonl", "parquet") else ["--time-regex", TIME_RE[fmt]]
    invoke_trib("ingest", root, "--source", src, "--app-id", app, *time, check=True)


def _partitions(table: Table) -> dict[str, list[FileEntry]]:
    """Committed data files by directory, in commit order."""
    out: dict[str, list[FileEntry]] = {}
    for v in range(1, table.log.latest_version() + 1):
        commit = table.log.read_commit(v)
        assert commit is not None
        for f in commit.files:
            if f.kind != KIND_DEAD_LETTER:
                out.setdefault(posixpath.dirname(f.path), []).append(f)
    return out


def _biggest(table: Table) -> list[FileEntry]:
    return max(_partitions(table).values(), key=len)


# -- reading records back ------------------------------------------------------------------------------
def _decode(data: bytes, name: str) -> bytes:
    if name.endswith(".gz"):
        return gzip.decompress(data)
    if name.endswith(".zst"):
        return pa.CompressedInputStream(pa.BufferReader(data), "zstd").read()
    return data


def _records(table: Table, rel: str, name: str | None = None) -> list:
    """The records a reader finds in ``rel`` (named ``name`` for its extension): lines, or rows as JSON
    (without null fields: a column a file lacks reads as null when files are merged)."""
    data = table.storage.read(rel)
    if (name or rel).endswith(".parquet"):
        rows = pq.read_table(io.BytesIO(data)).to_pylist()
        return [json.dumps({k: v for k, v in r.items() if v is not None}, sort_keys=True) for r in rows]
    text = _decode(data, name or rel)
    lines = text.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return lines


def _check(table: Table, rw: Rewritten, inputs: list[FileEntry]) -> Counter:
    """The output holds exactly the inputs' records, hidden, with an entry that says what it holds."""
    st = table.storage
    e = rw.entry
    assert e.staged and not is_visible(e.staged) and is_visible(e.path)
    assert posixpath.dirname(e.path) == posixpath.dirname(inputs[0].path)
    assert WRITTEN_NAME.match(posixpath.basename(e.path)) and WRITTEN_NAME.match(posixpath.basename(e.staged))
    assert dict(e.partition) == dict(inputs[0].partition) and e.kind == "data"
    assert not st.exists(e.path), "the output is never visible before its commit"
    info = st.info(e.staged)
    assert info is not None and info.size == e.size
    want = Counter(r for f in inputs for r in _records(table, f.path))
    got = Counter(_records(table, e.staged, e.path))
    assert got == want
    assert e.records == rw.records_read == sum(f.records for f in inputs) == sum(got.values())
    assert rw.inputs == tuple(inputs)
    return got


def _snapshot(table: Table, files) -> dict[str, bytes]:
    return {f.path: table.storage.read(f.path) for f in files}


# -- group ---------------------------------------------------------------------------------------------
def _e(name: str, size: int, part: str = "2020062401", kind: str = "data") -> FileEntry:
    d = "_tributary/dead_letter" if kind != "data" else f"2020_06_24/{part[-2:]}"
    return FileEntry(f"{d}/{name}", size, 1, {} if kind != "data" else {"dt": part}, kind=kind)


def test_group_keeps_the_given_order_and_closes_a_group_before_it_would_pass_the_target():
    files = [_e("a", 40), _e("b", 40), _e("c", 20), _e("d", 30), _e("e", 80), _e("f", 10)]
    got = group(files, target_size=100, min_files=2)
    # a+b+c = 100 fits exactly; d would make 130: closes; d+e = 110 > 100: d alone (dropped); e+f = 90.
    assert [[f.path[-1] for f in g] for g in got] == [["a", "b", "c"], ["e", "f"]]


def test_group_leaves_big_files_and_dead_letters_alone_and_needs_min_files():
    big, dl = _e("big", 100), _e("dl", 5, kind=KIND_DEAD_LETTER)
    files = [_e("a", 10), big, dl, _e("b", 10), _e("c", 10)]
    got = group(files, target_size=100, min_files=3)
    assert got == [(files[0], files[3], files[4])]  # a file at the target is never rewritten
    assert group(files, target_size=100, min_files=4) == []  # three candidates: fewer than asked for
    assert group([_e("a", 10), big], target_size=100, min_files=0) == []  # a group of one is no merge
    assert group([], target_size=100, min_files=0) == []


def test_group_refuses_several_partitions_duplicates_and_nonsense_sizes():
    with pytest.raises(InvalidInputError, match="different partitions"):
        group([_e("a", 1), _e("b", 1, part="2020062402")], target_size=10, min_files=2)
    with pytest.raises(InvalidInputError, match="listed twice"):
        group([_e("a", 1), _e("a", 1)], target_size=10, min_files=2)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(InvalidInputError):
            group([_e("a", 1)], target_size=bad, min_files=2)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        group([_e("a", 1)], target_size=10, min_files=-1)


# -- every format and compression ------------------------------------------------------------------------
@pytest.mark.parametrize("fmt,compression", COMBOS, ids=[f"{f}-{c}" for f, c in COMBOS])
def test_rewrite_keeps_every_record_in_every_format_and_compression(tmp_path, fmt, compression):
    root = tmp_path / "t"
    table = _create(root, fmt, compression)
    _ingest(root, _source(tmp_path / "src", fmt, N), fmt)
    files = _biggest(table)
    assert len(files) >= 5
    before = _snapshot(table, files)
    groups = group(files, target_size=1 << 30, min_files=2)
    assert groups == [tuple(files)]
    rw = rewrite(table, groups[0], writer_id=new_writer_id())
    got = _check(table, rw, files)
    assert _snapshot(table, files) == before, "the inputs are only read"
    # A directory reader sees the inputs and never the output too, until the commit renames it.
    visible = {f.path for f in table.storage.list(posixpath.dirname(files[0].path)) if is_visible(f.path)}
    assert visible == {f.path for f in files}
    if fmt == "parquet":
        pf = pq.ParquetFile(io.BytesIO(table.storage.read(rw.entry.staged)))
        codec = pf.metadata.row_group(0).column(0).compression.lower()
        assert codec == ("uncompressed" if compression == "none" else compression)
        assert pf.metadata.num_row_groups == 1, "small inputs' row groups are merged into the writer's"
    roll_forward(table, [rw.entry])  # what follows the replace commit
    assert not table.storage.exists(rw.entry.staged)
    assert Counter(_records(table, rw.entry.path)) == got


def test_a_direct_protocol_table_still_gets_a_staged_output(tmp_path):
    root = tmp_path / "t"
    table = _create(root, "jsonl", "gzip", "--protocol", "direct")
    _ingest(root, _source(tmp_path / "src", "jsonl", N), "jsonl")
    files = _biggest(table)
    assert all(f.staged is None for f in files)
    rw = rewrite(table, files, writer_id=new_writer_id(), seq=7)
    assert rw.entry.path.endswith("-000007.jsonl.gz") and rw.entry.staged.endswith("-000007.jsonl.gz.inprogress")
    _check(table, rw, files)


def test_an_input_committed_but_not_yet_renamed_is_rolled_forward_and_read(tmp_path):
    root = tmp_path / "t"
    table = _create(root, "jsonl", "none")
    _ingest(root, _source(tmp_path / "src", "jsonl", N), "jsonl")
    files = _biggest(table)
    table.storage.rename(files[1].path, files[1].staged)  # a crash between the commit and its renames
    rw = rewrite(table, files, writer_id=new_writer_id())
    assert table.storage.exists(files[1].path) and not table.storage.exists(files[1].staged)
    _check(table, rw, files)


# -- csv headers and last lines ---------------------------------------------------------------------------
def test_csv_has_no_header_so_every_first_line_stays_one_record(tmp_path):
    """trib's csv files hold records only: a header line of the source is a bad record (a dead letter),
    and the first line of each committed file is data, copied once, never dropped as a header."""
    root = tmp_path / "t"
    table = _create(root, "csv", "gzip")
    src = tmp_path / "src.csv"
    src.write_text("id,ts,msg\n" + _source(tmp_path / "body", "csv", N).read_text())
    _ingest(root, src, "csv")
    dead = [f for c in (table.log.read_commit(v) for v in range(1, table.log.latest_version() + 1))
            for f in (c.files if c else ()) if f.kind == KIND_DEAD_LETTER]
    assert sum(f.records for f in dead) == 1
    files = _biggest(table)
    firsts = Counter(_records(table, f.path)[0] for f in files)
    rw = rewrite(table, group(files, target_size=1 << 30, min_files=2)[0], writer_id=new_writer_id())
    got = _check(table, rw, files)
    assert b"id,ts,msg" not in got, "no header is added"
    assert all(got[line] == n for line, n in firsts.items()), "no first line is taken for a header"


def _commit_foreign(table: Table, files: dict[str, bytes], records: dict[str, int]) -> list[FileEntry]:
    """Files another engine wrote and committed (docs/manifest.md lets any writer append)."""
    entries = []
    for rel, data in files.items():
        table.storage.write(rel, data)
        entries.append(FileEntry(rel, len(data), records[rel], {"dt": "2020062401"}))
    table.log.commit(entries, writer="20200624010000-0badc0de")
    return entries


def _compress(data: bytes, compression: str) -> bytes:
    if compression == "none":
        return data
    out = pa.BufferOutputStream()
    with pa.CompressedOutputStream(out, compression) as c:
        c.write(data)
    return out.getvalue().to_pybytes()


@pytest.mark.parametrize("fmt", ["text", "jsonl", "csv"])
@pytest.mark.parametrize("compression", ["none", "gzip", "zstd"])
def test_a_last_line_without_a_newline_is_not_glued_to_the_next_file(tmp_path, fmt, compression):
    table = _create(tmp_path / "t", fmt, compression)
    ext = {"text": "txt", "jsonl": "jsonl", "csv": "csv"}[fmt] + {"none": "", "gzip": ".gz", "zstd": ".zst"}[
        compression]
    d = "2020_06_24/01"
    raw = {f"{d}/part-20200624010000-0badc0de-000001.{ext}": b'{"a":1}\n{"a":2}',  # no newline at the end
           f"{d}/part-20200624010000-0badc0de-000002.{ext}": b'{"a":3}\r\n\n{"a":4}\n',  # CRLF, an empty line
           f"{d}/part-20200624010000-0badc0de-000003.{ext}": b"",  # an empty file: no records
           f"{d}/part-20200624010000-0badc0de-000004.{ext}": b'{"a":5}'}
    counts = {k: n for k, n in zip(raw, (2, 3, 0, 1))}
    files = _commit_foreign(table, {k: _compress(v, compression) for k, v in raw.items()}, counts)
    rw = rewrite(table, files, writer_id=new_writer_id())
    _check(table, rw, files)
    assert _records(table, rw.entry.staged, rw.entry.path) == [b'{"a":1}', b'{"a":2}', b'{"a":3}\r', b"",
                                                              b'{"a":4}', b'{"a":5}']
    assert _decode(table.storage.read(rw.entry.staged), rw.entry.path).endswith(b'{"a":5}\n')


# -- Parquet schemas -------------------------------------------------------------------------------------
def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_parquet_inputs_with_evolved_schemas_merge_without_losing_a_column(tmp_path):
    root = tmp_path / "t"
    table = _create(root, "parquet", "snappy")
    ts = BASE_MS + 60_000
    _ingest(root, _jsonl(tmp_path / "a", [{"ts": ts + i, "id": i, "score": i, "gone_later": f"x{i}",
                                           "nested": {"a": i}} for i in range(20)]), "parquet", "one")
    _ingest(root, _jsonl(tmp_path / "b", [{"ts": ts + i, "id": 100 + i, "score": i + 0.5, "added": True,
                                           "nested": {"b": "y"}} for i in range(20)]), "parquet", "two")
    files = _biggest(table)
    schemas = [pq.ParquetFile(io.BytesIO(table.storage.read(f.path))).schema_arrow for f in files]
    assert {s.field("score").type for s in schemas} == {pa.int64(), pa.float64()}
    rw = rewrite(table, files, writer_id=new_writer_id())
    out = pq.read_table(io.BytesIO(table.storage.read(rw.entry.staged)))
    assert out.schema.names == ["ts", "id", "score", "gone_later", "nested", "added"]  # first-seen order
    assert out.schema.field("score").type == pa.float64()
    assert out.schema.field("nested").type == pa.struct([("a", pa.int64()), ("b", pa.string())])
    rows = {r["id"]: r for r in out.to_pylist()}
    assert len(rows) == 40 == rw.entry.records
    assert rows[3] == {"ts": ts + 3, "id": 3, "score": 3.0, "gone_later": "x3", "nested": {"a": 3, "b": None},
                       "added": None}
    assert rows[103] == {"ts": ts + 3, "id": 103, "score": 3.5, "gone_later": None,
                         "nested": {"a": None, "b": "y"}, "added": True}


def _parquet_entry(table: Table, rel: str, t: pa.Table) -> tuple[str, bytes]:
    buf = io.BytesIO()
    pq.write_table(t, buf)
    return rel, buf.getvalue()


@pytest.mark.parametrize("second,why", [
    (pa.table({"v": ["a string"]}), "no common schema"),
    (pa.table({"v": [0.5]}), "without loss"),  # 2**60 is exact as an integer, not as a double
])
def test_parquet_inputs_that_cannot_share_a_file_are_refused_and_nothing_is_left(tmp_path, second, why):
    table = _create(tmp_path / "t", "parquet", "snappy")
    d = "2020_06_24/01"
    first = dict([_parquet_entry(table, f"{d}/part-20200624010000-0badc0de-000001.parquet",
                                 pa.table({"v": [1, 2**60]}))])
    rel2, data2 = _parquet_entry(table, f"{d}/part-20200624010000-0badc0de-000002.parquet", second)
    files = _commit_foreign(table, {**first, rel2: data2}, {**{k: 2 for k in first}, rel2: 1})
    with pytest.raises(SchemaConflictError, match=why):
        rewrite(table, files, writer_id=new_writer_id())
    assert {f.path for f in table.storage.list(d)} == {f.path for f in files}


def test_merged_schema_loosens_nullability_only_where_inputs_disagree():
    a = pa.schema([pa.field("k", pa.int64(), False), pa.field("only_a", pa.int64(), False)])
    b = pa.schema([pa.field("k", pa.int64(), False), pa.field("s", pa.struct([pa.field("x", pa.int32(), False)]))])
    c = pa.schema([pa.field("k", pa.int64(), False), pa.field("s", pa.struct([pa.field("y", pa.string(), False)]))])
    m = merged_schema([a, b, c])
    assert not m.field("k").nullable, "every input has it, non-null: it stays required"
    assert m.field("only_a").nullable and m.field("s").nullable
    assert all(f.nullable for f in m.field("s").type)
    assert m.names == ["k", "only_a", "s"]


def test_merged_schema_keeps_schema_metadata_only_when_every_input_has_the_same():
    a = pa.schema([("k", pa.int64())], metadata={"org.apache.spark.sql.parquet.row.metadata": "k only"})
    b = pa.schema([("k", pa.int64()), ("v", pa.string())], metadata={"org.apache.spark.sql.parquet.row.metadata":
                                                                     "k and v"})
    assert merged_schema([a, b]).metadata is None
    assert merged_schema([a, a]).metadata == a.metadata


# -- inputs that do not match their commit -----------------------------------------------------------------
@pytest.mark.parametrize("fault", ["records", "grown", "missing", "corrupt"])
def test_an_input_that_does_not_match_its_commit_is_refused(tmp_path, fault):
    root = tmp_path / "t"
    table = _create(root, "jsonl", "gzip")
    _ingest(root, _source(tmp_path / "src", "jsonl", N), "jsonl")
    files = _biggest(table)
    victim = files[2]
    full = root / victim.path
    if fault == "records":
        files[2] = FileEntry(victim.path, victim.size, victim.records + 1, victim.partition, victim.staged)
    elif fault == "grown":  # appended after its commit: bytes no commit holds
        with open(full, "ab") as f:
            f.write(gzip.compress(b'{"late": 1}\n'))
    elif fault == "missing":
        full.unlink()
    else:  # same size, other bytes: the gzip stream no longer decodes
        data = bytearray(full.read_bytes())
        data[len(data) // 2:] = b"\0" * (len(data) - len(data) // 2)
        full.write_bytes(bytes(data))
    with pytest.raises(VerificationError):
        rewrite(table, files, writer_id=new_writer_id())
    left = {f.path for f in table.storage.list(posixpath.dirname(victim.path))}
    assert left == {f.path for f in files} - ({victim.path} if fault == "missing" else set())


def test_a_valid_length_sidecar_beside_a_committed_file_does_not_cut_it(tmp_path):
    """Manifest readers return a committed file whole at its committed size (sidecars cap listed files
    only), so the rewrite copies all of it: cutting it would drop records readers deliver today."""
    root = tmp_path / "t"
    table = _create(root, "jsonl", "none")
    _ingest(root, _source(tmp_path / "src", "jsonl", N), "jsonl")
    files = _biggest(table)
    d, name = posixpath.split(files[0].path)
    table.storage.write(f"{d}/_{name}.valid-length", b"10")
    _check(table, rewrite(table, files, writer_id=new_writer_id()), files)


# -- failing storage -------------------------------------------------------------------------------------
class _FullDisk(io.RawIOBase):
    """An output stream on a disk that fills up after ``room`` bytes: every later write fails with ENOSPC."""

    def __init__(self, inner, room: int):
        self.inner, self.room = inner, room

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        if len(b) > self.room:
            self.inner.write(bytes(b[: self.room]))
            self.room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(b)
        return self.inner.write(bytes(b))

    def tell(self) -> int:
        return self.inner.tell()

    def close(self) -> None:
        self.inner.close()
        super().close()


class FullDiskStorage(LocalStorage):
    """Local storage whose data files can take ``room`` bytes each before the disk is full."""

    def __init__(self, root: str, room: int, lying: bool = False):
        super().__init__(root)
        self.room, self.lying = room, lying

    def open_output(self, rel: str):
        raw = super().open_output(rel)
        if rel.startswith("_tributary/"):
            return raw
        return pa.PythonFile(_Lossy(raw, self.room) if self.lying else _FullDisk(raw, self.room), mode="w")


class _Lossy(_FullDisk):
    """A store that drops bytes past ``room`` and says nothing (a silent short write)."""

    def write(self, b) -> int:
        keep = bytes(b[: self.room])
        self.room -= len(keep)
        self.inner.write(keep)
        return len(b)


@pytest.mark.parametrize("fmt,compression", [("jsonl", "gzip"), ("csv", "none"), ("parquet", "snappy")])
def test_a_full_disk_mid_rewrite_deletes_the_partial_output_and_touches_no_input(tmp_path, fmt, compression):
    root = tmp_path / "t"
    table = _create(root, fmt, compression, "--roll-records", "2000")
    for k in range(3):  # three files in one hour, big enough that the output passes the room left
        src = tmp_path / f"src{k}"
        if fmt == "csv":
            src.write_text("".join(f"{k * 10_000 + i},{_iso(BASE_MS + i)},{os.urandom(64).hex()}\n"
                                   for i in range(1500)))
        else:
            _jsonl(src, [{"ts": BASE_MS + k * 1000 + i, "id": k * 10_000 + i, "pad": os.urandom(64).hex()}
                         for i in range(1500)])
        _ingest(root, src, fmt, f"app{k}")
    files = _biggest(table)
    assert len(files) == 3
    before = _snapshot(table, files)
    full = Table(FullDiskStorage(str(root), room=sum(f.size for f in files) // 2), table.config)
    with pytest.raises(StorageError, match="No space left") as err:
        rewrite(full, files, writer_id=new_writer_id())
    assert isinstance(err.value, TributaryError) and err.value.exit_code == 7
    d = posixpath.dirname(files[0].path)
    assert {f.path for f in table.storage.list(d)} == {f.path for f in files}, "the partial output is deleted"
    assert _snapshot(table, files) == before
    # The same rewrite on a disk with room succeeds: nothing of the failure is left in the way.
    _check(table, rewrite(table, files, writer_id=new_writer_id()), files)


@pytest.mark.parametrize("fmt,compression", [("jsonl", "none"), ("text", "gzip"), ("parquet", "zstd")])
def test_a_store_that_silently_loses_bytes_is_caught_by_reading_the_output_back(tmp_path, fmt, compression):
    root = tmp_path / "t"
    table = _create(root, fmt, compression)
    _ingest(root, _source(tmp_path / "src", fmt, N), fmt)
    files = _biggest(table)
    lossy = Table(FullDiskStorage(str(root), room=300, lying=True), table.config)  # far less than any output
    with pytest.raises(StorageError):
        rewrite(lossy, files, writer_id=new_writer_id())
    assert {f.path for f in table.storage.list(posixpath.dirname(files[0].path))} == {f.path for f in files}
    # Without the read-back the store's loss would have gone into a commit.
    blind = rewrite(lossy, files, writer_id=new_writer_id(), verify=False)
    assert blind.entry.size == 300 and blind.entry.records == sum(f.records for f in files)


class _Flipping(_FullDisk):
    """A store that changes one byte of what it is given (no newline: the line count may well stay)."""

    def write(self, b) -> int:
        b = bytearray(b)
        if self.room and len(b) > 40:
            b[20] ^= 0x01 if b[20] not in (0x0A, 0x0B) else 0x04
            self.room = 0
        self.inner.write(bytes(b))
        return len(b)


class FlippingStorage(LocalStorage):
    def open_output(self, rel: str):
        raw = super().open_output(rel)
        return raw if rel.startswith("_tributary/") else pa.PythonFile(_Flipping(raw, 1), mode="w")


@pytest.mark.parametrize("fmt,compression", [("jsonl", "none"), ("jsonl", "gzip")])
def test_a_store_that_changes_a_byte_of_a_line_output_is_caught_by_its_crc(tmp_path, fmt, compression):
    """A line output is checked by the CRC of the bytes written (not decoded again): a changed byte that
    keeps every line is caught as surely as a lost one."""
    root = tmp_path / "t"
    table = _create(root, fmt, compression)
    _ingest(root, _source(tmp_path / "src", fmt, N), fmt)
    files = _biggest(table)
    with pytest.raises(StorageError, match="other bytes than were written"):
        rewrite(Table(FlippingStorage(str(root)), table.config), files, writer_id=new_writer_id())
    assert {f.path for f in table.storage.list(posixpath.dirname(files[0].path))} == {f.path for f in files}
    _check(table, rewrite(table, files, writer_id=new_writer_id()), files)


# -- names, crash point, S3 ---------------------------------------------------------------------------------
def test_bad_groups_and_names_are_refused_before_anything_is_written(tmp_path):
    root = tmp_path / "t"
    table = _create(root, "jsonl", "none")
    _ingest(root, _source(tmp_path / "src", "jsonl", N), "jsonl")
    parts = list(_partitions(table).values())
    files = parts[0]
    wid = new_writer_id()
    rewrite(table, files[:2], writer_id=wid)
    listing = {f.path for f in table.storage.list()}
    for bad in (dict(group=files[2:4], writer_id=wid),  # the same name again: would overwrite
                dict(group=files[:2], writer_id="compact"),  # not a writer id `clean` recognises
                dict(group=files[:2], writer_id=new_writer_id(), seq=0),
                dict(group=[], writer_id=new_writer_id()),
                dict(group=[files[0], files[0]], writer_id=new_writer_id()),
                dict(group=[files[0], parts[1][0]], writer_id=new_writer_id()),
                dict(group=[FileEntry("_tributary/dead_letter/dl-x.jsonl", 1, 1, {}, kind=KIND_DEAD_LETTER)],
                     writer_id=new_writer_id())):
        with pytest.raises(InvalidInputError):
            rewrite(table, **bad)  # type: ignore[arg-type]
    assert {f.path for f in table.storage.list()} == listing


def test_a_kill_at_the_crash_point_leaves_only_a_hidden_orphan(tmp_path):
    root = tmp_path / "t"
    table = _create(root, "jsonl", "zstd")
    _ingest(root, _source(tmp_path / "src", "jsonl", N), "jsonl")
    files = _biggest(table)
    before = {f.path for f in table.storage.list()}
    code = ("import sys; from tributary_read.table.config import Table; from tributary_read.table.manifest import "
            "FileEntry; from tributary_read.write.rewrite import rewrite; import json; "
            "t = Table.load(sys.argv[1]); fs = [FileEntry.from_json(d) for d in json.loads(sys.argv[2])]; "
            "rewrite(t, fs, writer_id='20200624010000-0123abcd')")
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRIB_CRASH_AT": "compact.after_rewrite"}
    p = subprocess.run([sys.executable, "-c", code, str(root), json.dumps([f.to_json() for f in files])],
                       env=env, capture_output=True, text=True)
    assert p.returncode == -9, p.stderr
    new = {f.path for f in table.storage.list()} - before
    assert len(new) == 1
    (orphan,) = new
    assert not is_visible(orphan) and WRITTEN_NAME.match(posixpath.basename(orphan))
    assert all(table.storage.exists(f.path) for f in files)
    invoke_trib("clean", root, "--older-than", "0s", check=True)  # never committed: clean knows it for trib's
    assert {f.path for f in table.storage.list()} == before


def test_rewrite_on_s3(s3_root, tmp_path):
    table = _create(s3_root, "parquet", "snappy")
    _ingest(s3_root, _source(tmp_path / "src", "parquet", N), "parquet")
    _ingest(s3_root, _jsonl(tmp_path / "more", [{"ts": BASE_MS + i, "id": 1000 + i, "extra": "e"}
                                                for i in range(30)]), "parquet", "more")
    files = _biggest(table)
    rw = rewrite(table, group(files, target_size=1 << 30, min_files=2)[0], writer_id=new_writer_id())
    _check(table, rw, files)
    roll_forward(table, [rw.entry])
    assert table.storage.exists(rw.entry.path) and not table.storage.exists(rw.entry.staged)


def test_rewrite_on_s3_line_format(s3_root, tmp_path):
    table = _create(s3_root, "csv", "gzip")
    _ingest(s3_root, _source(tmp_path / "src", "csv", N), "csv")
    files = _biggest(table)
    _check(table, rewrite(table, files, writer_id=new_writer_id()), files)
