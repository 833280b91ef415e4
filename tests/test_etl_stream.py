"""Issue 23: ``trib etl stream JOB.toml``, a job file's SQL over a streaming input, on real Spark.

A file stream through the job's SQL into a trib table, its partitions mounted in
Hive by ``[hive]`` and counted through HiveServer2; the CLI in a process of its
own with ``--available-now``; the ``rate`` source stopped by SIGTERM between
batches and restarted from its checkpoint, every generated value once; a lost
checkpoint refused, then accepted with ``--restart``; a batch that fails inside
its write stage, then the fixed SQL restarted from the same checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import REPO, TRIB, invoke_trib
from etl_data import Hs2, create_hive_table
from helpers import LAYOUT, PARTITION

T0 = 1_592_960_400_000  # 2020-06-24T01:00:00Z
SQL = "SELECT id, timestamp_millis(ts) AS ts, upper(msg) AS msg FROM events_in"


def _job(d: Path, *, out: Path, inbox: Path | None = None, source: str = "files", trigger: str | None = None,
         sql: str = SQL, hive: tuple[str, str] | None = None, extra: str = "", name: str = "events") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.sql").write_text(sql)
    lines = ["[job]", f'name = "{name}"', f'sql = "{name}.sql"', "", "[stream]", f'source = "{source}"',
             'view = "events_in"', f'checkpoint = "{d / "checkpoint"}"']
    if source == "files":
        lines += [f'path = "{inbox}"', 'format = "json"', 'schema = "id BIGINT, ts BIGINT, msg STRING"',
                  "max_files_per_trigger = 1"]
    if trigger:
        lines.append(f'trigger = "{trigger}"')
    lines += [extra, "", "[output]", f'table = "{out}"', 'time_column = "ts"']
    if hive:
        lines += ["", "[hive]", f'table = "{hive[0]}"', f'metastore = "{hive[1]}"']
    lines += ["", "[spark]", 'master = "local[2]"',
              'conf = { "spark.sql.shuffle.partitions" = "2", "spark.ui.enabled" = "false" }', ""]
    path = d / f"{name}.toml"
    path.write_text("\n".join(lines))
    return path


def _table(path: Path) -> Path:
    invoke_trib("table", "create", str(path), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    return path


def _drop(inbox: Path, k: int, n: int = 10, bad: bool = False) -> list[int]:
    """File ``k`` of the inbox: ``n`` records over two hours, the last one an hour late."""
    ids = [k * 1000 + i for i in range(n)]
    rows = [{"id": x, "ts": T0 + i * 600_000 - (3_600_000 if i == n - 1 else 0), "msg": f"m{x}"}
            for i, x in enumerate(ids)]
    if bad:
        rows[n // 2]["id"] = "not a number"
    tmp = inbox / f".f{k}.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.rename(tmp, inbox / f"f{k}.json")  # whole files only: the stream lists the directory any time
    return ids


def _ids(root: Path) -> list[int]:
    from tributary_read.table.config import Table

    t = Table.load(str(root))
    out = []
    for f in t.log.state().files.values():
        for line in (root / f.path).read_text().splitlines():
            doc = json.loads(line)
            assert doc.get("msg", f"M{doc['id']}") == f"M{doc['id']}"  # the SQL ran on every record
            out.append(doc["id"])
    return sorted(out)


def _parquet_rows(root: Path) -> list[tuple[int, str]]:
    """(id, dt) of each row in a Parquet table's committed files."""
    import pyarrow.parquet as pq

    from tributary_read.table.config import Table

    return sorted((i, f.partition["dt"]) for f in Table.load(str(root)).log.state().files.values()
                  for i in pq.read_table(root / f.path, columns=["id"]).column("id").to_pylist())


def _parquet_ids(root: Path) -> list[int]:
    return sorted(i for i, _ in _parquet_rows(root))


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _verify(root: Path) -> None:
    v = invoke_trib("verify", str(root), "--json")
    assert v.returncode == 0, v.stdout + v.stderr


