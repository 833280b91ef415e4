"""write(): Spark tasks write hidden staged files, the driver commits one manifest per transaction.

Real Spark (the shared ``local[2,2]`` session: a failed task is retried once),
real tables on local disk and on the S3 server, the real ``trib`` CLI for
verify/clean. Data is tiny: what is proved is where rows land and what the
manifest lists, not speed (benchmarks/bench_etl.py).
"""

from __future__ import annotations

import io
import json
import threading
import time

import pyarrow.parquet as pq
import pytest

from conftest import invoke_trib
from tributary_read.errors import BadRecordError, InvalidInputError, LogRetentionError
from tributary_read.table.config import Table, TableConfig
from tributary_read.table.layout import Layout
from tributary_read.table.log import checkpoint_path
from tributary_read.table.manifest import Transaction
from tributary_read.table.retention import clean_log

H = 3_600_000
T0 = 1_704_067_200_000  # 2024-01-01T00:00Z
LAYOUT = Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")


def _table(root, fmt="parquet") -> Table:
    return Table.create(str(root), TableConfig(LAYOUT, format=fmt))


def _frame(spark, rows, parts=3):
    """(id, ms) rows as a DataFrame with ``ts`` a TIMESTAMP, in ``parts`` partitions."""
    from pyspark.sql import functions as F

    return (spark.createDataFrame(rows, "id long, ms long")
            .withColumn("ts", F.timestamp_millis("ms")).repartition(parts))


def _rows(n=60, newest=T0 + 5 * H):
    """``n`` rows, most in the newest hour, every 4th one 1-3 hours late (an older event time)."""
    return [(i, newest + i * 1000 - (i % 3 + 1) * H * (i % 4 == 0)) for i in range(n)]


def _expected(rows) -> dict[int, str]:
    return {i: LAYOUT.for_time(ms).path for i, ms in rows}


def _landed_parquet(table: Table, files) -> dict[int, str]:
    """id -> partition directory of the file it was read from (every committed file read back)."""
    out: dict[int, str] = {}
    for f in files:
        t = pq.read_table(table.storage.abspath(f.path))
        assert t.num_rows == f.records
        for i in t.column("id").to_pylist():
            assert i not in out, f"id {i} written twice"
            out[i] = f.path.rsplit("/", 1)[0]
    return out


def test_rows_land_in_the_partition_of_their_event_time_one_manifest(spark, tmp_path):
    table = _table(tmp_path / "out")
    rows = _rows()
    from tributary_read.spark.write import write

    txn = Transaction("etl:hourly", {"schedule_time_ms": T0 + 6 * H}, {"note": "t"})
    r = write(_frame(spark, rows), table, time_column="ts", transaction=txn)

    assert table.log.latest_version() == 1 and r.version == 1 and not r.already_committed
    commit = table.log.read_commit(1)
    # the transaction, and the table's columns after it (the output schema is part of the table)
    assert commit.transaction.meta == {"note": "t", "schema": [
        {"name": "id", "type": "bigint", "nullable": True}, {"name": "ms", "type": "bigint", "nullable": True},
        {"name": "ts", "type": "timestamp", "nullable": True}]}
    assert (commit.transaction.app_id, commit.transaction.offsets) == (txn.app_id, txn.offsets)
    assert commit.protocol == "rename"  # the default: hidden until committed
    assert not list((tmp_path / "out").rglob(".*.inprogress"))  # and renamed visible right after
    assert set(commit.files) == set(r.files) and len(r.files) >= 4  # 3 tasks x several hours
    assert r.records == len(rows) == commit.records
    expected = _expected(rows)
    assert r.partitions == tuple(sorted(set(expected.values())))  # the late hours included
    assert len(r.partitions) == 4
    assert _landed_parquet(table, r.files) == expected
    # the rows read back with Spark, with the same values and types
    back = spark.read.parquet(*[table.storage.uri_for(f.path) for f in r.files])
    assert {f.name: f.dataType.simpleString() for f in back.schema} == {
        "id": "bigint", "ms": "bigint", "ts": "timestamp"}
    assert sorted((x.id, x.ms, int(x.ts.timestamp() * 1000)) for x in back.collect()) == sorted(
        (i, ms, ms) for i, ms in rows)
    assert json.loads(json.dumps(r.to_json()))["partitions"] == list(r.partitions)


