"""Issue 20, section 6: the broker is stopped and started again while ``trib ingest --kafka`` runs.

A ``--follow`` run rides out an outage shorter than ``--broker-timeout`` (the
client reconnects; commits of what was read go on, they need only the table)
and reads on; an outage longer than that ends the run with one line and exit 7,
and the next run resumes exactly. The broker is Tansu on its durable
``s3://`` engine, so topics and records survive the stop. Records are counted
in the table's committed files.
"""

from __future__ import annotations

import signal
import time
import uuid

import pytest

from conftest import run_trib
from test_kafka_faults import Producer, _catch_up, _follow
from test_kafka_ingest import _ids, _table

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _topic_ids(broker, topic: str) -> list[int]:
    """Every record's id as the topic holds it, one per offset. The test's producer is not idempotent (as
    most are not): a batch whose ack was lost in the broker's restart is sent again, and the topic then
    holds those records twice, at two offsets each. trib's promise is per offset. A batch cut by the
    stop leaves offsets that hold no record (``holes``); trib reads past them, as it must."""
    import json

    return sorted(json.loads(v)["id"] for v in broker.values(topic, holes=True))


def _wait_for(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.2)


def test_a_follow_run_rides_out_a_broker_restart_and_a_long_outage_ends_it_with_exit_7(durable_kafka_broker, tmp_path):
    broker = durable_kafka_broker
    topic = f"restart-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 2)
    root = _table(tmp_path)
    producer = Producer(broker, topic, 2, rate=200)
    producer.start()
    p = _follow(root, broker, topic, "--broker-timeout", "20s")
    try:
        _wait_for(lambda: len(_ids(root)) >= 200, 60, "200 records committed before the restart")
        time.sleep(2.5 * producer.rate / 200)
        broker.stop()
        time.sleep(5)  # the producer queues meanwhile; the follow run waits for the broker
        assert p.poll() is None, p.stderr.read()
        broker.start()
        mark = producer.sent + 200
        _wait_for(lambda: len(_ids(root)) >= mark, 90, f"{mark} records committed after the restart")
        assert p.poll() is None
    finally:
        sent = producer.stop()
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        rc = p.wait(60)
        err = p.stderr.read()
    assert rc == 0, err[-3000:]
    print(err)
    assert "does not answer; waiting up to 20 s" in err and "answers again" in err, err[-2000:]  # the outage was reported on stderr, and survived
    _catch_up(root, broker, topic)
    ids, held = _ids(root), _topic_ids(broker, topic)
    assert ids == held, f"the table holds {len(ids)} records, the topic {len(held)}: not each offset once"
    assert sorted(set(ids)) == list(range(sent)), f"{sent - len(set(ids))} records lost"

    # An outage longer than --broker-timeout: one line, exit 7; the next run resumes exactly.
    more = Producer(broker, topic, 2, rate=200)
    more.sent = sent
    more.start()
    time.sleep(1)
    sent = more.stop()
    p = _follow(root, broker, topic, "--broker-timeout", "3s")
    _wait_for(lambda: len(_ids(root)) >= sent, 60, "the new records committed")
    broker.stop()
    try:
        t0 = time.monotonic()
        rc = p.wait(60)
        took = time.monotonic() - t0
        err = p.stderr.read()
    finally:
        broker.start()
    print(err)
    assert rc == 7, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("trib: error: ") and "3 s" in last and "Traceback" not in err, err[-2000:]
    assert took < 40, took
    _catch_up(root, broker, topic)
    ids = _ids(root)
    assert ids == _topic_ids(broker, topic) and sorted(set(ids)) == list(range(sent))
    v = run_trib("verify", str(root))
    assert v.returncode == 0, v.stdout
