"""Metrics and the lineage outbox on every storage backend (issue 31): a table on S3 (moto's server)
answers ``trib metrics`` with the same exact values as a local one, and keeps unsent events the same way."""

from __future__ import annotations

import json

import pytest

from conftest import invoke_trib
from helpers import LAYOUT, PARTITION, make_source

pytestmark = pytest.mark.integration


def _values(doc, **labels):
    return {d["name"]: d["value"] for d in doc if all(d["labels"].get(k) == v for k, v in labels.items())}


def test_metrics_of_a_consumer_behind_by_one_ingest(any_root, tmp_path):
    invoke_trib("table", "create", any_root, "--layout", LAYOUT, "--partition", PARTITION, "--tracking", "manifest",
                check=True)
    ingest = ("--app-id", "a", "--time-field", "ts")
    invoke_trib("ingest", any_root, "--source", str(make_source(tmp_path / "a.jsonl", 20, hours=1)), *ingest,
                check=True)
    plan = json.loads(invoke_trib("files", any_root, "--consumer", "c", "--mode", "manifest", "--json",
                                  check=True).stdout)
    invoke_trib("consumer", "ack", any_root, "c", plan["plan_id"], check=True)
    more = json.loads(invoke_trib("ingest", any_root, "--source", str(make_source(tmp_path / "b.jsonl", 10, seed=2,
                                  hours=2)), *ingest[:1], "b", *ingest[2:], "--json", check=True).stdout)
    doc = json.loads(invoke_trib("metrics", any_root, "--json", check=True).stdout)
    table = invoke_trib("table", "show", any_root, "--json", check=True)
    uri = json.loads(table.stdout)["root"]
    v = _values(doc, table=uri, consumer="c")
    assert v["trib_consumer_pending_records"] == more["records"] == 10
    log = json.loads(invoke_trib("log", any_root, "--json", check=True).stdout)["commits"]
    assert v["trib_consumer_pending_files"] == log[-1]["files"] and log[-1]["app_id"] == "b"
    assert v["trib_consumer_oldest_pending_age_seconds"] >= 0
    assert _values(doc, table=uri)["trib_table_commits_total"] == 2


def test_the_outbox_keeps_and_drops_events_by_app_and_key(any_storage_root):
    from tributary_read.io.storage import open_storage
    from tributary_read.lineage.outbox import Outbox

    box = Outbox(open_storage(any_storage_root))
    ev = {"eventType": "COMPLETE", "run": {"runId": "x"}}
    assert box.keys("etl:hourly") == []
    box.put("etl:hourly", "2", ev)
    box.put("etl:hourly", "10", ev)
    box.put("etl:a/b c", "1", ev)  # odd names are escaped into one path segment
    assert sorted(box.keys("etl:hourly")) == ["10", "2"] and box.keys("etl:a/b c") == ["1"]
    assert box.get("etl:hourly", "2") == ev and box.get("etl:hourly", "3") is None
    box.drop("etl:hourly", "2")
    assert box.keys("etl:hourly") == ["10"]
