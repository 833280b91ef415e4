"""``trib etl run`` end to end through the real CLI: dry run, a full run checked against the
output table and Hive, a rerun of the same schedule time, a concurrent run, and bad input.

Spark starts only in real ``trib`` processes (``run_trib``/Popen), one full run for
the whole module: each start costs ~10 s. Bad input goes through ``invoke_trib``
(in-process, no Spark), which stops before any Spark is needed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from datetime import datetime, timezone

import pytest
from conftest import REPO, TRIB, invoke_trib, run_trib
from etl_data import spark_section
from helpers import one_line_error

from tributary_read.table.config import Table, TableConfig
from tributary_read.table.layout import Layout

LAYOUT = Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")
T = "2024-01-01T05:00:00Z"
T_MS = 1_704_085_200_000
H = 3_600_000
#: Records in hour 04 (the run's own hour), 03, and one late into 2023-12-31T23.
HOURS = {T_MS - H: 12, T_MS - 2 * H: 6, T_MS - 6 * H: 2}


def _env() -> dict:
    env = {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    return env


def make_tables(base, *, hive: tuple[str, str] | None = None, fmt: str = "parquet") -> dict:
    """A raw trib table with ``HOURS`` records (one file per hour), an empty output table, a job file."""
    raw, out = base / "raw", base / "events"
    Table.create(str(raw), TableConfig(LAYOUT, format="jsonl"))
    Table.create(str(out), TableConfig(LAYOUT, format=fmt))
    ids = 0
    for n, (hour, count) in enumerate(sorted(HOURS.items())):
        src = base / f"src{n}.jsonl"
        with open(src, "w") as f:
            for i in range(count):
                f.write(json.dumps({"id": ids, "ts": hour + i * 60_000, "msg": f"e{ids}"}) + "\n")
                ids += 1
        invoke_trib("ingest", str(raw), "--source", str(src), "--app-id", f"src{n}", "--time-field", "ts",
                    check=True)
    (base / "etl.sql").write_text("SELECT id, ts, upper(msg) AS msg FROM raw\n")
    job = textwrap.dedent("""\
        [job]
        name = "hourly_events"
        sql = "etl.sql"

        [[inputs]]
        table = "raw"
        view = "raw"
        mode = "consumer"

        [output]
        table = "events"
        time_column = "ts"

        """) + spark_section()
    if hive:
        job += f'\n[hive]\ntable = "{hive[0]}"\nmetastore = "{hive[1]}"\n'
    (base / "job.toml").write_text(job)
    return {"raw": raw, "out": out, "job": base / "job.toml", "records": ids}


def snapshot(root) -> dict[str, int]:
    """Every file under ``root`` but the lock (path -> size)."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            if not p.endswith(".lock"):
                out[os.path.relpath(p, root)] = os.path.getsize(p)
    return out


def create_hive_table(cursor, name: str, root) -> None:
    cursor.execute(f"CREATE EXTERNAL TABLE {name} (id BIGINT, ts BIGINT, msg STRING) PARTITIONED BY "
                   f"(dt STRING) STORED AS PARQUET LOCATION 'file://{root}'")


