"""OpenLineage events of real ``trib ingest --kafka`` processes against the session's Tansu broker (issue 31).

The client's file transport writes one event per line, each checked against the spec's schemas as it is read.
A bounded run sends START and COMPLETE: each topic an input named as the naming spec names a Kafka topic
(``kafka://host:port``, the topic), with the records of the ``--json`` report and the bytes of their values;
the table the output, at its last commit's version. A run killed with -9 leaves START only; the next Kafka
ingest of the app sends the dead run's FAIL, once, with the commits the dead run made, before its own START;
a retry that starts at the same offsets is the same run. A follow run stopped by SIGTERM (exit 0) completes.
"""

from __future__ import annotations

import json

import pytest

from conftest import TRIB
from lineage_cli import env_for, events_of, kept, new_table, stats, term_after_stop, trib
from test_kafka_ingest import _produce, _records, _topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
pytest.importorskip("openlineage.client")


def _value_bytes(records) -> int:
    return sum(len(json.dumps(doc, separators=(",", ":")).encode()) for doc, _ in records)


def _ingest(tmp_path, root, broker, topic, env, *extra):
    return trib(tmp_path, "ingest", root, "--kafka", broker.bootstrap, "--topic", topic, "--app-id", "feed",
                "--time-field", "ts", "--json", *extra, env=env)


def test_a_kafka_ingest_sends_start_and_complete_and_a_killed_one_is_ended_by_the_next(kafka_broker, tmp_path):
    topic = _topic(kafka_broker, 1)
    first = _records(0, 5, parts=1)
    _produce(kafka_broker, topic, first)
    table, events = new_table(tmp_path), tmp_path / "events.jsonl"

    # Killed before its first commit, then after it (2 of 5 records): each leaves START only.
    p = _ingest(tmp_path, table, kafka_broker, topic, env_for(events, TRIB_CRASH_AT="writer.before_commit"))
    assert p.returncode == -9, p.stderr
    p = _ingest(tmp_path, table, kafka_broker, topic, env_for(events, TRIB_CRASH_AT="kafka.after_commit"),
                "--commit-every", "2")
    assert p.returncode == -9, p.stderr
    evs = events_of(events)
    # The second run ended the first (same partitions), before its own START; both started at offset 0: one run.
    assert [e["eventType"] for e in evs] == ["START", "FAIL", "START"]
    assert len({e["run"]["runId"] for e in evs}) == 1
    assert stats(evs[1], "outputs") == {"rowCount": 0, "size": 0, "fileCount": 0}
    assert len(kept(table)) == 1

    p = _ingest(tmp_path, table, kafka_broker, topic, env_for(events))
    assert p.returncode == 0 and p.stderr == "", p.stderr
    report = json.loads(p.stdout)
    assert report["records"] == 3 and report["commits"] == 1
    evs = events_of(events)[3:]
    assert [e["eventType"] for e in evs] == ["FAIL", "START", "COMPLETE"]
    dead, done = evs[0], evs[2]
    assert dead["run"]["runId"] == events_of(events)[2]["run"]["runId"] != done["run"]["runId"] == evs[1]["run"]["runId"]
    assert "killed" in dead["run"]["facets"]["errorMessage"]["message"]
    assert dead["outputs"][0]["facets"]["version"]["datasetVersion"] == "1"  # the dead run's one commit
    assert stats(dead, "outputs")["rowCount"] == 2 and stats(dead) == {"rowCount": 2}  # bytes: not in the log
    for ev in (dead, done):
        (src,) = ev["inputs"]
        assert (src["namespace"], src["name"]) == (f"kafka://{kafka_broker.bootstrap}", topic)
    assert stats(done) == {"rowCount": report["records"], "size": _value_bytes(first[2:])}
    assert done["outputs"][0]["facets"]["version"]["datasetVersion"] == "2"  # its own last commit
    assert stats(done, "outputs")["rowCount"] == 3 and "errorMessage" not in done["run"]["facets"]
    assert done["job"]["name"] == "feed" and kept(table) == []

    # Nothing new: START and COMPLETE with zero statistics; the dead runs' FAILs are not sent again.
    p = _ingest(tmp_path, table, kafka_broker, topic, env_for(events))
    assert p.returncode == 0, p.stderr
    evs = events_of(events)[6:]
    assert [e["eventType"] for e in evs] == ["START", "COMPLETE"]
    assert stats(evs[1]) == {"rowCount": 0, "size": 0} and kept(table) == []
    assert stats(evs[1], "outputs") == {"rowCount": 0, "size": 0, "fileCount": 0}


def test_a_follow_run_stopped_by_sigterm_completes_with_its_commits(kafka_broker, tmp_path):
    """Paused right after its first commit (``TRIB_STOP_AT``), sent SIGTERM, resumed: one last commit, exit 0,
    and its terminal event is COMPLETE (a follow run's normal end), with every topic it read."""
    topics = [_topic(kafka_broker, 1), _topic(kafka_broker, 1)]
    recs = {t: _records(0, 3, parts=1) for t in topics}
    for t in topics:
        _produce(kafka_broker, t, recs[t])
    table, events = new_table(tmp_path), tmp_path / "events.jsonl"
    with open(tmp_path / "out.json", "w") as out:
        code = term_after_stop([*TRIB, "ingest", str(table), "--kafka", kafka_broker.bootstrap, "--topic", topics[0],
                                "--topic", topics[1], "--app-id", "feed", "--time-field", "ts", "--follow",
                                "--commit-every", "6", "--json"], out, tmp_path,
                               env_for(events, TRIB_STOP_AT="kafka.after_commit"))
    assert code == 0
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["stopped_by"] == "SIGTERM" and report["records"] == 6
    evs = events_of(events)
    assert [e["eventType"] for e in evs] == ["START", "COMPLETE"] and kept(table) == []
    done = evs[1]
    assert [(i["namespace"], i["name"]) for i in done["inputs"]] == [
        (f"kafka://{kafka_broker.bootstrap}", t) for t in topics]
    assert [stats({"inputs": [i]}) for i in done["inputs"]] == [
        {"rowCount": 3, "size": _value_bytes(recs[t])} for t in topics]
    assert done["outputs"][0]["facets"]["version"]["datasetVersion"] == str(report["commits"])  # a new table
