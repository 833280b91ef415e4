"""OpenLineage events of real ``trib etl run`` processes (issue 31, part 1; work in progress on branch i31).

The client's file transport (``OPENLINEAGE__TRANSPORT__*``) writes one event per line. A run sends
START and COMPLETE with one run id; the input subset names exactly the files the run read, the output
the commit's version and statistics; every event validates against the spec's schemas. A run killed
with -9 right after its commit sends no COMPLETE; the rerun of that hour sends it, once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, TRIB
from etl_data import RawSource, create_output_table, write_job
from openlineage_schema import event_errors
from tributary_read.lineage.event import iso_ms

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
pytest.importorskip("openlineage.client")


def _run(job, when, events, extra=None, how="--schedule-time"):
    """``trib etl run JOB`` for schedule time ``when`` (``how="--restate"``: a backfill of interval ``when``)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "OPENLINEAGE__TRANSPORT__TYPE": "file", "OPENLINEAGE__TRANSPORT__LOG_FILE_PATH": str(events),
           "OPENLINEAGE__TRANSPORT__APPEND": "true", **(extra or {})}
    if not extra:
        env.pop("TRIB_CRASH_AT", None)
    return subprocess.run([*TRIB, "etl", "run", str(job), how, when, "--json"], capture_output=True,
                          text=True, env=env, timeout=300)


