"""The ETL's one commit path and its Hive step (issue 19, item 5).

* "Is this transaction committed?" is asked once per run, by the run, and the
  commit builds on the version it was asked at (ManifestLog.transaction_version
  is counted on the real log: a second asker, e.g. spark/write.py, fails this).
* A concurrent duplicate of an empty hour (two real ``trib etl run`` processes,
  each with its own lock, as two machines have) ends like any duplicate: the
  second reports the first's commit and acks, exit 0, on local and S3 outputs.
* The Hive step mounts the commit's partitions: it neither lists the table's
  directories nor the metastore's partitions (counted on the real thrift
  metastore and the real listing), a late file into an old partition refreshes
  that partition's statistics, and ``--full-sync`` is the old whole-table sync.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import REPO, TRIB

from etl_data import LAY, Hs2, create_hive_table, create_output_table, write_job
from tributary_read.table.config import Table

H = 3_600_000


def _env(extra: dict | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    for var in ("TRIB_CRASH_AT", "TRIB_STOP_AT", "SPARK_HOME", "TRIB_SPARK_MASTER", "SPARK_MASTER"):
        env.pop(var, None)
    env.update(extra or {})
    return env


def _job_with_lock(directory: Path, lock: str, **kw) -> Path:
    """``write_job``'s job, with its own lock directory (a second machine's run of the same job)."""
    path = write_job(directory, **kw)
    path.write_text(path.read_text().replace("[job]\n", f'[job]\nlock_dir = "{lock}"\n', 1))
    return path


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def _hour_file(raw: Path, hour_ms: int, name: str, ids: range) -> None:
    d = raw / LAY.for_time(hour_ms).path
    d.mkdir(parents=True, exist_ok=True)
    with open(d / name, "w") as f:
        for i in ids:
            f.write(json.dumps({"id": i, "ts": hour_ms + 60_000 * (i % 50), "msg": f"m{i}"}) + "\n")
    settled = time.time_ns() - 120 * 10**9  # older than a consumer's default min_age (1 minute)
    os.utime(d / name, ns=(settled, settled))


# -- a concurrent duplicate of an empty hour ----------------------------------------------
@pytest.mark.integration
def test_a_concurrent_duplicate_of_an_empty_hour_reports_the_existing_commit(tmp_path, any_root):
    raw = tmp_path / "raw"
    raw.mkdir()  # nothing arrived: the hour is empty, committed without Spark
    create_output_table(any_root)
    jobs = [_job_with_lock(tmp_path / f"machine-{m}", "locks", name="dup", raw=raw, out=any_root)
            for m in ("a", "b")]
    when = "2024-01-01T05:00:00Z"
    run = [*TRIB, "etl", "run"]
    # A passes the "committed?" question, then stops just before its commit (a paused VM) ...
    first = subprocess.Popen([*run, str(jobs[0]), "--schedule-time", when, "--json"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=_env({"TRIB_STOP_AT": "etl.before_commit"}),
                             cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not _stopped(first.pid):
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first run never reached its commit"
            time.sleep(0.05)
        # ... while B, on another machine (its own lock), runs the same hour to the end.
        second = subprocess.run([*run, str(jobs[1]), "--schedule-time", when, "--json"], capture_output=True,
                                text=True, env=_env(), cwd=tmp_path, timeout=300)
        assert second.returncode == 0, second.stderr
        b = json.loads(second.stdout)
        assert b["already_committed"] is False and b["version"] == 1
    finally:
        os.kill(first.pid, signal.SIGCONT)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err  # not a conflict (exit 5): the same work was done
    a = json.loads(out)
    assert a["already_committed"] is True and a["version"] == 1, a
    assert "another run committed 2024-01-01T05:00:00Z first (version 1)" in err
    assert a["steps"]["commit"]["status"] == "done" and a["output"]["files"] == 0
    assert a["transaction"] == b["transaction"]  # the record is the committed one
    assert [x["already_acked"] for x in a["acked"]] == [True] and [x["already_acked"] for x in b["acked"]] == [False]
    log = Table.load(any_root).log
    assert log.latest_version() == 1  # one commit of the hour, not two
    assert [c.transaction.app_id for c in log.commits(0)] == ["etl:dup"]


# -- the Hive step --------------------------------------------------------------------
@pytest.fixture
def hourly(tmp_path, hive_services, spark, monkeypatch):
    """A job reading a raw directory and mounting into a Hive table through the thrift metastore,
    with the log's "committed?" question, the table listing and the metastore listing counted."""
    from tributary_read.hive.thrift_metastore import ThriftMetastore
    from tributary_read.table.log import ManifestLog

    raw, out = tmp_path / "raw", tmp_path / "out"
    raw.mkdir()
    create_output_table(out)
    hs2 = Hs2(hive_services)
    hive = f"default.etl_mount_{uuid.uuid4().hex[:8]}"
    create_hive_table(hs2, hive, out)
    job = write_job(tmp_path / "job", name="mount", raw=raw, out=out, hive_table=hive,
                    metastore=f"thrift://127.0.0.1:{hive_services.hms_port}")
    sync_module = importlib.import_module("tributary_read.hive.sync")  # the package exports a function `sync`
    calls: dict[str, int] = {"asked": 0, "list_partitions": 0, "scan": 0}

    def counted(name, fn):
        def wrapper(*a, **kw):
            calls[name] += 1
            return fn(*a, **kw)
        return wrapper

    monkeypatch.setattr(ManifestLog, "transaction_version", counted("asked", ManifestLog.transaction_version))
    monkeypatch.setattr(ThriftMetastore, "list_partitions", counted("list_partitions", ThriftMetastore.list_partitions))
    monkeypatch.setattr(sync_module, "scan", counted("scan", sync_module.scan))
    now_hour = int(time.time() * 1000) // H * H
    yield {"raw": raw, "out": out, "job": job, "hive": hive, "hs2": hs2, "calls": calls, "h0": now_hour - 4 * H,
           "hms_port": hive_services.hms_port}
    hs2.execute(f"DROP TABLE IF EXISTS {hive}")