def test_text_format_routes_by_epoch_ms_and_reads_back_with_spark(spark, tmp_path):
    """jsonl: each row as Spark's to_json encodes it; an integer time column is epoch ms."""
    table = _table(tmp_path / "out", "jsonl")
    rows = _rows(20)
    from tributary_read.spark.write import write

    r = write(_frame(spark, rows, 2).drop("ts"), table, time_column="ms")
    assert r.version == 1 and r.commit.transaction is None and r.records == 20
    landed = {}
    for f in r.files:
        lines = (tmp_path / "out" / f.path).read_text().splitlines()
        assert len(lines) == f.records
        for doc in map(json.loads, lines):
            landed[doc["id"]] = f.path.rsplit("/", 1)[0]
    assert landed == _expected(rows)
    back = spark.read.json([table.storage.uri_for(f.path) for f in r.files])
    assert sorted((x.id, x.ms) for x in back.collect()) == sorted(rows)


def test_rerun_of_a_transaction_returns_the_existing_commit_before_any_task(spark, tmp_path):
    table = _table(tmp_path / "out")
    rows = _rows(12)
    from tributary_read.spark.write import write

    txn = Transaction("etl:hourly", {"schedule_time_ms": T0})
    first = write(_frame(spark, rows), table, time_column="ts", transaction=txn)
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "out").rglob("*.parquet"))
    again = Transaction("etl:hourly", {"schedule_time_ms": T0}, {"other": "meta is not identity"})
    redo = write(_frame(spark, rows), table, time_column="ts", transaction=again)
    assert redo.already_committed and not first.already_committed
    assert redo.version == first.version == 1 and redo.files == first.files and redo.records == first.records
    assert table.log.latest_version() == 1
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "out").rglob("*.parquet")) == before
    # another schedule time of the same job is new; then the first one, re-run as a backfill, is still done
    write(_frame(spark, rows[:3]), table, time_column="ts", transaction=Transaction("etl:hourly",
                                                                                    {"schedule_time_ms": T0 + H}))
    redo = write(_frame(spark, rows), table, time_column="ts", transaction=txn)
    assert redo.already_committed and redo.version == 1 and table.log.latest_version() == 2
    assert table.log.find_transaction(txn).version == 1
    assert table.log.find_transaction(Transaction("etl:hourly", {"schedule_time_ms": T0 - H})) is None


def test_concurrent_copy_commits_first_second_copy_files_are_orphans(spark, tmp_path):
    """A copy that passed the check while the other was running finds the other's commit
    at its own (already_committed, that version); its files are orphans that verify
    reports and clean would delete."""
    from pyspark.sql import functions as F

    from tributary_read.spark.write import write

    table = _table(tmp_path / "out")
    rows = _rows(10)
    txn = Transaction("etl:hourly", {"schedule_time_ms": T0})
    slow = F.udf(lambda x: time.sleep(1.5) or x if x == 0 else x, "long")  # holds the job while the other commits
    df = _frame(spark, rows, 2).withColumn("id", slow("id"))
    outcome = {}

    def second_copy():
        try:
            outcome["result"] = write(df, table, time_column="ts", transaction=txn)
        except Exception as e:  # noqa: BLE001 - inspected below
            outcome["error"] = e

    runner = threading.Thread(target=second_copy)
    runner.start()
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 60
    while not tracker.getActiveJobsIds() and time.monotonic() < deadline:  # the check is behind it
        time.sleep(0.05)
    assert tracker.getActiveJobsIds(), "the second copy's job never started"
    # the first copy's commit (an empty run of the same transaction) lands meanwhile
    Table.load(str(tmp_path / "out")).log.commit([], txn, writer="first-copy")
    runner.join(120)
    result = outcome.get("result")
    assert result is not None and result.already_committed, outcome
    assert result.version == 1 and result.files == () and table.log.latest_version() == 1
    assert table.log.state().files == {}  # the records are the first copy's: none
    # The refused copy wrote, and its files were kept (a commit was attempted), hidden (rename protocol).
    on_disk = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*part-*"))
    assert len(on_disk) >= 2 and all(p.rsplit("/", 1)[1].startswith(".") for p in on_disk), on_disk

    verify = invoke_trib("verify", str(tmp_path / "out"), "--json")
    assert verify.returncode == 0, verify.stderr
    assert sorted(o["path"] for o in json.loads(verify.stdout)["orphans"]) == on_disk
    clean = invoke_trib("clean", str(tmp_path / "out"), "--older-than", "0s", "--dry-run", "--json")
    assert clean.returncode == 0, clean.stderr
    assert sorted(d["path"] for d in json.loads(clean.stdout)["deleted"]) == on_disk