def _events(path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_run_sends_start_and_complete_and_a_killed_run_is_completed_by_its_rerun(tmp_path, warm_spark):
    src = RawSource(tmp_path / "raw", 2)
    create_output_table(tmp_path / "out")
    job = write_job(tmp_path / "jobs", name="hourly", raw=tmp_path / "raw", out=tmp_path / "out")
    events = tmp_path / "events.jsonl"

    src.advance(0)
    p = _run(job, src.schedule_iso(0), events)
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    evs = _events(events)
    assert [e["eventType"] for e in evs] == ["START", "COMPLETE"]
    assert evs[0]["run"]["runId"] == evs[1]["run"]["runId"]
    for e in evs:
        assert event_errors(e) == [], event_errors(e)
    done = evs[1]
    locations = done["inputs"][0]["inputFacets"]["subset"]["inputCondition"]["locations"]
    assert sorted(locations) == sorted((tmp_path / "raw" / f.path).as_uri() for f in src.arrived_in(0))
    out = done["outputs"][0]
    assert out["facets"]["version"]["datasetVersion"] == str(report["version"])
    assert out["facets"]["schema"]["fields"] and done["inputs"][0]["facets"]["schema"]["fields"]
    assert {f["name"] for f in out["facets"]["schema"]["fields"]} >= {report["output"]["time_column"]}
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == report["output"]["records"]

    # Hour 1: killed right after its commit, before any COMPLETE; the rerun sends it, once.
    src.advance(1)
    p = _run(job, src.schedule_iso(1), events, {"TRIB_CRASH_AT": "etl.after_commit"})
    assert p.returncode == -9, p.stderr
    evs = _events(events)
    assert [e["eventType"] for e in evs[2:]] == ["START"]
    assert list((tmp_path / "out" / "_tributary" / "lineage").rglob("*.json"))  # kept for the next run
    p = _run(job, src.schedule_iso(1), events)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["already_committed"] is True
    evs = _events(events)
    assert [e["eventType"] for e in evs[2:]] == ["START", "COMPLETE"]
    assert evs[2]["run"]["runId"] == evs[3]["run"]["runId"] != evs[0]["run"]["runId"]
    assert event_errors(evs[3]) == []
    assert sorted(evs[3]["inputs"][0]["inputFacets"]["subset"]["inputCondition"]["locations"]) == \
        sorted((tmp_path / "raw" / f.path).as_uri() for f in src.arrived_in(1))
    assert not list((tmp_path / "out" / "_tributary" / "lineage").rglob("*.json"))

    # Hour 2: killed before its commit. Its kept event waits (it may be a live run on another machine)
    # until it is a day old; then the next run sends FAIL ("killed") for it, once, and drops it.
    src.advance(2)
    p = _run(job, src.schedule_iso(2), events, {"TRIB_CRASH_AT": "etl.before_commit"})
    assert p.returncode == -9, p.stderr
    kept = list((tmp_path / "out" / "_tributary" / "lineage").rglob("*.json"))
    assert len(kept) == 1
    ev = json.loads(kept[0].read_text())
    ev["eventTime"] = "2020-01-01T00:00:00.000+00:00"  # as if kept long ago
    kept[0].write_text(json.dumps(ev))
    src.advance(3)
    p = _run(job, src.schedule_iso(3), events)
    assert p.returncode == 0, p.stderr
    evs = _events(events)[4:]
    assert [e["eventType"] for e in evs] == ["START", "START", "COMPLETE", "FAIL"]
    abort = evs[3]
    assert abort["run"]["runId"] == evs[0]["run"]["runId"] and event_errors(abort) == []
    assert "before its commit" in abort["run"]["facets"]["errorMessage"]["message"]
    assert not list((tmp_path / "out" / "_tributary" / "lineage").rglob("*.json"))


def test_a_run_that_fails_before_its_commit_sends_fail_with_the_error(tmp_path, warm_spark):
    src = RawSource(tmp_path / "raw", 2)
    create_output_table(tmp_path / "out")
    job = write_job(tmp_path / "jobs", name="bad", raw=tmp_path / "raw", out=tmp_path / "out",
                    sql="SELECT no_such_column FROM raw\n")
    events = tmp_path / "events.jsonl"
    src.advance(0)
    # A lineage endpoint that is down: the run fails as it would (its own error), with one warning line,
    # and keeps its FAIL for the next run.
    down = {"OPENLINEAGE__TRANSPORT__TYPE": "http", "OPENLINEAGE__TRANSPORT__URL": "http://127.0.0.1:9",
            "OPENLINEAGE__TRANSPORT__RETRY": '{"total": 0, "connect": 0, "read": 0}'}
    p = _run(job, src.schedule_iso(0), events, down)
    assert p.returncode != 0 and not events.exists()
    assert len([line for line in p.stderr.splitlines() if "lineage" in line]) == 1, p.stderr
    kept = list((tmp_path / "out" / "_tributary" / "lineage").rglob("*.json"))
    assert [json.loads(k.read_text())["eventType"] for k in kept] == ["FAIL"]
    p = _run(job, src.schedule_iso(0), events)
    assert p.returncode != 0
    evs = _events(events)
    assert [e["eventType"] for e in evs] == ["START", "FAIL"], p.stderr
    assert event_errors(evs[1]) == []
    assert "no_such_column" in evs[1]["run"]["facets"]["errorMessage"]["message"]
    assert not list((tmp_path / "out" / "_tributary" / "lineage").rglob("*.json"))  # FAIL ends it


def test_a_restate_run_names_each_restated_partition_in_its_complete_event(tmp_path, warm_spark):
    """The output dataset of a restate run's COMPLETE carries trib's ``tributary_restated`` facet: the report's
    ``output.restated``, each partition with its records before and after and the files that caused it."""
    src = RawSource(tmp_path / "raw", 2, early=False)
    create_output_table(tmp_path / "out")
    job = write_job(tmp_path / "jobs", name="restating", raw=tmp_path / "raw", out=tmp_path / "out",
                    output_mode="restate")
    events = tmp_path / "events.jsonl"
    src.advance(0)
    p = _run(job, src.schedule_iso(0), events)
    assert p.returncode == 0, p.stderr
    restated = json.loads(p.stdout)["output"]["restated"]
    assert restated and all(r["cause"] == "input" and r["inputs"] for r in restated)
    done = _events(events)[-1]
    assert done["eventType"] == "COMPLETE" and event_errors(done) == [], event_errors(done)
    assert done["outputs"][0]["outputFacets"]["tributary_restated"]["partitions"] == restated

    # Killed right after the commit of its next restate: the rerun finds the commit made, and its report and
    # COMPLETE name the same causes the run that made it resolved (the commit keeps them)
    src.advance(1)
    p = _run(job, src.schedule_iso(1), events, {"TRIB_CRASH_AT": "etl.after_commit"})
    assert p.returncode == -9, p.stderr
    p = _run(job, src.schedule_iso(1), events)
    assert p.returncode == 0, p.stderr
    rerun = json.loads(p.stdout)
    restated = rerun["output"]["restated"]
    assert rerun["already_committed"] and restated and all(r["cause"] == "input" and r["inputs"] for r in restated)
    done = _events(events)[-1]
    assert done["eventType"] == "COMPLETE" and event_errors(done) == [], event_errors(done)
    assert done["outputs"][0]["outputFacets"]["tributary_restated"]["partitions"] == restated
    assert {f for r in restated for i in r["inputs"] for f in i["files"]} <= {f.path for f in src.arrived_in(1)}

    # A backfill is a run of its own: START and COMPLETE with the restated facet, its interval its nominal time
    # and its tributary_backfill facet; one that fails sends FAIL with the error
    start, end = src.hour(0), src.hour(1)
    seen = len(_events(events))
    p = _run(job, f"{start}/{end}", events, how="--restate")
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    evs = _events(events)[seen:]
    assert [e["eventType"] for e in evs] == ["START", "COMPLETE"] and evs[0]["run"]["runId"] == evs[1]["run"]["runId"]
    assert all(event_errors(e) == [] for e in evs), [event_errors(e) for e in evs]
    assert evs[1]["run"]["runId"] not in {e["run"]["runId"] for e in _events(events)[:seen]}
    interval = {"start": iso_ms(start), "end": iso_ms(end)}
    for e in evs:
        assert e["run"]["facets"]["tributary_backfill"]["interval"] == interval
        assert (e["run"]["facets"]["nominalTime"]["nominalStartTime"],
                e["run"]["facets"]["nominalTime"]["nominalEndTime"]) == (interval["start"], interval["end"])
    out = evs[1]["outputs"][0]
    assert out["outputFacets"]["tributary_restated"]["partitions"] == report["output"]["restated"]
    assert {r["cause"] for r in report["output"]["restated"]} == {"backfill"}
    assert out["facets"]["version"]["datasetVersion"] == str(report["version"])
    assert sorted(evs[0]["inputs"][0]["inputFacets"]["subset"]["inputCondition"]["locations"]) == \
        sorted((tmp_path / "raw" / f.path).as_uri() for f in src.arrived_in(0))
    # one killed right after its commit: its COMPLETE is kept, and the job's next backfill sends it, once
    p = _run(job, f"{start}/{end}", events, {"TRIB_CRASH_AT": "restate.after_swap"}, how="--restate")
    assert p.returncode == -9, p.stderr
    killed = _events(events)[seen + 2:]
    assert [e["eventType"] for e in killed] == ["START"]
    p = _run(job, f"{start}/{end}", events, how="--restate")
    assert p.returncode == 0, p.stderr
    evs = _events(events)[seen + 3:]
    assert [e["eventType"] for e in evs] == ["START", "COMPLETE", "COMPLETE"]
    assert evs[1]["run"]["runId"] == evs[0]["run"]["runId"] and evs[2]["run"]["runId"] == killed[0]["run"]["runId"]
    assert evs[2]["outputs"][0]["outputFacets"]["tributary_restated"]["partitions"] and event_errors(evs[2]) == []
    (job.parent / "restating.sql").write_text("SELECT no_such_column FROM raw\n")
    p = _run(job, f"{start}/{end}", events, how="--restate")
    assert p.returncode != 0
    evs = _events(events)[seen + 6:]
    assert [e["eventType"] for e in evs] == ["START", "FAIL"] and event_errors(evs[1]) == []
    assert "no_such_column" in evs[1]["run"]["facets"]["errorMessage"]["message"]
    assert not list((tmp_path / "out" / "_tributary" / "lineage").rglob("*.json"))
