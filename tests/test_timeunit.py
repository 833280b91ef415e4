"""Integer event times carry a unit (issue 19, item 4): ``trib ingest --time-unit`` and the Spark writer.

The trap: epoch seconds taken as milliseconds are a time in January 1970; every
record landed in a 1970 partition and the run exited 0. Now an integer time is
taken in its declared unit (undeclared: ms) and must be plausible (2000-01-01 ..
a day ahead of the clock); the refusal names the unit that fits. The ETL's own
regression (``trib etl run``) is in test_etl_cli.py.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone

import pytest

from conftest import invoke_trib
from helpers import one_line_error, snapshot
from tributary_read.table.config import Table, TableConfig
from tributary_read.table.layout import Layout

LAYOUT = Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")
H = 3_600_000
T0 = 1_704_067_200_000  # 2024-01-01T00:00Z
#: event times in ms: three hours of 2024-01-01, one of them with a sub-second part
TIMES = [T0 + 30_000, T0 + H + 1_234, T0 + 2 * H + 59 * 60_000 + 999]
SCALE = {"s": (1, 1000), "ms": (1, 1), "us": (1000, 1), "ns": (1_000_000, 1)}
Y1990_S = 631_152_000  # 1990-01-01T00:00Z in seconds


def _in(unit: str, ms: int) -> int:
    """``ms`` as an integer of ``unit`` (seconds drop the sub-second part)."""
    mul, div = SCALE[unit]
    return ms * mul // div


def _hours(unit: str) -> list[str]:
    return sorted(LAYOUT.for_time(_in(unit, ms) * SCALE[unit][1] // SCALE[unit][0]).path for ms in TIMES)


def _table(root, fmt="jsonl") -> Table:
    return Table.create(str(root), TableConfig(LAYOUT, format=fmt))


def _landed(root) -> dict[int, str]:
    """id -> partition directory of every committed record."""
    t = Table.load(str(root))
    out = {}
    for path, entry in t.log.state().files.items():
        if entry.kind != "data":
            continue
        for line in (root / path).read_text().splitlines():
            out[json.loads(line)["id"]] = path.rsplit("/", 1)[0]
    return out


def _ingest(root, src, *extra):
    return invoke_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts", "--json",
                       *extra)


def _source(path, values) -> str:
    path.write_text("".join(json.dumps({"id": i, "ts": v}) + "\n" for i, v in enumerate(values)))
    return str(path)


# -- trib ingest ------------------------------------------------------------------------------------
@pytest.mark.unit
def test_ingest_of_epoch_seconds_without_a_unit_is_refused_naming_time_unit_s(tmp_path):
    """The Why-3 trap through ``trib ingest``: refused, exit 3, nothing committed (not 1970, not dead letters
    with exit 0); with --time-unit s every record is in its hour."""
    root = tmp_path / "t"
    _table(root)
    src = _source(tmp_path / "s.jsonl", [_in("s", ms) for ms in TIMES])
    before = snapshot(root)
    one_line_error(_ingest(root, src), 3,
              "s.jsonl line 0: time field ts: 1704067230 as ms is 1970-01-20T17:21:07Z, before 2000-01-01; "
              "is it seconds? set --time-unit s")
    assert snapshot(root) == before  # no commit, no file, no dead letter
    doc = json.loads(_ingest(root, src, "--time-unit", "s").stdout)
    assert (doc["records"], doc["dead_letters"]) == (3, 0)
    assert sorted(_landed(root).values()) == _hours("s") == ["2024_01_01/00", "2024_01_01/01", "2024_01_01/02"]


@pytest.mark.unit
@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_ingest_places_each_unit_in_its_hour(tmp_path, unit):
    """Each unit, in a JSON number and in a regex-captured string (ns keeps every digit)."""
    root = tmp_path / "t"
    _table(root)
    values = [_in(unit, ms) for ms in TIMES]
    src = _source(tmp_path / "s.jsonl", values)
    doc = json.loads(_ingest(root, src, "--time-unit", unit).stdout)
    assert (doc["records"], doc["dead_letters"]) == (3, 0)
    assert _landed(root) == dict(enumerate(LAYOUT.for_time(v * SCALE[unit][1] // SCALE[unit][0]).path
                                           for v in values))
    text = tmp_path / "t2"
    Table.create(str(text), TableConfig(LAYOUT, format="text"))
    log = tmp_path / "app.log"
    log.write_text("".join(f"{v} GET /\n" for v in values))
    invoke_trib("ingest", str(text), "--source", str(log), "--app-id", "a", "--time-regex", r"^(\d+) ",
                "--time-unit", unit, check=True)
    got = sorted(p.rsplit("/", 1)[0] for p in Table.load(str(text)).log.state().files)
    assert got == _hours(unit)
    if unit == "ms":  # the default unit: the same records need no flag
        other = tmp_path / "t3"
        _table(other)
        json.loads(_ingest(other, src).stdout)
        assert _landed(other) == _landed(root)


@pytest.mark.unit
@pytest.mark.parametrize("unit, value, fits", [
    ("ms", _in("us", T0), "microseconds? set --time-unit us"),
    ("ms", _in("ns", T0), "nanoseconds? set --time-unit ns"),
    ("s", T0, "milliseconds? set --time-unit ms"),
])
def test_ingest_refusals_name_the_unit_that_fits(tmp_path, unit, value, fits):
    """No unit: the run stops (the job is wrong). A declared unit: the record is bad, and follows
    --on-bad-record (a run over the bad-record limit fails, exit 3: here --max-bad-fraction 0, since by
    default a run may keep a few; kept as a dead letter with an explicit dead-letter; exit 3 with fail);
    every way the message names the unit."""
    root = tmp_path / "t"
    _table(root)
    src = _source(tmp_path / "s.jsonl", [T0 if unit == "ms" else T0 // 1000, value])
    if unit == "ms":
        before = snapshot(root)
        line = one_line_error(_ingest(root, src), 3, "s.jsonl line 1: time field ts:", "more than a day ahead", fits)
        assert "as ms is beyond year 9999" in line
        assert snapshot(root) == before
    before = snapshot(root)
    one_line_error(_ingest(root, src, "--time-unit", unit, "--max-bad-fraction", "0"), 3, "1 of 2 records",
                   "line 1:", fits, "--max-bad-fraction")
    assert snapshot(root) == before
    doc = json.loads(_ingest(root, src, "--time-unit", unit, "--on-bad-record", "dead-letter").stdout)
    assert (doc["records"], doc["dead_letters"]) == (2, 1) and list(_landed(root)) == [0]
    (dead,) = [json.loads(x) for f in (root / "_tributary/dead_letter").glob("*.jsonl")
               for x in f.read_text().splitlines()]
    assert dead["offset"] == 1 and fits in dead["reason"] and f"as {unit} is" in dead["reason"]
    again = tmp_path / "t2"
    _table(again)
    one_line_error(_ingest(again, src, "--time-unit", unit, "--on-bad-record", "fail"), 3, "s.jsonl line 1:", fits)


@pytest.mark.unit
def test_ingest_plausibility_bounds_and_allow_any_time(tmp_path):
    """Before 2000-01-01 and more than a day ahead are refused; --allow-any-time (with a unit) admits 1990
    and the far future; without --time-unit it is refused up front."""
    root = tmp_path / "t"
    _table(root)
    now_s = int(time.time())
    values = [Y1990_S, 946_684_800 - 1, 946_684_800, now_s + 23 * 3600, now_s + 25 * 3600]
    src = _source(tmp_path / "s.jsonl", values)
    doc = json.loads(_ingest(root, src, "--time-unit", "s", "--on-bad-record", "dead-letter").stdout)
    assert (doc["records"], doc["dead_letters"]) == (5, 3)
    assert sorted(_landed(root)) == [2, 3]  # 2000-01-01T00:00:00Z itself, and 23 h ahead
    reasons = [json.loads(x)["reason"] for f in (root / "_tributary/dead_letter").glob("*.jsonl")
               for x in f.read_text().splitlines()]
    assert sum("1990-01-01T00:00:00Z, before 2000-01-01" in r for r in reasons) == 1
    assert sum("1999-12-31T23:59:59Z, before 2000-01-01" in r for r in reasons) == 1
    assert sum("more than a day ahead of the clock" in r for r in reasons) == 1
    assert all("set --allow-any-time" in r for r in reasons)

    old = tmp_path / "old"
    _table(old)
    one_line_error(_ingest(old, src, "--allow-any-time"), 3, "--allow-any-time needs the unit of integer times",
              "--time-unit")
    doc = json.loads(_ingest(old, src, "--allow-any-time", "--time-unit", "s").stdout)
    assert (doc["records"], doc["dead_letters"]) == (5, 0)
    landed = _landed(old)
    assert landed[0] == "1990_01_01/00" and landed[1] == "1999_12_31/23"
    assert landed[4] == datetime.fromtimestamp(values[4], timezone.utc).strftime("%Y_%m_%d/%H")


@pytest.mark.unit
def test_iso_strings_and_time_format_need_no_unit(tmp_path):
    root = tmp_path / "t"
    _table(root)
    src = _source(tmp_path / "s.jsonl", ["1990-01-01T00:30:00Z", "2024-01-01T01:00:00+00:00"])
    doc = json.loads(_ingest(root, src).stdout)
    assert doc["dead_letters"] == 0 and _landed(root) == {0: "1990_01_01/00", 1: "2024_01_01/01"}


# -- the one owner ------------------------------------------------------------------------------------
@pytest.mark.unit
def test_every_front_end_converts_through_the_one_owner():
    """No writing front end (ingest, the Spark writer, the ETL, the CLI) guesses a unit from a number's size
    or decides plausibility on its own."""
    import tributary_read

    base = os.path.dirname(tributary_read.__file__)
    for sub in ("write", "spark", "etl", "cli"):
        for d, _, names in os.walk(os.path.join(base, sub)):
            for n in names:
                if n.endswith(".py"):
                    text = open(os.path.join(d, n), encoding="utf-8").read()
                    assert "946_684_800" not in text and "1e11" not in text and "86_400_000" not in text, n
    import importlib

    mods = ("tributary_read.spark.write", "tributary_read.write.ingest", "tributary_read.write.writer",
            "tributary_read.etl.job")
    src = " ".join(open(importlib.import_module(m).__file__, encoding="utf-8").read() for m in mods)
    assert "IntegerTimes" in src and "epoch_ms" in src


# -- the Spark writer -------------------------------------------------------------------------------
def _frame(spark, unit: str, values):
    from pyspark.sql import functions as F

    rows = [(i, v) for i, v in enumerate(values)]
    return spark.createDataFrame(rows, "id long, ts long").repartition(2).withColumn("msg", F.lit("x"))


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_spark_write_places_each_unit_in_its_hour(spark, tmp_path, fmt):
    import pyarrow.parquet as pq

    from tributary_read.spark.write import write

    for unit in ("s", "ms", "us", "ns"):
        table = _table(tmp_path / f"{fmt}_{unit}", fmt)
        values = [_in(unit, ms) for ms in TIMES]
        r = write(_frame(spark, unit, values), table, time_column="ts", time_unit=unit)
        assert r.records == 3 and list(r.partitions) == _hours(unit), unit
        landed = {}
        for f in r.files:
            p = table.storage.abspath(f.path)
            ids = (pq.read_table(p).column("id").to_pylist() if fmt == "parquet"
                   else [json.loads(x)["id"] for x in open(p).read().splitlines()])
            landed.update({i: f.path.rsplit("/", 1)[0] for i in ids})
        assert landed == {i: LAYOUT.for_time(v * SCALE[unit][1] // SCALE[unit][0]).path
                          for i, v in enumerate(values)}, unit


def test_spark_write_refuses_implausible_integers_and_commits_nothing(spark, tmp_path):
    from tributary_read.errors import ImplausibleTimeError, InvalidInputError, TimeUnitError
    from tributary_read.spark.write import write

    table = _table(tmp_path / "out", "parquet")
    seconds = [_in("s", ms) for ms in TIMES]
    with pytest.raises(TimeUnitError, match=r"time column ts: 17040\d{5} as ms is 1970-01-20T17:\d\d:\d\dZ, "
                                            r"before 2000-01-01; is it seconds\? set time_unit=\"s\" "
                                            r"\(3 row\(s\) like it; nothing was committed\)"):
        write(_frame(spark, "s", seconds), table, time_column="ts")
    ahead = int(time.time() * 1000) + 2 * 86_400_000
    with pytest.raises(ImplausibleTimeError, match=r"more than a day ahead of the clock \(.*\); "
                                                   r"if such times are real, set allow_any_time=True"):
        write(_frame(spark, "ms", [T0, ahead]), table, time_column="ts", time_unit="ms")
    with pytest.raises(ImplausibleTimeError, match=r"631152000 as s is 1990-01-01T00:00:00Z, before 2000-01-01; "
                                                   r"if such times are real, set allow_any_time=True"):
        write(_frame(spark, "s", [T0 // 1000, Y1990_S]), table, time_column="ts", time_unit="s")
    assert isinstance(TimeUnitError("x"), InvalidInputError) and TimeUnitError.exit_code == 3
    assert table.log.latest_version() == 0 and not list((tmp_path / "out").rglob("part-*"))
    # historical data: the check off, the unit still applies
    r = write(_frame(spark, "s", [Y1990_S, T0 // 1000]), table, time_column="ts", time_unit="s",
              allow_any_time=True)
    assert r.partitions == ("1990_01_01/00", "2024_01_01/00")
    with pytest.raises(InvalidInputError, match="allow_any_time=True needs the unit"):
        write(_frame(spark, "s", [Y1990_S]), table, time_column="ts", allow_any_time=True)
