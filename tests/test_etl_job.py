"""Job files (``trib etl run JOB.toml``): parsing, defaults, and every way a job file can be wrong.

Fast and in-process: no Spark. The run itself is tested end to end in
tests/test_etl_cli.py.
"""

from __future__ import annotations

import json
import os
import re
import textwrap

import pytest

from tributary_read.errors import ConcurrentRunError, InvalidInputError
from tributary_read.etl.job import HOUR_MS, InputMode, Job
from tributary_read.etl.lock import JobLock, lock_path
from tributary_read.etl.record import InputRecord, RunRecord
from tributary_read.etl.run import iso_z, recorded_inputs, schedule_time_ms, transaction_for, window_for
from tributary_read.etl.submit import build_submit, driver_path
from tributary_read.read.window import WindowForm, parse_instant
from tributary_read.table.config import Table, TableConfig
from tributary_read.table.layout import Layout
from tributary_read.table.manifest import Transaction

pytestmark = pytest.mark.unit

#: The shape issue 10 gives, verbatim.
ISSUE_JOB = """\
[job]
name = "hourly_events"
sql = "etl.sql"                  # relative to the job file; SELECTs the output rows from the views

[[inputs]]
table = "/data/raw"              # a table root or a trib.toml alias
view = "raw"
mode = "consumer"                # consumer | mtime | manifest

[output]
table = "/data/events"           # a trib table (created beforehand with `trib table create`)
time_column = "ts"               # routes each row to the partition of its event time

[hive]                           # optional: sync the output's partitions
table = "dw.events"
metastore = "hs2://127.0.0.1:10000"

[spark]                          # optional
master = "local[2]"
conf = { "spark.sql.shuffle.partitions" = "4" }
"""

MINIMAL = """\
[job]
name = "j"
sql = "q.sql"

[[inputs]]
table = "in"
view = "v"

[output]
table = "out"
time_column = "ts"
"""


def write_job(tmp_path, text: str, sql: str | None = "SELECT * FROM v;\n", name: str = "job.toml"):
    (tmp_path / name).write_text(textwrap.dedent(text))
    if sql is not None:
        (tmp_path / "etl.sql").write_text(sql)
        (tmp_path / "q.sql").write_text(sql)
    return tmp_path / name


def load_error(tmp_path, text: str, **kw) -> str:
    with pytest.raises(InvalidInputError) as e:
        Job.load(write_job(tmp_path, text, **kw))
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_the_issue_shape_loads_as_is(tmp_path):
    job = Job.load(write_job(tmp_path, ISSUE_JOB))
    assert job.name == "hourly_events" and job.app_id == "etl:hourly_events"
    assert job.sql_path == str(tmp_path / "etl.sql")
    assert job.sql == "SELECT * FROM v"  # the trailing ';' is not Spark SQL
    (inp,) = job.inputs
    assert (inp.table, inp.root, inp.view, inp.mode) == ("/data/raw", "/data/raw", "raw", InputMode.CONSUMER)
    assert inp.consumer == "etl-hourly_events-raw"
    assert (job.output.root, job.output.time_column) == ("/data/events", "ts")
    assert (job.hive.table, job.hive.metastore) == ("dw.events", "hs2://127.0.0.1:10000")
    assert job.spark.master == "local[2]"
    assert dict(job.spark.conf) == {"spark.sql.shuffle.partitions": "4"}
    assert job.period_ms == HOUR_MS and job.timezone == "UTC" and job.count_inputs


def test_defaults_and_relative_paths_resolve_against_the_job_file(tmp_path, monkeypatch):
    sub = tmp_path / "jobs"
    sub.mkdir()
    job = Job.load(write_job(sub, MINIMAL))
    monkeypatch.chdir(tmp_path)  # the working directory does not matter
    (inp,) = job.inputs
    assert inp.root == str(sub / "in") and job.output.root == str(sub / "out")
    assert inp.mode is InputMode.CONSUMER and inp.consumer == "etl-j-v"
    assert job.hive is None and job.spark.master is None and job.lock_dir is None


