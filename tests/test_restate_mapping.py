"""Which output partitions a restate run recomputes and which input partitions feed each (table/restatement.py)."""

from __future__ import annotations

import pytest

from tributary_read.errors import InvalidInputError
from tributary_read.table.restatement import affected, check_rows, covering, needed
from tributary_read.table.layout import Layout

pytestmark = pytest.mark.unit

HOURLY = Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")
DAILY_UTC = Layout("{yyyy}_{MM}_{dd}", "dt={yyyy}{MM}{dd}")
DAILY_BERLIN = Layout("{yyyy}_{MM}_{dd}", "dt={yyyy}{MM}{dd}", "Europe/Berlin")


def test_an_hour_feeds_its_day_and_a_day_needs_its_24_hours():
    h = HOURLY.parse("2026_11_28/06")
    (day,) = affected(DAILY_UTC, [h]).values()
    assert day.path == "2026_11_28"
    hours = needed(HOURLY, [day])
    assert len(hours) == 24 and next(iter(hours)) == "2026_11_28/00" and list(hours)[-1] == "2026_11_28/23"


def test_an_hour_restates_its_own_hour_only():
    assert list(affected(HOURLY, [HOURLY.parse("2026_11_28/06")])) == ["2026_11_28/06"]
    assert list(needed(HOURLY, [HOURLY.parse("2026_11_28/06")])) == ["2026_11_28/06"]


def test_zones_and_dst_days_follow_real_boundaries():
    # 2026-10-25 is 25 hours long in Berlin: its day needs the UTC hours 2026-10-24T22 .. 2026-10-25T22.
    day = DAILY_BERLIN.parse("2026_10_25")
    hours = list(needed(HOURLY, [day]))
    assert len(hours) == 25 and hours[0] == "2026_10_24/22" and hours[-1] == "2026_10_25/22"
    # A UTC hour that straddles no Berlin midnight feeds one day; the hour before a Berlin midnight one day.
    assert list(affected(DAILY_BERLIN, [HOURLY.parse("2026_10_24/21")])) == ["2026_10_24"]
    assert list(affected(DAILY_BERLIN, [HOURLY.parse("2026_10_24/22")])) == ["2026_10_25"]


def test_a_day_input_feeds_every_hour_of_an_hourly_output():
    assert len(affected(HOURLY, [DAILY_UTC.parse("2026_11_28")])) == 24
    assert len(covering(HOURLY, 0, 3_600_000 * 3)) == 3


def test_rows_outside_the_restated_partitions_are_refused():
    check_rows(["2026_11_28/06"], ["2026_11_28/06", "2026_11_28/07"])
    with pytest.raises(InvalidInputError, match="2026_11_28/09, which no input partition this run read feeds"):
        check_rows(["2026_11_28/06", "2026_11_28/09"], ["2026_11_28/06"])


def test_a_restate_writer_stages_every_file_and_an_emptied_partition_still_swaps(tmp_path):
    import os

    from tributary_read.table.restatement import restatements
    from tributary_read.table.config import Table, TableConfig
    from tributary_read.table.manifest import Transaction
    from tributary_read.table.restate_swap import finish_restate
    from tributary_read.write.writer import TableWriter

    t = Table.create(str(tmp_path / "t"), TableConfig(HOURLY, format="jsonl"))
    old = TableWriter(t)
    for ts in (0, 3_600_000, 3_600_001):  # 1970_01_01/00 and /01
        old.write(b'{"old":1}', ts)
    old.commit(Transaction("writer", {"src": 1}))
    w = TableWriter(t, restate_run="r7")
    w.write(b'{"new":1}', 5)  # hour 00 recomputed to one record; hour 01 recomputed to none
    files = w.flush()
    assert [f.staged for f in files] == [f"1970_01_01/.00.restate-r7/{os.path.basename(files[0].path)}"]
    with pytest.raises(InvalidInputError, match="committed by the restate that stages them"):
        w.commit(Transaction("etl:x", {"s": 1}))
    parts = affected(HOURLY, [HOURLY.parse("1970_01_01/00"), HOURLY.parse("1970_01_01/01")])
    c = t.log.commit(files, Transaction("etl:x", {"s": 1}), restated=restatements(t.storage, "r7", parts, files))
    assert [(r.directory, r.records_before, r.records_after) for r in c.restated] == [
        ("1970_01_01/00", 1, 1), ("1970_01_01/01", 2, 0)]
    finish_restate(t, c)
    visible = {d: sorted(n for n in os.listdir(t.storage.abspath(d)) if not n.startswith(".")) for d in parts}
    assert visible == {"1970_01_01/00": [os.path.basename(files[0].path)], "1970_01_01/01": []}
    with pytest.raises(InvalidInputError, match="which no input partition this run read feeds"):
        restatements(t.storage, "r8", {"1970_01_01/01": parts["1970_01_01/01"]}, files)