# -- the job file ------------------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize("stream, error", [
    ('source = "files"\ncheckpoint = "ck"\npath = "in"\nformat = "json"', "needs 'schema'"),
    ('source = "files"\ncheckpoint = "ck"\npath = "in"\nformat = "xml"\nschema = "a INT"', "choose json"),
    ('source = "rate"', "needs 'checkpoint'"),
    ('source = "rate"\ncheckpoint = "ck"\npath = "in"', "stream.path is for source"),
    ('source = "socket"\ncheckpoint = "ck"', "unknown stream.source 'socket'"),
    ('source = "rate"\ncheckpoint = "ck"\ntrigger = "soon"', "stream.trigger"),
    ('source = "rate"\ncheckpoint = "ck"\nview = "a b"', "SQL identifier"),
    ('source = "rate"\ncheckpoint = "ck"\nlookback = "1h"', "unknown key 'lookback' in [stream]"),
])
def test_a_bad_stream_section_is_one_line_naming_the_key(tmp_path, stream, error):
    (tmp_path / "q.sql").write_text("SELECT 1")
    (tmp_path / "job.toml").write_text(f'[job]\nname = "j"\nsql = "q.sql"\n\n[stream]\n{stream}\n\n'
                                       f'[output]\ntable = "{tmp_path / "out"}"\ntime_column = "ts"\n')
    r = invoke_trib("etl", "stream", str(tmp_path / "job.toml"))
    assert r.returncode == 3, r.stderr
    assert error in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.unit
def test_stream_and_batch_jobs_each_refuse_the_other_command(tmp_path):
    out = _table(tmp_path / "out")
    job = _job(tmp_path / "job", out=out, source="rate", trigger="1s")
    r = invoke_trib("etl", "run", str(job), "--schedule-time", "2020-06-24T02:00:00Z")
    assert r.returncode == 3 and "run it with trib etl stream" in r.stderr, r.stderr
    r = invoke_trib("etl", "submit", str(job), "--schedule-time", "2020-06-24T02:00:00Z")
    assert r.returncode == 3 and "run it with trib etl stream" in r.stderr, r.stderr
    text = job.read_text().replace("[stream]", "[[inputs]]\ntable = \"x\"\n\n[stream]")
    job.write_text(text)
    r = invoke_trib("etl", "stream", str(job))
    assert r.returncode == 3 and "not both" in r.stderr, r.stderr


# -- on real Spark --------------------------------------------------------------------------------
@pytest.mark.integration
def test_a_file_stream_through_the_sql_commits_each_batch_once_and_mounts_hive(tmp_path, spark, hive_services):
    from tributary_read.etl.job import Job
    from tributary_read.etl.stream import stream_job

    out, inbox = _table(tmp_path / "out"), tmp_path / "in"
    inbox.mkdir()
    hs2 = Hs2(hive_services)
    hive = f"default.stream_{uuid.uuid4().hex[:8]}"
    create_hive_table(hs2, hive, out, fmt="jsonl")
    try:
        job = Job.load(_job(tmp_path / "job", out=out, inbox=inbox, trigger="available-now",
                            hive=(hive, f"hs2://127.0.0.1:{hive_services.hs2_port}?user=trib")))
        want = _drop(inbox, 0) + _drop(inbox, 1)
        r = stream_job(job, spark=spark)
        assert (r.batches, r.records, r.skipped, r.stopped_by) == (2, 20, (), None), r
        assert _ids(out) == sorted(want)
        ((rows,),) = hs2.query(f"SELECT count(*) FROM {hive}")
        assert int(rows) == 20  # every batch's partitions mounted, the late hour's too
        from tributary_read.table.config import Table

        last = Table.load(str(out)).log.state().apps["stream:events"].transaction
        assert last.offsets["batch"] == 1 and json.loads(last.meta["source_offsets"][0]) == {"logOffset": 1}
        # Nothing new: no batch. A new file: one batch, going on from the checkpoint.
        assert stream_job(job, spark=spark).batches == 0
        want += _drop(inbox, 2)
        r = stream_job(job, spark=spark)
        assert (r.batches, r.records) == (1, 10)
        assert _ids(out) == sorted(want)
        ((rows,),) = hs2.query(f"SELECT count(*) FROM {hive}")
        assert int(rows) == 30
    finally:
        hs2.execute(f"DROP TABLE IF EXISTS {hive}")
    _verify(out)


@pytest.mark.integration
def test_a_lost_checkpoint_is_refused_and_restart_takes_the_new_one_on_purpose(tmp_path, spark):
    from tributary_read.etl.job import Job
    from tributary_read.etl.stream import stream_job
    from tributary_read.spark.stream import CheckpointMismatchError

    out, inbox = _table(tmp_path / "out"), tmp_path / "in"
    inbox.mkdir()
    path = _job(tmp_path / "job", out=out, inbox=inbox, trigger="available-now")
    want = _drop(inbox, 0)
    assert stream_job(Job.load(path), spark=spark).batches == 1
    import shutil

    shutil.rmtree(tmp_path / "job" / "checkpoint")  # lost: the new query would read the inbox from its start
    with pytest.raises(CheckpointMismatchError, match="committed by query"):
        stream_job(Job.load(path), spark=spark)
    assert _ids(out) == sorted(want)  # refused before anything was written
    # The documented way back: move what was read away (the source starts where the table's last batch
    # ended), then accept the new checkpoint once.
    shutil.rmtree(tmp_path / "job" / "checkpoint")
    (inbox / "f0.json").rename(tmp_path / "f0.json.done")
    want += _drop(inbox, 1)
    r = stream_job(Job.load(path), spark=spark, restart=True)
    assert (r.batches, r.records) == (1, 10)
    assert _ids(out) == sorted(want)
    _verify(out)


