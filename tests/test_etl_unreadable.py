"""A planned file that is missing or unreadable ends ``trib etl run`` with exit 7 and one line (issue 25, item 6).

The line names the file and both ways forward: restore it, or ``trib consumer skip ROOT NAME FILE
--execute`` (or drop the whole plan). A skip is recorded in the consumer (shown by ``trib consumer
show``), the plan keeps its id, the next run reads the rest, records the skip in its commit and
acks the plan: the skipped file is never read, and nothing else is lost or read twice.

Real files, ``trib etl run`` in this process on the shared ``spark`` fixture (no JVM per run).
"""

from __future__ import annotations

import json
import os

from conftest import invoke_trib
from etl_data import table_job_text
from helpers import one_line_error
from test_etl_cli import LAYOUT

from tributary_read.table.config import Table, TableConfig

H = 3_600_000
T0 = 1_704_085_200_000  # 2024-01-01T05:00:00Z
T, T_NEXT = "2024-01-01T05:00:00Z", "2024-01-01T06:00:00Z"
NAME = "etl-unread-raw"


def _setup(base):
    raw, out = base / "raw", base / "events"
    Table.create(str(raw), TableConfig(LAYOUT, format="jsonl", compression="gzip"))
    Table.create(str(out), TableConfig(LAYOUT, format="parquet"))
    n = 0
    for k in range(3):  # three hours, five records each, one file per hour
        src = base / f"src{k}.jsonl"
        src.write_text("".join(json.dumps({"id": n + i, "ts": T0 - (3 - k) * H + i * 60_000, "msg": "x" * 200})
                               + "\n" for i in range(5)))
        invoke_trib("ingest", str(raw), "--source", str(src), "--app-id", f"src{k}", "--time-field", "ts",
                    check=True)
        n += 5
    (base / "q.sql").write_text("SELECT id, ts, msg FROM raw")
    (base / "job.toml").write_text(table_job_text("unread"))
    files = sorted(Table.load(str(raw)).log.state().files)
    return raw, out, base / "job.toml", files


def _ids(out) -> list[int]:
    import pyarrow.parquet as pq

    t = Table.load(str(out))
    return sorted(i for p in t.log.state().files for i in pq.read_table(str(out / p)).column("id").to_pylist())