def test_every_input_mode_with_its_options(tmp_path):
    job = Job.load(write_job(tmp_path, MINIMAL.replace('view = "v"', textwrap.dedent('''\
        view = "v"
        mode = "consumer"
        consumer = "mine"
        lookback = "2d"
        min_age = "30s"
        state_dir = "state"

        [[inputs]]
        table = "s3://bucket/logs"
        view = "logs"
        mode = "mtime"
        window_form = "sliding"
        window = "1h"
        lag = "10m"
        layout = "{yyyy}/{MM}/{dd}/{HH}"
        format = "text"
        options = { lineSep = "\\n", header = true }

        [[inputs]]
        table = "in2"
        view = "m"
        mode = "manifest"
        '''))))
    c, m, f = job.inputs
    assert (c.consumer, c.lookback_ms, c.min_age_ms, c.state_dir) == ("mine", 2 * 86_400_000, 30_000,
                                                                       str(tmp_path / "state"))
    assert m.root == "s3://bucket/logs" and m.mode is InputMode.MTIME
    # window = period is the calendar's period (None), so runs tile on DST days (issue 25)
    assert (m.window_form, m.window_ms, m.lag_ms) == (WindowForm.SLIDING, None, 600_000)
    assert m.layout == Layout("{yyyy}/{MM}/{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")
    assert m.format == "text"
    assert dict(m.read_options) == {"lineSep": "\n", "header": "true"}
    assert f.mode is InputMode.MANIFEST and f.window_form is WindowForm.ALIGNED and f.lag_ms == 0
    assert f.window_ms is None


def test_a_trib_toml_alias_names_a_table(tmp_path):
    config = {"storage": {"region": "eu"}, "tables": {"in": {"root": "s3://b/raw", "storage": {"profile": "p"}}}}
    job = Job.load(write_job(tmp_path, MINIMAL), config)
    assert job.inputs[0].root == "s3://b/raw"
    assert dict(job.inputs[0].storage_options) == {"region": "eu", "profile": "p"}
    assert job.output.root == str(tmp_path / "out") and dict(job.output.storage_options) == {"region": "eu"}
    cli = Job.load(tmp_path / "job.toml", config, {"region": "us"})  # trib -o region=us wins
    assert dict(cli.inputs[0].storage_options) == {"region": "us", "profile": "p"}


def test_the_sql_may_name_a_packaged_warehouse_example_but_not_a_metastore_template(tmp_path):
    job = Job.load(write_job(tmp_path, MINIMAL.replace('"q.sql"', '"hourly_trib.sql"')))
    assert job.sql_path.endswith(os.path.join("sql", "warehouse", "hourly_trib.sql")) and job.sql
    assert "among the packaged sql/warehouse/ examples" in load_error(
        tmp_path, MINIMAL.replace('"q.sql"', '"show_partitions.sql"'))


@pytest.mark.parametrize("text, words", [
    (MINIMAL.replace('name = "j"', 'name = "j"\nnaem = "x"'), "unknown key 'naem' in [job]"),
    (MINIMAL.replace('view = "v"', 'view = "v"\nlokback = "2d"'), "unknown key 'lokback' in [inputs[0]]"),
    (MINIMAL.replace('time_column = "ts"', 'time_column = "ts"\ntime_colum = "x"'), "unknown key 'time_colum' in [output]"),
    (MINIMAL + '[hive]\ntable = "a.b"\nmetastore = "hs2://h:1"\nmetastor = "x"\n', "unknown key 'metastor' in [hive]"),
    (MINIMAL + '[spark]\nmaster = "yarn"\nconfs = {}\n', "unknown key 'confs' in [spark]"),
    (MINIMAL + '[outputs]\ntable = "x"\n', "unknown key 'outputs' in [top level]"),
])
def test_an_unknown_key_is_named_never_ignored(tmp_path, text, words):
    assert words in load_error(tmp_path, text)


