"""Issue 33, item 5: one rule for a time without an offset, through every front end.

On a table created with ``--timezone Asia/Shanghai``, ``trib files --schedule-time
2024-01-01T06:00:00`` read Shanghai time and ``trib etl run`` read UTC, 8 hours apart.
Every front end now refuses such a time (exit 3, one line) and writes it both ways, with
``Z`` and with the table's offset, so the fix is a copy and paste of the reading meant:
``trib files`` (each time option), ``trib etl run`` and ``submit`` (the flag and the job
file's time key), ``trib sql``, ``trib report lateness``, the Spark helper and the jar.
Only the Spark helper and the jar need a JVM (marked integration).
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap

import pytest
from conftest import invoke_trib
from helpers import one_line_error

from tributary_read.errors import InvalidInputError
from tributary_read.table.layout import parse_timezone
from tributary_read.timespec import parse_instant

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
T = "2024-01-01T06:00:00"
BOTH = f"has no UTC offset: write {T}Z (UTC) or {T}+08:00 (Asia/Shanghai)"


def _shanghai(tmp_path, input_keys: str = "") -> dict[str, str]:
    """The issue's setup: a table in Asia/Shanghai, read by a consumer job left in UTC."""
    src, out = tmp_path / "events", tmp_path / "out"
    for root, zone in ((src, "Asia/Shanghai"), (out, "UTC")):
        invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", "dt={yyyy}{MM}{dd}{HH}",
                    "--format", "jsonl", "--timezone", zone, check=True)
    (tmp_path / "q.sql").write_text("SELECT * FROM v\n")
    (tmp_path / "job.toml").write_text(textwrap.dedent(f"""\
        [job]
        name = "zoneless"
        sql = "q.sql"

        [[inputs]]
        table = "{src}"
        view = "v"
        """) + input_keys + textwrap.dedent("""
        [output]
        table = "out"
        time_column = "ts"
        """))
    (tmp_path / "s.sql").write_text("SELECT 1;\n")
    return {"{root}": str(src), "{job}": str(tmp_path / "job.toml"), "{script}": str(tmp_path / "s.sql")}


FRONT_ENDS = {
    "files --schedule-time": ["files", "{root}", "--schedule-time", "{t}", "--period", "1h"],
    "files --start": ["files", "{root}", "--start", "{t}"],
    "files --end": ["files", "{root}", "--start", "2023-12-01T00:00:00Z", "--end", "{t}"],
    "files --initial-position": ["files", "{root}", "--consumer", "{c}", "--initial-position", "{t}"],
    "etl run": ["etl", "run", "{job}", "--schedule-time", "{t}", "--dry-run"],
    "etl submit": ["etl", "submit", "{job}", "--schedule-time", "{t}"],
    "report lateness --since": ["report", "lateness", "{root}", "--since", "{t}"],
}


@pytest.mark.unit
@pytest.mark.parametrize("argv", FRONT_ENDS.values(), ids=FRONT_ENDS.keys())
def test_a_time_without_an_offset_is_refused_with_the_tables_offset(tmp_path, argv):
    subs = {**_shanghai(tmp_path), "{t}": T, "{c}": "c"}
    p = invoke_trib(*[subs.get(a, a) for a in argv])
    line = one_line_error(p, 3, BOTH)
    assert f"{argv[argv.index('{t}') - 1]} {T} has no UTC offset" in line  # the CLI names its own flag
    # the same command with either reading copied from the line is taken (etl run's window is past, dry run)
    for i, fixed in enumerate((f"{T}Z", f"{T}+08:00")):  # a new consumer each: its first plan takes the time
        ok = invoke_trib(*[{**subs, "{t}": fixed, "{c}": f"c{i}"}.get(a, a) for a in argv])
        assert ok.returncode == 0, (fixed, ok.stderr)


