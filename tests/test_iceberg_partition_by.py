"""``trib iceberg sync --partition-by hour(ts)`` / ``day(ts)``: hidden partitioning on the event-time column.

Real trib tables written by trib's own writer (``TableWriter.write_table`` with a Parquet timestamp column:
``trib ingest`` keeps a JSON time field as the number or string it was, which is refused), a real SQLite
catalog, and the two readers: a pyiceberg scan filtered on ``ts`` plans only the files of the hours asked
for and returns exactly trib's rows of them, ``dt`` included; DuckDB's ``iceberg_scan`` agrees. Late files
in old hours land in their hour; a file whose times are not all in its ``dt``'s hour is refused, nothing
registered, and identity partitioning mirrors the same table.
"""

from __future__ import annotations

import json
import shlex
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest
from conftest import invoke_trib
from helpers import LAYOUT, PARTITION
from test_iceberg import _catalog, _duckdb_rows, _iceberg, _live_paths, _pyiceberg_rows, _trib_uris

pytest.importorskip("pyiceberg")

pytestmark = pytest.mark.integration

HOUR = 3_600_000


def _hour0() -> int:
    """An hour two days back (inside any plausibility window), in epoch ms."""
    return (int(time.time() * 1000) // HOUR - 48) * HOUR


def _table(tmp_path: Path, layout: str = LAYOUT, partition: str = PARTITION, zone: str = "UTC"):
    from tributary_read.table.config import Table, TableConfig
    from tributary_read.table.layout import Layout

    return Table.create(str(tmp_path / "t"), TableConfig(Layout(layout, partition, zone), format="parquet"))


def _write(table, times_ms: list[int], start_id: int, unit: str = "us", tz: str | None = "UTC") -> None:
    """One commit of trib's writer: a row per time, ``ts`` a Parquet timestamp column."""
    import pyarrow as pa

    from tributary_read import TableWriter

    scale = 1000 if unit == "us" else 1
    w = TableWriter(table)
    w.write_table(pa.table({"id": list(range(start_id, start_id + len(times_ms))),
                            "ts": pa.array([t * scale for t in times_ms], pa.timestamp(unit, tz=tz))}), "ts")
    w.commit()


def _sync(root, catalog: str, *args: str, name: str = "db.events", code: int = 0) -> dict:
    proc = invoke_trib("iceberg", "sync", str(root), "--table", name, "--catalog", catalog, *args, "--json")
    assert proc.returncode == code, proc.stderr
    return json.loads(proc.stdout) if code == 0 else {"stderr": proc.stderr}


def _trib_rows(root) -> list[tuple[int, str, int]]:
    """(id, dt, ts in ms) of every row trib's reader returns, each file with its manifest partition."""
    import pyarrow.parquet as pq

    plan = json.loads(invoke_trib("files", str(root), "--all", "--json", check=True).stdout)
    rows = []
    for f in plan["files"]:
        t = pq.read_table(Path(root) / f["path"], columns=["id", "ts"])
        ms = [int(v.timestamp() * 1000) for v in t.column("ts").to_pylist()]
        rows += [(i, f["partition"]["dt"], m) for i, m in zip(t.column("id").to_pylist(), ms)]
    return rows


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat()


def test_hour_ts_prunes_by_event_time_reads_as_trib_and_refuses_a_file_outside_its_hour(tmp_path):
    t = _table(tmp_path)
    root = Path(t.storage.abspath(""))
    cat = _catalog(tmp_path)
    h0 = _hour0()
    _write(t, [h0 + h * HOUR + i * 60_000 for h in range(4) for i in range(3)], 0)
    out = _sync(root, cat, "--partition-by", "hour(ts)")
    assert out["version"] == 1 and out["snapshots"][0]["added"] == 4
    ice = _iceberg(cat)
    assert [(f.name, str(f.transform)) for f in ice.spec().fields] == [("dt", "identity"), ("ts_hour", "hour")]

    # A late file into an old hour (another commit of trib's writer): a sync without the flag follows the
    # table's spec and registers it in its hour.
    _write(t, [h0 + HOUR + 30 * 60_000, h0 + HOUR + 59 * 60_000], 100)
    assert [s["version"] for s in _sync(root, cat)["snapshots"]] == [2]
    ice = _iceberg(cat)

    # Every file's partition tuple: its manifest dt, and the hour of every ts it holds (read from the file).
    rows = _trib_rows(root)
    by_uri = {}
    import pyarrow.parquet as pq

    for e in ice.inspect.entries().to_pylist():
        uri = e["data_file"]["file_path"]
        hours = {int(v.timestamp() * 1000) // HOUR for v in pq.read_table(uri.removeprefix("file://")).column("ts")
                 .to_pylist()}
        by_uri[uri] = e["data_file"]["partition"]
        (hour,) = hours
        ts_hour = by_uri[uri]["ts_hour"]
        assert ts_hour == hour and by_uri[uri]["dt"] == datetime.fromtimestamp(
            hour * 3600, tz=timezone.utc).strftime("%Y%m%d%H")
    assert set(by_uri) == _trib_uris(root) and set(_live_paths(ice).values()) == {1}
    assert _pyiceberg_rows(ice) == _duckdb_rows(ice) == Counter((i, dt) for i, dt, _ in rows)

    # A filter on ts: the plan holds the files of hours 1 and 2 only (the late file too), and the rows are
    # exactly trib's rows in that range, through both readers.
    lo, hi = h0 + HOUR + 90_000, h0 + 3 * HOUR  # the first hour-1 file has a row at 2 minutes past
    scan = ice.scan(row_filter=f"ts >= '{_iso(lo)}' and ts < '{_iso(hi)}'", selected_fields=("id", "dt"))
    planned = {task.file.file_path for task in scan.plan_files()}
    assert {by_uri[u]["ts_hour"] for u in planned} == {h0 // HOUR + 1, h0 // HOUR + 2} and len(planned) == 3
    want = Counter((i, dt) for i, dt, ms in rows if lo <= ms < hi)
    got = scan.to_arrow()
    assert Counter(zip(got.column("id").to_pylist(), got.column("dt").to_pylist())) == want
    assert _duckdb_rows(ice, f"ts >= TIMESTAMPTZ '{_iso(lo)}' AND ts < TIMESTAMPTZ '{_iso(hi)}'") == want

    # A file whose ts is not all inside its dt's hour (a writer that partitions by arrival time): refused
    # in one line naming identity partitioning, nothing of its commit registered.
    from tributary_read.table.manifest import FileEntry, Transaction

    import pyarrow as pa

    path = f"{t.layout.for_time(h0).path}/late.parquet"
    pq.write_table(pa.table({"id": [900, 901], "ts": pa.array([(h0 + 30 * 60_000) * 1000, (h0 + HOUR + 60_000) * 1000],
                                                              pa.timestamp("us", tz="UTC"))}), t.storage.abspath(path))
    dt0 = datetime.fromtimestamp(h0 / 1000, tz=timezone.utc).strftime("%Y%m%d%H")
    t.log.commit([FileEntry(path, t.storage.info(path).size, 2, {"dt": dt0})], Transaction("w", {"arrival": 1}))
    err = _sync(root, cat, code=3)["stderr"]
    assert err.count("\n") == 1 and "late.parquet: its 'ts' runs from" in err
    assert "without --partition-by/--iceberg-partition-by (identity partitioning" in err
    assert [s.summary["trib.version"] for s in _iceberg(cat).snapshots()] == ["1", "2"]
    # The way it names: identity partitioning mirrors the same table, every row with its dt.
    assert _sync(root, cat, name="db.identity")["version"] == 3
    assert _pyiceberg_rows(_iceberg(cat, "db.identity")) == Counter((i, dt) for i, dt, _ in _trib_rows(root))

    # The spec is fixed at creation: another transform for the existing table is refused, nothing added.
    err = _sync(root, cat, "--partition-by", "day(ts)", name="db.identity", code=3)["stderr"]
    assert "is partitioned by identity on the layout's keys only, not day(ts)" in err and err.count("\n") == 1
    assert len(_iceberg(cat, "db.identity").snapshots()) == 3


def test_the_mirror_setting_creates_the_spec_and_what_no_file_can_fit_is_refused_before_anything_exists(tmp_path):
    """``trib table set --iceberg-partition-by``: the next commit (here a compaction) creates the Iceberg
    table with the spec, ``day(ts)`` over an hourly layout in a zone with whole-hour offsets. Refused in one
    line, exit 3, with no Iceberg table created: a layout coarser than the transform, a column of epoch
    numbers (what ``trib ingest`` keeps a JSON time field as), a partition that spans two UTC hours."""
    from tributary_read.iceberg.catalog import open_catalog

    t = _table(tmp_path, zone="Europe/Berlin")
    root = Path(t.storage.abspath(""))
    cat = _catalog(tmp_path)
    h0 = _hour0()
    for k in range(3):  # three files in each of two hours, milliseconds without a zone
        _write(t, [h0 + h * HOUR + k * 1000 for h in range(2)], 10 * k, unit="ms", tz=None)
    out = json.loads(invoke_trib("table", "set", str(root), "--iceberg", "db.days", "--iceberg-catalog", cat,
                                 "--iceberg-partition-by", "day(ts)", "--json", check=True).stdout)
    assert out["iceberg"] == {"table": "db.days", "catalog": cat, "partition_by": "day(ts)"}
    done = json.loads(invoke_trib("compact", str(root), "--min-age", "0s", "--min-files", "2", "--json",
                                  check=True).stdout)
    assert done["iceberg"]["error"] is None and done["iceberg"]["version"] == 4
    ice = _iceberg(cat, "db.days")
    assert [(f.name, str(f.transform)) for f in ice.spec().fields] == [("dt", "identity"), ("ts_day", "day")]
    days = {e["data_file"]["partition"]["ts_day"] for e in ice.inspect.entries().to_pylist()}
    assert days == {datetime.fromtimestamp(h0 / 1000, tz=timezone.utc).date(),
                    datetime.fromtimestamp((h0 + HOUR) / 1000, tz=timezone.utc).date()}
    want = Counter((i, dt) for i, dt, _ in _trib_rows(root))
    assert _pyiceberg_rows(ice) == _duckdb_rows(ice) == want and len(want) == 6
    # The catch-up command a failed mirror would print carries the transform, and runs as printed.
    from tributary_read.iceberg.auto import read_setting

    catch_up = read_setting(t).catch_up(str(root))
    assert catch_up.endswith("--partition-by 'day(ts)'")
    assert json.loads(invoke_trib(*shlex.split(catch_up)[1:], "--json", check=True).stdout)["snapshots"] == []

    # A daily layout cannot give a file one hour: refused by the setting and by the sync.
    daily = _table(tmp_path / "d", "{yyyy}_{MM}_{dd}", "dt={yyyy}{MM}{dd}")
    _write(daily, [h0], 0)
    for args in (("table", "set", daily.storage.abspath(""), "--iceberg", "db.daily", "--iceberg-catalog", cat,
                  "--iceberg-partition-by", "hour(ts)"),
                 ("iceberg", "sync", daily.storage.abspath(""), "--table", "db.daily", "--catalog", cat,
                  "--partition-by", "hour(ts)")):
        proc = invoke_trib(*args)
        assert proc.returncode == 3 and proc.stderr.count("\n") == 1, proc.stderr
        assert "makes one partition per day, coarser than hour(ts)" in proc.stderr

    # trib ingest's time field: epoch milliseconds in an int64 column, which no transform takes.
    ingested = tmp_path / "ingested"
    invoke_trib("table", "create", str(ingested), "--layout", LAYOUT, "--partition", PARTITION, "--format",
                "parquet", check=True)
    src = tmp_path / "events.jsonl"
    src.write_text("".join(json.dumps({"id": i, "ts": h0 + i}) + "\n" for i in range(3)))
    invoke_trib("ingest", str(ingested), "--source", str(src), "--app-id", "a", "--time-field", "ts", check=True)
    err = _sync(ingested, cat, "--partition-by", "hour(ts)", name="db.ingested", code=3)["stderr"]
    assert "column 'ts' is int64, not a timestamp" in err and err.count("\n") == 1

    # A zone whose hours are not UTC hours: each partition spans two, and no file has one hour(ts).
    india = _table(tmp_path / "i", zone="Asia/Kolkata")
    _write(india, [h0], 0)
    err = _sync(india.storage.abspath(""), cat, "--partition-by", "hour(ts)", name="db.india", code=3)["stderr"]
    assert "in zone Asia/Kolkata: the zone is not a whole number of hours from UTC" in err and err.count("\n") == 1
    # A zone with daylight saving: its repeated autumn hour spans two UTC hours; refused now, not a year on.
    err = _sync(root, cat, "--partition-by", "hour(ts)", name="db.berlin", code=3)["stderr"]
    assert "in zone Europe/Berlin: the zone changes its UTC offset (daylight saving)" in err and "use day(ts)" in err
    err = _sync(ingested, cat, "--partition-by", "minute(ts)", name="db.x", code=3)["stderr"]
    assert "--partition-by/--iceberg-partition-by 'minute(ts)' is not hour(COLUMN) or day(COLUMN)" in err
    assert {n for _, n in open_catalog(cat).list_tables("db")} == {"days"}


def test_a_files_hour_comes_from_its_dt_and_its_footer_must_agree(tmp_path):
    """The pieces without a catalog: the hour a dt stands for (a DST change in the layout's zone), and the
    footer checks a mirror runs on each file (NULL times, a file written without statistics, row groups)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tributary_read.errors import InvalidInputError
    from tributary_read.iceberg.partition_by import Buckets, PartitionBy, footer_times, parse
    from tributary_read.table.layout import Layout

    assert parse(" hour( ts ) ") == PartitionBy("hour", "ts") and parse("") is None and parse(None) is None
    berlin = Layout(LAYOUT, PARTITION, "Europe/Berlin")
    # Clocks go back at 03:00 CEST: local 02:xx happens twice, so dt=2026102502 holds two UTC hours (its
    # files have no one hour(ts)): hour(ts) over a zone with daylight saving is refused outright; the
    # repeated hour lies inside one UTC day.
    with pytest.raises(InvalidInputError, match="changes its UTC offset"):
        Buckets(PartitionBy("hour", "ts"), berlin)
    day = Buckets(PartitionBy("day", "ts"), berlin)
    assert day.value({"dt": "2026102502"}, "v1") == int(datetime(2026, 10, 25, tzinfo=timezone.utc).timestamp()) // 86400

    t0 = int(datetime(2026, 11, 28, 10, tzinfo=timezone.utc).timestamp() * 1000)
    utc = Buckets(PartitionBy("hour", "ts"), Layout(LAYOUT, PARTITION))
    value = utc.value({"dt": "2026112810"}, "v1")
    assert value == t0 // HOUR

    def footer(times, **kwargs):
        path = tmp_path / f"f{len(list(tmp_path.iterdir()))}.parquet"
        pq.write_table(pa.table({"ts": pa.array(times, pa.timestamp("us"))}), path, **kwargs)
        return pq.read_metadata(path)

    inside = [(t0 + m * 60_000) * 1000 for m in (5, 0, 59)]
    two_groups = footer(inside, row_group_size=2)
    assert two_groups.num_row_groups == 2 and footer_times(two_groups, "ts", "f") == (t0, t0 + 59 * 60_000, 0)
    utc.check(value, footer_times(two_groups, "ts", "f"), "f")
    with pytest.raises(InvalidInputError, match="1 rows have a NULL 'ts'"):
        utc.check(value, footer_times(footer([*inside, None]), "ts", "f"), "f")
    with pytest.raises(InvalidInputError, match="outside the hour its partition stands for"):
        utc.check(value, footer_times(footer([*inside, (t0 + HOUR) * 1000]), "ts", "f"), "f")
    with pytest.raises(InvalidInputError, match="no min/max statistics of 'ts'"):
        utc.check(value, footer_times(footer(inside, write_statistics=False), "ts", "f"), "f")
    # INT96 (older Spark's default) reads as nanoseconds, which Iceberg's v2 timestamp does not hold.
    with pytest.raises(InvalidInputError, match="is timestamp\\[ns\\], not a timestamp of milli- or micro"):
        footer_times(footer(inside, use_deprecated_int96_timestamps=True), "ts", "f")


def test_an_etl_runs_timestamp_output_mirrors_itself_under_hour_ts(tmp_path, warm_spark):
    """The documented way to a timestamp ``ts``: a ``trib etl run`` job whose SQL gives a TIMESTAMP time
    column (Spark's Arrow batches through trib's writer), mirrored after its commit under ``hour(ts)``."""
    from conftest import run_trib
    from etl_data import LAYOUT as RAW_LAYOUT, create_output_table, write_job

    raw, out = tmp_path / "raw", tmp_path / "out"
    invoke_trib("table", "create", str(raw), "--layout", RAW_LAYOUT, "--partition", PARTITION, check=True)
    hour = _hour0()
    src = tmp_path / "raw.jsonl"
    src.write_text("".join(json.dumps({"id": i, "ts": hour + i * 1000, "msg": f"m{i}"}) + "\n" for i in range(6)))
    invoke_trib("ingest", str(raw), "--source", str(src), "--app-id", "raw", "--time-field", "ts", check=True)
    create_output_table(out)
    cat = _catalog(tmp_path)
    invoke_trib("table", "set", str(out), "--iceberg", "db.hourly", "--iceberg-catalog", cat,
                "--iceberg-partition-by", "hour(ts)", check=True)
    job = write_job(tmp_path / "jobs", name="hourly", raw=raw, out=out,
                    sql="SELECT id, timestamp_millis(ts) AS ts, msg FROM raw\n")
    when = datetime.fromtimestamp((hour + HOUR + 300_000) / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    proc = run_trib("etl", "run", str(job), "--schedule-time", when, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["iceberg"]["error"] is None
    ice = _iceberg(cat, "db.hourly")
    assert [(f.name, str(f.transform)) for f in ice.spec().fields] == [("dt", "identity"), ("ts_hour", "hour")]
    assert {e["data_file"]["partition"]["ts_hour"] for e in ice.inspect.entries().to_pylist()} == {hour // HOUR}
    rows = Counter((i, dt) for i, dt, _ in _trib_rows(out))
    assert _pyiceberg_rows(ice) == _duckdb_rows(ice) == rows and len(rows) == 6
    assert ice.scan(row_filter=f"ts >= '{_iso(hour + HOUR)}'").to_arrow().num_rows == 0
