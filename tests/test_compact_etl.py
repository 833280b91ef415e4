"""Issue 28's property on Spark: hourly `trib etl run` jobs with a consumer, a manifest (commit-time)
and an mtime input, and the Spark helper (read_incremental) as a consumer and by mtime window, over a
raw table that is compacted between and before their runs; each output holds every record once.

Time is simulated: each ingest's commits are stamped in the simulated hour (TRIB_CLOCK_SKEW_MS,
the writer's clock) and its files get that hour's mtime, so hours pass in seconds. The compaction
merges files of one hour (the layout's period), sometimes before that hour's runs, sometimes after.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter

import pytest
from conftest import invoke_trib
from etl_data import LAYOUT, PARTITION, create_output_table

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

HOUR = 3_600_000
CYCLES = 8
MODES = ("consumer", "manifest", "mtime")


def _job(base, name: str, raw, out, mode: str):
    (base / f"{name}.sql").write_text("SELECT id, ts FROM raw")
    lines = ["[job]", f'name = "{name}"', f'sql = "{name}.sql"', "", "[[inputs]]", f'table = "{raw}"',
             'view = "raw"', f'mode = "{mode}"', 'schema = "id BIGINT, ts BIGINT"', "",
             "[output]", f'table = "{out}"', 'time_column = "ts"', "",
             "[spark]", 'master = "local[2]"', 'conf = { "spark.sql.shuffle.partitions" = "2" }', ""]
    path = base / f"{name}.toml"
    path.write_text("\n".join(lines))
    from tributary_read.etl.job import Job

    return Job.load(str(path))


def _output_ids(root) -> Counter:
    files = json.loads(invoke_trib("files", str(root), "--all", "--json", check=True).stdout)["files"]
    import pyarrow.parquet as pq

    ids: Counter = Counter()
    for f in files:
        ids.update(pq.read_table(os.path.join(root, f["path"]), columns=["id"]).column("id").to_pylist())
    return ids


def test_etl_inputs_and_the_spark_helper_read_every_record_once_across_compactions(spark, tmp_path, monkeypatch):
    from tributary_read.etl.run import run_job
    from tributary_read.spark.incremental import read_incremental

    raw = tmp_path / "raw"
    invoke_trib("table", "create", str(raw), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    jobs = {}
    for mode in MODES:
        out = tmp_path / f"out_{mode}"
        create_output_table(out)
        jobs[mode] = (_job(tmp_path, f"compact_{mode}", raw, out, mode), out)
    now = int(time.time() * 1000)
    h0 = now - now % HOUR - (CYCLES + 2) * HOUR
    ids: Counter = Counter()
    helper: dict[str, Counter] = {"consumer": Counter(), "mtime": Counter()}
    compactions = 0
    for k in range(CYCLES):
        for j in range(2):  # two ingests in hour k: small files for the compaction to merge
            at = h0 + k * HOUR + (10 + 20 * j) * 60_000
            monkeypatch.setenv("TRIB_CLOCK_SKEW_MS", str(at - int(time.time() * 1000)))
            src = tmp_path / f"src{k}_{j}.jsonl"
            first = (k * 2 + j) * 100
            src.write_text("".join(json.dumps({"id": i, "ts": h0 + (i % 3) * HOUR}) + "\n"
                                   for i in range(first, first + 40)))
            new = set(raw.rglob("part-*"))
            invoke_trib("ingest", str(raw), "--source", str(src), "--app-id", f"a{k}_{j}", "--time-field", "ts",
                        check=True)
            for p in set(raw.rglob("part-*")) - new:
                os.utime(p, ns=(at * 1_000_000,) * 2)  # written in the simulated hour
            ids.update(range(first, first + 40))
        monkeypatch.setenv("TRIB_CLOCK_SKEW_MS", str(h0 + k * HOUR + 50 * 60_000 - int(time.time() * 1000)))
        if k % 3 != 1:  # before this hour's runs (its files merged unread), or the last hours' after theirs
            p = invoke_trib("compact", str(raw), "--min-age", "0s", "--min-files", "2", "--json", check=True)
            compactions += json.loads(p.stdout)["version"] is not None
        schedule = h0 + (k + 1) * HOUR + 5 * 60_000  # reads hour k
        monkeypatch.setenv("TRIB_CLOCK_SKEW_MS", str(schedule - int(time.time() * 1000)))
        for mode, (job, _) in jobs.items():
            report = run_job(job, schedule, spark=spark)  # a failure raises
            assert report.version is not None and not report.already_committed, (mode, k)
        df, batch = read_incremental(spark, str(raw), consumer="helper", schema="id BIGINT, ts BIGINT")
        helper["consumer"].update(r.id for r in df.collect())
        batch.ack()
        df, _ = read_incremental(spark, str(raw), mode="mtime", schedule_time=schedule, period="1h",
                                 schema="id BIGINT, ts BIGINT")
        helper["mtime"].update(r.id for r in df.collect())
    assert compactions >= 4
    for mode, (_, out) in jobs.items():
        got = _output_ids(out)
        twice = {i: n for i, n in got.items() if n > 1}
        assert got == ids, f"etl {mode}: {len(twice)} twice, {len(set(ids) - set(got))} lost"
    for name, got in helper.items():
        assert got == ids, f"read_incremental {name}: {sum(n > 1 for n in got.values())} twice, " \
                           f"{len(set(ids) - set(got))} lost"
    assert invoke_trib("verify", str(raw)).returncode == 0