@pytest.mark.unit
def test_the_issues_case_files_and_etl_run_refuse_the_same_line(tmp_path):
    """Issue 33, Why 5: one string, one table, two commands, 8 hours apart; now one refusal, word for word."""
    subs = {**_shanghai(tmp_path), "{t}": T}
    files = one_line_error(invoke_trib("files", subs["{root}"], "--schedule-time", T, "--period", "1h"), 3, BOTH)
    etl = one_line_error(invoke_trib("etl", "run", subs["{job}"], "--schedule-time", T, "--dry-run"), 3, BOTH)
    assert files.split("has no UTC offset")[1] == etl.split("has no UTC offset")[1]
    # each reading copied from the line names its own window: the last hour before it
    for fixed, start in ((f"{T}Z", "2024-01-01T05:00:00Z"), (f"{T}+08:00", "2023-12-31T21:00:00Z")):
        f = json.loads(invoke_trib("files", subs["{root}"], "--schedule-time", fixed, "--period", "1h", "--mode",
                                   "mtime", "--json", check=True).stdout)
        assert f["window"]["start_ms"] == parse_instant(start), fixed


@pytest.mark.unit
def test_several_zones_are_each_named_once():
    """An ETL job's own zone and its tables' may differ: the line names each reading, UTC first."""
    zones = [parse_timezone(z) for z in ("UTC", "Asia/Shanghai", "Europe/Berlin", "Asia/Shanghai")]
    with pytest.raises(InvalidInputError) as e:
        parse_instant(T, zones, "schedule time")
    assert str(e.value) == (f"schedule time {T} has no UTC offset: write {T}Z (UTC) or {T}+08:00 (Asia/Shanghai) "
                            f"or {T}+01:00 (Europe/Berlin)")


@pytest.mark.unit
@pytest.mark.parametrize("argv", [FRONT_ENDS["files --schedule-time"], FRONT_ENDS["etl run"]],
                         ids=["files", "etl run"])
def test_the_cron_idiom_without_z_is_refused(tmp_path, argv):
    """``date -u +%Y-%m-%dT%H:00:00`` has no ``Z``: -u says UTC to date, not to the string it prints."""
    t = subprocess.run(["date", "-u", "+%Y-%m-%dT%H:00:00"], capture_output=True, text=True, check=True).stdout.strip()
    subs = {**_shanghai(tmp_path), "{t}": t}
    one_line_error(invoke_trib(*[subs.get(a, a) for a in argv]), 3,
                   f"{t} has no UTC offset: write {t}Z (UTC) or {t}+08:00 (Asia/Shanghai)")
    with_z = subprocess.run(["date", "-u", "+%Y-%m-%dT%H:00:00Z"], capture_output=True, text=True,
                            check=True).stdout.strip()
    ok = invoke_trib(*[{**subs, "{t}": with_z}.get(a, a) for a in argv])
    assert ok.returncode == 0, ok.stderr


@pytest.mark.unit
@pytest.mark.parametrize("value", [f'"{T}"', T], ids=["quoted", "toml-datetime"])
def test_a_job_files_initial_position_without_an_offset_is_refused(tmp_path, value):
    """The job file's one time key, quoted or as TOML's own local date-time: refused the same way."""
    subs = _shanghai(tmp_path, f"initial_position = {value}\n")
    one_line_error(invoke_trib("etl", "run", subs["{job}"], "--schedule-time", "2024-01-01T06:00:00Z", "--dry-run"),
                   3, "inputs[0].initial_position: initial position", BOTH)


@pytest.mark.unit
@pytest.mark.parametrize("value", [f'"{T}+08:00"', f"{T}+08:00", f"{T}Z"], ids=["quoted", "toml", "toml-z"])
def test_a_job_files_initial_position_with_an_offset_is_taken(tmp_path, value):
    subs = _shanghai(tmp_path, f"initial_position = {value}\n")
    p = invoke_trib("etl", "run", subs["{job}"], "--schedule-time", "2024-01-01T06:00:00Z", "--dry-run", "--json")
    assert p.returncode == 0, p.stderr


@pytest.mark.unit
def test_a_toml_date_is_not_an_instant(tmp_path):
    subs = _shanghai(tmp_path, "initial_position = 2024-01-01\n")
    one_line_error(invoke_trib("etl", "run", subs["{job}"], "--schedule-time", "2024-01-01T06:00:00Z", "--dry-run"),
                   3, "initial position 2024-01-01 is a date, not an instant: write 2024-01-01T00:00:00Z (UTC)")