# -- without Spark ----------------------------------------------------------------------------
@pytest.mark.unit
def test_dry_run_prints_the_plan_and_changes_nothing(tmp_path):
    t = make_tables(tmp_path)
    before = snapshot(t["out"])
    p = invoke_trib("etl", "run", str(t["job"]), "--schedule-time", "2024-01-01T05:20:00Z", "--dry-run", "--json",
                    check=True)
    doc = json.loads(p.stdout)
    assert doc["dry_run"] is True and doc["already_committed"] is False and doc["version"] is None
    assert doc["schedule_time"] == T and doc["given_schedule_time"] == "2024-01-01T05:20:00Z"
    assert doc["transaction"]["app_id"] == "etl:hourly_events"
    assert doc["transaction"]["offsets"] == {"schedule_time_ms": T_MS}
    (inp,) = doc["inputs"]
    raw = Table.load(str(t["raw"]))
    committed = sorted(raw.log.state().files)
    assert sorted(inp["paths"]) == committed and inp["files"] == 3
    assert inp["records"] == t["records"]  # the manifest knows every file's count: no Spark needed
    assert inp["bytes"] == sum(e.size for e in raw.log.state().files.values())
    # late: a partition that ended before the run's hour [04:00, 05:00) began
    assert inp["late_files"] == [p for p in committed if not p.startswith("2024_01_01/04/")]
    assert inp["consumer"] == "etl-hourly_events-raw" and inp["plan_id"]
    assert doc["transaction"]["meta"]["inputs"]["raw"]["plan_id"] == inp["plan_id"]
    assert doc["sql_text"] == "SELECT id, ts, upper(msg) AS msg FROM raw"
    assert doc["steps"]["resolve"]["status"] == "done"
    assert doc["skipped_steps"] == ["read", "commit", "sync", "ack"]
    assert snapshot(t["out"]) == before and Table.load(str(t["out"])).log.latest_version() == 0
    human = invoke_trib("etl", "run", str(t["job"]), "--schedule-time", T, "--dry-run", check=True).stdout
    assert "DRY RUN" in human and "input raw: 3 files" in human and inp["plan_id"] in human
    assert "SELECT id, ts, upper(msg) AS msg FROM raw" in human


@pytest.mark.unit
def test_bad_input_is_one_line_with_the_exit_code_of_its_class(tmp_path):
    t = make_tables(tmp_path)
    job = str(t["job"])
    one_line_error(invoke_trib("etl", "run", job, "--schedule-time", "yesterday"), 3, "--schedule-time")
    one_line_error(invoke_trib("etl", "run", str(tmp_path / "nope.toml"), "--schedule-time", T), 3, "does not exist")
    t["job"].write_text(t["job"].read_text().replace('view = "raw"', 'view = "raw"\nlokback = "1d"'))
    one_line_error(invoke_trib("etl", "run", job, "--schedule-time", T), 3, "unknown key 'lokback' in [inputs[0]]")
    t["job"].write_text(t["job"].read_text().replace('lokback = "1d"\n', "").replace('table = "events"',
                                                                                       'table = "nowhere"'))
    one_line_error(invoke_trib("etl", "run", job, "--schedule-time", T), 4, "no trib table")
    one_line_error(invoke_trib("etl", "run", job, "--schedule-time", "2999-01-01T00:00:00Z"), 3,
                   "--schedule-time 2999-01-01T00:00:00Z is more than a period ahead of the clock")
    usage = invoke_trib("etl", "run", job)
    assert usage.returncode == 2 and "--schedule-time" in usage.stderr
    one_line_error(invoke_trib("etl", "submit", job, "--schedule-time", T, "--deploy-mode", "cluster"), 3,
                   "cluster master")


@pytest.mark.unit
def test_submit_prints_the_spark_submit_line(tmp_path):
    t = make_tables(tmp_path)
    p = invoke_trib("etl", "submit", str(t["job"]), "--schedule-time", "2024-01-01T05:59:00Z", "--master", "yarn",
                    "--archives", "env.tar.gz", "--spark-submit", "spark-submit", "--json", check=True)
    doc = json.loads(p.stdout)
    assert doc["master"] == "yarn" and doc["deploy_mode"] == "client" and doc["schedule_time"] == T
    argv = doc["argv"]
    assert argv[argv.index("--archives") + 1] == "env.tar.gz#environment"
    assert "spark.pyspark.python=./environment/bin/python" in argv
    assert argv[-3:] == [str(t["job"]), "--schedule-time", T]
    line = invoke_trib("etl", "submit", str(t["job"]), "--schedule-time", T, "--spark-submit", "spark-submit",
                       check=True).stdout.strip()
    assert line.startswith("spark-submit --master 'local[2]' --deploy-mode client") and line.endswith(T)