@pytest.mark.parametrize("text, words", [
    (MINIMAL.replace('view = "v"', 'view = "v"\nmode = "kafka"'), "unknown inputs[0].mode 'kafka'"),
    (MINIMAL.replace('view = "v"', 'view = "v"\nmode = "mtime"\nlookback = "1d"'), "inputs[0].lookback does not apply"),
    (MINIMAL.replace('view = "v"', 'view = "v"\nwindow = "1h"'), "inputs[0].window does not apply to mode consumer"),
    (MINIMAL.replace('view = "v"', 'view = "v"\nlookback = "7"'), "inputs[0].lookback 7 has no unit: write 7s or 7ms"),
    (MINIMAL.replace('view = "v"', 'view = "v"\nlookback = "0s"'), "must be positive"),
    (MINIMAL.replace('view = "v"', 'view = "my-view"'), "must be a SQL identifier"),
    (MINIMAL.replace('view = "v"', 'view = "v"\nformat = "avro"'), "inputs[0].format 'avro': choose one of"),
    (MINIMAL.replace('view = "v"', 'view = "v"\ncompression = "gzip"'), "unknown key 'compression'"),
    (MINIMAL.replace('view = "v"', 'view = "v"\npartition = "dt={yyyy}"'), "give inputs[0].layout too"),
    (MINIMAL.replace('view = "v"', 'view = "v"\nlayout = "{nope}"'), "inputs[0].layout"),
    (MINIMAL.replace('name = "j"', 'name = "a b"'), "job.name 'a b'"),
    (MINIMAL.replace('sql = "q.sql"', 'sql = "missing.sql"'), "job.sql 'missing.sql' not found"),
    (MINIMAL.replace('name = "j"', 'name = "j"\nperiod = "1x"'), "job.period '1x' is not a duration"),
    (MINIMAL.replace('name = "j"', 'name = "j"\ntimezone = "Mars/Base"'), "job.timezone"),
    (MINIMAL.replace('name = "j"', 'name = "j"\ncount_inputs = "yes"'), "true or false"),
    (MINIMAL.replace('time_column = "ts"', ''), "[output] needs 'time_column'"),
    (MINIMAL.replace('[output]', '[outputx]'), "unknown key 'outputx'"),
    ("[job]\nname = 'j'\nsql = 'q.sql'\n[output]\ntable = 'o'\ntime_column = 't'\n", "missing [[inputs]]"),
    ("[[inputs]]\ntable = 'i'\nview = 'v'\n", "missing [job]"),
    (MINIMAL + '[[inputs]]\ntable = "in2"\nview = "V"\n', "two inputs use view 'v'"),
    (MINIMAL + '[hive]\ntable = "a.b"\nmetastore = "mysql://h:9083"\n', "unknown metastore"),
    (MINIMAL + '[hive]\ntable = "a.b.c"\nmetastore = "hs2://h:1"\n', "must be db.table"),
    (MINIMAL + '[hive]\ntable = "a.b"\nmetastore = "hs2://h:1"\nfull_sync_every = "daily"\n',
     "hive.full_sync_every 'daily' is not a duration"),
    (MINIMAL + '[spark]\ndeploy_mode = "both"\n', "choose client or cluster"),
    (MINIMAL + '[spark]\nconf = { "a" = [1] }\n', "spark.conf.a must be"),
    (MINIMAL.replace('table = "in"', 'table = 5'), "inputs[0].table must be a non-empty string"),
    ("[job\nname=", "cannot read job file"),
])
def test_a_bad_job_file_is_one_clear_line(tmp_path, text, words):
    msg = load_error(tmp_path, text)
    assert words in msg, msg
    assert msg.startswith("job.toml: ") or "cannot read job file" in msg


def test_a_missing_job_file(tmp_path):
    with pytest.raises(InvalidInputError, match="does not exist"):
        Job.load(tmp_path / "nope.toml")


# -- schedule times and windows -----------------------------------------------------------
def _job(tmp_path, extra: str = "") -> Job:
    return Job.load(write_job(tmp_path, MINIMAL.replace('name = "j"', 'name = "j"\n' + extra)))


