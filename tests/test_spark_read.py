"""read_files: Spark reads exactly a FileSet's files, with the layout's partition columns.

Real Spark (the session's ``spark`` fixture), real trib tables and plain
directories, the session's Hive services for bound reads. Data is tiny: each
test costs a few Spark jobs.
"""

from __future__ import annotations

import gzip
import json
import os

import pytest

from tributary_read.errors import InvalidInputError
from tributary_read.read.resolve import resolve
from tributary_read.spark.read import read_files
from tributary_read.table.config import Table, TableConfig
from tributary_read.table.layout import Layout
from tributary_read.write.writer import TableWriter

pytestmark = pytest.mark.integration

HOUR = 3_600_000
T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z
HOURLY = Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")
TWO_KEYS = Layout("dt={yyyy}{MM}{dd}/hr={HH}", "dt={yyyy}{MM}{dd},hr={HH}")


def _table(tmp_path, name="t", fmt="jsonl", compression="none", layout=HOURLY) -> Table:
    return Table.create(str(tmp_path / name), TableConfig(layout, format=fmt, compression=compression))


def _write(table: Table, rows: list[dict]) -> None:
    w = TableWriter(table)
    for r in rows:
        if table.config.format == "parquet":
            w.write(r, r["ts"])
        elif table.config.format == "csv":
            w.write(f"{r['id']},{r['ts']},{r['msg']}".encode(), r["ts"])
        elif table.config.format == "text":
            w.write(r["msg"].encode(), r["ts"])
        else:
            w.write(json.dumps(r).encode(), r["ts"])
    w.commit()


def _rows(n: int, hours: int = 2) -> list[dict]:
    return [{"id": i, "ts": T0 + (i % hours) * HOUR + i, "msg": f"m{i}"} for i in range(n)]


