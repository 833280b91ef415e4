"""Issue 25, item 1: consecutive ETL runs tile time, in every zone and for every period.

An mtime or manifest input reads exactly the job's period before T - lag, on the
job's local calendar (issue 19's one window function, read/window.py). The
property test below is the one that proved ``trib files`` windows, run against
the ETL's windows too; it is pure computation (no Spark, no files), so it is a
``unit`` test and runs in ``make test-unit`` and ``make test``.
"""

from __future__ import annotations

import json
import textwrap
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from conftest import invoke_trib

from tributary_read.etl.job import Job
from tributary_read.etl.run import schedule_time_ms, window_for
from tributary_read.read.window import TimeWindow
from tributary_read.table.config import Table, TableConfig
from tributary_read.table.layout import Layout
from tributary_read.timespec import parse_duration_ms, parse_instant

pytestmark = pytest.mark.unit

MIN = 60_000
H = 60 * MIN
#: whole-hour DST, half-hour DST (Lord_Howe), quarter-hour offsets, midnight transitions (Havana,
#: Santiago), southern hemisphere, and zones without DST
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata",
         "Pacific/Chatham", "Asia/Kathmandu", "America/St_Johns", "America/Havana", "America/Santiago"]
PERIODS = ["5m", "15m", "30m", "45m", "1h", "90m", "2h", "3h", "6h", "12h", "1d"]