@pytest.mark.parametrize("given", ["2024-01-01T05:00:00Z", "2024-01-01T06:00:00+01:00",
                                   "2024-01-01T05:00:00.000+00:00", "1704085200000", 1704085200000,
                                   "2024-01-01T05:59:59.999Z", " 2024-01-01T05:00:00z "])
def test_schedule_times_are_iso_or_epoch_ms_and_floored_to_the_period(tmp_path, given):
    aligned, raw = schedule_time_ms(given, _job(tmp_path))
    assert aligned == parse_instant("2024-01-01T05:00:00+00:00")
    assert raw >= aligned and iso_z(aligned) == "2024-01-01T05:00:00Z"


def test_full_sync_every_picks_the_runs_on_its_multiples_in_the_job_zone(tmp_path):
    from tributary_read.etl.sync_step import wants_full_sync

    job = Job.load(write_job(tmp_path, MINIMAL.replace('name = "j"', 'name = "j"\ntimezone = "Asia/Shanghai"')
                             + '[hive]\ntable = "a.b"\nmetastore = "hs2://h:1"\nfull_sync_every = "1d"\n'))
    assert job.hive.full_sync_every == 24 * HOUR_MS and job.hive.to_json()["full_sync_every_ms"] == 24 * HOUR_MS
    midnight = parse_instant("2024-01-02T00:00:00+08:00")
    assert wants_full_sync(job, midnight, False) and not wants_full_sync(job, midnight + HOUR_MS, False)
    assert not wants_full_sync(job, parse_instant("2024-01-02T00:00:00+00:00"), False)
    assert wants_full_sync(job, midnight + HOUR_MS, True)  # --full-sync
    assert not wants_full_sync(_job(tmp_path), midnight, False)  # no [hive]: nothing to sync


def test_a_daily_job_floors_to_midnight_in_its_zone(tmp_path):
    job = _job(tmp_path, 'period = "1d"\ntimezone = "Asia/Shanghai"')
    aligned, _ = schedule_time_ms("2024-01-01T20:00:00Z", job)  # 04:00 on Jan 2 in Shanghai
    assert aligned == parse_instant("2024-01-02T00:00:00+08:00")


@pytest.mark.parametrize("bad", ["yesterday", "", "1704085200", "2024-13-01T00:00:00Z", "2024-01-01T05:00:00"])
def test_a_bad_schedule_time_names_the_flag(tmp_path, bad):
    with pytest.raises(InvalidInputError) as e:
        schedule_time_ms(bad, _job(tmp_path))
    assert "--schedule-time" in e.value.reword({"schedule_time": "--schedule-time"})


def test_the_sliding_form_ends_at_the_schedule_time_minus_the_lag_exclusive(tmp_path):
    job = Job.load(write_job(tmp_path, MINIMAL.replace(
        'view = "v"', 'view = "v"\nmode = "mtime"\nwindow_form = "sliding"\nlag = "5m"')))
    t = parse_instant("2024-01-01T05:00:00+00:00")
    w = window_for(job, job.inputs[0], t)
    assert (w.start_ms, w.end_ms) == (t - HOUR_MS - 300_000, t - 300_000 - 1)
    # consecutive runs tile time: every millisecond in exactly one window
    assert window_for(job, job.inputs[0], t + HOUR_MS).start_ms == w.end_ms + 1


def test_the_aligned_form_is_the_last_whole_period_ending_by_t_minus_lag(tmp_path):
    job = Job.load(write_job(tmp_path, MINIMAL.replace(
        'view = "v"', 'view = "v"\nmode = "mtime"\nwindow_form = "aligned"\nlag = "10m"')))
    t = parse_instant("2024-01-01T05:00:00Z")
    w = window_for(job, job.inputs[0], t)
    assert (w.start_ms, w.end_ms) == (t - 2 * HOUR_MS, t - HOUR_MS - 1)  # 03:00 .. 03:59:59.999
    # a run started late is the run of the same period, and reads the same window
    late, _ = schedule_time_ms("2024-01-01T05:14:00Z", job)
    assert late == t and window_for(job, job.inputs[0], late) == w


