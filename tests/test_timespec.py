"""One duration parser, one instant parser, one schedule window: every front end answers alike.

* the grammar of :mod:`tributary_read.timespec` (unit tests);
* the jar's ``trib.udfs.TimeSpec`` gives the same value or the same message for
  every spelling, and the same schedule windows (one JVM for all cases);
* through the CLI, a job spelled in ``trib files``, ``trib etl run``, ``trib sql``'s
  variables, the Spark helper and the jar reads the same files (issue 19, Why 1),
  and a spelling means the same thing in each (Why 4).
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from datetime import datetime, timezone

import pytest
from conftest import invoke_trib

from tributary_read.errors import InvalidInputError
from tributary_read.read.window import Schedule, TimeWindow, WindowForm, floor_to_period
from tributary_read.table.config import Table, TableConfig
from tributary_read.table.layout import Layout, parse_timezone
from tributary_read.timespec import parse_duration_ms, parse_instant

H = 3_600_000
MIN = 60_000

#: (spelling, ms or the start of the refusal), shared by the Python and Java tests.
DURATIONS = [
    ("500ms", 500), ("30s", 30_000), ("10m", 600_000), ("1h", H), ("7d", 7 * 86_400_000), ("2w", 1_209_600_000),
    ("1.5h", 5_400_000), (" 15 m ", 900_000), ("0", 0), ("0.0", 0), ("0s", 0), ("1.5ms", "is not a whole number"),
    ("1.9ms", "is not a whole number"), ("3600", "has no unit: write 3600s or 3600ms"),
    ("-5", "has no unit: a duration is never negative"), ("-5m", "is not a duration"), ("1x", "is not a duration"),
    ("", "is not a duration"), ("1H", "is not a duration"), ("99999999999999d", "is longer than 9999 years"),
    ("1e400h", "is not a duration"), ("week", "is not a duration"),
]
INSTANTS = [
    ("2024-01-01T05:00:00Z", "", 1_704_085_200_000), ("2024-01-01T05:00:00z", "", 1_704_085_200_000),
    ("2024-01-01T13:00:00+08:00", "", 1_704_085_200_000), ("2024-01-01T13:00:00+0800", "", 1_704_085_200_000),
    ("2024-01-01 05:00Z", "", 1_704_085_200_000), ("2024-01-01T05:00:00.123456Z", "", 1_704_085_200_123),
    ("1969-12-31T23:59:59.5Z", "", -500), ("1704085200000", "", 1_704_085_200_000), ("0", "", 0),
    ("9999-12-31T23:59:59.999Z", "", 253_402_300_799_999),
    ("2024-01-01T05:00:00", "", "has no UTC offset: write 2024-01-01T05:00:00Z (UTC)"),
    ("2024-01-01T05:00:00", "Asia/Shanghai",
     "has no UTC offset: write 2024-01-01T05:00:00Z (UTC) or 2024-01-01T05:00:00+08:00 (Asia/Shanghai)"),
    ("2024-07-01T05:00:00.5", "Europe/Berlin",
     "has no UTC offset: write 2024-07-01T05:00:00.5Z (UTC) or 2024-07-01T05:00:00.5+02:00 (Europe/Berlin)"),
    # issue 25: a wall time the zone skips has no offset to suggest; one it repeats has two.
    ("2020-03-29T02:30:00", "Europe/Berlin", "has no UTC offset: write 2020-03-29T02:30:00Z (UTC) "
     "(2020-03-29T02:30:00 does not exist in Europe/Berlin: its clocks skip it)"),
    ("2020-10-25T02:30:00", "Europe/Berlin", "has no UTC offset: write 2020-10-25T02:30:00Z (UTC) or "
     "2020-10-25T02:30:00+02:00 or 2020-10-25T02:30:00+01:00 (Europe/Berlin: that wall time happens twice)"),
    ("2024-01-01", "", "is a date, not an instant: write 2024-01-01T00:00:00Z (UTC)"),
    ("2024-02-30T00:00:00Z", "", "not a valid date and time"), ("0000-01-01T00:00:00Z", "", "not a valid date"),
    ("2024-01-01T05:00:00+19:00", "", "is outside -18:00..+18:00"),
    ("1704085200", "", "looks like epoch seconds"), ("-1", "", "looks like epoch seconds"),
    ("99999999999999999999", "", "is past the year 9999"), ("yesterday", "", "unparsable time 'yesterday'"),
    ("", "", "empty time"),
]
#: (schedule time, period, lag, zone): the aligned window, Python's Schedule against the jar's PeriodClock.
WINDOWS = [
    ("2020-06-24T01:05:00+08:00", "1h", "0", "Asia/Shanghai"),
    ("2020-06-24T01:05:00Z", "1h", "10m", "UTC"),
    ("2020-06-24T01:14:59.999Z", "1h", "10m", "UTC"),
    ("2024-03-10T03:30:00-04:00", "1h", "0", "America/New_York"),
    ("2024-11-03T01:30:00-05:00", "2h", "0", "America/New_York"),
    ("2024-11-03T12:00:00Z", "1d", "1h", "America/New_York"),
    ("2020-10-25T23:00:00Z", "1d", "0", "Europe/Berlin"),
    ("2020-03-29T22:00:00Z", "1d", "0", "Europe/Berlin"),
    ("9999-12-31T23:30:00Z", "2h", "0", "UTC"),
    ("0001-01-01T00:30:00Z", "1h", "0", "UTC"),
    # issue 25: run times with a lag where periods differ in length read what reached its lag since the last run
    ("2021-10-31T01:00:00Z", "1h", "2h", "Europe/Berlin"), ("2021-10-31T02:00:00Z", "1h", "2h", "Europe/Berlin"),
    ("2021-10-31T02:00:00Z", "5m", "10m", "Europe/Berlin"), ("2021-10-31T02:05:00Z", "5m", "10m", "Europe/Berlin"),
    ("2021-04-03T15:00:00Z", "1h", "1h", "Australia/Lord_Howe"),
    ("2021-04-03T15:30:00Z", "1h", "1h", "Australia/Lord_Howe"),
]


def _py(fn, *args):
    try:
        return fn(*args)
    except InvalidInputError as e:
        return str(e)


def _expect(got, want, spelled: str):
    if isinstance(want, int):
        assert got == want, spelled
    else:
        assert isinstance(got, str) and want in got, (spelled, got)


# -- the grammar --------------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize("text,want", DURATIONS)
def test_durations_carry_a_unit(text, want):
    _expect(_py(parse_duration_ms, text, "duration"), want, text)


@pytest.mark.unit
@pytest.mark.parametrize("text,zone,want", INSTANTS)
def test_instants_carry_an_offset(text, zone, want):
    _expect(_py(parse_instant, text, parse_timezone(zone) if zone else None, "time"), want, text)


@pytest.mark.unit
def test_a_toml_integer_is_a_bare_number_too():
    with pytest.raises(InvalidInputError, match="lag 600 has no unit"):
        parse_duration_ms(600, "lag")
    assert parse_duration_ms(0, "lag") == 0


@pytest.mark.unit
@pytest.mark.parametrize("t,hour", [("2024-01-01T05:00:00Z", 3), ("2024-01-01T05:09:59.999Z", 3),
                                    ("2024-01-01T05:10:00Z", 4), ("2024-01-01T05:59:59.999Z", 4)])
def test_the_lag_is_how_long_a_period_waits_after_its_end_and_both_forms_tile(t, hour):
    """Aligned: the last whole period that ended at least ``lag`` before T (trib report lateness's lag too)."""
    ms = parse_instant(t)
    aligned = Schedule(H, 10 * MIN)
    start = parse_instant(f"2024-01-01T{hour:02d}:00:00Z")
    assert aligned.window(ms) == TimeWindow(start, start + H - 1)
    assert aligned.run_time(ms) == parse_instant("2024-01-01T05:00:00Z")  # the ETL's run: one per period
    sliding = Schedule(H, 10 * MIN, WindowForm.SLIDING)
    assert sliding.window(ms) == TimeWindow(ms - 70 * MIN, ms - 10 * MIN - 1)
    for s in (aligned, sliding):  # consecutive runs: no gap, no overlap
        assert s.window(ms + H).start_ms == s.window(ms).end_ms + 1
    with pytest.raises(InvalidInputError, match="the aligned form reads exactly one period"):
        Schedule(H, 0, WindowForm.ALIGNED, 2 * H)


@pytest.mark.unit
def test_daily_aligned_windows_tile_across_dst_in_every_run():
    tz = parse_timezone("Europe/Berlin")
    s = Schedule(86_400_000, 0, tz=tz)
    t = parse_instant("2020-10-20T22:00:00Z")
    prev = None
    for _ in range(12):
        w = s.window(t)
        if prev is not None:
            assert w.start_ms == prev.end_ms + 1
        prev = w
        t = floor_to_period(t + 30 * H, 86_400_000, tz)
    day = s.window(parse_instant("2020-10-26T00:00:00+01:00"))
    assert day.end_ms - day.start_ms + 1 == 25 * H  # the fall-back day is 25 hours long


# -- the jar ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def java_timespec():
    """Runs the jar's TimeSpec on lines of input; one JVM per call, all cases in one call."""
    from tributary_read.hive_udfs import build

    jar = build.jar_path()
    cp = f"{jar}{os.pathsep}{build.spark_home() / 'jars'}/*"

    def run(lines: list[str]) -> list[tuple[str, str]]:
        out = subprocess.run([build.java(), "-cp", cp, "trib.udfs.TimeSpec"], input="\n".join(lines) + "\n",
                             capture_output=True, text=True, timeout=120, check=True).stdout
        return [tuple(line.split("\t", 1)) for line in out.splitlines()]
    return run


#: issue 25, items 9 and 10: a UDF's BIGINT instant (seconds were taken as ms) and the partition value
#: of a time whose local year is past 9999 (the jar printed "+10000010100")
EPOCHS = ["1592931599999", "1592931599", "0", "-1", "253402300799999", "253402300800000", "9223372036854775807"]
PARTITIONS = [("1592931599999", "yyyyMMddHH", "Asia/Shanghai"), ("253402300800000", "yyyyMMddHH", "UTC"),
              ("253402297200000", "yyyyMMddHH", "Pacific/Kiritimati"), ("253402293600000", "yyyyMMddHH", "UTC"),
              ("1592931599", "yyyyMMddHH", "UTC")]
#: issue 25, item 9: the jar returned a wrapped long for a huge period
WINDOWS_REFUSED = [("2024-01-01T05:00:00Z", "99999999999999d", "0", "UTC"),
                   ("2024-01-01T05:00:00Z", "1h", "99999999999999d", "UTC")]


def _partition_py(ms: str, pattern: str, zone: str):
    assert pattern == "yyyyMMddHH"
    return Layout("{yyyy}{MM}{dd}{HH}", "dt={yyyy}{MM}{dd}{HH}", zone).for_time(
        parse_instant(int(ms), None, "time")).values["dt"]


def test_the_jar_reads_every_spelling_as_python_does(java_timespec):
    lines = [f"D\t{t}" for t, _ in DURATIONS] + [f"I\t{t}\t{z}" for t, z, _ in INSTANTS]
    lines += [f"W\t{t}\t{p}\t{lag}\t{z}" for t, p, lag, z in WINDOWS + WINDOWS_REFUSED]
    lines += [f"E\t{v}" for v in EPOCHS] + [f"P\t{v}\t{p}\t{z}" for v, p, z in PARTITIONS]
    got = java_timespec(lines)
    assert len(got) == len(lines)
    want = [_py(parse_duration_ms, t, "duration") for t, _ in DURATIONS]
    want += [_py(parse_instant, t, parse_timezone(z) if z else None, "time") for t, z, _ in INSTANTS]

    def window(t, p, lag, z):
        tz = parse_timezone(z)
        w = Schedule(parse_duration_ms(p, "period"), parse_duration_ms(lag, "lag"), tz=tz).window(
            parse_instant(t, tz, "schedule time"))
        return f"{w.start_ms},{w.end_ms}"
    want += [_py(window, *c) for c in WINDOWS + WINDOWS_REFUSED]
    want += [_py(parse_instant, int(v), None, "time") for v in EPOCHS]
    for line, (status, value), w in zip(lines[-len(PARTITIONS):], got[-len(PARTITIONS):], PARTITIONS):
        try:
            py = _partition_py(*w)
        except InvalidInputError as e:  # both refuse: the instant's refusal word for word, the range's alike
            assert status == "err", (line, value)
            assert str(e) == value or ("out of range" in str(e) and "out of range" in value
                                       and value.endswith("(years 0001..9999)")), (line, value, str(e))
        else:
            assert (status, value) == ("ok", py), line
    lines, got = lines[:-len(PARTITIONS)], got[:-len(PARTITIONS)]
    for line, (status, value), w in zip(lines, got, want):
        if isinstance(w, str) and status == "err":
            assert value == w, line  # the same message, word for word
        else:
            assert (status, value) == ("ok", str(w)), line


# -- through the CLI ------------------------------------------------------------------------
LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"


def _landing_zone(base, zone: str, start_ms: int, hours: int):
    """A plain hourly directory, a file every 10 minutes and one on each side of every hour's boundary."""
    tz = parse_timezone(zone)
    root = base / "landing"
    for k in range(hours * 6):
        for ms in {start_ms + k * 10 * MIN, start_ms + k * 10 * MIN - 1}:
            local = datetime.fromtimestamp(ms / 1000, timezone.utc).astimezone(tz)
            d = root / local.strftime("%Y_%m_%d/%H")
            d.mkdir(parents=True, exist_ok=True)
            f = d / f"f{ms}.log"
            f.write_text(f"{ms}\n")
            os.utime(f, ns=(ms * 1_000_000, ms * 1_000_000))
    return root


def _job(base, root, zone: str, period: str, window_keys: str) -> str:
    out = base / "out"
    if not out.exists():
        Table.create(str(out), TableConfig(Layout(LAYOUT, "dt={yyyy}{MM}{dd}{HH}", zone), format="parquet"))
    (base / "q.sql").write_text("SELECT value FROM v\n")
    (base / "job.toml").write_text(textwrap.dedent(f"""\
        [job]
        name = "parity"
        sql = "q.sql"
        period = "{period}"
        timezone = "{zone}"

        [[inputs]]
        table = "{root}"
        view = "v"
        mode = "mtime"
        layout = "{LAYOUT}"
        timezone = "{zone}"
        format = "text"
        """) + window_keys + textwrap.dedent("""
        [output]
        table = "out"
        time_column = "ts"
        """))
    return str(base / "job.toml")


#: (zone, period, schedule time, job window keys, trib files flags); trib etl run floors the time to its
#: period first, and `trib files --schedule-time` given the run's schedule time shows the same files.
CASES = [
    ("UTC", "1h", "2024-01-01T05:00:00Z", "", []),
    ("UTC", "1h", "2024-01-01T05:00:00Z", 'window_form = "aligned"\nlag = "10m"\n', ["--lag", "10m"]),
    ("UTC", "1h", "2024-01-01T05:14:00Z", 'window_form = "aligned"\nlag = "10m"\n', ["--lag", "10m"]),
    ("UTC", "1h", "2024-01-01T05:00:00Z", 'window_form = "sliding"\nlag = "10m"\n',
     ["--lag", "10m", "--window-form", "sliding"]),
    ("Europe/Berlin", "1d", "2020-10-25T23:00:00Z", 'window_form = "sliding"\nwindow = "1d"\n',
     ["--window-form", "sliding", "--window", "1d"]),  # issue 25: the 25-hour day, whole
    ("Europe/Berlin", "1h", "2021-10-31T02:00:00Z", 'window_form = "aligned"\nlag = "2h"\n', ["--lag", "2h"]),
    ("Europe/Berlin", "1d", "2020-10-25T23:00:00Z", "", []),
    ("Asia/Shanghai", "1h", "2024-01-01T13:00:00+08:00", 'window_form = "aligned"\nlag = "1h"\n', ["--lag", "1h"]),
]


def _trib_files(root, zone, period, t, flags) -> tuple[set[str], dict]:
    p = invoke_trib("files", str(root), "--layout", LAYOUT, "--timezone", zone, "--mode", "mtime",
                    "--schedule-time", t, "--period", period, *flags, "--json", check=True)
    doc = json.loads(p.stdout)
    return {f["path"] for f in doc["files"]}, doc["window"]


def _etl_dry_run(job, t) -> tuple[set[str], dict, str]:
    p = invoke_trib("etl", "run", job, "--schedule-time", t, "--dry-run", "--json", check=True)
    doc = json.loads(p.stdout)
    (inp,) = doc["inputs"]
    return set(inp["paths"]), inp["window"], doc["schedule_time"]


@pytest.mark.parametrize("zone,period,t,keys,flags", CASES)
def test_one_job_spelled_in_each_front_end_reads_the_same_files(tmp_path, zone, period, t, keys, flags):
    """Issue 19, Why 1: `trib files` and `trib etl run` read one window for one schedule time (and sql's vars)."""
    from tributary_read.spark.script import window_variables

    start = parse_instant(t) - 3 * 86_400_000
    root = _landing_zone(tmp_path, zone, start - start % H, 96)
    etl_files, etl_window, run_time = _etl_dry_run(_job(tmp_path, root, zone, period, keys), t)
    tz = parse_timezone(zone)
    assert parse_instant(run_time) == Schedule(parse_duration_ms(period), tz=tz).run_time(parse_instant(t))
    t = run_time  # the run's schedule time, as its report gives it
    files, window = _trib_files(root, zone, period, t, flags)
    assert files and etl_files == files
    assert (etl_window["start_ms"], etl_window["end_ms"]) == (window["start_ms"], window["end_ms"])
    opts = dict(zip(flags[::2], flags[1::2]))
    v = window_variables(t, parse_duration_ms(period), parse_duration_ms(opts.get("--lag", "0")), zone,
                         opts.get("--window-form", "aligned"),
                         parse_duration_ms(opts["--window"]) if "--window" in opts else None)
    assert (int(v["window_start_ms"]), int(v["window_end_ms"])) == (window["start_ms"], window["end_ms"])
    for f in files:  # the closed window, both bounds inclusive
        assert window["start_ms"] <= int(f.rsplit("/f", 1)[1][:-4]) <= window["end_ms"]


def test_the_spark_helper_and_the_jar_read_that_window_too(tmp_path, spark):
    from tributary_read.spark import read_incremental

    zone, period, t = "UTC", "1h", "2024-01-01T05:14:00Z"
    root = _landing_zone(tmp_path, zone, parse_instant("2024-01-01T00:00:00Z"), 8)
    files, window = _trib_files(root, zone, period, t, ["--lag", "10m"])
    from tributary_read.read.resolve import plain_layout

    df, batch = read_incremental(spark, str(root), mode="mtime", schedule_time=t, period=period, lag="10m",
                                 layout=plain_layout(LAYOUT, None, zone), read_options={"format": "text"})
    assert {f.path for f in batch.fileset.files} == files
    assert sorted(int(r[0]) for r in df.collect()) == sorted(int(f.rsplit("/f", 1)[1][:-4]) for f in files)
    from tributary_read.hive_udfs import registry as udfs

    udfs.register(spark)
    got = spark.sql(f"SELECT trib_window_start_ms('{t}', '{period}', '10m', '{zone}'), "
                    f"trib_window_end_ms('{t}', '{period}', '10m', '{zone}')").collect()[0]
    assert (got[0], got[1]) == (window["start_ms"], window["end_ms"])


@pytest.mark.parametrize("argv", [
    ["files", "{root}", "--layout", LAYOUT, "--schedule-time", "2024-01-01T05:00:00Z", "--period", "3600"],
    ["files", "{root}", "--layout", LAYOUT, "--schedule-time", "2024-01-01T05:00:00Z", "--period", "1h",
     "--lag", "3600"],
    ["clean", "{out}", "--older-than", "3600"],
    ["sql", "-f", "{script}", "--schedule-time", "2024-01-01T05:00:00Z", "--lag", "3600"],
    ["etl", "run", "{job_lag}", "--schedule-time", "2024-01-01T05:00:00Z", "--dry-run"],
])
def test_a_bare_number_is_refused_by_every_front_end(tmp_path, argv):
    """Issue 19, Why 4: "3600" meant one hour on the CLI and was an error in a job file and in the jar."""
    root = _landing_zone(tmp_path, "UTC", parse_instant("2024-01-01T00:00:00Z"), 1)
    script = tmp_path / "s.sql"
    script.write_text("SELECT 1;\n")
    job = _job(tmp_path, root, "UTC", "1h", 'window_form = "aligned"\nlag = 3600\n')
    subs = {"{root}": str(root), "{out}": str(tmp_path / "out"), "{script}": str(script), "{job_lag}": job}
    args = [subs.get(a, a) for a in argv]
    p = invoke_trib(*args)
    assert p.returncode == 3, p.stderr
    assert "3600 has no unit: write 3600s or 3600ms" in p.stderr and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [
    ["files", "{root}", "--layout", LAYOUT, "--timezone", "Asia/Shanghai", "--schedule-time", "{t}", "--period", "1h"],
    ["files", "{root}", "--layout", LAYOUT, "--timezone", "Asia/Shanghai", "--start", "{t}"],
    ["sql", "-f", "{script}", "--schedule-time", "{t}", "--timezone", "Asia/Shanghai"],
    ["etl", "run", "{job}", "--schedule-time", "{t}", "--dry-run"],
])
def test_a_time_without_an_offset_is_refused_the_same_way_everywhere(tmp_path, argv):
    """Issue 33, Why 5 (issue 19's instant parser): 06:00 meant Shanghai in one command and UTC in another."""
    root = _landing_zone(tmp_path, "Asia/Shanghai", parse_instant("2024-01-01T00:00:00Z"), 1)
    script = tmp_path / "s.sql"
    script.write_text("SELECT 1;\n")
    job = _job(tmp_path, root, "Asia/Shanghai", "1h", "")
    subs = {"{root}": str(root), "{script}": str(script), "{job}": job, "{t}": "2024-01-01T06:00:00"}
    args = [subs.get(a, a) for a in argv]
    p = invoke_trib(*args)
    assert p.returncode == 3, p.stderr
    assert ("has no UTC offset: write 2024-01-01T06:00:00Z (UTC) or 2024-01-01T06:00:00+08:00 (Asia/Shanghai)"
            in p.stderr), p.stderr
    if argv[0] != "sql":  # sql would go on to start Spark
        ok = invoke_trib(*[a.replace("2024-01-01T06:00:00", "2024-01-01T06:00:00+08:00") for a in args])
        assert ok.returncode == 0, ok.stderr


@pytest.mark.unit
@pytest.mark.parametrize("ms, text", [(0, "0s"), (1, "1ms"), (1500, "1500ms"), (60_000, "1m"), (90_000, "90s"),
                                      (3_600_000, "1h"), (86_400_000, "1d"), (604_800_000, "1w")])
def test_a_formatted_duration_parses_back(ms, text):
    from tributary_read.timespec import format_duration_ms

    assert format_duration_ms(ms) == text and parse_duration_ms(text) == ms
