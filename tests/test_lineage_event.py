"""trib's OpenLineage events against the spec's schemas, offline (issue 31, part 1; work in progress)."""

from __future__ import annotations

import copy
import json

import pytest

from openlineage_schema import event_errors
from tributary_read.lineage.event import MAX_LOCATIONS, input_dataset, output_dataset, run_event, run_id

pytestmark = pytest.mark.unit

H = 3_600_000
T = 1_704_085_200_000  # 2024-01-01T05:00Z


def _complete(files):
    return run_event(
        "COMPLETE", run=run_id("etl", "hourly", T), namespace="trib", job="hourly", event_ms=T + 60_000,
        nominal=(T - H, T),
        inputs=[input_dataset("file:///data/raw", files, size=123, rows=7, version="plan-1",
                              partitions={"2024_01_01/04": len(files)})],
        outputs=[output_dataset("file:///data/events", version=3, files=2, rows=7, size=456,
                                partitions=[{"dt": "2024010104"}], hive_table="dw.events",
                                hive_namespace="hive://metastore:9083")])


def test_a_complete_event_validates_and_names_the_exact_files():
    ev = _complete(["2024_01_01/04/a.jsonl", "2024_01_01/04/b.jsonl"])
    assert event_errors(ev) == []
    cond = ev["inputs"][0]["inputFacets"]["subset"]["inputCondition"]
    assert cond == {"type": "location", "locations": ["file:///data/raw/2024_01_01/04/a.jsonl",
                                                      "file:///data/raw/2024_01_01/04/b.jsonl"]}


def test_a_restate_names_its_partitions_in_trib_s_own_facet_which_validates_against_its_schema():
    restated = [{"partition": "2024_01_01/04", "records_before": 3, "records_after": 5, "cause": "input",
                 "inputs": [{"view": "raw", "files": ["2024_01_01/04/late.jsonl"], "files_total": 1}]},
                {"partition": "2024_01_01/03", "records_before": 2, "records_after": 2, "cause": "input", "inputs": None},
                {"partition": "2024_01_01/02", "records_before": 1, "records_after": 0, "cause": "backfill",
                 "interval": {"start": "2024-01-01T02:00:00Z", "end": "2024-01-01T03:00:00Z"}}]
    out = output_dataset("file:///data/events", version=3, files=1, rows=7, size=456, restated=restated)
    ev = run_event("COMPLETE", run=run_id("etl", "hourly", T), namespace="trib", job="hourly", event_ms=T,
                   outputs=[out])
    assert event_errors(ev) == []
    f = ev["outputs"][0]["outputFacets"]["tributary_restated"]
    assert f["partitions"] == restated and f["_schemaURL"].endswith("#/$defs/TributaryRestatedOutputDatasetFacet")
    bad = copy.deepcopy(ev)
    bad["outputs"][0]["outputFacets"]["tributary_restated"]["partitions"][0]["records_after"] = -1
    assert event_errors(bad)
    assert "tributary_restated" not in output_dataset("file:///x", version=1, files=0, rows=0, size=0)["outputFacets"]


def test_above_the_threshold_the_subset_lists_partitions_and_the_event_stays_small():
    files = [f"2024_01_01/04/part-{i:06d}.jsonl" for i in range(MAX_LOCATIONS * 50)]
    ev = _complete(files)
    assert event_errors(ev) == []
    cond = ev["inputs"][0]["inputFacets"]["subset"]["inputCondition"]
    assert cond == {"type": "partition", "partitions": [
        {"identifier": "file:///data/raw/2024_01_01/04", "dimensions": {"files": str(len(files))}}]}
    assert len(json.dumps(ev)) < 1_000_000


def test_a_backfill_over_many_partitions_lists_coarser_directories_and_stays_small():
    """A year of hourly partitions, three files each: 8,760 directories are more than the threshold,
    so the subset lists the 365 days (each with its 72 files)."""
    files = [f"{d // 24 + 1:03d}/{d % 24:02d}/part-{i}.jsonl" for d in range(8760) for i in range(3)]
    ev = run_event("COMPLETE", run=run_id("etl", "backfill", T), namespace="trib", job="backfill", event_ms=T,
                   inputs=[input_dataset("s3://bucket/raw", files, size=1)])
    assert event_errors(ev) == []
    parts = ev["inputs"][0]["inputFacets"]["subset"]["inputCondition"]["partitions"]
    assert len(parts) == 365 and parts[0] == {"identifier": "s3://bucket/raw/001", "dimensions": {"files": "72"}}
    assert sum(int(p["dimensions"]["files"]) for p in parts) == len(files)
    assert len(json.dumps(ev)) < 100_000


def test_the_check_fails_a_broken_event():
    ev = _complete(["a"])
    bad = copy.deepcopy(ev)
    bad["inputs"][0]["inputFacets"]["subset"]["inputCondition"]["locations"] = "a"  # not a list
    assert event_errors(bad)
    bad = copy.deepcopy(ev)
    bad["run"]["runId"] = "not-a-uuid"
    assert event_errors(bad)


def test_every_try_of_an_hour_is_one_run():
    assert run_id("etl", "hourly", T) == run_id("etl", "hourly", T)
    assert run_id("etl", "hourly", T) != run_id("etl", "hourly", T + H) != run_id("etl", "daily", T)
    assert run_id("etl", "hourly", T) < run_id("etl", "hourly", T + H)  # time-ordered by schedule time