@pytest.mark.parametrize("extra,message", [
    ('lag = "10m"', "a lag or window needs window_form"),
    ('window = "2h"', "a lag or window needs window_form"),
    ('window_form = "aligned"\nwindow = "2h"', "the aligned form reads exactly one period"),
    ('window_form = "tumbling"', "unknown inputs[0].window_form 'tumbling'"),
])
def test_a_job_that_relied_on_the_old_window_is_refused_not_moved(tmp_path, extra, message):
    """Before the forms had names the ETL read [T - lag - window, T - lag): such a job must say which it means."""
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        Job.load(write_job(tmp_path, MINIMAL.replace('view = "v"', f'view = "v"\nmode = "mtime"\n{extra}')))


def test_no_lag_and_the_period_as_window_reads_what_it_read_before(tmp_path):
    """Where both forms agree (lag 0, window = period), an old job loads unchanged and reads the same window."""
    job = Job.load(write_job(tmp_path, MINIMAL.replace('view = "v"', 'view = "v"\nmode = "mtime"\nwindow = "1h"')))
    t = parse_instant("2024-01-01T05:00:00Z")
    assert job.inputs[0].window_form is WindowForm.ALIGNED
    w = window_for(job, job.inputs[0], t)
    assert (w.start_ms, w.end_ms) == (t - HOUR_MS, t - 1)


def test_the_transaction_is_the_job_and_the_schedule_time(tmp_path):
    job = _job(tmp_path)
    t = parse_instant("2024-01-01T05:00:00+00:00")
    record = RunRecord((InputRecord("v", "/raw", "consumer", 3, "c", "0-abc"),
                        InputRecord("w", "/other", "mtime", 0, window=(t - HOUR_MS, t - 1))))
    txn = transaction_for(job, t, record)
    assert txn.app_id == "etl:j" and dict(txn.offsets) == {"schedule_time_ms": t}
    assert txn.meta == {"schedule_time": "2024-01-01T05:00:00Z", "inputs": {
        "v": {"table": "/raw", "mode": "consumer", "files": 3, "consumer": "c", "plan_id": "0-abc"},
        "w": {"table": "/other", "mode": "mtime", "files": 0, "window": [t - HOUR_MS, t - 1]}}}
    # through the log's JSON and back: the same typed record
    back = Transaction.from_json(json.loads(json.dumps(txn.to_json())))
    assert RunRecord.of(back) == record and record.plans == record.inputs[:1]


def test_records_in_existing_logs_read_as_they_were_written():
    """The dict form the previous code wrote (commits in users' logs) reads into the typed record unchanged."""
    stored = {"raw": {"table": "file:///data/raw", "mode": "consumer", "files": 2, "consumer": "etl-j-raw",
                      "plan_id": "7-0f3a", "state_dir": "/state"},
              "dim": {"table": "/data/dim", "mode": "manifest", "files": 1, "window": [1, 3_600_000]},
              "junk": "not a dict: skipped"}
    txn = Transaction("etl:j", {"schedule_time_ms": 5}, {"schedule_time": "x", "inputs": stored})
    record = RunRecord.of(txn)
    assert [i.view for i in record.inputs] == ["raw", "dim"]
    assert record.inputs[0] == InputRecord("raw", "file:///data/raw", "consumer", 2, "etl-j-raw", "7-0f3a", "/state")
    assert record.inputs[1].window == (1, 3_600_000) and record.inputs[1].plan_id is None
    assert record.to_json() == {k: v for k, v in stored.items() if k != "junk"}
    assert recorded_inputs(txn) == record.to_json()
    assert RunRecord.of(Transaction("etl:j", {"schedule_time_ms": 5})) == RunRecord()


