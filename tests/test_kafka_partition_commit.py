"""Issue 20 item 5: a Kafka ingest's partition commit waits for the event-time watermark.

With ``--clock event`` a partition is mounted in Hive (and marked ``_SUCCESS``)
once the watermark, the minimum over the worker's Kafka partitions of the
newest event time each has delivered, passes its end plus the delay (Flink's
partition-time trigger), and mounted or refreshed again at once when late
records land in it. Against the real broker and the session's Hive pair,
through the CLI; counts are read back through HiveServer2.
"""

from __future__ import annotations

import json
import uuid

import pytest

from conftest import hs2_connect, invoke_trib
from helpers import LAYOUT, PARTITION
from tributary_read.hive.model import TableName
from tributary_read.table.layout import Layout

pytestmark = pytest.mark.integration

LAY = Layout(LAYOUT, PARTITION)
H = 3_600_000
MIN = 60_000
T10 = 1_764_064_800_000  # 2025-11-25T10:00:00Z


def _dt(ms: int) -> str:
    return LAY.for_time(ms).values["dt"]


@pytest.fixture
def setup(kafka_broker, hive_services, tmp_path):
    topic = f"wm-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, 2)
    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, "--format", "jsonl",
                check=True)
    conn = hs2_connect(hive_services)
    cur = conn.cursor()
    name = TableName("default", f"wm_{uuid.uuid4().hex[:10]}")
    cur.execute(f"CREATE EXTERNAL TABLE {name.sql} (line STRING) PARTITIONED BY (dt STRING) "
                f"STORED AS TEXTFILE LOCATION 'file://{root}'")
    invoke_trib("partitions", "configure", str(root), "--policy", "metastore", "--policy", "success-file",
                "--hive-table", str(name), "--metastore", f"hs2://127.0.0.1:{hive_services.hs2_port}?user=trib",
                "--clock", "event", check=True)
    yield kafka_broker, topic, root, name, cur
    cur.execute(f"DROP TABLE IF EXISTS {name.sql}")
    conn.close()


def _produce(broker, topic, partition: int, times: list[int], start_id: int) -> None:
    broker.produce(topic, [{"id": start_id + i, "ts": ts} for i, ts in enumerate(times)], partition=partition)


def _run(broker, topic, root) -> dict:
    r = invoke_trib("ingest", str(root), "--kafka", broker.bootstrap, "--topic", topic, "--app-id", "feed",
                    "--time-field", "ts", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _hive(cur, name) -> dict[str, int]:
    cur.execute(f"SELECT dt, count(*) FROM {name.sql} GROUP BY dt")
    return {dt: int(n) for dt, n in cur.fetchall()}


def _marked(root) -> list[str]:
    return sorted(str(p.parent.relative_to(root)) for p in root.rglob("_SUCCESS"))


def test_partitions_wait_for_the_slowest_kafka_partition_and_late_records_refresh_them(setup):
    broker, topic, root, name, cur = setup
    h10, h11 = _dt(T10), _dt(T10 + H)
    # Partition 0 has reached 11:05, partition 1 only 10:50: the watermark is 10:50, no hour is complete.
    _produce(broker, topic, 0, [T10 + 10 * MIN, T10 + 40 * MIN, T10 + H + 5 * MIN], 0)
    _produce(broker, topic, 1, [T10 + 20 * MIN, T10 + 50 * MIN], 100)
    out = _run(broker, topic, root)
    assert out["records"] == 5
    assert out["partition_commit"]["added"] == [] and out["partition_commit"]["watermark_ms"] == T10 + 50 * MIN
    assert _hive(cur, name) == {} and _marked(root) == []
    (c,) = [json.loads(p.read_text()) for p in sorted((root / "_tributary" / "log").glob("*.json"))[-1:]]
    assert c["transaction"]["meta"]["event_watermark_ms"] == T10 + 50 * MIN
    assert c["transaction"]["meta"]["kafka_event_ms"] == {f"kafka:{topic}/0": T10 + H + 5 * MIN,
                                                          f"kafka:{topic}/1": T10 + 50 * MIN}

    # A run that reads nothing new changes nothing: hour 10 stays pending.
    out = _run(broker, topic, root)
    assert out["records"] == 0 and _hive(cur, name) == {}

    # Partition 1 passes 11:00 (a new run: the other partition's 11:05 comes from the log): hour 10 is complete.
    _produce(broker, topic, 1, [T10 + H + 20 * MIN], 200)
    out = _run(broker, topic, root)
    assert out["partition_commit"]["watermark_ms"] == T10 + H + 5 * MIN
    assert _hive(cur, name) == {h10: 4} and _marked(root) == [LAY.for_time(T10).path]

    # A late record into hour 10 (its partition's newest time stays 11:05): refreshed at once.
    _produce(broker, topic, 0, [T10 + 30 * MIN], 300)
    out = _run(broker, topic, root)
    assert out["partition_commit"]["refreshed"] == [LAY.for_time(T10).spec]
    assert _hive(cur, name) == {h10: 5}

    # Both partitions pass 12:00: hour 11 (written two runs ago, pending since) is mounted.
    _produce(broker, topic, 0, [T10 + 2 * H + 1], 400)
    _produce(broker, topic, 1, [T10 + 2 * H + 2], 500)
    _run(broker, topic, root)
    assert _hive(cur, name) == {h10: 5, h11: 2}
    assert _marked(root) == [LAY.for_time(T10).path, LAY.for_time(T10 + H).path]
    v = invoke_trib("verify", str(root))
    assert v.returncode == 0, v.stderr

    # The mark (a hint) lost: a catch-up reads the watermark from the newest commit and mounts nothing early.
    (root / "_tributary" / "partition-commit" / "mark.json").unlink()
    out = json.loads(invoke_trib("partitions", "commit", str(root), "--json", check=True).stdout)
    assert out["watermark_ms"] == T10 + 2 * H + 1
    assert _hive(cur, name) == {h10: 5, h11: 2}
    mark = json.loads((root / "_tributary" / "partition-commit" / "mark.json").read_text())
    assert mark["pending"] == [LAY.for_time(T10 + 2 * H).path]