def _run(hourly, spark, schedule_ms: int, **kw):
    from tributary_read.etl.job import Job
    from tributary_read.etl.run import run_job

    for k in hourly["calls"]:
        hourly["calls"][k] = 0
    return run_job(Job.load(hourly["job"]), schedule_ms, spark=spark, **kw)


def _dt(ms: int) -> str:
    return LAY.for_time(ms).spec


@pytest.mark.integration
def test_the_hive_step_mounts_the_commit_and_refreshes_late_partitions_without_listing(hourly, spark):
    from tributary_read.hive.model import TableName
    from tributary_read.hive.thrift_metastore import ThriftMetastore

    h0, raw, calls = hourly["h0"], hourly["raw"], hourly["calls"]
    _hour_file(raw, h0, "a.jsonl", range(0, 5))
    _hour_file(raw, h0 + H, "b.jsonl", range(5, 12))
    first = _run(hourly, spark, h0 + 2 * H)
    assert calls == {"asked": 1, "list_partitions": 0, "scan": 0}, calls
    assert first.hive.mode == "commit" and sorted(first.hive.added) == [_dt(h0), _dt(h0 + H)]
    assert first.hive.refreshed == () and first.hive.relocated == ()

    # A late file into the old partition h0, and the next hour's file.
    _hour_file(raw, h0, "late.jsonl", range(100, 103))
    _hour_file(raw, h0 + 2 * H, "c.jsonl", range(12, 15))
    second = _run(hourly, spark, h0 + 3 * H)
    assert calls == {"asked": 1, "list_partitions": 0, "scan": 0}, calls
    assert second.hive.added == (_dt(h0 + 2 * H),) and second.hive.refreshed == (_dt(h0),)
    # Hive's statistics of h0 follow its files, as the full sync left them.
    d = hourly["out"] / LAY.for_time(h0).path
    size = sum(f.stat().st_size for f in d.iterdir() if not f.name.startswith((".", "_")))
    with ThriftMetastore("127.0.0.1", hourly["hms_port"]) as ms:
        assert ms.describe_partition(TableName.parse(hourly["hive"]), {"dt": _dt(h0)[3:]}).stats.size_bytes == size
    assert hourly["hs2"].counts(hourly["hive"]) == {_dt(h0)[3:]: 8, _dt(h0 + H)[3:]: 7, _dt(h0 + 2 * H)[3:]: 3}

    # A rerun of the committed hour (a crash after the commit) mounts that commit's partitions again,
    # read from the commit in the log; the question is still asked once.
    again = _run(hourly, spark, h0 + 3 * H)
    assert again.already_committed and again.version == second.version
    assert calls == {"asked": 1, "list_partitions": 0, "scan": 0}, calls
    assert again.hive.added == () and again.hive.refreshed == (_dt(h0), _dt(h0 + 2 * H))

    # --full-sync: the whole-table sync, which lists both sides (what the commit mount avoids).
    full = _run(hourly, spark, h0 + 3 * H, full_sync=True)
    assert full.hive.mode == "full" and calls["scan"] == 1 and calls["list_partitions"] == 1, calls
    assert full.hive.added == ()


# -- the input counts ride on the write's Spark job ------------------------------------------
@pytest.mark.integration
def test_inputs_are_counted_by_the_writes_own_spark_job(tmp_path, spark, monkeypatch):
    """``count_inputs`` (on by default) costs no Spark action of its own: each input is counted in full
    by the write's job, so a run on a warm server pays one job and one round trip, not two. The count
    is the input's (a filtering SQL writes fewer rows), and a run that keeps lineage events, which name
    the counts before the commit, still counts first."""
    from tributary_read.etl.job import Job
    from tributary_read.etl.run import run_job

    counted: list[int] = []
    frame = type(spark.range(1))  # the session's own DataFrame class (pyspark's classic one)
    real = frame.count
    monkeypatch.setattr(frame, "count", lambda self: counted.append(1) or real(self))
    raw, out = tmp_path / "raw", tmp_path / "out"
    raw.mkdir()
    create_output_table(out)
    job = write_job(tmp_path / "job", name="counted", raw=raw, out=out,
                    sql="SELECT id, ts, msg FROM raw WHERE id % 3 <> 0\n")
    h0 = int(time.time() * 1000) // H * H - 3 * H
    _hour_file(raw, h0, "a.jsonl", range(0, 7))
    _hour_file(raw, h0 + H, "b.jsonl", range(7, 12))
    report = run_job(Job.load(job), h0 + 2 * H, spark=spark)
    assert [i.records for i in report.inputs] == [12] and report.output.records == 8
    assert counted == []  # no count() of its own

    for k, v in {"TYPE": "file", "LOG_FILE_PATH": str(tmp_path / "events.jsonl"), "APPEND": "true"}.items():
        monkeypatch.setenv(f"OPENLINEAGE__TRANSPORT__{k}", v)  # lineage on: its kept COMPLETE names the count
    _hour_file(raw, h0 + 2 * H, "c.jsonl", range(12, 15))
    second = run_job(Job.load(job), h0 + 3 * H, spark=spark)
    assert [i.records for i in second.inputs] == [3] and counted == [1]
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