def _transitions(tz, year: int = 2021) -> list[int]:
    """The instants the zone's UTC offset changes in ``year`` (a plain date when it never does)."""
    t = int(datetime(year, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
    out, prev = [], datetime.fromtimestamp(t / 1000, tz).utcoffset()
    for _ in range(366 * 96):
        t += 15 * MIN
        off = datetime.fromtimestamp(t / 1000, tz).utcoffset()
        if off != prev:
            out.append(t)
            prev = off
    return out or [int(datetime(year, 3, 28, tzinfo=timezone.utc).timestamp() * 1000)]


def _job(base, zone: str, period: str, keys: dict) -> Job:
    inp = {"table": "in", "view": "v", "mode": "mtime", **keys}
    return Job.from_dict({"job": {"name": "p", "sql": "q.sql", "period": period, "timezone": zone},
                          "inputs": [inp], "output": {"table": "out", "time_column": "ts"}},
                         path=str(base / "job.toml"))


@pytest.mark.parametrize("zone", ZONES)
def test_etl_windows_tile_like_trib_files_windows(tmp_path, zone):
    """11 zones x 11 periods x each DST change of 2021 x a schedule time every 5 minutes:
    the ETL's window of each run is ``trib files``' window of that run's schedule time, and
    consecutive runs (aligned, and each form with a lag) leave no gap and no overlap. Before issue 25
    an aligned window with a lag skipped or doubled a period where periods differ in length (an hourly
    job in Berlin with lag 2h lost an hour at the fall-back; a sliding 1d window lost one too)."""
    tz = ZoneInfo(zone)
    (tmp_path / "q.sql").write_text("SELECT * FROM v\n")
    for period in PERIODS:
        jobs = {"aligned": _job(tmp_path, zone, period, {}),
                **{f"{form}+{lag}": _job(tmp_path, zone, period, {"window_form": form, "lag": lag})
                   for form in ("aligned", "sliding") for lag in ("10m", "2h")}}
        p = jobs["aligned"].period_ms
        for t in _transitions(tz):
            runs: dict[int, dict[str, TimeWindow]] = {}
            s = t - p - 3 * H
            s -= s % (5 * MIN)
            while s < t + p + 3 * H:
                run = schedule_time_ms(s, jobs["aligned"])[0]
                assert run <= s < run + p + 2 * H, (zone, period, s, run)
                if run not in runs:
                    runs[run] = {name: window_for(job, job.inputs[0], run) for name, job in jobs.items()}
                    for lag in ("", "10m", "2h"):  # trib files given the run's schedule time reads the same
                        files = TimeWindow.for_schedule(schedule_time=run, period_ms=p, tz=tz,
                                                        lag_ms=parse_duration_ms(lag) if lag else None)
                        assert runs[run][f"aligned+{lag}" if lag else "aligned"] == files, (zone, period, run)
                    assert runs[run]["aligned"].end_ms + 1 == run, (zone, period, run)  # the period before T
                s += 5 * MIN
            ordered = [runs[k] for k in sorted(runs)]
            assert len(ordered) >= 2, (zone, period, t)
            for a, b in zip(ordered, ordered[1:]):
                for name in jobs:
                    assert b[name].start_ms == a[name].end_ms + 1, (zone, period, name, a[name].to_json(),
                                                                   b[name].to_json())


# -- through the CLI ------------------------------------------------------------------------
LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"


def _cli_job(tmp_path, period: str, zone: str, keys: str) -> str:
    out = tmp_path / "out"
    if not out.exists():
        Table.create(str(out), TableConfig(Layout(LAYOUT, "dt={yyyy}{MM}{dd}{HH}", zone), format="parquet"))
        (tmp_path / "land").mkdir()
    (tmp_path / "q.sql").write_text("SELECT value FROM v\n")
    (tmp_path / "job.toml").write_text(textwrap.dedent(f"""\
        [job]
        name = "w"
        sql = "q.sql"
        period = "{period}"
        timezone = "{zone}"

        [[inputs]]
        table = "land"
        view = "v"
        mode = "mtime"
        layout = "{LAYOUT}"
        format = "text"
        """) + keys + '\n[output]\ntable = "out"\ntime_column = "ts"\n')
    return str(tmp_path / "job.toml")


def _window(job: str, t: str) -> tuple[int, int]:
    doc = json.loads(invoke_trib("etl", "run", job, "--schedule-time", t, "--dry-run", "--json", check=True).stdout)
    w = doc["inputs"][0]["window"]
    return w["start_ms"], w["end_ms"]


@pytest.mark.parametrize("keys", ['window = "1d"\n', "", 'window_form = "sliding"\nwindow = "1d"\n',
                                  'window_form = "sliding"\nlag = "2h"\n', 'window_form = "aligned"\nlag = "2h"\n'])
@pytest.mark.parametrize("days", [("2020-10-23T22:00:00Z", "2020-10-24T22:00:00Z", "2020-10-25T23:00:00Z",
                                   "2020-10-26T23:00:00Z"),
                                  ("2020-03-27T23:00:00Z", "2020-03-28T23:00:00Z", "2020-03-29T22:00:00Z",
                                   "2020-03-30T22:00:00Z")])
def test_a_daily_job_in_berlin_tiles_across_both_dst_changes(tmp_path, keys, days):
    """Issue 25, Why 1: the run of 2020-10-25T23:00Z read from 10-24T23:00Z while the run before it ended
    at 22:00Z (an hour lost); on 2020-03-28 an hour was read by two runs. Local midnights, both forms."""
    job = _cli_job(tmp_path, "1d", "Europe/Berlin", keys)
    wins = [_window(job, t) for t in days]
    for a, b in zip(wins, wins[1:]):
        assert b[0] == a[1] + 1, (keys, a, b)
    lengths = sorted((w[1] + 1 - w[0]) // H for w in wins)
    assert lengths[0] in (23, 24) and lengths[-1] in (24, 25) and lengths != [24] * 4


def test_a_daily_job_without_a_window_reads_its_whole_day(tmp_path):
    """Issue 25, Why 2: with no ``window`` an mtime input read the last hour of its day (23 of 24 lost)."""
    job = _cli_job(tmp_path, "1d", "UTC", "")
    start, end = _window(job, "2024-01-02T00:00:00Z")
    assert (start, end + 1) == (parse_instant("2024-01-01T00:00:00Z"), parse_instant("2024-01-02T00:00:00Z"))


@pytest.mark.parametrize("keys,says", [
    ('window_form = "sliding"\nwindow = "30m"\n', "inputs[0].window 30m is shorter than job.period 1h"),
    ('window_form = "sliding"\nwindow = "2h"\n', "inputs[0].window 2h is longer than job.period 1h"),
    ('window = "30m"\n', "window_form"),
])
def test_a_window_other_than_the_period_is_refused_naming_period(tmp_path, keys, says):
    """Issue 25, Why 2: ``window = "30m"`` with ``period = "1h"`` lost half of every hour; a longer window
    read files twice. The ETL runs once a period, so neither can tile: refused, exit 3, one line."""
    job = _cli_job(tmp_path, "1h", "UTC", keys)
    p = invoke_trib("etl", "run", job, "--schedule-time", "2024-01-01T05:00:00Z", "--dry-run")
    assert p.returncode == 3, p.stderr
    assert says in p.stderr and "period" in p.stderr and len(p.stderr.strip().splitlines()) == 1