def _put(path, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


# -- exact files and partition columns ----------------------------------------------
def test_a_hidden_name_is_refused_not_read_as_empty(spark, tmp_path):
    """Spark reads an explicit path named .x or _x as no rows: a committed file still under its
    staged name (a store trib could not rename in) would vanish from the result with exit 0."""
    from dataclasses import replace

    from tributary_read.errors import UnreadableInputError

    t = Table.create(str(tmp_path / "t"), TableConfig(HOURLY, tracking="manifest"))
    _write(t, _rows(4))
    fs = resolve(t)
    f = fs.files[0]
    hidden = f.path.rsplit("/", 1)[0] + "/." + f.path.rsplit("/", 1)[1] + ".inprogress"
    os.rename(str(tmp_path / "t" / f.path), str(tmp_path / "t" / hidden))
    assert spark.read.text(str(tmp_path / "t" / hidden)).count() == 0  # what Spark would do
    with pytest.raises(UnreadableInputError, match="starts with '.' or '_'"):
        read_files(spark, replace(fs, files=(replace(f, path=hidden), *fs.files[1:])))

def test_reads_exactly_the_fileset_with_hourly_partition_column(spark, tmp_path):
    t = Table.create(str(tmp_path / "t"), TableConfig(HOURLY, tracking="manifest"))
    _write(t, _rows(6))
    # A foreign file in a partition directory: not in the manifest, so not in the FileSet
    # (a manifest-only read of it must be asked for: allow_untracked).
    _put(str(tmp_path / "t/2024_01_01/00/foreign.jsonl"), b'{"id": 100, "ts": 0, "msg": "foreign"}\n')
    fs = resolve(t, allow_untracked=True)
    assert fs.layout == HOURLY and len(fs.files) == 2 and fs.untracked.count == 1
    df = read_files(spark, fs)
    # Written after resolution, into a directory the FileSet reads: not read either.
    _put(str(tmp_path / "t/2024_01_01/01/late.jsonl"), b'{"id": 101, "ts": 0, "msg": "late"}\n')
    assert df.columns == ["id", "msg", "ts", "dt"]
    got = sorted((r.id, r.msg, r.dt) for r in df.collect())
    assert got == [(i, f"m{i}", "202401010" + str(i % 2)) for i in range(6)]


def test_two_key_layout_odd_file_names_and_globs_in_a_plain_directory(spark, tmp_path):
    root = tmp_path / "plain dir"  # the root may hold a space: only the layout's directories are parsed
    names = {"a b.txt": b"space\n", "p*.txt": b"star\n", "q[1].txt": b"bracket\n", "r%20s.txt": b"percent\n"}
    for n, data in names.items():
        _put(str(root / "dt=20240101/hr=05" / n), data)
    _put(str(root / "dt=20240102/hr=23/x.txt"), b"x1\nx2\n")
    fs = resolve(str(root), layout=TWO_KEYS)
    assert fs.format is None and len(fs.files) == 5
    # Created after resolution: a glob "p*.txt" would match it, the escaped path does not.
    _put(str(root / "dt=20240101/hr=05/pp.txt"), b"glob\n")
    _put(str(root / "dt=20240101/hr=05/q1.txt"), b"glob\n")
    df = read_files(spark, fs, options={"format": "text"})
    assert df.columns == ["value", "dt", "hr"]
    got = sorted(tuple(r) for r in df.collect())
    assert got == sorted([("space", "20240101", "05"), ("star", "20240101", "05"),
                          ("bracket", "20240101", "05"), ("percent", "20240101", "05"),
                          ("x1", "20240102", "23"), ("x2", "20240102", "23")])


@pytest.mark.parametrize("fmt,compression", [("text", "gzip"), ("text", "zstd"), ("csv", "none"),
                                              ("parquet", "zstd")])
def test_formats(spark, tmp_path, fmt, compression):
    t = _table(tmp_path, fmt=fmt, compression=compression)
    _write(t, _rows(4))
    fs = resolve(t)
    if fmt == "csv":
        df = read_files(spark, fs, schema="id bigint, ts bigint, msg string")
    else:
        df = read_files(spark, fs)
    got = sorted(r.asDict()["msg" if fmt != "text" else "value"] for r in df.collect())
    assert got == [f"m{i}" for i in range(4)]
    assert sorted({r.dt for r in df.collect()}) == ["2024010100", "2024010101"]


# -- valid lengths -----------------------------------------------------------------------
def _sidecar(path, length: int, flink: bool = True) -> None:
    d, name = os.path.split(path)
    body = str(length).encode()
    _put(os.path.join(d, f"_{name}.valid-length"), (len(body).to_bytes(2, "big") + body) if flink else body)


def test_valid_length_caps_never_show_the_bytes_past_it(spark, tmp_path):
    root = tmp_path / "flink"
    good = b"".join(json.dumps({"id": i, "msg": f"ok{i}"}).encode() + b"\n" for i in range(3))
    garbage = b'{"id": 666, "msg": "PAST"}\n{"id": 667, "extra": "PAST"}\ntorn{{'
    capped = str(root / "2024_01_01/05/part-0-0")
    _put(capped, good + garbage)
    _sidecar(capped, len(good))
    # A gzip file cut at a flushed member boundary, its garbage in a second member.
    zipped = str(root / "2024_01_01/06/part-1-0.gz")
    head = gzip.compress(b'{"id": 10, "msg": "gz"}\n')
    _put(zipped, head + gzip.compress(b'{"id": 668, "msg": "PAST"}\n'))
    _sidecar(zipped, len(head), flink=False)
    _put(str(root / "2024_01_01/06/part-2-0"), b'{"id": 20, "msg": "whole"}\n')
    fs = resolve(str(root), layout=HOURLY)
    assert sorted((f.path, f.valid_length) for f in fs.files)[:2] == [
        ("2024_01_01/05/part-0-0", len(good)), ("2024_01_01/06/part-1-0.gz", len(head))]

    df = read_files(spark, fs, options={"format": "jsonl"})
    rows = df.collect()
    assert "extra" not in df.columns  # not even a column inferred from the bytes past the length
    assert sorted((r.id, r.msg, r.dt) for r in rows) == [
        (0, "ok0", "2024010105"), (1, "ok1", "2024010105"), (2, "ok2", "2024010105"),
        (10, "gz", "2024010106"), (20, "whole", "2024010106")]
    # Text: the raw lines, the same cap.
    text = sorted(r.value for r in read_files(spark, fs, options={"format": "text"}).collect())
    assert not any("PAST" in v or "torn" in v for v in text) and len(text) == 5


def test_valid_length_with_a_schema_and_only_capped_files(spark, tmp_path):
    root = tmp_path / "capped"
    body = b"1,a\n2,b\n"
    path = str(root / "2024_01_01/07/f.csv")
    _put(path, body + b"3,PAST\n")
    _sidecar(path, len(body))
    fs = resolve(str(root), layout=HOURLY)
    df = read_files(spark, fs, schema="n int, s string", options={"format": "csv"})
    assert sorted(tuple(r) for r in df.collect()) == [(1, "a", "2024010107"), (2, "b", "2024010107")]


# -- Hive-bound reads --------------------------------------------------------------------
def test_hive_bound_read_takes_schema_delimiter_and_keys_from_the_table(spark, hs2_cursor, hive_services, tmp_path):
    root = tmp_path / "tsv"
    _put(str(root / "2024_01_01/05/a.txt"), b"1\tone\n2\t\\N\n")
    _put(str(root / "2024_01_01/06/b.txt"), b"3\tthree\n")
    fs = resolve(str(root), layout=HOURLY)
    hs2_cursor.execute("CREATE DATABASE IF NOT EXISTS trib_read")
    hs2_cursor.execute("DROP TABLE IF EXISTS trib_read.tsv")
    hs2_cursor.execute(
        "CREATE EXTERNAL TABLE trib_read.tsv (id INT, name STRING) PARTITIONED BY (dt STRING) "
        f"ROW FORMAT DELIMITED FIELDS TERMINATED BY '\\t' STORED AS TEXTFILE LOCATION 'file:{root}'")
    try:
        for metastore in (None, f"hs2://127.0.0.1:{hive_services.hs2_port}"):
            df = read_files(spark, fs, hive_table="trib_read.tsv", metastore=metastore)
            assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
                ("id", "int"), ("name", "string"), ("dt", "string")]
            assert sorted(tuple(r) for r in df.collect()) == [
                (1, "one", "2024010105"), (2, None, "2024010105"), (3, "three", "2024010106")]
        hs2_cursor.execute("DROP TABLE trib_read.tsv")
        hs2_cursor.execute("CREATE EXTERNAL TABLE trib_read.tsv (id INT, name STRING) PARTITIONED BY (day STRING) "
                           f"STORED AS PARQUET LOCATION 'file:{root}'")
        with pytest.raises(InvalidInputError, match="partitioned by \\(day\\)"):
            read_files(spark, fs, hive_table="trib_read.tsv")
    finally:
        hs2_cursor.execute("DROP TABLE IF EXISTS trib_read.tsv")