# -- the lock ---------------------------------------------------------------------------
def test_a_second_holder_of_the_job_lock_is_refused_and_the_lock_frees_on_exit(tmp_path):
    table = Table.create(str(tmp_path / "out"), TableConfig(Layout("{yyyy}_{MM}_{dd}/{HH}", "dt={yyyy}{MM}{dd}{HH}")))
    path = lock_path("j", table)
    assert path == str(tmp_path / "out" / "_tributary" / "etl" / "j.lock")
    with JobLock(path, "j"):
        with pytest.raises(ConcurrentRunError, match=rf"another run of job 'j' is in progress \(pid {os.getpid()}\)"):
            with JobLock(path, "j"):
                pass
    with JobLock(path, "j") as lock:  # released: a later run takes it
        assert lock.note("session") is None
        lock.set_note("session", "s1")
    with JobLock(path, "j") as lock:  # a note is the next holder's; the holder's pid still names it
        assert lock.note("session") == "s1"
        with pytest.raises(ConcurrentRunError, match=rf"\(pid {os.getpid()}\)"):
            with JobLock(path, "j"):
                pass
    assert ConcurrentRunError.exit_code == 5
    assert lock_path("j", table, str(tmp_path / "locks")) == str(tmp_path / "locks" / "j.lock")


def test_a_run_keeps_the_last_runs_connect_session_only_on_the_same_server_and_its_own_url(tmp_path):
    """The kept Spark Connect session's rule (tests/test_connect_session.py runs it on a server): the last
    run's session on the same server; a new one on another server; none of trib's choosing for a URL that
    names its own session, or a run without the lock (a dry run)."""
    from types import SimpleNamespace

    from tributary_read.etl.commit_step import SESSION_NOTE, _kept_session_id, _server_key
    from tributary_read.etl.remote import url_params

    url = "sc://127.0.0.1:15002/;token=s3cr3t;user_id=etl"
    assert url_params(url) == {"token": "s3cr3t", "user_id": "etl"} and url_params("sc://h:1") == {}
    with JobLock(str(tmp_path / "j.lock"), "j") as lock:
        run = SimpleNamespace(lock=lock)
        first = _kept_session_id(run, url)  # type: ignore[arg-type]
        assert first and "s3cr3t" not in _server_key(url)
        lock.set_note(SESSION_NOTE, f"{_server_key(url)} {first}")
        assert _kept_session_id(run, url) == first  # type: ignore[arg-type]
        assert _kept_session_id(run, "sc://other:15002") not in (None, first)  # type: ignore[arg-type]
        assert _kept_session_id(run, url + ";session_id=mine") is None  # type: ignore[arg-type]
        assert _kept_session_id(SimpleNamespace(lock=None), url) is None  # type: ignore[arg-type]


def test_a_remote_output_locks_in_a_local_state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))

    class Remote:
        uri = "s3://bucket/events"
        storage = object()

    p = lock_path("j", Remote())
    assert p.startswith(str(tmp_path / "state" / "trib" / "etl" / "j-")) and p.endswith(".lock")
    assert p != lock_path("j", type("Other", (), {"uri": "s3://bucket/other", "storage": object()})())


# -- spark-submit ---------------------------------------------------------------------------
def test_submit_line_for_yarn_cluster_ships_the_environment_job_and_sql(tmp_path):
    job = Job.load(write_job(tmp_path, ISSUE_JOB))
    cmd = build_submit(job, "2024-01-01T05:10:00Z", master="yarn", deploy_mode="cluster", archives="env.tar.gz",
                       spark_submit="spark-submit")
    argv = list(cmd.argv)
    assert argv[:6] == ["spark-submit", "--master", "yarn", "--deploy-mode", "cluster", "--name"]
    assert argv[argv.index("--archives") + 1] == "env.tar.gz#environment"
    confs = {argv[i + 1] for i, a in enumerate(argv) if a == "--conf"}
    assert {"spark.pyspark.python=./environment/bin/python", "spark.pyspark.driver.python=./environment/bin/python",
            "spark.yarn.appMasterEnv.PYSPARK_PYTHON=./environment/bin/python",
            "spark.sql.shuffle.partitions=4"} <= confs
    assert argv[argv.index("--files") + 1] == f"{tmp_path / 'job.toml'},{tmp_path / 'etl.sql'}"
    assert argv[-6:] == [driver_path(), "job.toml", "--schedule-time", "2024-01-01T05:00:00Z", "--sql", "etl.sql"]
    assert os.path.isfile(driver_path())
    assert any("local paths" in n for n in cmd.notes)  # /data/raw is this machine's disk