@pytest.mark.unit
def test_sql_refuses_it_with_its_timezone(tmp_path):
    """`trib sql` has no table: its --timezone (the window's zone) is the other reading."""
    subs = _shanghai(tmp_path)
    one_line_error(invoke_trib("sql", "-f", subs["{script}"], "--schedule-time", T, "--timezone", "Asia/Shanghai"),
                   3, f"--schedule-time {T} {BOTH}")


# -- the Spark helper and the jar (a JVM) ----------------------------------------------------
@pytest.mark.integration
def test_the_spark_helper_refuses_it_with_the_tables_offset(tmp_path, spark):
    from tributary_read.spark import read_incremental

    root = _shanghai(tmp_path)["{root}"]
    with pytest.raises(InvalidInputError, match=rf"schedule time {T} {re.escape(BOTH)}"):
        read_incremental(spark, root, schedule_time=T, period="1h")
    with pytest.raises(InvalidInputError, match=rf"initial_position {T} {re.escape(BOTH)}"):
        read_incremental(spark, root, consumer="c", initial_position=T)
    df, batch = read_incremental(spark, root, schedule_time=f"{T}+08:00", period="1h", schema="ts STRING")
    assert len(batch.fileset.files) == 0 and df.count() == 0


@pytest.mark.integration
@pytest.mark.parametrize("fn", ["trib_window_start_ms", "trib_window_end_ms"])
def test_the_jars_window_functions_refuse_it_with_their_zone(spark, fn):
    from tributary_read.hive_udfs import registry as udfs

    udfs.register(spark)
    rows = f"FROM VALUES ('{T}') v(t)"  # a column, not a literal: refused as the query runs
    with pytest.raises(Exception, match=rf"{fn} {T} {re.escape(BOTH)}"):
        spark.sql(f"SELECT {fn}(t, '1h', '0s', 'Asia/Shanghai') {rows}").collect()
    with pytest.raises(Exception, match=rf"{fn} {T} has no UTC offset: write {T}Z \(UTC\)(?! or)"):
        spark.sql(f"SELECT {fn}(t, '1h') {rows}").collect()
    got = spark.sql(f"SELECT {fn}('{T}+08:00', '1h', '0s', 'Asia/Shanghai')").collect()[0][0]
    assert got == parse_instant("2023-12-31T21:00:00Z") + (0 if fn.endswith("start_ms") else 3_600_000 - 1)


@pytest.mark.integration
def test_trib_sql_names_the_jars_reason_for_a_literal(spark, tmp_path):
    """A literal is folded while Spark analyses the query, and Spark's line names only the UDF class."""
    script = tmp_path / "w.sql"
    script.write_text(f"SELECT trib_window_start_ms('{T}', '1h', '0s', 'Asia/Shanghai');\n")
    one_line_error(invoke_trib("-q", "sql", "-f", str(script)), 3, "statement 1 (line 1) failed",
                   f"trib_window_start_ms {T} {BOTH}")


@pytest.mark.integration
def test_the_jars_mtime_window_refuses_it(tmp_path, spark):
    """The path filter's tributary.input.starttime: no table zone to name, so the line gives Z."""
    from tributary_read.hive_udfs import registry as udfs

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.txt").write_text("a\n")
    name = "default.zoneless_mtime"
    spark.sql(f"CREATE EXTERNAL TABLE {name} (k STRING) STORED AS TEXTFILE LOCATION '{(tmp_path / 't').as_uri()}'")
    try:
        spark.sql("SET tributary.input.sync=true")
        spark.sql(f"SET tributary.input.starttime={T}")
        with pytest.raises(Exception, match=rf"trib mtime window: tributary.input.starttime={T}: "
                                            rf"tributary.input.starttime {T} has no UTC offset: write {T}Z \(UTC\)"):
            spark.sql(f"SELECT k FROM {name}").collect()
    finally:
        for key in udfs.PROPERTIES:
            spark.conf.unset(key)
        spark.sql(f"DROP TABLE IF EXISTS {name}")