# -- empty and bad input -----------------------------------------------------------------
def test_empty_fileset_keeps_its_columns(spark, tmp_path):
    t = _table(tmp_path, fmt="text")
    fs = resolve(t)
    assert fs.files == ()
    df = read_files(spark, fs)
    assert df.columns == ["value", "dt"] and df.count() == 0
    j = resolve(_table(tmp_path, "j"))
    assert read_files(spark, j, schema="id bigint").columns == ["id", "dt"]
    with pytest.raises(InvalidInputError, match="no schema"):
        read_files(spark, j)


def test_bad_input_is_one_clear_error(spark, tmp_path):
    root = tmp_path / "plain"
    _put(str(root / "2024_01_01/05/a.parquet"), b"PAR1")
    fs = resolve(str(root), layout=HOURLY)
    with pytest.raises(InvalidInputError, match="plain directory.*format"):
        read_files(spark, fs)
    _sidecar(str(root / "2024_01_01/05/a.parquet"), 2)
    with pytest.raises(InvalidInputError, match="valid length"):
        read_files(spark, resolve(str(root), layout=HOURLY), options={"format": "parquet"})
    t = _table(tmp_path, "pq", fmt="parquet")
    with pytest.raises(InvalidInputError, match="disagrees"):
        read_files(spark, resolve(t), options={"format": "csv"})


# -- the pure parts: layout fields, DESCRIBE parsing, SerDe mapping ----------------------
@pytest.mark.parametrize("layout", [HOURLY, TWO_KEYS, Layout("{yyyy}/{MM}/{dd}/{yyyy}{MM}{dd}-{HH}",
                                                             "dt={yyyy}-{MM}-{dd},hr=h{HH}")])
def test_directory_fields_slice_what_parse_reads(layout):
    import re
    from datetime import datetime, timezone

    regex, offsets = layout.directory_fields
    d = layout.dir_for_datetime(datetime(2024, 3, 9, 7, tzinfo=timezone.utc))
    assert re.fullmatch(regex, d)
    values = {t: d[o:o + w] for t, (o, w) in offsets.items()}
    want = layout.parse(d).values
    got = {k: "".join(p if isinstance(p, str) else values[p[0]] for p in parts)
           for k, parts in layout.partition_parts.items()}
    assert got == want
    if "yyyy}/" in layout.directory:  # a repeated token must repeat its digits
        assert not re.fullmatch(regex, "2024/03/09/20250309-07")


def test_describe_keeps_whitespace_delimiters_and_partition_types():
    from tributary_read.hive.describe import parse_describe
    from tributary_read.spark.read_format import for_hive_table
    from tributary_read.hive.model import HiveTable, TableName

    spark_rows = [("id", "int", None), ("dt", "string", None), ("# Partition Information", "", ""),
                  ("# col_name", "data_type", "comment"), ("dt", "string", None), ("", "", ""),
                  ("# Detailed Table Information", "", ""),
                  ("Serde Library", "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe", ""),
                  ("InputFormat", "org.apache.hadoop.mapred.TextInputFormat", ""),
                  ("Storage Properties", "[serialization.format=\t, field.delim=\t]", ""),
                  ("Table Properties", "[skip.header.line.count=1]", "")]
    d = parse_describe(spark_rows)
    assert d.serde_params == {"serialization.format": "\t", "field.delim": "\t"}
    assert d.partition_columns == [("dt", "string")] and d.columns == [("id", "int")]
    hive_rows = [("id", "int", ""), ("# Detailed Table Information", None, None),
                 ("SerDe Library:", "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe", None),
                 ("Storage Desc Params:", None, None), ("", "field.delim", "  "), ("", "serialization.format", "1")]
    assert parse_describe(hive_rows).serde_params == {"field.delim": " ", "serialization.format": "1"}
    info = HiveTable(TableName("db", "t"), None, ("dt",), (("id", "int"), ("name", "varchar(10)")),
                     "org.apache.hadoop.mapred.TextInputFormat", "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe",
                     serde_params={"field.delim": "1"}, partition_columns=(("dt", "int"),))
    fmt = for_hive_table(info, "db.t")
    assert (fmt.spark_format, fmt.options["sep"], fmt.schema) == ("csv", "\x01", "`id` int, `name` string")
    assert fmt.partition_keys == ("dt",) and fmt.partition_types == {"dt": "int"}