def test_a_task_that_fails_once_commits_only_its_retry(spark, tmp_path):
    """The first attempt of every task writes a batch, then raises (trib.fault.write);
    Spark retries it. Only the retries' files are committed; the failed attempts'
    files were deleted by abort()."""
    from tributary_read.spark.write import FAULT_PROPERTY, write

    table = _table(tmp_path / "out")
    rows = _rows(40)
    sc = spark.sparkContext
    sc.setLocalProperty(FAULT_PROPERTY, "fail_first_attempt")
    try:
        r = write(_frame(spark, rows, 2), table, time_column="ts",
                  transaction=Transaction("etl:hourly", {"schedule_time_ms": T0}))
    finally:
        sc.setLocalProperty(FAULT_PROPERTY, None)
    assert r.records == len(rows) == table.log.read_commit(r.version).records
    assert _landed_parquet(table, r.files) == _expected(rows)  # each row once
    on_disk = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("part-*"))
    assert on_disk == sorted(f.path for f in r.files)  # nothing of the failed attempts is left
    # two tasks, each retried once: the committed writer ids are the retries' (ids 1 apart from the first try)
    assert len({f.path.rsplit("/", 1)[1].rsplit("-", 1)[0] for f in r.files}) == 2


def test_bad_times_fail_the_write_and_commit_nothing(spark, tmp_path):
    from pyspark.sql import functions as F

    from tributary_read.spark.write import write

    table = _table(tmp_path / "out")
    rows = _rows(10) + [(100, None)]
    df = _frame(spark, rows, 2)
    with pytest.raises(BadRecordError, match=r"1 row\(s\) have a null time.*'ts'.*nothing was committed"):
        write(df, table, time_column="ts", transaction=Transaction("etl:hourly", {"schedule_time_ms": T0}))
    assert table.log.latest_version() == 0
    assert not list((tmp_path / "out").rglob("part-*"))  # never handed to a commit: removed
    with pytest.raises(InvalidInputError, match="'ts' is string"):
        write(df.withColumn("ts", F.col("ts").cast("string")), table, time_column="ts")
    with pytest.raises(InvalidInputError, match="'nope' is not in the DataFrame"):
        write(df, table, time_column="nope")


def test_rename_table_hides_files_until_the_commit(spark, tmp_path):
    """A ``rename`` table keeps its contract: tasks write hidden names, renamed after the commit."""
    from tributary_read.spark.write import write

    table = Table.create(str(tmp_path / "out"), TableConfig(LAYOUT, format="parquet", protocol="rename"))
    rows = _rows(12)
    r = write(_frame(spark, rows, 2), table, time_column="ts",
              transaction=Transaction("etl:hourly", {"schedule_time_ms": T0}))
    assert r.commit.protocol == "rename" and all(f.staged and "/." in "/" + f.staged for f in r.files)
    assert not list((tmp_path / "out").rglob("*.inprogress"))
    assert _landed_parquet(table, r.files) == _expected(rows)


