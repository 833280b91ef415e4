"""A Parquet or jsonl table's lines parsed in bulk (write.json_batch) give what record-by-record admission gives.

The bulk parse is a shortcut that must never decide anything: for each seed, the
same lines go into two tables, one line at a time (``LineRecords.take``) and in
runs of random lengths (``take_many``); every partition must then hold the same
files with the same schemas (column order and types) and the same rows in the
same order, and the dead letters must be the same. The lines mix what makes the
two paths differ if anything can: absent and null fields, integers and doubles
around 2**53 and 2**63, strings Arrow reads as timestamps, objects (empty too)
and arrays, non-objects, blank and broken lines, two objects on a line,
duplicate keys, a BOM, lone surrogates, bad and out-of-range times, a line break
inside a value, nesting deeper than ``json.loads`` takes, rows of many partitions in
one run, and rolls by record count.
"""

from __future__ import annotations

import gzip
import json
import random

import pyarrow.parquet as pq
import pytest
from helpers import LAYOUT, PARTITION

from tributary_read.table.config import RollPolicy, Table, TableConfig
from tributary_read.table.layout import Layout
from tributary_read.table.manifest import KIND_DEAD_LETTER
from tributary_read.write.ingest import TimeSpec
from tributary_read.write.lines import BadRecordLimit, LineRecords, OnBadRecord
from tributary_read.write.writer import TableWriter

pytestmark = pytest.mark.unit

T0 = 1_592_960_400_000  # 2020-06-24T01:00:00Z
HOUR = 3_600_000


def _iso(ms: int) -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


class Lines:
    """Log lines of one source: mostly alike (as a real log is), with odd ones at a given rate."""

    def __init__(self, seed: int, odd: float, hours: int):
        self.r = random.Random(seed)
        self.odd, self.hours = odd, hours
        self.iso = seed % 3 != 0  # a source writes its times one way: ISO strings, or epoch ms
        self.i = 0

    def _time(self):
        r = self.r
        ms = T0 + (self.i * 997) % (self.hours * HOUR)
        if r.random() >= self.odd:
            return _iso(ms) if self.iso else ms
        return r.choice([f"{_iso(ms)[:19]}Z", _iso(ms)[:10], None, "soon", 12, ms / 1, True,
                         "0000-01-01T00:00:00Z", "9999-12-31T23:59:59Z"])

    def _value(self, depth: int = 0):
        r = self.r
        k = r.randrange(14 if depth < 2 else 12)
        if k == 12:
            return {"a": self._value(depth + 1), "b": self._value(depth + 1)}
        if k == 13:
            return [self._value(depth + 1) for _ in range(r.randrange(3))]
        return [None, True, r.randrange(-5, 5), r.random() * 100, 2**53 + r.randrange(3), -(2**53) - 1,
                2**63 + 5, f"s{r.randrange(9)}", "2021-03-04", "2021-03-04 05:06:07", {}, []][k]

    def line(self) -> bytes:
        r = self.r
        self.i += 1
        doc: dict = {"ts": self._time(), "level": r.choice(["INFO", "WARN"]), "n": r.randrange(100),
                     "ms": r.choice([1.5, 2.25, 3]), "day": "2021-03-04"}
        if r.random() < 0.3:
            doc["user"] = {"id": r.randrange(9), "tags": ["x", "y"][: r.randrange(3)]}
        if r.random() < 0.2:
            del doc["day"]
        if r.random() < 0.1:
            doc = {"n": doc.pop("n"), **doc}  # another field order
        if r.random() >= self.odd:
            return json.dumps(doc, separators=(",", ":")).encode()
        kind = r.randrange(16)
        if kind == 0:
            doc[r.choice(["x", "y", "n", "ms", "level", "user", "day"])] = self._value()
            return json.dumps(doc).encode()
        if kind == 1:
            doc.pop("ts")
            return json.dumps(doc).encode()
        return [b"", b"   ", b"5", b"null", b"[1,2]", b"{not json", b'{"ts":1,"ts":2}',
                json.dumps(doc).encode() + b" " + json.dumps(doc).encode(), b"\xef\xbb\xbf" + json.dumps(doc).encode(),
                b'{"ts":"%s","s":"\\ud800"}' % _iso(T0).encode(), b'{"ts":"%s","s":"\xff"}' % _iso(T0).encode(),
                b'{"ts":"%s","s":"\xed\xa0\x80"}' % _iso(T0).encode(),
                b'{"ts":"%s","n":1e400}' % _iso(T0).encode(), b'{"ts":"%s",\r"n":1}' % _iso(T0).encode(),
                b'{"ts":"%s","n":%s%s}' % (_iso(T0).encode(), b"[" * 1200, b"]" * 1200)][kind - 2]


def _table(root, fmt: str = "parquet") -> Table:
    return Table.create(str(root), TableConfig(Layout(LAYOUT, PARTITION), format=fmt,
                                               compression="snappy" if fmt == "parquet" else "gzip"))


