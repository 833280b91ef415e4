"""Every gauge of ``trib metrics`` against a scenario with known values, all through real ``trib`` processes.

Issue 31 asks for "late files, a stalled consumer, a failed ETL hour". The scenario:

- a raw trib table written by ``trib ingest``, read by a plain manifest consumer ``c`` and by the ETL
  job ``hourly`` (its input's consumer, which the job owns: its series carry ``etl_job="hourly"``);
- two hours of the job commit with no input (no Spark); between them a run is killed with -9
  (``TRIB_CRASH_AT``, SIGKILL from inside), which the next run counts as ``killed``;
- a late file lands in a partition 30 hours old: pending counts it, and its age is its commit's,
  not its partition's;
- the next hour fails for real (its SQL raises on every row, in Spark): one ``failed`` run, the last
  success stays the previous hour, and the job's consumer stops acking;
- the writer goes on: the stalled consumer's pending files, bytes and records grow by exactly the
  new commit's, its oldest age by exactly the time between the two readings, its last ack and its
  pending plan's time stay.

Only the failing hour starts Spark (about 10 s); the other runs commit empty hours.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import REPO, TRIB, run_trib
from etl_data import iso, spark_section, table_job_text
from helpers import LAYOUT, PARTITION

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

H = 3_600_000
JOB_CONSUMER = "etl-hourly-raw"
#: Spark's view of a run that starts it; no crash point unless the step asks for one.
SPARK_ENV = {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}


def _etl(job, schedule_ms: int, **env):
    clean = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "TRIB_SPARK_MASTER", "SPARK_MASTER",
                                                              "TRIB_CRASH_AT", "TRIB_STOP_AT")}
    full = {**clean, **SPARK_ENV, **env}
    full["PYTHONPATH"] = str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")
    return subprocess.run([*TRIB, "etl", "run", str(job), "--schedule-time", iso(schedule_ms), "--json"],
                          capture_output=True, text=True, env=full, timeout=240)


def _ingest(root, path, app: str, records: list[tuple[int, int]]) -> None:
    """One ``trib ingest`` commit of ``records`` ((id, event time ms)): one file per hour it spans."""
    path.write_text("".join(json.dumps({"id": i, "ts": ts, "msg": f"m{i}"}) + "\n" for i, ts in records))
    run_trib("ingest", str(root), "--source", str(path), "--app-id", app, "--time-field", "ts", check=True)


def _metrics(*roots) -> dict[tuple[str, tuple], float]:
    """``trib metrics --json``: (name, sorted labels) -> value, each series once."""
    doc = json.loads(run_trib("metrics", *map(str, roots), "--json", check=True).stdout)
    out = {}
    for d in doc:
        key = (d["name"], tuple(sorted(d["labels"].items())))
        assert key not in out, f"duplicate series {key}"
        out[key] = d["value"]
    return out


def _get(m, name: str, **labels) -> float | None:
    return m.get((name, tuple(sorted(labels.items()))))


def _commit(root, version: int):
    from tributary_read.table.config import Table

    return Table.load(str(root)).log.read_commit(version)


def test_every_gauge_against_late_files_a_stalled_consumer_and_a_failed_hour(tmp_path, warm_spark):
    raw, events = tmp_path / "raw", tmp_path / "events"
    run_trib("table", "create", str(raw), "--layout", LAYOUT, "--partition", PARTITION, "--tracking", "manifest",
             check=True)
    run_trib("table", "create", str(events), "--layout", LAYOUT, "--partition", PARTITION, "--format", "parquet",
             check=True)
    (tmp_path / "q.sql").write_text("SELECT id, ts, msg FROM raw\n")
    job = tmp_path / "hourly.toml"
    job.write_text(table_job_text("hourly", tail="\n" + spark_section()))
    now = int(time.time() * 1000)
    hour = now - now % H
    S = [hour - (5 - k) * H for k in range(3)]  # the job's schedule times, all past

    # Hour 0 commits with nothing to read; hour 1's first run is killed -9 before its commit, its rerun
    # counts it. No Spark: an hour with no input files commits no files.
    assert _etl(job, S[0]).returncode == 0
    killed = _etl(job, S[1], TRIB_CRASH_AT="etl.before_commit")
    assert killed.returncode == -9, killed.stderr
    p = _etl(job, S[1])
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["acked"][0]["consumer"] == JOB_CONSUMER

    # The writer: five records of a recent hour; `c` reads them and acks; then a late file into a
    # partition 30 hours old (three records).
    _ingest(raw, tmp_path / "a.jsonl", "a", [(i, hour - 3 * H + i * 60_000) for i in range(5)])
    plan = json.loads(run_trib("files", str(raw), "--consumer", "c", "--mode", "manifest", "--json",
                               check=True).stdout)
    run_trib("consumer", "ack", str(raw), "c", plan["plan_id"], check=True)
    _ingest(raw, tmp_path / "late.jsonl", "late", [(10 + i, hour - 30 * H + i * 60_000) for i in range(3)])

    # Hour 2 fails for real: the SQL analyses, and raises on the first row Spark computes.
    (tmp_path / "q.sql").write_text("SELECT id, ts, CAST(raise_error(concat('bad row ', id)) AS STRING) AS msg "
                                    "FROM raw\n")
    failed = _etl(job, S[2])
    assert failed.returncode != 0 and "bad row" in failed.stderr, failed.stderr[-3000:]

    v1, v2 = _commit(raw, 1), _commit(raw, 2)
    (f1,), (f2,) = v1.new_data, v2.new_data  # one hour each: one file each
    assert (f1.records, f2.records) == (5, 3)
    m = _metrics(raw, events)
    now1 = _get(m, "trib_metrics_generated_timestamp_seconds")
    R, E = {"table": f"file://{raw}"}, {"table": f"file://{events}"}

    # The tables.
    assert _get(m, "trib_table_commits_total", **R) == 2
    assert _get(m, "trib_table_last_commit_timestamp_seconds", **R) == v2.timestamp_ms / 1000
    assert _get(m, "trib_table_commits_total", **E) == 2  # hours 0 and 1
    assert _get(m, "trib_table_last_commit_timestamp_seconds", **E) == _commit(events, 2).timestamp_ms / 1000

    # `c`: the late file alone is pending, aged from its commit (seconds), not from its partition (30 h).
    c = {**R, "consumer": "c", "etl_job": ""}
    assert _get(m, "trib_consumer_pending_files", **c) == 1
    assert _get(m, "trib_consumer_pending_bytes", **c) == f2.size == (raw / f2.path).stat().st_size
    assert _get(m, "trib_consumer_pending_records", **c) == 3
    age = _get(m, "trib_consumer_oldest_pending_age_seconds", **c)
    assert age == pytest.approx(now1 - v2.timestamp_ms / 1000, abs=1e-3) and 0 <= age < 600
    from tributary_read.read.consumer import Consumer

    c_state = Consumer(str(raw), "c").current()
    assert _get(m, "trib_consumer_last_ack_timestamp_seconds", **c) == c_state.updated_ms / 1000
    assert _get(m, "trib_consumer_pending_plan_created_timestamp_seconds", **c) is None  # acked, none handed out

    # The job's consumer: both files pending (the failed hour acked nothing), its plan handed out.
    j = {**R, "consumer": JOB_CONSUMER, "etl_job": "hourly"}
    jc = Consumer(str(raw), JOB_CONSUMER)
    ack_ms, plan_ms = jc.current().updated_ms, jc.pending().created_ms
    assert _get(m, "trib_consumer_pending_files", **j) == 2
    assert _get(m, "trib_consumer_pending_bytes", **j) == f1.size + f2.size
    assert _get(m, "trib_consumer_pending_records", **j) == 8
    assert _get(m, "trib_consumer_oldest_pending_age_seconds", **j) == pytest.approx(
        now1 - v1.timestamp_ms / 1000, abs=1e-3)
    assert _get(m, "trib_consumer_last_ack_timestamp_seconds", **j) == ack_ms / 1000 < v1.timestamp_ms / 1000
    assert _get(m, "trib_consumer_pending_plan_created_timestamp_seconds", **j) == plan_ms / 1000

    # The job's runs: hours 0 and 1 succeeded, one run killed, hour 2 failed; the last success is hour 1.
    runs = {o: _get(m, "trib_etl_runs_total", **E, etl_job="hourly", outcome=o)
            for o in ("success", "already_committed", "failed", "refused", "killed")}
    assert runs == {"success": 2, "already_committed": 0, "failed": 1, "refused": 0, "killed": 1}
    assert _get(m, "trib_etl_last_success_schedule_time_seconds", **E, etl_job="hourly") == S[1] / 1000
    assert not any(k[0] == "trib_partition_commit_watermark_seconds" for k in m)  # no policy configured

    # The writer goes on and nobody acks: pending grows by exactly the new commit, the rest stays.
    time.sleep(0.05)
    _ingest(raw, tmp_path / "b.jsonl", "b", [(20 + i, hour - H + i * 60_000) for i in range(4)])
    (f3,) = _commit(raw, 3).new_data
    m2 = _metrics(raw, events)
    now2 = _get(m2, "trib_metrics_generated_timestamp_seconds")
    assert now2 > now1
    assert _get(m2, "trib_table_commits_total", **R) == 3
    for who, before in ((j, (2, f1.size + f2.size, 8)), (c, (1, f2.size, 3))):
        assert (_get(m2, "trib_consumer_pending_files", **who), _get(m2, "trib_consumer_pending_bytes", **who),
                _get(m2, "trib_consumer_pending_records", **who)) == (before[0] + 1, before[1] + f3.size,
                                                                      before[2] + 4)
        grew = (_get(m2, "trib_consumer_oldest_pending_age_seconds", **who)
                - _get(m, "trib_consumer_oldest_pending_age_seconds", **who))
        assert grew == pytest.approx(now2 - now1, abs=1e-3)  # the same oldest file, older
        assert _get(m2, "trib_consumer_last_ack_timestamp_seconds", **who) == \
            _get(m, "trib_consumer_last_ack_timestamp_seconds", **who)
    assert _get(m2, "trib_consumer_pending_plan_created_timestamp_seconds", **j) == plan_ms / 1000
    assert {k: v for k, v in m2.items() if k[0].startswith("trib_etl_")} == \
        {k: v for k, v in m.items() if k[0].startswith("trib_etl_")}

    # The same values as text: promtool accepts them (no lint errors).
    if shutil.which("promtool"):
        text = run_trib("metrics", str(raw), str(events), check=True).stdout
        p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
        assert 'trib_etl_runs_total{etl_job="hourly",outcome="failed",table="file://' in text