def test_empty_frame_with_a_transaction_still_commits(spark, tmp_path):
    from tributary_read.spark.write import write

    table = _table(tmp_path / "out")
    empty = _frame(spark, [], 2)
    assert write(empty, table, time_column="ts").commit is None  # nothing to record
    txn = Transaction("etl:hourly", {"schedule_time_ms": T0})
    r = write(empty, str(tmp_path / "out"), time_column="ts", transaction=txn)
    assert r.version == 1 and r.files == () and r.partitions == () and r.records == 0
    assert table.log.find_transaction(txn).version == 1


def test_write_to_s3(spark, s3_root):
    """Executors reopen an S3 table from its root and the driver's storage options
    (here from the driver's environment, which the executors' Python workers lack)."""
    from tributary_read.spark.write import write

    table = Table.create(s3_root, TableConfig(LAYOUT, format="parquet"))
    rows = _rows(8)
    r = write(_frame(spark, rows, 2), table, time_column="ts",
              transaction=Transaction("etl:hourly", {"schedule_time_ms": T0}))
    reopened = Table.load(s3_root)
    assert reopened.log.read_commit(1).records == 8
    landed = {}
    for f in r.files:
        t = pq.read_table(io.BytesIO(reopened.storage.read(f.path)))
        landed.update({i: f.path.rsplit("/", 1)[0] for i in t.column("id").to_pylist()})
    assert landed == _expected(rows)


# -- finding a committed transaction (ManifestLog.find_transaction) ----------------------------------
def _txn(t: int) -> Transaction:
    return Transaction("etl:hourly", {"schedule_time_ms": t})


@pytest.mark.unit
def test_find_transaction_out_of_order_runs(tmp_path):
    """Backfills commit schedule times out of order: any of them is found, a new one is not."""
    log = _table(tmp_path / "t").log
    for t in (5, 9, 2, 7):
        log.commit([], _txn(t), writer="w")
    log.commit([], Transaction("other", {"schedule_time_ms": 3}))
    assert [log.transaction_version(_txn(t)) for t in (5, 9, 2, 7)] == [1, 2, 3, 4]
    assert log.transaction_version(_txn(3)) is None  # below the highest: the log is read, and it is complete
    assert log.transaction_version(_txn(10)) is None  # beyond every offset of the app: known new at once
    assert log.transaction_version(Transaction("etl:hourly", {"other_key": 1})) is None
    assert log.find_transaction(_txn(9)).transaction == _txn(9)
    assert log.state().apps["etl:hourly"].high == {"schedule_time_ms": 9}


@pytest.mark.unit
def test_find_transaction_after_log_retention(tmp_path):
    """The app's highest offsets survive in checkpoints; an older position whose
    commit retention may have removed is an error, never a guess."""
    table = Table.create(str(tmp_path / "t"), TableConfig(LAYOUT, checkpoint_interval=4))
    log = table.log
    for t in (8, 1, 2, 3, 4, 5):  # versions 1..6, checkpoint at 4
        log.commit([], _txn(t), writer="w")
    assert json.loads((tmp_path / "t" / checkpoint_path(4)).read_bytes())["apps"]["etl:hourly"]["high"] == {
        "schedule_time_ms": 8}
    assert clean_log(table, 0).commits == (1, 2, 3)
    assert log.oldest_version() == 4
    assert log.transaction_version(_txn(5)) == 6 and log.transaction_version(_txn(4)) == 5
    assert log.transaction_version(_txn(9)) is None  # beyond 8, the high the checkpoint kept
    for t in (1, 6):  # 1 was in a removed commit; 6 never ran, but the log cannot prove it
        with pytest.raises(LogRetentionError, match="cannot tell whether"):
            log.transaction_version(_txn(t))
    assert invoke_trib("verify", str(tmp_path / "t")).returncode == 0


