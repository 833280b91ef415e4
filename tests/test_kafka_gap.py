"""Issue 20: a committed offset the broker no longer holds, through ``trib ingest --kafka`` (the CLI).

Tansu deletes no record, so a fault proxy (tests/kafka_proxy.py) in front of a
Tansu of the test's own plays the topic's retention: it says the log of a
partition starts at offset 50, as Kafka does after retention deleted 0..49.
An app that committed up to offset 9 then meets a gap of 10..49. The run stops
(exit 13, one line naming the partition and the offsets, nothing committed)
unless it is told to skip, and a skip is printed and recorded in the commit.
Records are counted by their ids in the table's committed files, never from
watermarks.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from conftest import invoke_trib
from helpers import one_line_error
from test_kafka_ingest import T0, _ids, _table

pytestmark = pytest.mark.integration


@pytest.fixture
def retention_kafka(tmp_path):
    """A Tansu in memory behind a KafkaRetentionProxy; the broker advertises the proxy, so every
    client connection after the bootstrap goes through it (producers' too)."""
    from kafka_broker import Broker, BrokerUnavailable
    from kafka_proxy import KafkaRetentionProxy

    try:
        broker = Broker(tmp_path / "kafka", storage="memory")
    except BrokerUnavailable as e:
        pytest.skip(f"no Kafka broker: {e}")
    with KafkaRetentionProxy(broker.bootstrap) as proxy:
        broker.advertised = proxy.bootstrap
        try:
            broker.start()
            yield broker, proxy
        finally:
            broker.close()
    assert proxy.problems == []


def _docs(partition: int, offsets: range) -> list[dict]:
    """One record per offset; its id says where it was produced: partition * 1000 + offset."""
    return [{"id": partition * 1000 + o, "ts": T0 + o * 1000} for o in offsets]


def _ingest(root, proxy, topic, *extra):
    return invoke_trib("ingest", str(root), "--kafka", proxy.bootstrap, "--topic", topic, "--app-id", "feed",
                       "--time-field", "ts", *extra)


def _version(root) -> int:
    from tributary_read.table.config import Table

    return Table.load(str(root)).log.state().version


def _commit(root, version: int) -> dict:
    return json.loads((root / "_tributary" / "log" / f"{version:020d}.json").read_text())["transaction"]


def _gapped(broker, proxy, tmp_path):
    """A table that read offsets 0..9 of both partitions; then 90 more each, and retention took 0..49 of p0."""
    topic = f"gap-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 2)
    for p in (0, 1):
        broker.produce(topic, _docs(p, range(10)), partition=p)
    root = _table(tmp_path)
    r = _ingest(root, proxy, topic)
    assert r.returncode == 0, r.stderr
    assert _ids(root) == list(range(10)) + list(range(1000, 1010))
    for p in (0, 1):
        broker.produce(topic, _docs(p, range(10, 100)), partition=p)
    proxy.log_start[(topic, 0)] = 50
    return root, topic


def test_a_retention_gap_stops_the_run_naming_the_partition_and_the_offsets(retention_kafka, tmp_path):
    broker, proxy = retention_kafka
    root, topic = _gapped(broker, proxy, tmp_path)
    version = _version(root)
    t0 = time.monotonic()
    line = one_line_error(_ingest(root, proxy, topic), 13, f"{topic}/0 offsets 10..49 (40)",
                          "deleted by the topic's retention", "--on-gap skip")
    assert time.monotonic() - t0 < 30
    assert f"{topic}/1" not in line
    assert proxy.faked and all(f[:2] == (topic, 0) and f[2] == 10 for f in proxy.faked)
    assert _version(root) == version  # nothing committed, partition 1's 90 records included
    assert _ids(root) == list(range(10)) + list(range(1000, 1010))
    assert invoke_trib("verify", str(root)).returncode == 0
    # The same again: a gap is not forgotten by failing once.
    one_line_error(_ingest(root, proxy, topic), 13, f"{topic}/0 offsets 10..49 (40)")
    assert _version(root) == version


def test_on_gap_skip_goes_on_from_the_log_start_prints_and_records_the_skip(retention_kafka, tmp_path):
    broker, proxy = retention_kafka
    root, topic = _gapped(broker, proxy, tmp_path)
    t0 = time.monotonic()
    r = _ingest(root, proxy, topic, "--on-gap", "skip")
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 30
    assert f"skipped 40 offsets of {topic}/0" in r.stdout, r.stdout
    assert r.stderr.strip() == (f"trib: warning: skipped 40 offsets of {topic}/0: the topic's retention deleted "
                                "them before they were read; the commit records how many"), r.stderr
    c = _commit(root, _version(root))
    assert c["meta"]["kafka_skipped"] == {f"kafka:{topic}/0": 40}
    assert c["meta"]["kafka"] == {topic: {"0": 100, "1": 100}}
    ids = _ids(root)  # sorted: a record read twice shows as a repeat
    assert ids == list(range(10)) + list(range(50, 100)) + list(range(1000, 1100))
    assert invoke_trib("verify", str(root)).returncode == 0

    # Retention stays where it is; the next run goes on from offset 100, nothing twice, no new skip.
    for p in (0, 1):
        broker.produce(topic, _docs(p, range(100, 120)), partition=p)
    r = _ingest(root, proxy, topic, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["records"] == 40 and doc["skipped"] == {}
    assert "kafka_skipped" not in _commit(root, _version(root))["meta"]
    assert _ids(root) == (list(range(10)) + list(range(50, 120)) + list(range(1000, 1120)))
    # Without any gap faked (the broker as it is): still exactly where the table says.
    proxy.log_start.clear()
    broker.produce(topic, _docs(0, range(120, 125)), partition=0)
    doc = json.loads(_ingest(root, proxy, topic, "--json").stdout)
    assert doc["records"] == 5
    assert _ids(root) == (list(range(10)) + list(range(50, 125)) + list(range(1000, 1120)))
    assert invoke_trib("verify", str(root)).returncode == 0


def test_a_resume_offset_past_the_partitions_end_stops_and_never_skips(retention_kafka, tmp_path):
    """The topic was deleted and made again (here: the in-memory broker restarted): the table's
    next offset 100 is past the end of the new partition. Kafka answers out of range; no skip
    could be right, whatever ``--on-gap`` says."""
    broker, proxy = retention_kafka
    root, topic = _gapped(broker, proxy, tmp_path)
    assert _ingest(root, proxy, topic, "--on-gap", "skip").returncode == 0
    version = _version(root)
    broker.stop()
    broker.start()  # memory://: every topic and record is gone
    broker.create_topic(topic, 2)
    for p in (0, 1):
        broker.produce(topic, _docs(p, range(5)), partition=p)
    proxy.log_start.update({(topic, 0): 0, (topic, 1): 0})  # Kafka's answers at both ends
    for gap in ("fail", "skip"):
        line = one_line_error(_ingest(root, proxy, topic, "--on-gap", gap), 3, "offset 100", "past the end")
        assert "skip" not in line.replace("skipped", ""), line
    assert _version(root) == version
    assert invoke_trib("verify", str(root)).returncode == 0


def test_start_at_an_instant_takes_the_first_offset_at_or_after_it_and_records_the_choice(retention_kafka, tmp_path):
    """``--start <instant>`` for partitions the table has never seen: Kafka's time index answers
    the first offset whose timestamp is at or after it (the proxy plays that index, which Tansu
    lacks), or -1 when none is that late yet: that partition starts at its end. The choice is
    recorded in the first commit and never resolved again."""
    broker, proxy = retention_kafka
    topic = f"start-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 2)
    minute = 60_000
    sizes = {0: 60, 1: 20}  # partition 0 spans an hour; partition 1 stops at minute 19
    for p, n in sizes.items():
        docs = [{"id": p * 1000 + o, "ts": T0 + o * minute} for o in range(n)]
        broker.produce(topic, docs, partition=p)
        proxy.time_index[(topic, p)] = [(o, T0 + o * minute) for o in range(n)]
    root = _table(tmp_path)
    at = T0 + 30 * minute
    from tributary_read.kafka.client import iso_ms

    r = _ingest(root, proxy, topic, "--start", iso_ms(at), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {tp: (p["from"], p["next"]) for tp, p in doc["partitions"].items()} == {
        f"{topic}/0": (30, 60), f"{topic}/1": (20, 20)}
    assert _ids(root) == list(range(30, 60))
    c = _commit(root, _version(root))
    assert c["meta"]["kafka_start"] == {f"kafka:{topic}/{p}": iso_ms(at) for p in (0, 1)}
    assert c["meta"]["kafka"] == {topic: {"0": 60, "1": 20}}

    # Later records of partition 1 are read from where its start was recorded; the instant is not
    # asked again (the first 30 of partition 0 stay unread), even when the flag is given again.
    broker.produce(topic, [{"id": 1000 + o, "ts": T0 + o * minute} for o in range(20, 25)], partition=1)
    r = _ingest(root, proxy, topic, "--start", iso_ms(T0), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["records"] == 5
    assert _ids(root) == list(range(30, 60)) + list(range(1020, 1025))
    assert "kafka_start" not in _commit(root, _version(root))["meta"]
    assert invoke_trib("verify", str(root)).returncode == 0