def _records(table: Table, roll: RollPolicy | None = None) -> tuple[TableWriter, LineRecords]:
    """A writer on ``table`` and the line records of ingest feeding it (time field ``ts``, bad lines dead-lettered)."""
    writer = TableWriter(table, roll=roll, writer_id="w")
    spec = TimeSpec(field="ts")
    return writer, LineRecords(table, writer, spec.extractor(table.layout.tz), True, OnBadRecord.DEAD_LETTER,
                               BadRecordLimit(None, "src"), field_time=spec.field_time(table.layout.tz))


def _write(root, lines: list[bytes], bulk: bool, seed: int, roll: RollPolicy | None, fmt: str = "parquet") -> int:
    table = _table(root, fmt)
    writer, records = _records(table, roll)
    r = random.Random(seed)
    i = 0
    while i < len(lines):
        k = min(len(lines), i + r.choice([1, 10, 64, 200, 1000, 3000]))
        if bulk:
            records.take_many(lines[i:k], i, "src")
        else:
            for j in range(i, k):
                records.take(lines[j], j, "src")
        i = k
        if r.random() < 0.2:
            writer.commit()
    writer.commit()
    return records.bulk


def _contents(root) -> tuple[dict, list]:
    """Per partition: each file's schema and rows, in the order the writer opened them; the dead letters."""
    state = Table.load(str(root)).log.state()
    parts: dict[str, list] = {}
    dead = []
    for f in sorted(state.files.values(), key=lambda f: f.path.rsplit("-", 1)[-1]):
        if f.kind == KIND_DEAD_LETTER:
            dead += (root / f.path).read_text().splitlines()
            continue
        if f.path.endswith(".parquet"):
            t = pq.read_table(root / f.path)
            got = (t.schema.to_string(show_schema_metadata=False), t.to_pylist())
        else:
            text = gzip.decompress((root / f.path).read_bytes())
            assert text.endswith(b"\n"), f.path
            got = ("lines", text[:-1].split(b"\n"))
        parts.setdefault(f.path.rsplit("/", 1)[0], []).append(got)
    return parts, sorted(dead)


@pytest.mark.parametrize("seed,odd,hours,roll,fmt", [
    (1, 0.0, 1, None, "parquet"), (2, 0.0, 6, None, "parquet"), (3, 0.002, 2, None, "parquet"),
    (4, 0.05, 3, None, "parquet"), (5, 0.3, 2, None, "parquet"), (6, 0.02, 2, 700, "parquet"),
    (7, 0.002, 40, None, "parquet"), (8, 0.001, 1, 5000, "parquet"), (9, 0.01, 2, None, "parquet"),
    (2, 0.0, 6, None, "jsonl"), (3, 0.002, 40, None, "jsonl"), (6, 0.002, 2, 700, "jsonl"),
    (10, 0.05, 3, None, "jsonl")])
def test_bulk_and_one_by_one_write_the_same_files_rows_and_dead_letters(tmp_path, seed, odd, hours, roll, fmt):
    src = Lines(seed, odd, hours)
    lines = [src.line() for _ in range(12_000)]
    policy = RollPolicy(max_records=roll) if roll else None
    _write(tmp_path / "one", lines, bulk=False, seed=seed, roll=policy, fmt=fmt)
    taken = _write(tmp_path / "bulk", lines, bulk=True, seed=seed, roll=policy, fmt=fmt)
    if odd <= 0.002:  # more, and most runs are cut near their start, or (Parquet) conflict: one by one
        assert taken > len(lines) / 3, "the bulk path was hardly taken: this compares nothing"
    one, one_dead = _contents(tmp_path / "one")
    bulk, bulk_dead = _contents(tmp_path / "bulk")
    assert one_dead == bulk_dead
    assert sorted(one) == sorted(bulk)
    for part in one:
        assert [s for s, _ in one[part]] == [s for s, _ in bulk[part]], part
        assert [rows for _, rows in one[part]] == [rows for _, rows in bulk[part]], part
    assert sum(len(rows) for files in one.values() for _, rows in files) + len(one_dead) == len(lines)


def test_clean_jsonl_lines_are_written_in_bulk(tmp_path):
    """A jsonl table's run of ordinary lines is written as one block per file, the lines as they are."""
    table = _table(tmp_path / "t", "jsonl")
    writer, records = _records(table)
    src = Lines(2, 0.0, 3)
    lines = [src.line() for _ in range(5000)]
    assert records.batch is not None and records.batch.write(lines, 64) == (len(lines), 0)
    writer.commit()
    parts, dead = _contents(tmp_path / "t")
    assert not dead and sorted(x for files in parts.values() for _, got in files for x in got) == sorted(lines)


def test_clean_lines_are_parsed_in_bulk(tmp_path):
    """The shortcut is taken at all: a run of ordinary lines writes no dict row."""
    table = _table(tmp_path / "t")
    writer, records = _records(table)
    src = Lines(9, 0.0, 3)
    lines = [src.line() for _ in range(5000)]
    assert records.batch is not None and records.batch.write(lines, 64) == (len(lines), 0)
    assert all(not f.sink._rows for f in writer._open.values())
    writer.commit()