@pytest.mark.unit
def test_write_table_routes_timestamp_columns_by_their_unit(tmp_path):
    """Spark hands timestamps as microseconds: a plain cast to int64 would route
    them 1,000 times later. Before 1970 they floor (-1 us is in 1969)."""
    import pyarrow as pa

    from tributary_read.write.writer import TableWriter

    table = _table(tmp_path / "t")
    w = TableWriter(table)
    us = [T0 * 1000 + 5 * H * 1000, -1, 0]
    for unit, scale in (("us", 1000), ("ns", 1_000_000), ("s", None)):
        vals = [v * scale // 1000 for v in us] if scale else [T0 // 1000, -1, 0]
        w.write_table(pa.table({"ts": pa.array(vals, pa.timestamp(unit, tz="UTC"))}), "ts")
    parts = sorted({f.path.rsplit("/", 1)[0] for f in w.flush()})
    assert parts == ["1969_12_31/23", "1970_01_01/00", "2024_01_01/00", "2024_01_01/05"]
    w.abort()


def test_a_write_error_on_executors_is_a_storage_error_and_commits_nothing(spark, tmp_path):
    """A store that refuses the write (here: a file where an hour directory must go) is exit 7, not 1."""
    from tributary_read.errors import StorageError
    from tributary_read.spark.write import write

    table = _table(tmp_path / "out")
    rows = _rows(12)
    (tmp_path / "out" / "2024_01_01").write_text("in the way\n")  # the day directory cannot be made
    with pytest.raises(StorageError) as e:
        write(_frame(spark, rows, parts=2), table, time_column="ts",
              transaction=Transaction("etl:hourly", {"schedule_time_ms": T0 + 6 * H}))
    msg = str(e.value)
    assert msg.startswith(f"writing {table.uri} on Spark executors: ") and "\n" not in msg
    assert "2024_01_01" in msg
    assert table.log.latest_version() == 0  # nothing committed
    r = invoke_trib("verify", str(tmp_path / "out"), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["orphans"] == []  # failed attempts removed their files


def test_a_restate_write_replaces_whole_partitions_and_refuses_rows_outside_them(spark, tmp_path):
    """write(restate=...): Spark tasks stage each partition's files for the swap; the commit restates exactly the
    partitions asked (one the recompute emptied too), and a row outside them commits nothing."""
    import os

    from tributary_read.table.restatement import affected
    from tributary_read.read.resolve import manifest_files
    from tributary_read.spark.write import write

    t = _table(tmp_path / "t", "jsonl")
    write(_frame(spark, [(i, T0 + i) for i in range(3)] + [(10 + i, T0 + H + i) for i in range(2)]), t,
          time_column="ts", transaction=Transaction("etl:j", {"s": 1}))
    hours = [LAYOUT.for_time(T0), LAYOUT.for_time(T0 + H)]
    r = write(_frame(spark, [(20 + i, T0 + i) for i in range(4)], parts=2), t, time_column="ts",
              transaction=Transaction("etl:j", {"s": 2}), restate=affected(LAYOUT, hours))
    c = t.log.read_commit(r.version)
    assert [(x.directory, x.records_before, x.records_after) for x in c.restated] == [
        (hours[0].path, 3, 4), (hours[1].path, 2, 0)]
    visible = {h.path: sorted(n for n in os.listdir(t.storage.abspath(h.path)) if not n.startswith("."))
               for h in hours}
    assert visible[hours[1].path] == [] and len(visible[hours[0].path]) == len([f for f in c.files])
    ids = sorted(json.loads(line)["id"] for f in manifest_files(t).files
                 for line in open(t.storage.abspath(f.path)).read().splitlines())
    assert ids == [20, 21, 22, 23]
    with pytest.raises(InvalidInputError, match="which no input partition this run read feeds"):
        write(_frame(spark, [(30, T0), (31, T0 + 2 * H)]), t, time_column="ts",
              transaction=Transaction("etl:j", {"s": 3}), restate=affected(LAYOUT, hours[:1]))
    assert t.log.latest_version() == r.version
    assert invoke_trib("verify", str(tmp_path / "t")).returncode == 0