@pytest.mark.integration
def test_a_batch_that_fails_in_its_write_stage_commits_nothing_and_the_fixed_sql_goes_on(tmp_path, spark):
    """A record the SQL cannot cast fails its task inside the write stage (ANSI casts), past Spark's
    retry: the batch commits nothing, and its staged files stay hidden. The SQL fixed, the same
    checkpoint runs the same batch again: every record once."""
    from tributary_read.etl.job import Job
    from tributary_read.etl.stream import stream_job
    from tributary_read.spark.stream import StreamingQueryFailedError

    out, inbox = _table(tmp_path / "out"), tmp_path / "in"
    inbox.mkdir()
    strict = "SELECT CAST(id AS BIGINT) AS id, timestamp_millis(ts) AS ts, upper(msg) AS msg FROM events_in"
    sql = strict
    d = tmp_path / "job"
    schema = 'schema = "id STRING, ts BIGINT, msg STRING"'
    path = _job(d, out=out, inbox=inbox, trigger="available-now", sql=sql)
    path.write_text(path.read_text().replace('schema = "id BIGINT, ts BIGINT, msg STRING"', schema))
    want = _drop(inbox, 0)
    assert stream_job(Job.load(path), spark=spark).batches == 1
    _drop(inbox, 1, bad=True)
    # one line naming Spark's reason, not py4j's wrapping of the batch function's traceback
    with pytest.raises(StreamingQueryFailedError, match=r"the streaming query failed: \[CAST_INVALID_INPUT\] "):
        stream_job(Job.load(path), spark=spark)
    assert _ids(out) == sorted(want)
    (d / "events.sql").write_text(sql.replace("CAST(id AS BIGINT)", "TRY_CAST(id AS BIGINT)")
                                  + " WHERE TRY_CAST(id AS BIGINT) IS NOT NULL")
    r = stream_job(Job.load(path), spark=spark)
    assert (r.batches, r.records) == (1, 9)
    assert _ids(out) == sorted(want + [1000 + i for i in range(10) if i != 5])
    _verify(out)