def test_nothing_configured_sends_nothing_and_imports_nothing(tmp_path):
    import subprocess
    import sys

    code = ("import sys; from tributary_read.lineage.transport import Emitter; e = Emitter(print, env={}); "
            "print(e.send({'eventType': 'START'}), 'openlineage' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert p.stdout.split() == ["False", "False"], p.stderr


def test_the_file_transport_gets_the_event_and_a_broken_one_is_one_warning(tmp_path):
    pytest.importorskip("openlineage.client")
    from tributary_read.lineage.transport import Emitter

    out = tmp_path / "events.jsonl"
    env = {"OPENLINEAGE__TRANSPORT__TYPE": "file", "OPENLINEAGE__TRANSPORT__LOG_FILE_PATH": str(out),
           "OPENLINEAGE__TRANSPORT__APPEND": "true"}
    import os

    old = dict(os.environ)
    os.environ.update(env)
    try:
        warnings: list[str] = []
        e = Emitter(warnings.append, env=env)
        ev = _complete(["a"])
        assert e.send(ev) is True and warnings == []
        assert [json.loads(line) for line in out.read_text().splitlines()] == [ev]
        e._transport = None
        os.environ["OPENLINEAGE__TRANSPORT__LOG_FILE_PATH"] = str(tmp_path / "no" / "such" / "dir" / "x")
        assert e.send(ev) is False and len(warnings) == 1 and "not sent" in warnings[0]
        # one dead endpoint costs one failure per run, not one per event (each pays the client's retries)
        os.environ["OPENLINEAGE__TRANSPORT__LOG_FILE_PATH"] = str(out)
        e._transport = None
        assert e.send(ev) is False and len(warnings) == 1
        assert len(out.read_text().splitlines()) == 1
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_the_outbox_keeps_events_by_app_and_key(tmp_path):
    from tributary_read.io.storage import open_storage
    from tributary_read.lineage.outbox import Outbox

    box = Outbox(open_storage(str(tmp_path)))
    ev = _complete(["a"])
    box.put("etl:hourly", str(T), ev)
    box.put("etl:hourly", str(T + H), ev)
    box.put("etl:other/x", "1", ev)
    assert box.keys("etl:hourly") == [str(T), str(T + H)] and box.keys("etl:other/x") == ["1"]
    assert box.get("etl:hourly", str(T)) == ev and box.get("etl:hourly", "0") is None
    box.drop("etl:hourly", str(T))
    assert box.keys("etl:hourly") == [str(T + H)] and box.keys("nothing") == []


@pytest.mark.parametrize("uri, namespace, name", [
    ("/data/t/", "file", "/data/t"),
    ("file:///data/t", "file", "/data/t"),
    ("s3://bucket/warehouse/t/", "s3://bucket", "warehouse/t"),
    ("s3a://bucket/warehouse/t", "s3://bucket", "warehouse/t"),
    ("gs://b/t", "gs://b", "t"),
    ("hdfs://nn:8020/warehouse/t", "hdfs://nn:8020", "/warehouse/t"),
])
def test_dataset_names_follow_the_specs_naming(uri, namespace, name):
    """Spark's and Hive's OpenLineage integrations name a table's location this way; the same name
    links trib's runs to theirs."""
    from tributary_read.lineage.event import dataset_name

    assert dataset_name(uri) == (namespace, name)


def test_the_schema_and_the_hive_table_are_facets_of_the_dataset():
    from tributary_read.lineage.event import input_dataset, output_dataset

    cols = [("ts", "timestamp", True), ("msg", "string", True)]
    out = output_dataset("s3://b/out", version=3, files=1, rows=2, size=10, columns=cols, hive_table="db.out",
                         hive_namespace="hive://127.0.0.1:9083")
    inp = input_dataset("/raw", ["/raw/2024_01_01/00/a.jsonl"], size=5, columns=cols)
    ev = run_event("COMPLETE", run=run_id("etl", "j", T), namespace="trib", job="j", event_ms=T,
                   inputs=[inp], outputs=[out])
    assert event_errors(ev) == []
    assert [f["name"] for f in out["facets"]["schema"]["fields"]] == ["ts", "msg"]
    assert out["facets"]["symlinks"]["identifiers"] == [
        {"namespace": "hive://127.0.0.1:9083", "name": "db.out", "type": "TABLE"}]
    assert out["facets"]["version"]["datasetVersion"] == "3" and "symlinks" not in inp["facets"]


def test_the_docs_example_is_a_valid_event_with_the_facets_trib_writes():
    """docs/observability.md shows a real COMPLETE event: it must stay one the spec accepts."""
    import re
    from pathlib import Path

    from tributary_read.lineage.event import FACETS

    text = (Path(__file__).resolve().parents[1] / "docs" / "observability.md").read_text()
    ev = json.loads(re.search(r"### A real example\n.*?```json\n(.*?)\n```", text, re.S).group(1))
    assert ev["eventType"] == "COMPLETE" and event_errors(ev) == []
    keys = {k for d in ev["inputs"] + ev["outputs"] for part in ("facets", "inputFacets", "outputFacets")
            for k in d.get(part, {})} | set(ev["run"]["facets"]) | set(ev["job"]["facets"])
    assert keys <= {k.split("/")[0] for k in FACETS}
