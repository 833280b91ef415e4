"""24 hourly ETL cycles over a raw source with late arrivals of every pattern.

The source (tests/etl_data.py) is a plain ``yyyy_MM_dd/HH`` directory other
tools write: files landing hours late into old hour directories, files with
mtimes older than the last run, files renamed into place hours after a run
listed their directory, records whose event time is an earlier hour than their
directory. Each cycle is ``run_job(job, T, spark=<the session's Spark>)``
in-process (a process per cycle would cost 24 JVM starts; tests/test_etl_crash.py
runs the CLI). After the cycles every input record is in the output exactly
once, in the partition of its event time, and Hive through HS2 counts the same
rows per partition; each cycle's report names its late inputs and the output
partitions it touched, as the generator says.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest

from conftest import invoke_trib
from etl_data import (
    LAY, LATE_PATTERNS, Hs2, RawSource, Record, assert_exactly_once, create_hive_table, create_output_table,
    output_rows, write_job,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

CYCLES = 24
JOB = "hourly_events"


class Cycles:
    def __init__(self, base, hive_services, spark):
        from tributary_read.etl.job import Job

        self.src = RawSource(base / "raw", CYCLES, seed=24)
        self.out = base / "events"
        create_output_table(self.out)
        self.hs2 = Hs2(hive_services)
        self.hive = f"default.etl_cycles_{uuid.uuid4().hex[:8]}"
        create_hive_table(self.hs2, self.hive, self.out)
        path = write_job(base / "job", name=JOB, raw=self.src.root, out=self.out, hive_table=self.hive,
                         metastore=f"hs2://127.0.0.1:{hive_services.hs2_port}?user=trib")
        self.job = Job.load(str(path))
        self.spark = spark
        self.reports: dict[int, object] = {}  # cycle -> RunReport
        self.hidden: dict[int, list[str]] = {}
        self.hive_after: dict[int, dict[str, int]] = {}
        self.seconds: list[float] = []

    def run(self, k: int):
        from tributary_read.etl.run import run_job

        started = time.monotonic()
        report = run_job(self.job, self.src.schedule(k), spark=self.spark)
        self.seconds.append(time.monotonic() - started)
        return report


@pytest.fixture(scope="module")
def cycles(spark, hive_services, tmp_path_factory):
    c = Cycles(tmp_path_factory.mktemp("etl-cycles"), hive_services, spark)
    for k in range(CYCLES):
        c.src.advance(k)
        c.hidden[k] = c.src.hidden_now()
        c.reports[k] = c.run(k)
        c.hive_after[k] = c.hs2.counts(c.hive)
    # No catch-up cycle: the consumer has no minimum age (every file visible at a run is
    # read by it) and its 7-day lookback, on the real clock, covers the simulated day.
    print(f"{CYCLES} cycles: {sum(c.seconds):.1f} s, slowest {max(c.seconds):.1f} s")
    yield c
    c.hs2.execute(f"DROP TABLE IF EXISTS {c.hive}")


def test_every_record_once_in_the_partition_of_its_event_time(cycles):
    src = cycles.src
    assert_exactly_once(output_rows(cycles.out), src.expected_rows())
    v = invoke_trib("verify", str(cycles.out))
    assert v.returncode == 0, v.stdout + v.stderr
    for pattern in LATE_PATTERNS:
        assert len(src.by_pattern(pattern)) >= 3, pattern
    # Records from an earlier hour than their file's directory sit in their own hour's partition.
    early = src.early_records()
    assert len(early) >= 5
    at = {i: dt for i, dt, _ in output_rows(cycles.out)}
    for f in src.by_pattern("normal"):
        for r in f.records:
            if r.early:
                assert at[r.id] == r.dt != LAY.parse(f.directory).values["dt"], (r, f.path)


def test_hive_counts_the_same_rows_per_partition_after_every_cycle(cycles):
    src = cycles.src
    for k in range(CYCLES):
        assert cycles.hive_after[k] == src.expected_counts(k), f"after cycle {k}"
    assert sorted(cycles.hs2.rows(cycles.hive)) == sorted(src.expected_rows())


def test_each_cycle_reads_exactly_what_arrived_since_the_last(cycles):
    src = cycles.src
    for k in range(CYCLES):
        (inp,) = cycles.reports[k].inputs
        assert sorted(inp.paths) == sorted(f.path for f in src.arrived_in(k)), f"cycle {k}"
        assert inp.records == sum(len(f.records) for f in src.arrived_in(k)), f"cycle {k}"
        assert not set(inp.paths) & set(cycles.hidden[k])  # an in-progress name is never read
    # Runs listed each renamed file's directory while it was hidden, and read it once renamed.
    for f in src.by_pattern("late_rename"):
        assert any(f.hidden in hs for hs in cycles.hidden.values()), f.path
    # The old-mtime files (and renamed ones, which keep their mtime) were read although their
    # mtime is older than the run before: an mtime window would have missed them.
    old = set().union(*(src.old_mtime_in(k) for k in range(CYCLES)))
    assert {f.path for f in src.by_pattern("old_mtime") + src.by_pattern("late_rename")} <= old


def test_reports_name_late_inputs_and_touched_partitions(cycles):
    src = cycles.src
    late_seen: set[str] = set()
    for k in range(CYCLES):
        rep = cycles.reports[k]
        doc = rep.to_json()
        (inp,) = doc["inputs"]
        assert set(inp["late_files"]) == src.late_in(k), f"cycle {k}"
        late_seen |= set(inp["late_files"])
        assert inp["files"] == len(src.arrived_in(k)) and inp["records"] == sum(
            len(f.records) for f in src.arrived_in(k)), f"cycle {k}"
        assert doc["already_committed"] is False and doc["version"] == k + 1
        assert set(doc["output"]["partitions"]) == src.partition_dirs_touched(k), f"cycle {k}"
        assert doc["output"]["records"] == inp["records"]
        # Hive: a new hour is added, a late row's older partition refreshed.
        hive = doc["hive"]
        assert set(hive["added"]) | set(hive["refreshed"]) >= {
            "dt=" + LAY.parse(d).values["dt"] for d in src.partition_dirs_touched(k)}, f"cycle {k}"
        assert [a["already_acked"] for a in doc["acked"]] == [False]
        assert set(doc["steps"]) == {"resolve", "read", "commit", "sync", "ack"}
        assert all(s["status"] == "done" for s in doc["steps"].values()), doc["steps"]
    # Every late pattern was reported late.
    late = {f.path for p in LATE_PATTERNS for f in src.by_pattern(p)}
    assert late == late_seen


def test_a_rerun_of_a_done_hour_neither_writes_nor_swallows_new_files(cycles):
    """A retried hour (a scheduler's retry after a lost success) finds its commit and writes nothing.

    A file landing meanwhile is not read by that retry (its commit stands as it
    was) and not acked away either: the next hour reads it, once.
    """
    src = cycles.src
    before = sorted(output_rows(cycles.out))
    late = src.root / src.files[0].directory / "late-extra.jsonl"
    extra = [Record(10_000 + i, src.hour(2) + 60_000 * (i + 1)) for i in range(2)]
    late.write_bytes("".join(r.line() for r in extra).encode())
    settled = time.time_ns() - 120 * 10**9  # older than a consumer's default min_age (1 minute)
    os.utime(late, ns=(settled, settled))

    rep = cycles.run(CYCLES - 2).to_json()  # an older hour than the latest
    assert rep["already_committed"] is True and rep["version"] == CYCLES - 1
    assert rep["skipped_steps"] == ["resolve", "read", "commit"]
    assert sorted(output_rows(cycles.out)) == before
    assert cycles.hs2.counts(cycles.hive) == src.expected_counts()

    nxt = cycles.run(CYCLES).to_json()  # the hour after the last: only the new file
    (inp,) = nxt["inputs"]
    assert inp["files"] == 1 and inp["late_files"] == [f"{src.files[0].directory}/late-extra.jsonl"]
    want = src.expected_rows() | {(r.id, r.dt) for r in extra}
    assert_exactly_once(output_rows(cycles.out), want)
    counts = src.expected_counts()
    for r in extra:
        counts[r.dt] += 1
    assert cycles.hs2.counts(cycles.hive) == counts
