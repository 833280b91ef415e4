"""The provider's parts that need no Airflow: the outcome table (and its copy in docs/airflow.md), the
interval check every front end shares, completeness read from the log, asset URIs, and the import rule.

tests/test_scheduling_airflow.py runs them inside a real Airflow."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from conftest import REPO, invoke_trib, run_trib
from etl_data import create_output_table, write_job
from helpers import BASE_MS, LAYOUT, PARTITION
from tributary_read import errors as E
from tributary_read.airflow.assets import partition_key, root_of, table_uri
from tributary_read.airflow.outcome import RULES, Outcome, table_rows, verdict
from tributary_read.errors import InvalidInputError
from tributary_read.read.window import Schedule
from tributary_read.table.layout import Layout, parse_timezone

pytestmark = pytest.mark.unit

H = 3_600_000
LAY = Layout(LAYOUT, PARTITION)


# -- the outcome table -----------------------------------------------------------------
def test_docs_show_the_outcome_table_of_the_code():
    text = (REPO / "docs" / "airflow.md").read_text()
    shown = [tuple(c.strip() for c in line.strip().strip("|").split("|"))
             for line in text.splitlines() if re.match(r"\|\s*[\d,]", line)]
    assert shown == table_rows()


def test_every_error_class_has_an_outcome_and_the_most_specific_rule_wins():
    from tributary_read.exits import error_classes

    for cls in error_classes():
        rule = next(r for r in RULES if issubclass(cls, r.error))
        later = [r for r in RULES[RULES.index(rule) + 1:] if issubclass(r.error, rule.error) and r.error is not rule.error]
        assert not later, f"{cls.__name__}: rule {rule.error.__name__} hides the narrower {later[0].error.__name__}"
    # Inside one exit code, the class decides: 8 retries, except a refused login.
    assert verdict(8, json.dumps({"error": {"class": "MetastoreError", "exit_code": 8, "message": "m"}})
                   ).outcome is Outcome.RETRY
    assert verdict(8, json.dumps({"error": {"class": "MetastoreAuthError", "exit_code": 8, "message": "m"}})
                   ).outcome is Outcome.FAIL
    assert verdict(7, json.dumps({"error": {"class": "UnreadableInputError", "exit_code": 7, "message": "m"}})
                   ).outcome is Outcome.FAIL


@pytest.mark.parametrize("code, outcome", [(0, Outcome.SUCCESS), (143, Outcome.RETRY), (-9, Outcome.RETRY),
                                           (1, Outcome.RETRY), (5, Outcome.RETRY), (7, Outcome.RETRY),
                                           (8, Outcome.RETRY), (12, Outcome.RETRY), (3, Outcome.FAIL),
                                           (4, Outcome.FAIL), (6, Outcome.FAIL), (9, Outcome.FAIL),
                                           (10, Outcome.FAIL), (13, Outcome.FAIL), (16, Outcome.FAIL)])
def test_an_exit_code_without_its_class_falls_back_to_its_family(code, outcome):
    assert verdict(code, "", "trib: error: something").outcome is outcome


def test_the_cli_error_object_names_the_class_the_table_reads(tmp_path):
    p = invoke_trib("etl", "run", str(tmp_path / "missing.toml"), "--schedule-time", "2024-01-01T05:00:00Z",
                    "--json")
    v = verdict(p.returncode, p.stdout, p.stderr.strip().splitlines()[-1])
    assert (p.returncode, v.outcome, v.error_class) == (3, Outcome.FAIL, "InvalidInputError")


def test_a_metastore_that_does_not_answer_is_retried_a_refused_table_is_not(tmp_path):
    from conftest import _free_port

    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    p = invoke_trib("partitions", "sync", str(root), "--metastore", f"thrift://127.0.0.1:{_free_port()}",
                    "--hive-table", "db.t", "--json")
    v = verdict(p.returncode, p.stdout, p.stderr.strip().splitlines()[-1])
    assert (p.returncode, v.outcome) == (8, Outcome.RETRY), p.stderr
    p = invoke_trib("files", str(tmp_path / "nothing"), "--all", "--json")
    v = verdict(p.returncode, p.stdout, p.stderr.strip().splitlines()[-1])
    assert (p.returncode, v.outcome, v.error_class) == (4, Outcome.FAIL, "NoSuchTableError"), p.stderr


# -- the interval --------------------------------------------------------------------
def _job(tmp_path):
    (tmp_path / "raw").mkdir()
    create_output_table(tmp_path / "out")
    return write_job(tmp_path / "jobs", name="hourly", raw=tmp_path / "raw", out=tmp_path / "out")


def test_etl_run_refuses_an_interval_that_is_not_one_period(tmp_path):
    job = str(_job(tmp_path))
    p = invoke_trib("etl", "run", job, "--schedule-time", "2024-01-01T05:00:00Z",
                    "--interval-start", "2024-01-01T05:00:00Z")
    assert p.returncode == 3 and "is empty" in p.stderr and "CronDataIntervalTimetable" in p.stderr
    for start, end in (("2024-01-01T03:00:00Z", "2024-01-01T05:00:00Z"),    # two periods
                       ("2024-01-01T04:30:00Z", "2024-01-01T05:30:00Z")):   # one period, off the boundary
        p = invoke_trib("etl", "run", job, "--schedule-time", end, "--interval-start", start)
        assert p.returncode == 3 and "is not one period (1h, in UTC)" in p.stderr, p.stderr
    p = invoke_trib("etl", "submit", job, "--schedule-time", "2024-01-01T05:00:00Z",
                    "--interval-start", "2024-01-01T05:00:00Z")
    assert p.returncode == 3 and "CronDataIntervalTimetable" in p.stderr
    p = invoke_trib("etl", "run", job, "--schedule-time", "2024-01-01T05:00:00Z", "--interval-start", "yesterday")
    assert p.returncode == 3 and "--interval-start" in p.stderr
    # One period ending at a boundary passes the check (the dry run goes on to plan).
    p = invoke_trib("etl", "run", job, "--schedule-time", "2024-01-01T05:00:00Z",
                    "--interval-start", "2024-01-01T04:00:00Z", "--dry-run", "--json")
    assert p.returncode == 0, p.stderr


def test_a_daily_interval_follows_the_calendar_across_dst():
    ny = parse_timezone("America/New_York")
    daily = Schedule(24 * H, tz=ny)
    start = int(datetime(2024, 3, 10, 5, tzinfo=timezone.utc).timestamp() * 1000)  # midnight EST
    end = int(datetime(2024, 3, 11, 4, tzinfo=timezone.utc).timestamp() * 1000)  # midnight EDT: 23 h later
    daily.check_interval(start, end)
    with pytest.raises(InvalidInputError, match="not one period"):
        daily.check_interval(end - 24 * H, end)


# -- completeness from the log ---------------------------------------------------------
def _records(path, hours_ms):
    path.write_text("".join(json.dumps({"id": i, "ts": t}) + "\n" for i, t in enumerate(hours_ms)))
    return str(path)


def test_completion_reads_the_policy_clock_from_the_log(tmp_path):
    from tributary_read.hive.completion import completion
    from tributary_read.table.config import Table

    root = tmp_path / "t"
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    h0 = LAY.for_time(BASE_MS)
    with pytest.raises(InvalidInputError, match="no partition-commit policy"):
        completion(Table.load(str(root)), [h0.path])
    run_trib("partitions", "configure", str(root), "--policy", "success-file", "--clock", "event", check=True)
    run_trib("ingest", str(root), "--source", _records(tmp_path / "a.jsonl", [BASE_MS + 1000]), "--app-id", "a",
             "--time-field", "ts", check=True)
    table = Table.load(str(root))
    value = h0.values["dt"]
    for name in (h0.path, h0.spec, value):  # its directory, Hive name or value
        [c] = completion(table, [name])
        assert (c.partition, c.complete, c.files) == (h0.spec, False, 1)  # it exists, it is not complete
    run_trib("ingest", str(root), "--source", _records(tmp_path / "b.jsonl", [BASE_MS + H + 1000]), "--app-id",
             "b", "--time-field", "ts", check=True)
    c0, c1 = completion(Table.load(str(root)), [value, LAY.for_time(BASE_MS + H).path])
    assert (c0.complete, c1.complete, c0.clock_ms) == (True, False, h0.end_ms)
    with pytest.raises(InvalidInputError, match="is not one of table"):
        completion(table, ["dt=nope"])
    # The processing clock: the newest commit's time (the run above committed long after these hours).
    run_trib("partitions", "configure", str(root), "--clock", "processing", "--delay", "1h", check=True)
    assert all(c.complete for c in completion(Table.load(str(root)), [value, LAY.for_time(BASE_MS + H).path]))


def test_committed_run_finds_a_job_run_by_name_and_schedule_time(tmp_path):
    from tributary_read.etl.run import committed_run
    from tributary_read.table.config import Table
    from tributary_read.table.manifest import Transaction
    from tributary_read.write.writer import TableWriter

    create_output_table(tmp_path / "out")
    table = Table.load(str(tmp_path / "out"))
    t = int(datetime(2024, 1, 1, 5, tzinfo=timezone.utc).timestamp() * 1000)
    w = TableWriter(table)
    w.write({"id": 1, "ts": t - H + 1, "msg": "x"}, t - H + 1)
    w.commit(Transaction("etl:hourly", {"schedule_time_ms": t}))
    assert committed_run(table, "hourly", "2024-01-01T05:00:00Z").version == 1
    assert committed_run(table, "hourly", datetime(2024, 1, 1, 5, tzinfo=timezone.utc)) is not None
    assert committed_run(table, "hourly", "2024-01-01T06:00:00Z") is None
    assert committed_run(table, "daily", "2024-01-01T05:00:00Z") is None


# -- assets and imports ------------------------------------------------------------------
@pytest.mark.parametrize("root", ["/data/events", "s3://bucket/events", "hdfs://nn:8020/warehouse/events"])
def test_asset_uris_name_their_table(root):
    uri = table_uri(root)
    assert uri.startswith("trib://") and root_of(uri) == root
    assert root_of(uri.replace("trib:///", "trib:/")) == root  # Airflow's normalised form
    assert table_uri("file:///data/events") == table_uri("/data/events")


def test_partition_keys_are_partition_values():
    assert partition_key("dt=2024010105") == "2024010105"
    assert partition_key("dt=20240101/hr=05") == "dt=20240101/hr=05"


def test_the_asset_event_of_a_restate_run_marks_its_restated_partitions(tmp_path):
    """The operator's asset event for a run's report (its XCom): the commit, one key per partition, and for a
    restate the partitions it recomputed, by key, so a downstream DAG can rerun them (an emptied one too)."""
    from tributary_read.airflow.assets import asset_event

    create_output_table(tmp_path / "out")
    h5, h6 = LAY.for_time(BASE_MS + 5 * H), LAY.for_time(BASE_MS + 6 * H)
    report = {"job": "hourly", "schedule_time": "2024-01-01T07:00:00Z", "version": 4,
              "output": {"table": str(tmp_path / "out"), "partitions": [h5.path, h6.path], "restated": [
                  {"partition": h5.path, "records_before": 2, "records_after": 3, "cause": "input",
                   "inputs": [{"view": "raw", "files": [f"{h5.path}/late.jsonl"], "files_total": 1}]},
                  {"partition": h6.path, "records_before": 1, "records_after": 0, "cause": "input", "inputs": None}]}}
    extra, keys = asset_event(report)
    k5, k6 = partition_key(h5.spec), partition_key(h6.spec)
    assert keys == [k5, k6] and k5 == h5.values["dt"]
    assert extra == {"job": "hourly", "schedule_time": "2024-01-01T07:00:00Z", "version": 4, "restated": [
        {"partition_key": k5, "partition": h5.path, "records_before": 2, "records_after": 3, "cause": "input"},
        {"partition_key": k6, "partition": h6.path, "records_before": 1, "records_after": 0, "cause": "input"}]}
    append = {**report, "output": {**report["output"], "restated": []}}  # an append run: no restated key
    assert asset_event(append) == ({"job": "hourly", "schedule_time": "2024-01-01T07:00:00Z", "version": 4},
                                   [k5, k6])
    assert asset_event({**report, "output": {"table": str(tmp_path / "nowhere")}})[1] == []  # nothing committed


def test_the_provider_registers_without_importing_airflow():
    code = ("import sys, tributary_read, tributary_read.airflow as a; info = a.get_provider_info(); "
            "assert 'airflow' not in sys.modules, sorted(m for m in sys.modules if m.startswith('airflow')); "
            "print(info['name'], info['triggers'][0]['python-modules'][0])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["Tributary", "Read", "tributary_read.airflow.triggers"]
    assert issubclass(E.MetastoreAuthError, E.MetastoreError)
