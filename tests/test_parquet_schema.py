"""Parquet tables keep every JSON field (docs/parquet.md), through ``trib ingest`` (run in this process).

Before: a file's schema came from its first record, so later fields were dropped
without a word, and a field that changed type failed every rerun (exit 3, no line).
"""

from __future__ import annotations

import json
import random
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import invoke_trib
from helpers import LAYOUT, PARTITION

from tributary_read.table.manifest import KIND_DATA, KIND_DEAD_LETTER
from tributary_read.table.config import Table

pytestmark = pytest.mark.unit

T0 = 1_592_960_400_000  # 2020-06-24T01:00:00Z


def _create(tmp_path):
    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION,
             "--format", "parquet", "--compression", "snappy", check=True)
    return root


def _source(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _ingest(root, src, *extra, check=True):
    return invoke_trib("ingest", str(root), "--source", src, "--app-id", "etl", "--time-field", "ts", "--json",
                    *extra, check=check)


def _committed(root, kind=KIND_DATA):
    return sorted((f for f in Table.load(str(root)).log.state().files.values() if f.kind == kind),
                  key=lambda f: f.path)


def _tables(root) -> list[pa.Table]:
    return [pq.read_table(root / f.path) for f in _committed(root)]


def _rows(root) -> list[dict]:
    return sorted((r for t in _tables(root) for r in t.to_pylist()), key=lambda r: r["id"])


def _dead_letters(root) -> list[dict]:
    return [json.loads(line) for f in _committed(root, KIND_DEAD_LETTER)
            for line in (root / f.path).read_text().splitlines()]


def test_a_field_missing_from_the_first_record_is_kept_with_nulls_before(tmp_path):
    root = _create(tmp_path)
    src = _source(tmp_path / "s.jsonl", [
        {"ts": T0, "id": 1},
        {"ts": T0 + 1, "id": 2, "amount": 99.5},
        {"ts": T0 + 2, "id": 3, "user": {"name": "ann"}},
        {"ts": T0 + 3, "id": 4, "user": {"age": 40}, "amount": 7},
    ])
    r = json.loads(_ingest(root, src).stdout)
    assert (r["records"], r["dead_letters"]) == (4, 0)
    [table] = _tables(root)
    assert table.schema.field("amount").type == pa.float64()  # 99.5 then 7: promoted, 7 kept as 7.0
    assert table.schema.field("user").type == pa.struct([("name", pa.string()), ("age", pa.int64())])
    assert _rows(root) == [
        {"ts": T0, "id": 1, "amount": None, "user": None},
        {"ts": T0 + 1, "id": 2, "amount": 99.5, "user": None},
        {"ts": T0 + 2, "id": 3, "amount": None, "user": {"name": "ann", "age": None}},
        {"ts": T0 + 3, "id": 4, "amount": 7.0, "user": {"name": None, "age": 40}},
    ]
    assert invoke_trib("verify", str(root)).returncode == 0


def test_an_integer_column_is_promoted_to_double(tmp_path):
    root = _create(tmp_path)
    src = _source(tmp_path / "s.jsonl", [
        {"ts": T0, "id": 1, "v": 1, "xs": [1, 2]},
        {"ts": T0, "id": 2, "v": 2.5, "xs": [0.5]},
        {"ts": T0, "id": 3, "v": -3, "xs": []},
    ])
    _ingest(root, src)
    [table] = _tables(root)
    assert table.schema.field("v").type == pa.float64()
    assert table.schema.field("xs").type == pa.list_(pa.float64())
    assert [(r["v"], r["xs"]) for r in _rows(root)] == [(1.0, [1.0, 2.0]), (2.5, [0.5]), (-3.0, [])]


def test_a_type_conflict_is_dead_lettered_with_its_offset_and_the_rest_is_kept(tmp_path):
    root = _create(tmp_path)
    records = [
        {"ts": T0, "id": 0, "v": 1},
        {"ts": T0, "id": 1, "v": "one"},  # a string in an integer column
        {"ts": T0, "id": 2, "v": 2, "flag": True},
        {"ts": T0, "id": 3, "v": 3, "flag": 1},  # an integer in a boolean column
        {"ts": T0, "id": 4, "v": 2**70},  # fits no Parquet integer
        {"ts": T0, "id": 5, "v": 5},
        {"ts": T0 + 5 * 3_600_000, "id": 6, "v": [1, "a"]},  # alone in its hour, and fits nothing
    ]
    src = _source(tmp_path / "s.jsonl", records)
    r = json.loads(_ingest(root, src, "--on-bad-record", "dead-letter").stdout)  # keep every bad one
    assert (r["records"], r["dead_letters"], r["last_offset"]) == (7, 4, 6)
    assert [row["id"] for row in _rows(root)] == [0, 2, 5]
    dead = _dead_letters(root)
    assert [(d["offset"], json.loads(d["line"])) for d in dead] == [(1, records[1]), (3, records[3]),
                                                                     (4, records[4]), (6, records[6])]
    assert "'v'" in dead[0]["reason"] and "string" in dead[0]["reason"]
    assert "'flag'" in dead[1]["reason"]
    assert "64 bits" in dead[2]["reason"]
    assert "mixing" in dead[3]["reason"]
    # The file opened for hour 06 took no record: it is neither committed nor left behind.
    assert [f.path.rsplit("/", 1)[0] for f in _committed(root)] == ["2020_06_24/01"]
    assert not (root / "2020_06_24" / "06").exists() or not any((root / "2020_06_24" / "06").iterdir())
    assert invoke_trib("verify", str(root)).returncode == 0
    again = json.loads(_ingest(root, src, "--on-bad-record", "dead-letter").stdout)  # a rerun: nothing left, no stall
    assert (again["records"], again["last_offset"]) == (0, 6)


def test_arrow_batches_add_fields_promote_and_roll_like_json_rows(tmp_path):
    """The library path (TableWriter.write_table) follows the same rules."""
    from tributary_read import TableWriter
    from tributary_read.errors import InvalidInputError

    root = _create(tmp_path)
    w = TableWriter(Table.load(str(root)))
    n = 70_000  # more than a row group: the file's schema is fixed after it
    w.write_table(pa.table({"ts": [T0 + i for i in range(n)], "id": list(range(n))}), "ts")
    w.write_table(pa.table({"ts": [T0 + n], "id": [n], "note": ["late"]}), "ts")
    w.write_table(pa.table({"ts": [T0 + n + 1], "id": [n + 1]}), "ts")
    other = T0 + 3_600_000  # another hour: no row group yet, so its schema widens in place
    w.write_table(pa.table({"ts": [other], "id": [0], "v": [1]}), "ts")
    w.write_table(pa.table({"ts": [other], "id": [1], "v": [1.5], "w": ["x"]}), "ts")
    with pytest.raises(InvalidInputError, match="schema"):
        w.write_table(pa.table({"ts": [other], "id": [2], "v": ["one"]}), "ts")
    files = sorted(w.commit().files, key=lambda f: f.path)
    got = {f.path: pq.read_table(root / f.path) for f in files}
    [a, b, c] = got.values()
    assert (a.num_rows, a.column_names) == (n, ["ts", "id"])
    assert b.column_names == ["ts", "id", "note"] and b.column("note").to_pylist() == ["late", None]
    assert c.schema.field("v").type == pa.float64()
    assert c.select(["v", "w"]).to_pylist() == [{"v": 1.0, "w": None}, {"v": 1.5, "w": "x"}]


def test_on_bad_record_fail_names_the_line_and_commits_nothing(tmp_path):
    root = _create(tmp_path)
    src = _source(tmp_path / "s.jsonl", [{"ts": T0, "id": 0, "v": 1}, {"ts": T0, "id": 1, "v": 2},
                                         {"ts": T0, "id": 2, "v": "two"}])
    p = _ingest(root, src, "--on-bad-record", "fail", check=False)
    assert p.returncode == 3, p.stderr
    assert "line 2" in p.stderr and "'v'" in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert _committed(root) == [] and Table.load(str(root)).log.latest_version() == 0


def test_reruns_never_stall_on_a_conflict_and_keep_every_record_once(tmp_path):
    """Fields appear, vanish and change type at random over 48 hours: every record
    ends up exactly once, in the data or (only if irreconcilable) in the dead letters."""
    rng = random.Random(8)
    root = _create(tmp_path)
    src = tmp_path / "s.jsonl"

    def record(i):
        r = {"ts": T0 + rng.randrange(48 * 3_600_000), "id": i}
        for name in ("a", "b", "c"):
            if rng.random() < 0.3:
                r[name] = rng.choice([1, 2.5, None, "x" if name == "c" else 3, {"k": i}])
        return r

    records = [record(i) for i in range(3000)]
    src.write_text("".join(json.dumps(r) + "\n" for r in records[:2000]))
    r1 = json.loads(_ingest(root, str(src), "--commit-every", "300", "--on-bad-record", "dead-letter").stdout)
    with open(src, "a") as f:  # the source grows; the next run resumes
        f.writelines(json.dumps(r) + "\n" for r in records[2000:])
    r2 = json.loads(_ingest(root, str(src), "--commit-every", "300", "--on-bad-record", "dead-letter").stdout)
    assert (r1["records"], r2["records"], r2["last_offset"]) == (2000, 1000, 2999)
    rows = _rows(root)
    dead = _dead_letters(root)
    assert r1["dead_letters"] + r2["dead_letters"] == len(dead) > 0
    ids = Counter([row["id"] for row in rows] + [json.loads(d["line"])["id"] for d in dead])
    assert ids == Counter(range(3000)), "every record exactly once, in the data or dead-lettered"
    for d in dead:  # offsets point at the very record
        assert json.loads(d["line"]) == records[d["offset"]]
    for row in rows:  # and every value of every stored record is there as written
        want = records[row["id"]]
        assert {k: v for k, v in row.items() if v is not None} == {
            k: (float(v) if isinstance(v, int) and isinstance(row[k], float) else v)
            for k, v in want.items() if v is not None}, (row, want)
    assert invoke_trib("verify", str(root)).returncode == 0


def test_a_new_field_after_a_written_row_group_rolls_to_a_new_file(tmp_path):
    """Parquet cannot add a column to a file whose first row group is written:
    the writer closes it and goes on in a new file that has the new field."""
    root = _create(tmp_path)
    n = 70_000  # more than a row group (65,536) in one file
    src = tmp_path / "s.jsonl"
    with open(src, "w") as f:
        f.writelines(f'{{"ts":{T0 + i},"id":{i}}}\n' for i in range(n))
        f.write(f'{{"ts":{T0 + n},"id":{n},"late":"here"}}\n')
        f.writelines(f'{{"ts":{T0 + i},"id":{i}}}\n' for i in range(n + 1, n + 10))
    _ingest(root, str(src), "--commit-every", "100000")
    files = _committed(root)
    assert [f.records for f in files] == [n, 10]
    first, second = (pq.ParquetFile(root / f.path) for f in files)
    assert first.metadata.num_row_groups == 2 and first.schema_arrow.names == ["ts", "id"]
    assert second.schema_arrow.names == ["ts", "id", "late"]
    assert second.read().column("late").to_pylist() == ["here"] + [None] * 9
    assert sorted(r["id"] for r in _rows(root)) == list(range(n + 10))


def test_write_table_routes_every_row_to_its_partition_across_offset_changes(tmp_path):
    """write_table maps runs of sorted minutes to partitions by their [start, end)
    interval: check it against Layout.for_time row by row where that is subtle
    (DST changes both ways, a half-hour zone, a 90-minute DST hour)."""
    from tributary_read import Layout, TableConfig, TableWriter

    rng = random.Random(3)
    cases = [("America/New_York", 1_604_209_000_000), ("America/New_York", 1_615_700_000_000),
             ("Asia/Kolkata", 1_592_960_400_000), ("Australia/Lord_Howe", 1_617_480_000_000)]
    for n, (zone, around) in enumerate(cases):
        layout = Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}", zone)
        table = Table.create(str(tmp_path / f"t{n}"), TableConfig(layout=layout, format="parquet"))
        ts = [around + rng.randrange(-6 * 3_600_000, 6 * 3_600_000) for _ in range(5000)]
        w = TableWriter(table)
        w.write_table(pa.table({"ts": ts, "i": list(range(len(ts)))}), "ts")
        got = {}
        for f in w.commit().files:
            for t in pq.read_table(tmp_path / f"t{n}" / f.path).column("ts").to_pylist():
                got[t] = f.path.rsplit("/", 1)[0]
        assert got == {t: layout.for_time(t).path for t in ts}, zone