def test_a_missing_or_corrupt_planned_file_is_exit_7_and_a_skip_gets_past_it(tmp_path, spark):
    raw, out, job, files = _setup(tmp_path)
    gone, corrupt, good = files  # hours 02, 03, 04
    dry = json.loads(invoke_trib("etl", "run", str(job), "--schedule-time", T, "--dry-run", "--json",
                                 check=True).stdout)
    plan_id = dry["inputs"][0]["plan_id"]  # the plan is fixed now; then its files go bad
    os.remove(raw / gone)
    data = (raw / corrupt).read_bytes()
    # a corrupt gzip stream of its committed size (a size change stops the read before Spark, with exit 9:
    # tests/test_spark_read_sizes.py)
    (raw / corrupt).write_bytes(data[: len(data) // 2] + bytes(len(data) - len(data) // 2))

    p = invoke_trib("etl", "run", str(job), "--schedule-time", T, "-q")
    line = one_line_error(p, 7, f"planned file {gone} is missing", plan_id, f"trib consumer skip file://{raw} "
                          f"{NAME} {gone} --execute", "--discard-plan --execute", "restore the file")
    assert "\tat " not in p.stderr and "org.apache" not in line
    show = json.loads(invoke_trib("consumer", "show", str(raw), NAME, "--json", check=True).stdout)
    assert show["pending"]["plan_id"] == plan_id and show["pending"]["skipped"] == []

    # The skip: a preview changes nothing; --execute records it; a second one is a no-op.
    pre = invoke_trib("consumer", "skip", str(raw), NAME, gone, check=True)
    assert "add --execute" in pre.stderr and "never read" in pre.stdout
    assert json.loads(invoke_trib("consumer", "show", str(raw), NAME, "--json").stdout)["pending"]["skipped"] == []
    doc = json.loads(invoke_trib("consumer", "skip", str(raw), NAME, gone, "--execute", "--json", check=True).stdout)
    assert doc["applied"] is True and doc["plan_id"] == plan_id
    again = json.loads(invoke_trib("consumer", "skip", str(raw), NAME, str(raw / gone), "--execute", "--json",
                                   check=True).stdout)
    assert again["applied"] is False and again["already_skipped"] is True
    one_line_error(invoke_trib("consumer", "skip", str(raw), NAME, "2024_01_01/09/nope.jsonl.gz"), 3,
                   "is not a file of consumer", plan_id)
    human = invoke_trib("consumer", "show", str(raw), NAME, check=True).stdout
    assert f"skipped    {gone}" in human

    # The same plan, read again: now the corrupt file stops it, with the same kind of line.
    p = invoke_trib("etl", "run", str(job), "--schedule-time", T, "-q")
    one_line_error(p, 7, f"planned file {corrupt} cannot be read", f"{NAME} {corrupt} --execute")
    assert "\tat " not in p.stderr
    invoke_trib("consumer", "skip", str(raw), NAME, corrupt, "--execute", check=True)

    # Past both: the run reads the good file, commits, records the skips and acks the plan.
    rep = json.loads(invoke_trib("etl", "run", str(job), "--schedule-time", T, "-q", "--json", check=True).stdout)
    (inp,) = rep["inputs"]
    assert inp["plan_id"] == plan_id and inp["skips"] == [gone, corrupt] and inp["files"] == 1
    assert rep["acked"][0]["plan_id"] == plan_id
    c = Table.load(str(out)).log.read_commit(rep["version"])
    assert c.transaction.meta["inputs"]["raw"]["skipped"] == [gone, corrupt]
    assert _ids(out) == list(range(10, 15))  # hour 04's file, once
    show = json.loads(invoke_trib("consumer", "show", str(raw), NAME, "--json", check=True).stdout)
    assert show["pending"] is None and show["skipped"] == [gone, corrupt]

    # The skipped files count as delivered: the next hour reads nothing of them, even restored.
    (raw / corrupt).write_bytes(data)
    nxt = json.loads(invoke_trib("etl", "run", str(job), "--schedule-time", T_NEXT, "-q", "--json",
                                 check=True).stdout)
    assert nxt["inputs"][0]["files"] == 0 and _ids(out) == list(range(10, 15))


def test_a_real_trib_process_prints_no_jvm_stack_trace(tmp_path):
    """In its own process Spark logs a failed task's Java trace to stderr (log4j), three times: kept off (-v keeps it)."""
    import subprocess
    import sys

    from conftest import REPO, TRIB

    raw, _out, job, files = _setup(tmp_path)
    job.write_text(job.read_text() + '[spark]\nmaster = "local[1]"\nconf = { "spark.ui.enabled" = "false" }\n')
    data = (raw / files[1]).read_bytes()
    (raw / files[1]).write_bytes(data[: len(data) // 2] + bytes(len(data) - len(data) // 2))  # corrupt, same size
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(REPO)}
    env.pop("SPARK_HOME", None)
    p = subprocess.run([*TRIB, "etl", "run", str(job), "--schedule-time", T, "-q"], capture_output=True, text=True,
                       env=env)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 7, p.stderr
    assert lines[-1].startswith(f"trib: error: input raw: planned file {files[1]} cannot be read"), p.stderr
    assert "gzip stream CRC failure" in lines[-1] and "trib consumer skip" in lines[-1]
    assert not any(ln.startswith("\tat ") or "Exception in task" in ln for ln in lines), p.stderr
    assert sum("trib: error" in ln for ln in lines) == 1


def test_a_file_the_sql_reads_itself_is_exit_7_and_a_bad_query_exit_3(tmp_path, spark):
    """Spark read errors map to 7 even for a file no input planned (a lookup the SQL names);
    an analysis error in the SQL maps to 3. Neither commits, moves the consumer or exits 1."""
    import gzip

    raw, out, job, _ = _setup(tmp_path)
    lookup = tmp_path / "lookup.json.gz"
    lookup.write_bytes(gzip.compress(b"".join(b'{"id": %d, "name": "n%d"}\n' % (i, i) for i in range(200)))[:60])
    (tmp_path / "q.sql").write_text(f"SELECT r.id, r.ts, r.msg FROM raw r LEFT JOIN json.`{lookup}` l ON r.id = l.id")
    p = invoke_trib("etl", "run", str(job), "--schedule-time", T, "-q")
    line = one_line_error(p, 7, "q.sql: Spark cannot read", "lookup.json.gz", "which no input of the job planned",
                          "restore or fix it and rerun")
    assert "\tat " not in p.stderr and "FAILED_READ_FILE" in line, line
    assert Table.load(str(out)).log.latest_version() == 0
    (tmp_path / "q.sql").write_text("SELECT id, ts, no_such_column FROM raw")
    one_line_error(invoke_trib("etl", "run", str(job), "--schedule-time", T, "-q"), 3, "q.sql", "no_such_column")
    show = json.loads(invoke_trib("consumer", "show", str(raw), NAME, "--json", check=True).stdout)
    assert show["pending"] is not None  # the plan waits for a run that can read; nothing acked
    assert Table.load(str(out)).log.latest_version() == 0