def _cli(job: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}
    for var in ("SPARK_HOME", "SPARK_CONF_DIR", "HADOOP_CONF_DIR"):
        env.pop(var, None)
    return subprocess.Popen([*TRIB, "etl", "stream", str(job), "--json", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.integration
def test_the_cli_drains_a_file_stream_and_sigterm_stops_a_rate_stream_between_batches(tmp_path):
    """Both in processes of their own. The rate source numbers its rows 0, 1, 2, ...: after two runs
    stopped by SIGTERM (exit 0) and restarted from the checkpoint, the table holds a prefix of those
    numbers, each once. The file stream's output is a Parquet table that mirrors itself into Iceberg: each
    batch's commit is one snapshot, and Iceberg's readers return the table's rows."""
    out, inbox = tmp_path / "out", tmp_path / "in"
    invoke_trib("table", "create", str(out), "--layout", LAYOUT, "--partition", PARTITION, "--format", "parquet",
                check=True)
    catalog = f"sqlite:///{tmp_path / 'iceberg.db'}"
    has_iceberg = _has("pyiceberg")
    if has_iceberg:
        invoke_trib("table", "set", str(out), "--iceberg", "db.stream", "--iceberg-catalog", catalog, check=True)
    inbox.mkdir()
    want = _drop(inbox, 0) + _drop(inbox, 1)
    p = _cli(_job(tmp_path / "files", out=out, inbox=inbox), "--available-now")
    stdout, stderr = p.communicate(timeout=300)
    assert p.returncode == 0, stderr
    report = json.loads(stdout)
    assert report["batches"] == 2 and _parquet_ids(out) == sorted(want)
    if has_iceberg:
        from tributary_read.iceberg.catalog import open_catalog

        assert report["iceberg"]["error"] is None and report["iceberg"]["version"] == 2, report
        ice = open_catalog(catalog).load_table("db.stream")
        assert [s.summary["trib.version"] for s in ice.snapshots()] == ["1", "2"]
        got = ice.scan(selected_fields=("id", "dt")).to_arrow()
        assert sorted(zip(got.column("id").to_pylist(), got.column("dt").to_pylist())) == _parquet_rows(out)

    rate = _table(tmp_path / "rate")
    sql = "SELECT value AS id, timestamp AS ts FROM events_in"
    job = _job(tmp_path / "r", out=rate, source="rate", trigger="500ms", sql=sql,
               extra='options = { rowsPerSecond = "200" }', name="numbers")
    total = 0
    for _ in range(2):
        p = _cli(job)
        seen = 0
        deadline = time.monotonic() + 240
        while seen < 3 and time.monotonic() < deadline and p.poll() is None:  # a few batches, then stop it
            line = p.stderr.readline()
            seen += " batches, " in line
        assert seen >= 3, p.stderr.read()
        p.send_signal(signal.SIGTERM)
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr
        report = json.loads(stdout)
        assert report["stopped_by"] == "SIGTERM" and report["batches"] >= 3
        total += report["records"]
    from tributary_read.table.config import Table

    t = Table.load(str(rate))
    ids = sorted(json.loads(line)["id"] for f in t.log.state().files.values()
                 for line in (rate / f.path).read_text().splitlines())
    assert ids == list(range(len(ids))) and len(ids) == total > 0
    _verify(rate)


@pytest.mark.integration
def test_two_queries_of_one_name_on_one_table_are_refused_never_interleaved(tmp_path, spark):
    """Two streaming queries named alike (two checkpoints) write one table at once: one of them fails on
    the other's batches (CheckpointMismatchError), and every commit of the name is the other's."""
    from pyspark.sql import functions as F

    from tributary_read.spark.stream import QUERY_ID, trib_sink
    from tributary_read.table.config import Table

    out, inbox = _table(tmp_path / "out"), tmp_path / "in"
    inbox.mkdir()
    want = [x for k in range(4) for x in _drop(inbox, k)]
    df = (spark.readStream.schema("id BIGINT, ts BIGINT, msg STRING").option("maxFilesPerTrigger", 1)
          .json(str(inbox)).select("id", F.timestamp_millis("ts").alias("ts"), F.upper("msg").alias("msg")))
    queries = [df.writeStream.foreachBatch(trib_sink(str(out), query="events", time_column="ts"))
               .option("checkpointLocation", str(tmp_path / f"ck{i}")).trigger(availableNow=True).start()
               for i in range(2)]
    failed = []
    for q in queries:
        try:
            q.awaitTermination()
        except Exception as e:  # noqa: BLE001 - pyspark's StreamingQueryException
            failed.append(str(e))
    assert len(failed) == 1 and "committed by query" in failed[0], failed
    ids = {c.transaction.meta[QUERY_ID] for c in Table.load(str(out)).log.commits()
           if c.transaction is not None and c.transaction.app_id == "stream:events"}
    assert len(ids) == 1  # never interleaved
    assert _ids(out) == sorted(want)  # the survivor read every file, each record once
    _verify(out)


@pytest.mark.unit
def test_restart_starts_a_kafka_stream_where_the_tables_last_batch_ended(tmp_path):
    """``--restart`` after a lost checkpoint: the Kafka source starts at the end offsets the table's last
    batch recorded (from Spark's offset log), unless the job's own options name a start. The connector
    is not here: this checks the offsets handed to it, from a real table's log."""
    from tributary_read.etl.job import Job
    from tributary_read.etl.stream import _restart_offsets
    from tributary_read.spark.stream import BATCH, QUERY_ID, SOURCE_OFFSETS, stream_app_id
    from tributary_read.spark.write import commit_files
    from tributary_read.table.config import Table
    from tributary_read.table.manifest import Transaction

    out = _table(tmp_path / "out")
    extra = 'options = { "kafka.bootstrap.servers" = "b:9092", subscribe = "events" }'
    job = Job.load(_job(tmp_path / "job", out=out, source="kafka", trigger="1m", extra=extra))
    assert _restart_offsets(job) is None  # nothing committed: the job's own options decide
    ends = '{"events":{"0":42,"1":7}}'
    log = Table.load(str(out)).log
    commit_files(log, [], Transaction(stream_app_id(job.name), {BATCH: 4}, {QUERY_ID: "q1", SOURCE_OFFSETS: [ends]}),
                 base_version=log.state().version)
    assert _restart_offsets(job) == ends