@pytest.mark.unit
def test_mtime_windows_end_at_the_schedule_time_exclusive(tmp_path):
    from helpers import put

    plain = tmp_path / "logs"
    for name, mtime in (("a", T_MS - H), ("b", T_MS - 1), ("c", T_MS), ("d", T_MS - H - 1)):
        put(plain, f"2024_01_01/04/{name}.txt", mtime)
    Table.create(str(tmp_path / "events"), TableConfig(LAYOUT, format="parquet"))
    (tmp_path / "q.sql").write_text("SELECT value, current_timestamp() AS ts FROM logs")
    (tmp_path / "job.toml").write_text(textwrap.dedent("""\
        [job]
        name = "logs"
        sql = "q.sql"
        [[inputs]]
        table = "logs"
        view = "logs"
        mode = "mtime"
        layout = "{yyyy}_{MM}_{dd}/{HH}"
        format = "text"
        [output]
        table = "events"
        time_column = "ts"
        """))
    doc = json.loads(invoke_trib("etl", "run", str(tmp_path / "job.toml"), "--schedule-time", T, "--dry-run",
                                 "--json", check=True).stdout)
    (inp,) = doc["inputs"]
    assert inp["paths"] == ["2024_01_01/04/a.txt", "2024_01_01/04/b.txt"]  # [T - 1h, T)
    assert (inp["window"]["start_ms"], inp["window"]["end_ms"]) == (T_MS - H, T_MS - 1)
    assert inp["records"] is None and inp["late_files"] == []
    assert doc["transaction"]["meta"]["inputs"]["logs"] == {
        "table": f"file://{plain}", "mode": "mtime", "files": 2, "window": [T_MS - H, T_MS - 1]}
    # A window that has not ended yet would be committed half-read, and never read again.
    next_hour = (int(time.time() * 1000) // H + 1) * H
    when = datetime.fromtimestamp(next_hour / 1000, timezone.utc).isoformat()
    one_line_error(invoke_trib("etl", "run", str(tmp_path / "job.toml"), "--schedule-time", when), 3,
                   "the window of input logs ends at", "after now", "run it later")


@pytest.mark.unit
def test_a_run_acks_what_a_crashed_committed_run_left_pending_and_an_empty_hour_commits_no_files(tmp_path):
    """The run of 05:00 committed but died before its ack; the 06:00 run must not read those files again."""
    from tributary_read.read.consumer import Consumer
    from tributary_read.table.manifest import Transaction

    t = make_tables(tmp_path)
    name = "etl-hourly_events-raw"
    consumer = Consumer(str(t["raw"]), name)
    held = consumer.plan()
    assert len(held.files) == 3
    out = Table.load(str(t["out"]))
    out.log.commit([], Transaction("etl:hourly_events", {"schedule_time_ms": T_MS}, {
        "schedule_time": T, "inputs": {"raw": {"table": f"file://{t['raw']}", "mode": "consumer", "files": 3,
                                               "consumer": name, "plan_id": held.plan_id}}}))
    job, t6 = str(t["job"]), "2024-01-01T06:00:00Z"

    dry = json.loads(invoke_trib("etl", "run", job, "--schedule-time", t6, "--dry-run", "--json", check=True).stdout)
    assert dry["recovered"] == [{"view": "raw", "consumer": name, "plan_id": held.plan_id, "schedule_time": T,
                                 "version": 1, "would_ack": True}]
    assert dry["inputs"][0]["files"] == 0 and held.plan_id in dry["inputs"][0]["note"]
    assert consumer.pending().plan_id == held.plan_id  # the dry run acked nothing

    doc = json.loads(invoke_trib("etl", "run", job, "--schedule-time", t6, "--json", check=True).stdout)
    assert [r["plan_id"] for r in doc["recovered"]] == [held.plan_id] and "would_ack" not in doc["recovered"][0]
    (inp,) = doc["inputs"]
    assert inp["files"] == 0 and inp["records"] == 0 and inp["plan_id"] != held.plan_id
    # nothing arrived since: no Spark, an empty commit that records the hour, and its plan acked
    assert doc["steps"]["read"] == {"status": "skipped", "seconds": 0.0, "reason": "no input files"}
    assert doc["version"] == 2 and doc["output"]["files"] == 0 and doc["output"]["records"] == 0
    (c2,) = list(out.log.commits(1))
    assert c2.files == () and dict(c2.transaction.offsets) == {"schedule_time_ms": T_MS + H}
    assert consumer.current().plan_id == inp["plan_id"] and consumer.current().delivered_files == 3
    assert doc["acked"] == [{"view": "raw", "consumer": name, "plan_id": inp["plan_id"], "already_acked": False}]

    # The 05:00 run retried now: committed, and its plan long acked (the consumer moved past it).
    redo = invoke_trib("etl", "run", job, "--schedule-time", T, "--json")
    assert redo.returncode == 0, redo.stderr
    back = json.loads(redo.stdout)
    assert back["already_committed"] is True and back["version"] == 1
    assert back["acked"] == [{"view": "raw", "consumer": name, "plan_id": held.plan_id, "already_acked": True,
                              "stale": True}]
    assert out.log.latest_version() == 2


# -- with Spark and Hive: one full run, a concurrent one, a rerun ------------------------------
def test_run_commits_syncs_acks_and_a_rerun_changes_nothing(tmp_path, warm_spark, hive_services, hs2_cursor):
    """The hourly run as a scheduler starts it, on the warm Spark of ``trib spark up`` (the classic driver's
    run: test_etl_crash, test_hidden_uncommitted)."""
    hive = f"default.etl_cli_{uuid.uuid4().hex[:8]}"
    t = make_tables(tmp_path, hive=(hive, f"hs2://127.0.0.1:{hive_services.hs2_port}?user=trib"))
    create_hive_table(hs2_cursor, hive, t["out"])
    try:
        _full_run_then_concurrent_and_rerun(tmp_path, t, hive, hs2_cursor)
    finally:
        hs2_cursor.execute(f"DROP TABLE IF EXISTS {hive}")


def _full_run_then_concurrent_and_rerun(tmp_path, t, hive, cur):
    job = str(t["job"])
    env = {**os.environ, **_env(), "PYTHONPATH": str(REPO)}
    for var in ("SPARK_HOME", "TRIB_SPARK_MASTER", "SPARK_MASTER", "TRIB_CRASH_AT"):
        env.pop(var, None)
    first = subprocess.Popen([*TRIB, "etl", "run", job, "--schedule-time", T, "--json"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    # The second run starts while the first holds the job's lock (it wrote its pid there).
    lock = t["out"] / "_tributary" / "etl" / "hourly_events.lock"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and first.poll() is None:
        if lock.exists() and lock.read_text().split("\n")[0] == str(first.pid):  # then notes (a kept session)
            break
        time.sleep(0.05)
    second = run_trib("etl", "run", job, "--schedule-time", T, "--json", env=_env())
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-5000:]
    one_line_error(second, 5, "another run of job 'hourly_events' is in progress", f"pid {first.pid}")
    assert json.loads(second.stdout)["error"]["exit_code"] == 5  # --json: the error object, nothing else

    doc = json.loads(out)
    table = Table.load(str(t["out"]))
    state = table.log.state()
    (commit,) = list(table.log.commits(0))
    assert doc["version"] == commit.version == 1 and doc["already_committed"] is False
    assert commit.transaction.app_id == "etl:hourly_events"
    assert dict(commit.transaction.offsets) == {"schedule_time_ms": T_MS}
    # inputs: file and record counts, late files
    (inp,) = doc["inputs"]
    raw = Table.load(str(t["raw"])).log.state().files
    assert inp["files"] == len(raw) == 3 and inp["records"] == t["records"]
    assert inp["late_files"] == sorted(p for p in raw if not p.startswith("2024_01_01/04/"))
    assert commit.transaction.meta["inputs"]["raw"]["plan_id"] == inp["plan_id"]
    # output: files, records and partitions are the table's
    o = doc["output"]
    assert o["files"] == len(state.files) == len(commit.files) >= 3
    assert o["records"] == sum(e.records for e in commit.files) == t["records"]
    dirs = sorted({p.rsplit("/", 1)[0] for p in state.files})
    assert o["partitions"] == dirs == ["2023_12_31/23", "2024_01_01/03", "2024_01_01/04"]
    # Hive: every touched partition added, and HS2 counts the rows
    assert sorted(doc["hive"]["added"]) == ["dt=2023123123", "dt=2024010103", "dt=2024010104"]
    cur.execute(f"SELECT dt, count(*) FROM {hive} GROUP BY dt")
    assert dict(cur.fetchall()) == {"2023123123": 2, "2024010103": 6, "2024010104": 12}
    cur.execute(f"SELECT count(DISTINCT id), min(msg) FROM {hive}")
    assert cur.fetchall() == [(t["records"], "E0")]
    # the consumer moved past the plan the commit recorded
    (ack,) = doc["acked"]
    assert ack == {"view": "raw", "consumer": "etl-hourly_events-raw", "plan_id": inp["plan_id"],
                   "already_acked": False}
    from tributary_read.read.consumer import Consumer

    c = Consumer(str(t["raw"]), "etl-hourly_events-raw")
    assert c.current().plan_id == inp["plan_id"] and c.pending() is None
    # every step ran, with its duration
    assert list(doc["steps"]) == ["resolve", "read", "commit", "sync", "ack"]
    assert all(s["status"] == "done" and s["seconds"] >= 0 for s in doc["steps"].values())
    assert doc["skipped_steps"] == []

    # A rerun of the same schedule time finds its commit: no Spark, nothing written, the same answer.
    before = snapshot(t["out"])
    again = run_trib("etl", "run", job, "--schedule-time", "2024-01-01T05:00:30+00:00", "--json", env=_env(),
                     cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    redo = json.loads(again.stdout)
    assert redo["already_committed"] is True and redo["version"] == 1
    assert redo["skipped_steps"] == ["resolve", "read", "commit"]
    assert redo["output"]["records"] == t["records"] and redo["output"]["partitions"] == dirs
    assert redo["acked"] == [{**ack, "already_acked": True}]
    assert redo["hive"]["added"] == [] and table.log.latest_version() == 1
    after = snapshot(t["out"])
    # Nothing changes but the Hive sync's state and the run book (which counts the rerun: issue 31).
    assert {k: v for k, v in after.items() if "/hive/" not in k and not k.endswith(".runs.json")} == \
        {k: v for k, v in before.items() if "/hive/" not in k and not k.endswith(".runs.json")}
    from tributary_read.etl.runs import read_book

    assert read_book(table, "hourly_events")["counts"]["already_committed"] == 1
    cur.execute(f"SELECT count(*) FROM {hive}")
    assert cur.fetchall() == [(t["records"],)]
    # human output of the rerun
    human = run_trib("etl", "run", job, "--schedule-time", T, "-q", env=_env(), cwd=tmp_path)
    assert human.returncode == 0 and "already committed version 1" in human.stdout and human.stderr == ""
    # its dry run: the hour is committed; an append job recomputes no partition (it said it did, of the commit's)
    dry = run_trib("etl", "run", job, "--schedule-time", T, "--dry-run", "-q", env=_env(), cwd=tmp_path)
    assert dry.returncode == 0 and "(already committed as version 1)" in dry.stdout, dry.stderr
    assert "recomputes" not in dry.stdout, dry.stdout


def test_the_spark_submit_driver_runs_the_job_and_prints_its_report(tmp_path, spark, hs2_cursor, capsys):
    """``trib etl submit``'s application, on the session's Spark (spark-submit would build one the same way),
    syncing Hive through that session's own catalog (``metastore = "spark"``)."""
    from tributary_read.etl import driver

    hive = f"default.etl_drv_{uuid.uuid4().hex[:8]}"
    t = make_tables(tmp_path, hive=(hive, "spark"))
    create_hive_table(hs2_cursor, hive, t["out"])
    try:
        assert driver.main([str(t["job"]), "--schedule-time", T]) == 0
        doc = json.loads(capsys.readouterr().out)
        hs2_cursor.execute(f"SELECT count(*) FROM {hive}")
        assert hs2_cursor.fetchall() == [(t["records"],)]
    finally:
        hs2_cursor.execute(f"DROP TABLE IF EXISTS {hive}")
    assert doc["hive"]["metastore"] == "spark" and len(doc["hive"]["added"]) == 3
    assert doc["version"] == 1 and doc["output"]["records"] == t["records"] and doc["acked"]
    commit = Table.load(str(t["out"])).log.read_commit(1)
    assert sum(e.records for e in commit.files) == t["records"]
    assert driver.main([str(tmp_path / "missing.toml"), "--schedule-time", T]) == 3
    assert "does not exist" in capsys.readouterr().err


def test_epoch_seconds_need_time_unit_and_then_land_in_their_hours(tmp_path, spark):
    """Issue 19, Why 3: an integer column of epoch seconds, no ``time_unit``. It used to be taken as ms and
    land in ``1970_01_20/17`` with exit 0; now the run is refused (exit 3, one line naming time_unit) before
    anything is committed, and with ``time_unit = "s"`` every record lands in its hour."""
    raw, out = tmp_path / "raw", tmp_path / "events"
    Table.create(str(raw), TableConfig(LAYOUT, format="jsonl"))
    Table.create(str(out), TableConfig(LAYOUT, format="parquet"))
    src = tmp_path / "src.jsonl"
    records = [(i, (hour + i * 60_000) // 1000) for hour, count in sorted(HOURS.items()) for i in range(count)]
    records = [(n, ts) for n, (_, ts) in enumerate(records)]
    src.write_text("".join(json.dumps({"id": n, "ts": ts, "msg": f"e{n}"}) + "\n" for n, ts in records))
    invoke_trib("ingest", str(raw), "--source", str(src), "--app-id", "src", "--time-field", "ts",
                "--time-unit", "s", check=True)
    (tmp_path / "etl.sql").write_text("SELECT id, ts, msg FROM raw\n")
    job = tmp_path / "job.toml"
    text = textwrap.dedent("""\
        [job]
        name = "seconds"
        sql = "etl.sql"

        [[inputs]]
        table = "raw"
        view = "raw"

        [output]
        table = "events"
        time_column = "ts"

        """) + spark_section()
    job.write_text(text)
    before = snapshot(out)
    # In this process, on the shared session: the refusal is trib's, not a property of a process.
    refused = invoke_trib("etl", "run", str(job), "--schedule-time", T, "-q", cwd=tmp_path)
    assert refused.returncode == 3 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
    errors = [x for x in refused.stderr.splitlines() if x.startswith("trib: error: ")]  # Spark logs the rest
    assert len(errors) == 1, refused.stderr[-3000:]
    for w in ("time column ts: ", " as ms is 1970-01-20T", "before 2000-01-01", 'is it seconds? set time_unit = "s"',
              "nothing was committed"):
        assert w in errors[0], (w, errors[0])
    assert Table.load(str(out)).log.latest_version() == 0
    assert {k for k in snapshot(out) if "/etl/" not in k} == {k for k in before if "/etl/" not in k}

    job.write_text(text.replace('time_column = "ts"', 'time_column = "ts"\ntime_unit = "s"'))
    ok = invoke_trib("etl", "run", str(job), "--schedule-time", T, "--json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert json.loads(ok.stdout)["output"]["records"] == len(records)
    table = Table.load(str(out))
    landed = {}
    for path in table.log.state().files:
        import pyarrow.parquet as pq

        for i in pq.read_table(str(out / path)).column("id").to_pylist():
            landed[i] = path.rsplit("/", 1)[0]
    assert landed == {n: LAYOUT.for_time(ts * 1000).path for n, ts in records}
    assert sorted(set(landed.values())) == ["2023_12_31/23", "2024_01_01/03", "2024_01_01/04"]


@pytest.mark.unit
def test_time_unit_and_allow_any_time_keys(tmp_path):
    t = make_tables(tmp_path)
    job = str(t["job"])
    text = t["job"].read_text()
    for extra, words in (('time_unit = "sec"', "output.time_unit: unknown time unit 'sec'; choose s, ms, us, ns"),
                         ("allow_any_time = true", 'output.allow_any_time: allow_any_time = true needs the unit '
                                                   'of integer times (time_unit = "s" or ms, us, ns)'),
                         ('allow_any_time = "yes"', "output.allow_any_time must be true or false")):
        t["job"].write_text(text.replace('time_column = "ts"', f'time_column = "ts"\n{extra}'))
        one_line_error(invoke_trib("etl", "run", job, "--schedule-time", T, "--dry-run"), 3, words)
    t["job"].write_text(text.replace('time_column = "ts"', 'time_column = "ts"\ntime_unit = "ms"\n'
                                                           'allow_any_time = true'))
    invoke_trib("etl", "run", job, "--schedule-time", T, "--dry-run", check=True)


def test_the_spark_submit_driver_ends_on_sigterm_with_one_line_and_143(tmp_path):
    """A scheduler killing ``trib etl submit``'s driver sees what ``trib etl run`` shows: one line, exit 143.

    A real process, signalled while it starts Spark; nothing is committed."""
    t = make_tables(tmp_path)
    proc = subprocess.Popen([sys.executable, str(REPO / "tributary_read" / "etl" / "driver.py"), str(t["job"]),
                             "--schedule-time", T, "--progress"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **_env()})
    try:
        first = proc.stderr.readline()
        assert first.strip() == "trib etl: starting Spark", first
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    ours = [ln for ln in err.splitlines() if ln.startswith("trib")]  # the JVM's own log lines may interleave
    assert ours == ["trib: terminated"] and "Traceback" not in err, err
    assert out == ""
    assert Table.load(str(t["out"])).log.latest_version() in (None, 0)


@pytest.mark.unit
def test_submit_run_prints_json_on_success_and_one_error_line_on_failure(tmp_path):
    """spark-submit merges the driver's stderr (a traceback) into its stdout and logs on its stderr:
    `trib etl submit --run` shows only the JSON report, or only one error line with the driver's code."""
    t = make_tables(tmp_path)
    fake = tmp_path / "spark-submit"
    fake.write_text("#!/bin/sh\n"
                    "echo '26/01/01 INFO SparkContext: Running Spark' >&2\n"
                    "if [ -n \"$FAIL\" ]; then\n"
                    "  echo 'Traceback (most recent call last):'; echo '  File \"driver.py\", line 1'\n"
                    "  echo 'KeyError: boom'; echo 'trib: error: unexpected KeyError: boom'; exit 11\n"
                    "fi\n"
                    "echo 'a driver warning'; printf '{\\n  \"job\": \"hourly_events\"\\n}\\n'\n")
    fake.chmod(0o755)
    args = ("etl", "submit", str(t["job"]), "--schedule-time", T, "--run", "--spark-submit", str(fake))
    ok = run_trib("-q", *args)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == {"job": "hourly_events"} and ok.stderr == ""
    bad = run_trib("-q", *args, env={"FAIL": "1"})
    assert bad.returncode == 11 and bad.stdout == ""
    assert bad.stderr == "trib: error: unexpected KeyError: boom\n"
    fake.write_text("#!/bin/sh\necho 'Exception in thread main: no such class' >&2\nexit 1\n")
    bad = run_trib("-q", *args)
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr == "trib: error: spark-submit exited 1: Exception in thread main: no such class\n"


@pytest.mark.unit
def test_submit_env_names_the_wheels_spark_home(monkeypatch):
    """The wheel's spark-submit works without the venv on PATH: SPARK_HOME is set for it."""
    from tributary_read.etl.submit import submit_env
    from tributary_read.hive_udfs.build import spark_home

    monkeypatch.delenv("SPARK_HOME", raising=False)
    assert submit_env()["SPARK_HOME"] == str(spark_home())
    monkeypatch.setenv("SPARK_HOME", "/opt/spark")
    assert submit_env()["SPARK_HOME"] == "/opt/spark"