def test_a_lone_surrogate_is_a_dead_letter_not_a_failed_file(tmp_path):
    """``"\\ud800"`` is valid JSON but no character, and json.loads also takes its UTF-8 form (bytes ED A0
    80): a Parquet string can hold neither. They used to be admitted, then fail the whole file at its
    encode, at every rerun. (A Hangul syllable also starts with byte ED: it is no dead letter.)"""
    root = _create(tmp_path)
    lines = [json.dumps({"id": i, "ts": T0 + i, "msg": "ok"}).encode() for i in range(300)]
    lines.insert(150, b'{"id": -1, "ts": %d, "msg": "half \\ud800 a pair"}' % T0)
    lines.insert(200, b'{"id": -2, "ts": %d, "msg": "half \xed\xa0\x80 a pair"}' % T0)
    lines.insert(250, json.dumps({"id": 9999, "ts": T0, "msg": "\ud55c"}, ensure_ascii=False).encode())
    src = tmp_path / "src.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    p = _ingest(root, str(src))
    assert json.loads(p.stdout)["dead_letters"] == 2
    assert [r["id"] for r in _rows(root)] == [*range(300), 9999]
    first, second = sorted(_dead_letters(root), key=lambda d: d["offset"])
    assert first["offset"] == 150 and "lone surrogate" in first["reason"] and "\\ud800" in first["line"]
    assert second["offset"] == 200 and "lone surrogate \\ud800" in second["reason"]