def test_submit_line_without_an_archive_ships_trib_with_py_files(tmp_path):
    """Issue 21: the nodes need no tributary-read; the zip the session builder adds goes with --py-files."""
    from tributary_read.spark.ship import package_zip

    job = Job.load(write_job(tmp_path, ISSUE_JOB))
    for mode in ("client", "cluster"):
        cmd = build_submit(job, "2024-01-01T05:00:00Z", master="spark://10.0.0.1:7077", deploy_mode=mode,
                           spark_submit="spark-submit")
        argv = list(cmd.argv)
        assert argv[argv.index("--py-files") + 1] == package_zip() and "--archives" not in argv, argv
        assert argv.index("--py-files") < argv.index(driver_path())  # an option of spark-submit's, not the app's
        assert any("--py-files" in n for n in cmd.notes), cmd.notes
    with_archive = build_submit(job, "2024-01-01T05:00:00Z", master="yarn", archives="env.tar.gz",
                                spark_submit="spark-submit")
    local = build_submit(job, "2024-01-01T05:00:00Z", spark_submit="spark-submit")
    assert "--py-files" not in with_archive.argv and "--py-files" not in local.argv


def test_submit_line_in_client_mode_runs_the_driver_here(tmp_path):
    job = Job.load(write_job(tmp_path, ISSUE_JOB))
    cmd = build_submit(job, "2024-01-01T05:00:00Z", spark_submit="spark-submit")
    assert cmd.master == "local[2]" and cmd.deploy_mode == "client"
    assert cmd.argv[-3:] == (str(tmp_path / "job.toml"), "--schedule-time", "2024-01-01T05:00:00Z")
    with pytest.raises(InvalidInputError, match="deploy mode cluster needs a cluster master"):
        build_submit(job, "2024-01-01T05:00:00Z", deploy_mode="cluster")


def test_a_jobs_json_shows_no_secret_from_its_spark_conf_stream_or_input_options(tmp_path):
    """A job file may hold secrets (a file, not argv); what trib prints of a job must not."""
    job = Job.load(write_job(tmp_path, MINIMAL.replace('view = "v"', 'view = "v"\noptions = { "sasl.password" = "pw1" }')
                             + '\n[spark]\nconf = { "spark.hadoop.fs.s3a.secret.key" = "pw2", '
                               '"spark.sql.shuffle.partitions" = "4" }\n'))
    text = json.dumps(job.to_json())
    assert "pw1" not in text and "pw2" not in text, text
    assert job.to_json()["spark"]["conf"] == {"spark.hadoop.fs.s3a.secret.key": "<redacted>",
                                              "spark.sql.shuffle.partitions": "4"}
    assert job.spark.conf["spark.hadoop.fs.s3a.secret.key"] == "pw2"  # the run itself still gets it

    stream = tmp_path / "s"
    stream.mkdir()
    (stream / "q.sql").write_text("SELECT 1")
    (stream / "job.toml").write_text(
        '[job]\nname = "j"\nsql = "q.sql"\n\n[stream]\nsource = "kafka"\ncheckpoint = "ck"\n'
        'options = { "kafka.bootstrap.servers" = "b:9092", "subscribe" = "t", '
        '"kafka.sasl.jaas.config" = "PlainLoginModule required password=\\"pw3\\";" }\n\n'
        '[output]\ntable = "out"\ntime_column = "ts"\n')
    d = Job.load(stream / "job.toml").to_json()["stream"]["options"]
    assert d == {"kafka.bootstrap.servers": "b:9092", "subscribe": "t", "kafka.sasl.jaas.config": "<redacted>"}
