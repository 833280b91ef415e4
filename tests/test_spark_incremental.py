"""read_incremental and Batch: resolve and read in one call, ack after the output is committed (issue 10, §1).

A plain ``yyyy_MM_dd/HH`` directory of text files another tool writes, read on
the shared ``local[2,2]`` session: a durable consumer's batches (acked, not
acked as after a crash, a late file into an old hour), an mtime window, and the
temp view a job's SQL reads.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.helpers import put
from tributary_read.errors import InvalidInputError
from tributary_read.read.resolve import plain_layout, resolve
from tributary_read.read.window import TimeWindow

H = 3_600_000
HOURLY = plain_layout("{yyyy}_{MM}_{dd}/{HH}")
TEXT = {"format": "text"}


def hour(ms: int) -> str:
    return HOURLY.for_time(ms).path


def dt(ms: int) -> str:
    return HOURLY.for_time(ms).values["dt"]


def rows(df) -> list[tuple[str, str]]:
    return sorted((r["value"], r["dt"]) for r in df.collect())


def test_consumer_batch_rerun_ack_and_late_file(spark, tmp_path):
    from tributary_read.spark import read_incremental

    root = tmp_path / "raw"
    now = int(time.time() * 1000) - 120_000  # the files' mtimes: older than the default min_age (1 minute)
    h0 = now // H * H - 3 * H  # inside the consumer's 7-day lookback
    put(root, f"{hour(h0)}/a.log", now, b"1\n2\n")
    put(root, f"{hour(h0 + H)}/b.log", now, b"3\n")

    def batch():
        return read_incremental(spark, str(root), consumer="etl", layout=HOURLY, read_options=TEXT, view="raw")

    df, b = batch()
    assert b.consumer == "etl" and b.plan_id and b.fileset.mode == "consumer"
    assert df.columns == ["value", "dt"]
    assert rows(spark.sql("SELECT value, dt FROM raw")) == [("1", dt(h0)), ("2", dt(h0)), ("3", dt(h0 + H))]

    # A crash before the ack: the re-run gets the same plan and the same files.
    put(root, f"{hour(h0 + 2 * H)}/c.log", now, b"4\n")
    put(root, f"{hour(h0)}/late.log", now, b"5\n")  # late, into an old hour
    _, b2 = batch()
    assert (b2.plan_id, b2.files) == (b.plan_id, b.files)

    ack = b.ack()  # the output is committed: now the consumer moves
    assert ack.acked and not ack.already_acked and ack.to_json()["plan_id"] == b.plan_id
    again = b2.ack()  # a re-run that crashed after acking acks again: a no-op
    assert again.already_acked and not again.acked

    _, b3 = batch()
    assert b3.plan_id != b.plan_id
    assert [f.path for f in b3.files] == [f"{hour(h0)}/late.log", f"{hour(h0 + 2 * H)}/c.log"]
    # the view now shows this batch; the late row keeps its hour's partition
    assert rows(spark.sql("SELECT value, dt FROM raw")) == [("4", dt(h0 + 2 * H)), ("5", dt(h0))]
    summary = b3.to_json()
    assert (summary["files"], summary["consumer"], summary["view"], summary["late"]) == (2, "etl", "raw", [])
    assert b3.ack().acked

    df4, b4 = batch()
    assert b4.files == () and df4.columns == ["value", "dt"]  # an empty batch still has its columns


def test_mtime_window_batch_has_nothing_to_ack(spark, tmp_path):
    from tributary_read.spark import read_incremental

    root = tmp_path / "raw"
    t0 = 1592956800000  # 2020-06-24T00:00Z
    for h in range(4):
        put(root, f"{hour(t0 + h * H)}/f.log", t0 + h * H + 1000, f"{h}\n".encode())
    put(root, f"{hour(t0)}/late.log", t0 + 2 * H + 5, b"late\n")  # old hour, written in the window
    window = TimeWindow(t0 + 2 * H, t0 + 3 * H - 1)
    df, b = read_incremental(spark, str(root), mode="mtime", window=window, layout=HOURLY, read_options=TEXT)
    assert rows(df) == [("2", dt(t0 + 2 * H)), ("late", dt(t0))]
    assert b.consumer is None and b.plan_id is None
    local = resolve(str(root), mode="mtime", window=window, layout=HOURLY)
    assert (b.fileset.files, b.fileset.plan, b.fileset.skipped) == (local.files, local.plan, local.skipped)
    a = b.ack()
    assert not a.acked and "nothing to ack" in a.note
    # the same window as (start, end) strings, listed on the executors
    _, b2 = read_incremental(spark, str(root), mode="mtime", layout=HOURLY, read_options=TEXT, lister="spark",
                             window=("2020-06-24T02:00:00Z", "2020-06-24T02:59:59.999Z"))
    assert b2.files == b.files and b2.to_json()["plan"]["window"] == b.to_json()["plan"]["window"]


@pytest.mark.parametrize("kw, message", [
    ({"view": "raw data"}, "bad view name"),
    ({"lookback_ms": 1}, "unknown option lookback_ms for a window read"),
    ({"consumer": "c", "window": TimeWindow(0, 1)}, "window cannot be combined with a consumer"),
    ({"consumer": "c", "lister": "spark"}, "lister cannot be combined with a consumer"),
    ({"consumer": "c", "since_version": 3}, "unknown option since_version for a consumer batch"),
    ({"state_dir": "/tmp/x"}, "state_dir goes with a consumer"),
    ({"lister": "cluster", "window": TimeWindow(0, 1)}, "unknown lister 'cluster'"),
    ({}, "a read with no bound returns every file, on every run: give a consumer, window, "
         "since_version/until_version or partitions, or ask for all_files=True"),
    ({"all_files": True, "window": TimeWindow(0, 1)}, "all_files=True cannot be combined with a bound"),
])
def test_bad_arguments_are_one_clear_error(spark, tmp_path, kw, message):
    from tributary_read.spark import read_incremental

    root = tmp_path / "raw"
    put(root, "2020_06_24/00/a.log", 1592956800000)
    with pytest.raises(InvalidInputError, match=message):
        read_incremental(spark, str(root), layout=HOURLY, read_options=TEXT, **kw)
    assert not (Path(root) / "_tributary").exists()  # nothing was planned


def test_manifest_consumer_on_a_trib_table_by_alias(spark, tmp_path, monkeypatch):
    """A trib table named by its trib.toml alias: committed files only, by version, until acked."""
    from tributary_read import FileEntry, Layout, Table, TableConfig
    from tributary_read.spark import read_incremental

    t = Table.create(str(tmp_path / "events"), TableConfig(layout=Layout("{yyyy}_{MM}_{dd}/{HH}",
                                                                         "dt={yyyy}{MM}{dd}{HH}"),
                                                           tracking="manifest"))
    (tmp_path / "trib.toml").write_text(f'[tables.events]\nroot = "{t.uri}"\n')
    monkeypatch.setenv("TRIB_CONFIG", str(tmp_path / "trib.toml"))

    def commit(h: int, ids: list[int]) -> None:
        rel = f"2020_06_24/{h:02d}/part-{h}.jsonl"
        data = "".join(f'{{"id": {i}}}\n' for i in ids).encode()
        t.storage.write(rel, data)
        t.log.commit([FileEntry(rel, len(data), len(ids), {"dt": f"20200624{h:02d}"})])

    commit(0, [1, 2])
    # written by trib's writer, never committed (an orphan of a crash): not read
    t.storage.write("2020_06_24/00/part-20200624000000-0badcafe-000001.jsonl", b'{"id": 99}\n')
    df, b = read_incremental(spark, "events", consumer="etl", schema="id INT")
    assert sorted((r["id"], r["dt"]) for r in df.collect()) == [(1, "2020062400"), (2, "2020062400")]
    assert b.fileset.plan["tracking"] == "manifest" and b.fileset.plan["until_version"] == 1
    commit(1, [3])
    assert read_incremental(spark, "events", consumer="etl", schema="id INT")[1].plan_id == b.plan_id
    assert b.ack().acked
    df, b = read_incremental(spark, "events", consumer="etl", schema="id INT")
    assert [f.path for f in b.files] == ["2020_06_24/01/part-1.jsonl"]
    assert [(r["id"], r["dt"]) for r in df.collect()] == [(3, "2020062401")]


def test_manifest_table_with_untracked_files_raises_unless_allowed(spark, tmp_path):
    """Issue 19: a batch that would leave files other tools wrote unread raises before anything is read."""
    from tributary_read import Layout, Table, TableConfig
    from tributary_read.errors import UntrackedDataError
    from tributary_read.spark import read_incremental

    t = Table.create(str(tmp_path / "raw"), TableConfig(layout=Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}"),
                                                        tracking="manifest"))
    now = int(time.time() * 1000)
    h0 = now // H * H - 3 * H
    put(tmp_path / "raw", f"{hour(h0)}/flume.log", h0 + 60_000, b'{"id": 1}\n')
    for kw in ({"consumer": "etl"}, {"window": TimeWindow(h0, h0 + H)}):
        with pytest.raises(UntrackedDataError, match=r"1 files .* not tracked.*--tracking both.*allow_untracked=True"):
            read_incremental(spark, t.uri, schema="id INT", **kw)
        df, b = read_incremental(spark, t.uri, schema="id INT", allow_untracked=True, **kw)
        assert df.count() == 0 and b.fileset.untracked.count == 1
    # outside the window's mtimes: not this batch's data
    assert read_incremental(spark, t.uri, schema="id INT", window=TimeWindow(h0 + H, now))[1].fileset.untracked is None
    # A batch holding trib's own files checks the whole table too, not only the hours of its files.
    from tributary_read import TableWriter

    w = TableWriter(t)
    w.write(b'{"id": 2}', h0 + 2 * H + 1)
    w.flush()
    w.commit()
    with pytest.raises(UntrackedDataError, match=r"1 files in the table are not tracked .*flume\.log"):
        read_incremental(spark, t.uri, schema="id INT", consumer="busy")
