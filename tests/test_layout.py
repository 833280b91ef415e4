"""Layouts: directory <-> partition values and period bounds, strict parsing, DST."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest

from tributary_read.errors import InvalidLayoutError
from tributary_read.table.layout import Layout, PartitionCache, PartitionDir

pytestmark = pytest.mark.unit

HOUR = 3_600_000
DAY = 24 * HOUR
HOURLY = "{yyyy}_{MM}_{dd}/{HH}"
HOURLY_SPEC = "dt={yyyy}{MM}{dd}{HH}"


def utc(y, mo, d, h=0, mi=0, s=0, ms=0) -> int:
    """Epoch ms of a UTC wall time."""
    return int(datetime(y, mo, d, h, mi, s, tzinfo=timezone.utc).timestamp()) * 1000 + ms


def hourly(tz: str = "UTC") -> Layout:
    return Layout(HOURLY, HOURLY_SPEC, tz)


def daily(tz: str = "UTC") -> Layout:
    return Layout("{yyyy}_{MM}_{dd}", "dt={yyyy}{MM}{dd}", tz)


def minutely(tz: str = "UTC") -> Layout:
    return Layout("{yyyy}_{MM}_{dd}/{HH}/{mm}", "dt={yyyy}{MM}{dd}{HH}{mm}", tz)


def _next_day(day: str) -> str:
    return (datetime.strptime(day, "%Y_%m_%d") + timedelta(days=1)).strftime("%Y_%m_%d")


def _hours_of_day(layout: Layout, day: PartitionDir) -> list[PartitionDir]:
    """The distinct hourly partitions of a day, in time order (sampled every 10 min)."""
    seen: dict[str, PartitionDir] = {}
    for t in range(day.start_ms, day.end_ms, 10 * 60_000):
        p = layout.for_time(t)
        assert p.start_ms <= t < p.end_ms, (p, t)
        seen.setdefault(p.path, p)
    return list(seen.values())


# -- DST ---------------------------------------------------------------------------

# (zone, day, UTC instant of local midnight, skipped local hour)
SPRING = [
    ("America/New_York", "2024_03_10", utc(2024, 3, 10, 5), "02"),
    ("Europe/Berlin", "2024_03_31", utc(2024, 3, 30, 23), "02"),
]
# (zone, day, UTC instant of local midnight, repeated local hour, its UTC start)
FALL = [
    ("America/New_York", "2024_11_03", utc(2024, 11, 3, 4), "01", utc(2024, 11, 3, 5)),
    ("Europe/Berlin", "2024_10_27", utc(2024, 10, 26, 22), "02", utc(2024, 10, 27, 0)),
]


@pytest.mark.parametrize("tz,day,midnight,skipped", SPRING)
def test_spring_forward_day_has_23_hours(tz, day, midnight, skipped):
    d = daily(tz).parse(day)
    assert d.start_ms == midnight
    assert d.end_ms - d.start_ms == 23 * HOUR
    assert d.end_ms == daily(tz).parse(_next_day(day)).start_ms

    hours = _hours_of_day(hourly(tz), d)
    names = [p.path.split("/")[1] for p in hours]
    assert names == [f"{h:02d}" for h in range(24) if f"{h:02d}" != skipped]
    assert hours[0].start_ms == d.start_ms and hours[-1].end_ms == d.end_ms
    for a, b in zip(hours, hours[1:]):
        assert a.end_ms == b.start_ms and a.end_ms - a.start_ms == HOUR
    for p in hours:
        assert hourly(tz).parse(p.path) == p


@pytest.mark.parametrize("tz,day,midnight,skipped", SPRING)
def test_skipped_local_hour_is_rejected(tz, day, midnight, skipped):
    with pytest.raises(InvalidLayoutError):
        hourly(tz).parse(f"{day}/{skipped}")
    assert hourly(tz).try_parse(f"{day}/{skipped}") is None
    hive = Layout("dt={yyyy}{MM}{dd}{HH}", HOURLY_SPEC, tz)
    with pytest.raises(InvalidLayoutError):
        hive.parse("dt=" + day.replace("_", "") + skipped)
    with pytest.raises(InvalidLayoutError):
        minutely(tz).parse(f"{day}/{skipped}/30")


@pytest.mark.parametrize("tz,day,midnight,repeated,rep_start", FALL)
def test_fall_back_day_has_25_hours(tz, day, midnight, repeated, rep_start):
    d = daily(tz).parse(day)
    assert d.start_ms == midnight
    assert d.end_ms - d.start_ms == 25 * HOUR

    hours = _hours_of_day(hourly(tz), d)
    assert [p.path.split("/")[1] for p in hours] == [f"{h:02d}" for h in range(24)]
    assert hours[0].start_ms == d.start_ms and hours[-1].end_ms == d.end_ms
    for a, b in zip(hours, hours[1:]):
        assert a.end_ms == b.start_ms
    # The repeated wall-clock hour is one directory holding two real hours.
    rep = hourly(tz).parse(f"{day}/{repeated}")
    assert (rep.start_ms, rep.end_ms) == (rep_start, rep_start + 2 * HOUR)
    assert hourly(tz).for_time(rep_start + HOUR // 2) == rep
    assert hourly(tz).for_time(rep_start + 3 * HOUR // 2) == rep
    assert sum(p.end_ms - p.start_ms for p in hours) == 25 * HOUR


@pytest.mark.parametrize(
    "tz,ts,path",
    [
        ("America/New_York", utc(2024, 3, 10, 6, 59, 59, 999), "2024_03_10/01"),
        ("America/New_York", utc(2024, 3, 10, 7), "2024_03_10/03"),
        ("America/New_York", utc(2024, 11, 3, 5, 59, 59, 999), "2024_11_03/01"),
        ("America/New_York", utc(2024, 11, 3, 6), "2024_11_03/01"),
        ("America/New_York", utc(2024, 11, 3, 6, 59, 59, 999), "2024_11_03/01"),
        ("America/New_York", utc(2024, 11, 3, 7), "2024_11_03/02"),
        ("America/New_York", utc(2024, 7, 4, 3, 59, 59, 999), "2024_07_03/23"),
        ("America/New_York", utc(2024, 1, 1, 4, 59, 59, 999), "2023_12_31/23"),
        ("Europe/Berlin", utc(2024, 3, 31, 0, 59, 59, 999), "2024_03_31/01"),
        ("Europe/Berlin", utc(2024, 3, 31, 1), "2024_03_31/03"),
        ("Europe/Berlin", utc(2024, 10, 27, 0), "2024_10_27/02"),
        ("Europe/Berlin", utc(2024, 10, 27, 1, 30), "2024_10_27/02"),
        ("Europe/Berlin", utc(2024, 10, 27, 2), "2024_10_27/03"),
        ("Europe/Berlin", utc(2024, 12, 31, 23), "2025_01_01/00"),
    ],
)
def test_for_time_maps_instants_around_transitions(tz, ts, path):
    p = hourly(tz).for_time(ts)
    assert p.path == path
    assert p.start_ms <= ts < p.end_ms
    assert hourly(tz).parse(path) == p


@pytest.mark.parametrize("tz", ["America/New_York", "Europe/Berlin"])
def test_every_hour_of_a_dst_year_round_trips(tz):
    layout = hourly(tz)
    parts = [layout.for_time(t) for t in range(utc(2024, 1, 1), utc(2025, 1, 1), HOUR)]
    assert len(parts) == 366 * 24
    distinct = list(dict.fromkeys(p.path for p in parts))
    assert distinct == sorted(distinct)  # directory names sort in time order
    assert len(distinct) == 366 * 24 - 1  # the fall-back hour shares one directory
    by_path = {p.path: p for p in parts}
    chain = [by_path[d] for d in distinct]
    for a, b in zip(chain, chain[1:]):
        assert a.end_ms == b.start_ms
    for p in chain:
        assert layout.parse(p.path) == p


# -- layout shapes -----------------------------------------------------------------


def test_hive_style_layout():
    layout = Layout("dt={yyyy}{MM}{dd}{HH}", HOURLY_SPEC)
    p = layout.parse("dt=2020062401")
    assert p.path == "dt=2020062401"
    assert p.values == {"dt": "2020062401"}
    assert p.spec == "dt=2020062401"
    assert (p.start_ms, p.end_ms) == (utc(2020, 6, 24, 1), utc(2020, 6, 24, 2))
    assert layout.for_time(utc(2020, 6, 24, 1, 59, 59, 999)) == p
    assert layout.dir_for_datetime(datetime(2020, 6, 24, 1, 30, tzinfo=timezone.utc)) == p.path
    assert layout.depth == 1 and layout.keys == ["dt"]
    for bad in ("dt=2020062424", "dt=202006240", "dt=20200624011", "dt=2020062401/x",
                "hr=2020062401", "DT=2020062401", "dt=2020-06-24", "2020062401"):
        with pytest.raises(InvalidLayoutError):
            layout.parse(bad)


def test_multi_key_partitions():
    layout = Layout(HOURLY, "dt={yyyy}{MM}{dd},hr={HH}")
    assert layout.keys == ["dt", "hr"]
    p = layout.parse("2020_06_24/01")
    assert p.values == {"dt": "20200624", "hr": "01"}
    assert list(p.values) == ["dt", "hr"]
    assert p.spec == "dt=20200624/hr=01"
    assert layout.for_time(utc(2020, 6, 24, 1, 30)) == p

    nested = Layout("dt={yyyy}-{MM}-{dd}/hr={HH}", "dt={yyyy}-{MM}-{dd}, hr={HH}")
    assert nested.keys == ["dt", "hr"]
    q = nested.parse("dt=2020-06-24/hr=01")
    assert q.spec == "dt=2020-06-24/hr=01"
    assert q.start_ms == p.start_ms and q.end_ms == p.end_ms

    three = Layout("{yyyy}/{MM}/{dd}", "year={yyyy},month={MM},day={dd}")
    assert three.parse("2020/06/24").spec == "year=2020/month=06/day=24"


def test_daily_layout():
    layout = Layout("{yyyy}/{MM}/{dd}", "dt={yyyy}{MM}{dd}")
    assert layout.period == timedelta(days=1)
    leap = layout.parse("2020/02/29")
    assert (leap.start_ms, leap.end_ms) == (utc(2020, 2, 29), utc(2020, 3, 1))
    assert layout.for_time(utc(2020, 2, 29, 23, 59, 59, 999)) == leap
    assert layout.for_time(utc(2020, 3, 1)).path == "2020/03/01"
    assert layout.parse("2020/12/31").end_ms == layout.parse("2021/01/01").start_ms
    for bad in ("2021/02/29", "2020/02/30", "2020/04/31", "2020/13/01", "2020/00/01",
                "2020/01/00", "2020/01/32", "2020/1/01", "2020/01"):
        with pytest.raises(InvalidLayoutError):
            layout.parse(bad)


def test_minute_layout():
    layout = minutely()
    assert layout.period == timedelta(minutes=1)
    p = layout.parse("2020_06_24/01/59")
    assert p.end_ms - p.start_ms == 60_000
    assert p.end_ms == layout.parse("2020_06_24/02/00").start_ms
    assert layout.for_time(utc(2020, 6, 24, 1, 59, 59, 999)) == p
    assert layout.parse("2020_12_31/23/59").end_ms == layout.parse("2021_01_01/00/00").start_ms
    for bad in ("2020_06_24/01/60", "2020_06_24/24/00", "2020_06_24/01/5", "2020_06_24/0159"):
        with pytest.raises(InvalidLayoutError):
            layout.parse(bad)
    # Quarter-hour zones keep minute partitions exact.
    ktm = minutely("Asia/Kathmandu")
    assert ktm.for_time(utc(2020, 6, 24, 0, 0)).path == "2020_06_24/05/45"


@pytest.mark.parametrize("tz", ["+08:00", "+0800"])
def test_fixed_positive_offset(tz):
    layout = hourly(tz)
    p = layout.parse("2020_06_24/00")
    assert (p.start_ms, p.end_ms) == (utc(2020, 6, 23, 16), utc(2020, 6, 23, 17))
    assert layout.for_time(utc(2020, 6, 23, 16)) == p
    assert layout.for_time(utc(2020, 6, 23, 15, 59, 59, 999)).path == "2020_06_23/23"
    day = daily(tz).parse("2020_06_24")
    assert (day.start_ms, day.end_ms) == (utc(2020, 6, 23, 16), utc(2020, 6, 24, 16))


def test_fixed_negative_half_hour_offset():
    layout = hourly("-03:30")
    p = layout.parse("2020_06_24/00")
    assert p.start_ms == utc(2020, 6, 24, 3, 30)
    assert layout.for_time(utc(2020, 6, 24, 3, 29, 59, 999)).path == "2020_06_23/23"


def test_repeated_token_must_agree():
    layout = Layout("{yyyy}/{yyyy}_{MM}_{dd}", "dt={yyyy}{MM}{dd}")
    assert layout.parse("2020/2020_06_24").values == {"dt": "20200624"}
    with pytest.raises(InvalidLayoutError):
        layout.parse("2020/2021_06_24")


def test_extreme_years():
    assert daily().parse("0001_01_01").start_ms == utc(1, 1, 1)
    assert hourly().parse("9999_12_31/22").end_ms == utc(9999, 12, 31, 23)
    # No period after the last representable day: reported, not an OverflowError.
    for layout, path in ((daily(), "9999_12_31"), (hourly(), "9999_12_31/23"),
                         (daily("+08:00"), "9999_12_31")):
        with pytest.raises(InvalidLayoutError):
            layout.parse(path)
        assert layout.try_parse(path) is None
    with pytest.raises(InvalidLayoutError):
        daily().parse("0000_01_01")


# -- strict parsing ----------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "\u0662\u0660\u0662\u0660_06_24/01",  # Arabic-Indic digits
        "2020_06_24/\u0660\u0661",
        "\uff12\uff10\uff12\uff10_06_24/01",  # fullwidth digits
        "2020_06_24/\uff10\uff11",
        "2020_\u0966\u0966_24/01",  # Devanagari digits
        "2020_6_24/01",
        "2020_06_4/01",
        "2020_06_24/1",
        "20200_06_24/01",
        "2020_06_24/001",
        "2020_13_01/00",
        "2020_00_10/00",
        "2020_02_30/00",
        "2021_02_29/00",
        "2020_06_31/00",
        "2020_06_00/00",
        "2020_06_24/24",
        "2020_06_24",
        "2020_06_24/01/extra",
        "extra/2020_06_24/01",
        "",
        "2020_06_24//01",
        "2020-06-24/01",
        " 2020_06_24/01",
        "2020_06_24/01 ",
        "2020_06_24/01\n",
        "2020_06_24/+1",
        "2020_06_24/-1",
        "2020_06_24/1_",
        "+020_06_24/01",
    ],
)
def test_parse_rejects(path):
    with pytest.raises(InvalidLayoutError):
        hourly().parse(path)
    assert hourly().try_parse(path) is None


DAILY = "{yyyy}_{MM}_{dd}"
DAILY_SPEC = "dt={yyyy}{MM}{dd}"


@pytest.mark.parametrize(
    "directory,partition,tz",
    [
        # unknown / malformed tokens
        (DAILY + "/{yy}", DAILY_SPEC, "UTC"),
        (DAILY + "/{H}", DAILY_SPEC, "UTC"),
        (DAILY + "/{hh}", DAILY_SPEC, "UTC"),
        (DAILY + "/{}", DAILY_SPEC, "UTC"),
        (DAILY + "/{HH", DAILY_SPEC, "UTC"),
        (DAILY + "/HH}", DAILY_SPEC, "UTC"),
        (DAILY + "/{{HH}}", DAILY_SPEC, "UTC"),
        # layouts that skip or lack tokens
        ("{yyyy}/{dd}", "dt={yyyy}{dd}", "UTC"),
        ("{yyyy}/{MM}", "dt={yyyy}{MM}", "UTC"),
        ("{MM}/{dd}/{HH}", "dt={MM}{dd}{HH}", "UTC"),
        (DAILY + "/{mm}", "dt={yyyy}{MM}{dd}{mm}", "UTC"),
        ("{yyyy}_{dd}/{HH}", "dt={yyyy}{dd}{HH}", "UTC"),
        ("static", "dt=x", "UTC"),
        # bad literals and structure
        (DAILY + "'", DAILY_SPEC, "UTC"),
        (DAILY + '"', DAILY_SPEC, "UTC"),
        (DAILY + ";drop", DAILY_SPEC, "UTC"),
        (DAILY + " x", DAILY_SPEC, "UTC"),
        (DAILY + "`", DAILY_SPEC, "UTC"),
        (DAILY + "\n", DAILY_SPEC, "UTC"),
        (DAILY + "\\{HH}", DAILY_SPEC, "UTC"),
        (DAILY + "/\u00e9{HH}", DAILY_SPEC, "UTC"),
        (DAILY + "/*", DAILY_SPEC, "UTC"),
        ("/" + DAILY, DAILY_SPEC, "UTC"),
        (DAILY + "/", DAILY_SPEC, "UTC"),
        ("{yyyy}_{MM}//{dd}", DAILY_SPEC, "UTC"),
        ("", DAILY_SPEC, "UTC"),
        # malformed partition specs
        (DAILY, "dt", "UTC"),
        (DAILY, "=x", "UTC"),
        (DAILY, "={yyyy}", "UTC"),
        (DAILY, "dt=", "UTC"),
        (DAILY, "", "UTC"),
        (DAILY, "dt={HH}", "UTC"),
        (DAILY, "dt={yyyy}{MM}{dd}{HH}", "UTC"),
        (DAILY, "dt={yyyy}{MM}{dd},dt={dd}", "UTC"),
        (DAILY, "dt={yyyy}{MM}{dd},", "UTC"),
        (DAILY, "1dt={yyyy}", "UTC"),
        (DAILY, "d t={yyyy}", "UTC"),
        (DAILY, "dt\n={yyyy}{MM}{dd}", "UTC"),
        (DAILY, "dt={yyyy}{MM}{dd},hr\n={dd}", "UTC"),
        (DAILY, "dt={yyyy};drop", "UTC"),
        (DAILY, "dt='{yyyy}'", "UTC"),
        (DAILY, 'dt="{yyyy}"', "UTC"),
        (DAILY, "dt=`{yyyy}`", "UTC"),
        (DAILY, "dt={yyyy} {MM}", "UTC"),
        (DAILY, "dt=x;y={dd}", "UTC"),
        (DAILY, "dt={yy}", "UTC"),
        # time zones
        (DAILY, DAILY_SPEC, "Mars/Olympus_Mons"),
        (DAILY, DAILY_SPEC, "America"),
        (DAILY, DAILY_SPEC, ""),
        (DAILY, DAILY_SPEC, "../etc/passwd"),
        (DAILY, DAILY_SPEC, "+8:00"),
        (DAILY, DAILY_SPEC, "+08:99"),
        (DAILY, DAILY_SPEC, "+24:00"),
        (DAILY, DAILY_SPEC, "-25:00"),
        (DAILY, DAILY_SPEC, "+99:99"),
    ],
)
def test_bad_layouts_are_rejected(directory, partition, tz):
    with pytest.raises(InvalidLayoutError):
        Layout(directory, partition, tz)


@pytest.mark.parametrize("tz", ["UTC", "Z", "utc", "+00:00", "-12:00", "+14:00", "+05:45",
                                "Asia/Kolkata", "Australia/Lord_Howe"])
def test_good_timezones(tz):
    assert daily(tz).parse("2020_06_24").path == "2020_06_24"


def test_literals_allowed_in_layouts():
    layout = Layout("year={yyyy}/v1.day-{MM}+{dd}", "ds={yyyy}-{MM}-{dd}")
    p = layout.parse("year=2020/v1.day-06+24")
    assert p.spec == "ds=2020-06-24"
    assert layout.to_dict() == {"directory": "year={yyyy}/v1.day-{MM}+{dd}",
                                "partition": "ds={yyyy}-{MM}-{dd}", "timezone": "UTC"}


# -- PartitionDir ------------------------------------------------------------------


@pytest.mark.parametrize(
    "layout,path,nxt",
    [
        (hourly(), "2020_06_24/23", "2020_06_25/00"),
        (hourly(), "2020_12_31/23", "2021_01_01/00"),
        (hourly(), "2020_02_28/23", "2020_02_29/00"),
        (hourly(), "2021_02_28/23", "2021_03_01/00"),
        (hourly("America/New_York"), "2024_03_10/01", "2024_03_10/03"),
        (hourly("Europe/Berlin"), "2024_10_27/02", "2024_10_27/03"),
        (daily(), "2020_02_28", "2020_02_29"),
        (daily(), "2019_02_28", "2019_03_01"),
        (daily("America/New_York"), "2024_11_02", "2024_11_03"),
        (minutely(), "2020_06_24/23/59", "2020_06_25/00/00"),
    ],
)
def test_end_is_exclusive_and_is_the_next_start(layout, path, nxt):
    p = layout.parse(path)
    assert p.start_ms < p.end_ms
    assert p.end_ms == layout.parse(nxt).start_ms
    assert layout.for_time(p.start_ms) == p
    assert layout.for_time(p.end_ms - 1) == p
    assert layout.for_time(p.end_ms).path == nxt


def test_partition_dir_spec_and_identity():
    p = hourly().parse("2020_06_24/01")
    assert p == PartitionDir("2020_06_24/01", {"dt": "2020062401"}, utc(2020, 6, 24, 1),
                             utc(2020, 6, 24, 2))
    assert p.spec == "dt=2020062401"
    assert hash(p) == hash(hourly().for_time(utc(2020, 6, 24, 1, 30)))
    with pytest.raises(AttributeError):
        p.path = "x"  # frozen


# -- PartitionCache ----------------------------------------------------------------

TRANSITIONS = [utc(2024, 3, 10, 7), utc(2024, 11, 3, 6), utc(2024, 3, 31, 1), utc(2024, 10, 27, 1),
               utc(2024, 4, 6, 15), utc(2024, 10, 5, 15)]  # NY, Berlin, Lord Howe (30-min DST)


def _instants(rng: random.Random, n: int) -> list[int]:
    out = []
    for _ in range(n):
        if rng.random() < 0.5:
            t = rng.randrange(utc(1990, 1, 1), utc(2060, 1, 1))
        else:
            t = rng.choice(TRANSITIONS) + rng.randrange(-3 * HOUR, 3 * HOUR)
        out.append(t)
        out.append(t - t % 60_000 + rng.randrange(60_000))  # same UTC minute: a cache hit
    return out


@pytest.mark.parametrize("tz", ["UTC", "America/New_York", "Europe/Berlin", "+08:00", "-03:30",
                                "Asia/Kolkata", "Asia/Kathmandu", "Australia/Lord_Howe"])
def test_partition_cache_matches_for_time(tz):
    rng = random.Random(f"cache-{tz}")
    for layout in (hourly(tz), daily(tz), minutely(tz)):
        cache = PartitionCache(layout)
        small = PartitionCache(layout, limit=3)  # exercises eviction
        for t in _instants(rng, 300):
            expected = layout.for_time(t)
            assert cache(t) == expected, (layout.directory, tz, t)
            assert small(t) == expected, (layout.directory, tz, t)


@pytest.mark.parametrize("layout_fn", [minutely, hourly, daily])
def test_partition_cache_with_sub_minute_zone_offset(layout_fn):
    # Liberia kept local mean time, UTC-00:44:30, until 1972: partition
    # boundaries fall at :30 seconds past a UTC minute.
    layout = layout_fn("Africa/Monrovia")
    cache = PartitionCache(layout)
    base = utc(1971, 6, 1, 12, 44)  # local 11:59:30 -> hour and minute boundaries at :30 s
    if layout_fn is daily:
        base = utc(1971, 6, 1, 0, 44)  # local midnight at 00:44:30 UTC
    for t in (base + 10_000, base + 40_000, base + 29_999, base + 30_000, base + 59_999):
        expected = layout.for_time(t)
        assert expected.start_ms <= t < expected.end_ms
        assert cache(t) == expected, t
    assert layout.for_time(base + 10_000) != layout.for_time(base + 40_000)


# -- the partition spec: templates, value spans, the inverse mapping ---------------
def test_partition_templates_and_tokens():
    lay = Layout("dt={yyyy}{MM}{dd}/hr={HH}", " dt={yyyy}{MM}{dd} , hr={HH}")
    assert lay.partition_templates == {"dt": "{yyyy}{MM}{dd}", "hr": "{HH}"}
    assert lay.partition_tokens == ["yyyy", "MM", "dd", "HH"]
    assert Layout(HOURLY, "dt={yyyy}{MM}{dd}").partition_tokens == ["yyyy", "MM", "dd"]


def test_value_span_is_the_period_a_value_names():
    lay = Layout("{yyyy}/{MM}/{dd}/{HH}", "y={yyyy},ym={yyyy}-{MM},d={dd},dt={yyyy}{MM}{dd}{HH}")
    assert lay.value_span("dt", "2020062401") == (utc(2020, 6, 24, 1), utc(2020, 6, 24, 2))
    assert lay.value_span("ym", "2020-12") == (utc(2020, 12, 1), utc(2021, 1, 1))
    assert lay.value_span("y", "2020") == (utc(2020, 1, 1), utc(2021, 1, 1))
    # Not ordered like time, not a fit, not a real time, no end: nothing to prune by.
    for key, value in (("d", "24"), ("dt", "202006240"), ("dt", "2021022900"), ("nokey", "2020"),
                       ("y", "9999")):
        assert lay.value_span(key, value) is None, (key, value)
    berlin = Layout("{yyyy}_{MM}_{dd}", "dt={yyyy}{MM}{dd}", "Europe/Berlin")
    assert berlin.value_span("dt", "20200624") == (utc(2020, 6, 23, 22), utc(2020, 6, 24, 22))


def test_default_partition_uses_every_token_in_order():
    from tributary_read.table.layout import default_partition

    assert default_partition(HOURLY) == HOURLY_SPEC
    assert default_partition("{dd}/{yyyy}{MM}/{dd}") == "dt={dd}{yyyy}{MM}"


def test_partition_mapper_inverts_the_layout():
    from tributary_read.table.layout import PartitionMapper

    m = PartitionMapper(Layout(HOURLY, HOURLY_SPEC))
    assert m.directory({"dt": "2024013123"}) == "2024_01_31/23"
    for bad in ({"dt": "2024023000"}, {"dt": "202401010"}, {"dt": "__HIVE_DEFAULT_PARTITION__"}, {"x": "2024010100"}):
        assert m.directory(bad) is None
    two = PartitionMapper(Layout("dt={yyyy}{MM}{dd}/hr={HH}", "dt={yyyy}{MM}{dd},hr={HH}"))
    assert two.directory({"dt": "20240101", "hr": "05"}) == "dt=20240101/hr=05"
    with pytest.raises(InvalidLayoutError, match="several directories would share one Hive partition"):
        PartitionMapper(Layout(HOURLY, "dt={yyyy}{MM}{dd}"))


def test_table_create_refuses_a_partition_spec_that_omits_a_layout_token(tmp_path):
    """``table create`` refuses what ``partitions sync`` would refuse later (one rule, Layout.check_one_to_one):
    24 hourly directories under one ``dt=`` partition, which Hive cannot mount. Nothing is created."""
    from conftest import invoke_trib

    from tributary_read.table.config import Table, TableConfig

    root = tmp_path / "t"
    for spec, missing in (("dt={yyyy}{MM}{dd}", "{HH}"), ("dt={yyyy}{MM},hr={HH}", "{dd}")):
        p = invoke_trib("table", "create", str(root), "--layout", HOURLY, "--partition", spec)
        assert p.returncode == 3 and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert f"omits {missing} of layout" in p.stderr and "Traceback" not in p.stderr, p.stderr
        assert not root.exists()
        with pytest.raises(InvalidLayoutError, match="several directories would share one Hive partition"):
            Table.create(str(root), TableConfig(Layout(HOURLY, spec)))
        assert not root.exists()
    assert invoke_trib("table", "create", str(root), "--layout", HOURLY, "--partition", "dt={yyyy}{MM}{dd},hr={HH}",
                       ).returncode == 0


def test_a_plain_directory_layout_that_fits_no_directory_is_bad_input_not_0_files(tmp_path):
    """``trib files --layout`` whose layout fits none of ROOT's directories exits 3 with one line (a wrong
    layout or ROOT), for a window, --all and a consumer alike, and the consumer saves no plan; an empty
    directory, and a window with nothing new, stay an empty answer (exit 0)."""
    from conftest import invoke_trib

    land = tmp_path / "land"
    (land / "2026-11-26/10").mkdir(parents=True)
    (land / "2026-11-26/10/x.jsonl").write_text('{"a": 1}\n')
    state = tmp_path / "state"
    for extra in (["--all"], ["--start", "0", "--end", "9999999999999"],
                  ["--consumer", "c", "--state-dir", str(state)]):
        p = invoke_trib("files", str(land), "--layout", HOURLY, *extra)
        assert p.returncode == 3 and p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, (extra, p.stderr)
        assert f"fits '{HOURLY}'" in p.stderr and "2026-11-26/10/x.jsonl" in p.stderr and "--layout" in p.stderr
    assert not state.exists()
    right = "{yyyy}-{MM}-{dd}/{HH}"
    p = invoke_trib("files", str(land), "--layout", right, "--all")
    assert p.returncode == 0 and p.stdout.split() == ["2026-11-26/10/x.jsonl"], p.stderr
    p = invoke_trib("files", str(land), "--layout", right, "--start", "2020-01-01T00:00:00Z", "--end", "2020-01-01T01:00:00Z")
    assert p.returncode == 0 and p.stdout == "", p.stderr  # nothing new in this window: an empty answer
    (tmp_path / "empty").mkdir()
    p = invoke_trib("files", str(tmp_path / "empty"), "--layout", HOURLY, "--all")
    assert p.returncode == 0 and p.stdout == "", p.stderr
    # A partition filter prunes the listing to where the layout points, so the mistake hid behind it:
    # a bounded filter lists only candidate directories, an open one walks; both say the layout is wrong.
    for spec, example in (("dt>=2026112600,dt<2026112700", "e.g. 2026-11-26)"), ("dt>=2026112600", "e.g. 2026-11-26/10)")):
        p = invoke_trib("files", str(land), "--layout", HOURLY, "--partitions", spec)
        assert p.returncode == 3 and p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, (spec, p.stderr)
        assert f"fits '{HOURLY}'" in p.stderr and example in p.stderr, p.stderr
        p = invoke_trib("files", str(land), "--layout", right, "--partitions", spec)
        assert p.returncode == 0 and p.stdout.split() == ["2026-11-26/10/x.jsonl"], p.stderr
    p = invoke_trib("files", str(land), "--layout", right, "--partitions", "dt>=2030010100,dt<2030010200")
    assert p.returncode == 0 and p.stdout == "", p.stderr  # the layout fits; that day is not there yet
