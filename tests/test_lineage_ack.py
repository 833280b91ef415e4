"""OpenLineage events of real ``trib consumer ack`` processes (issue 31, part 1; work in progress on branch i31).

An ack sends START and COMPLETE for job ``consumer:NAME``: the table as input, the plan id as its version,
exactly the plan's files as the subset, the plan's rows, bytes and files as statistics. Killed with -9
between the ack and the COMPLETE, it leaves the event in the table's outbox; acking the plan again sends it,
once, and a third ack sends nothing. Read-only tables keep the outbox in the state directory.
"""

from __future__ import annotations

import json

import pytest

from helpers import make_source
from lineage_cli import env_for, events_of, ingest, kept, new_table, trib

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
pytest.importorskip("openlineage.client")


def _plan(tmp_path, root, name, *state_dir):
    p = trib(tmp_path, "files", root, "--consumer", name, *state_dir, "--json", env=env_for())
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _ack(tmp_path, root, name, plan_id, env, *state_dir):
    return trib(tmp_path, "consumer", "ack", root, name, plan_id, *state_dir, "--json", env=env)


def test_an_ack_sends_the_plans_exact_files_and_a_killed_one_is_sent_by_the_next_ack(tmp_path):
    table = new_table(tmp_path)
    src = make_source(tmp_path / "s.jsonl", 6)
    assert ingest(tmp_path, table, src, env_for()).returncode == 0
    events = tmp_path / "events.jsonl"

    plan = _plan(tmp_path, table, "c")
    p = _ack(tmp_path, table, "c", plan["plan_id"], env_for(events))
    assert p.returncode == 0 and p.stderr == "", p.stderr
    evs = events_of(events)
    assert [e["eventType"] for e in evs] == ["START", "COMPLETE"] and evs[0]["run"] == evs[1]["run"]
    done = evs[1]
    assert done["job"]["name"] == "consumer:c" and done["outputs"] == []
    ds = done["inputs"][0]
    assert (ds["namespace"], ds["name"]) == ("file", str(table))
    assert ds["facets"]["version"]["datasetVersion"] == plan["plan_id"]
    locations = ds["inputFacets"]["subset"]["inputCondition"]["locations"]
    assert sorted(locations) == sorted(f"{table.as_uri()}/{f['path']}" for f in plan["files"])
    stats = {k: v for k, v in ds["inputFacets"]["inputStatistics"].items() if not k.startswith("_")}
    assert stats == {"fileCount": len(plan["files"]), "size": plan["bytes"],
                     "rowCount": sum(f["records"] for f in plan["files"])} and stats["fileCount"] > 1
    assert kept(table) == []

    # Killed between the ack and the COMPLETE: the ack stands; acking the plan again sends the event, once.
    src2 = make_source(tmp_path / "s2.jsonl", 3, seed=9)
    assert trib(tmp_path, "ingest", table, "--source", src2, "--app-id", "logs", "--time-field", "ts",
                 env=env_for()).returncode == 0
    plan = _plan(tmp_path, table, "c")
    p = _ack(tmp_path, table, "c", plan["plan_id"], env_for(events, TRIB_CRASH_AT="consumer.after_ack"))
    assert p.returncode == -9, p.stderr
    assert [e["eventType"] for e in events_of(events)[2:]] == ["START"] and len(kept(table)) == 1
    for _ in range(2):
        p = _ack(tmp_path, table, "c", plan["plan_id"], env_for(events))
        assert p.returncode == 0 and json.loads(p.stdout)["already_acked"] is True, p.stderr
    evs = events_of(events)[2:]
    assert [e["eventType"] for e in evs] == ["START", "COMPLETE"] and evs[0]["run"] == evs[1]["run"]
    locations = evs[1]["inputs"][0]["inputFacets"]["subset"]["inputCondition"]["locations"]
    assert sorted(locations) == sorted(f"{table.as_uri()}/{f['path']}" for f in plan["files"]) and len(locations) == 3
    assert kept(table) == []


def test_a_read_only_tables_consumer_keeps_its_events_in_its_state_dir(tmp_path):
    table = new_table(tmp_path)
    src = make_source(tmp_path / "s.jsonl", 2)
    assert ingest(tmp_path, table, src, env_for()).returncode == 0
    state = ("--state-dir", str(tmp_path / "state"))
    plan = _plan(tmp_path, table, "c", *state)
    events = tmp_path / "events.jsonl"
    p = _ack(tmp_path, table, "c", plan["plan_id"], env_for(events, TRIB_CRASH_AT="consumer.after_ack"), *state)
    assert p.returncode == -9, p.stderr
    assert kept(table) == [] and len(list((tmp_path / "state" / "_tributary" / "lineage").rglob("*.json"))) == 1
    p = _ack(tmp_path, table, "c", plan["plan_id"], env_for(events), *state)
    assert p.returncode == 0, p.stderr
    assert [e["eventType"] for e in events_of(events)] == ["START", "COMPLETE"]
    assert not list((tmp_path / "state" / "_tributary" / "lineage").rglob("*.json"))
