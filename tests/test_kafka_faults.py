"""Issue 20, section 6: faults of ``trib ingest --kafka`` against a real broker (Tansu).

Each ends with every produced record in the table exactly once (counted in the
committed files, never from watermarks) and ``trib verify`` exiting 0.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time
import uuid

import pytest

from conftest import REPO, TRIB, run_trib
from test_kafka_ingest import T0, _ids, _table

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SEED = int(os.environ.get("TRIB_KILL_SEED", "20"))
TRIALS = int(os.environ.get("TRIB_KILL_TRIALS", "20"))


class Producer(threading.Thread):
    """Writes records with consecutive ids to every partition, throughout a test."""

    def __init__(self, broker, topic: str, partitions: int, rate: float = 2000.0):
        super().__init__(daemon=True)
        from confluent_kafka import Producer as P

        self.p = P({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "enable.idempotence": False})
        self.topic, self.parts, self.rate = topic, partitions, rate
        self.sent = 0
        self.halt = threading.Event()
        self.failed: list[str] = []

    def run(self) -> None:
        batch = 50
        while not self.halt.is_set():
            for _ in range(batch):
                i = self.sent
                self.p.produce(self.topic, json.dumps({"id": i, "ts": T0 + i * 100}).encode(),
                               partition=i % self.parts, on_delivery=self._delivered)
                self.sent += 1
            self.p.poll(0)
            time.sleep(batch / self.rate)
        if self.p.flush(30):
            self.failed.append("records still queued after 30 s")

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.failed.append(str(err))

    def stop(self) -> int:
        self.halt.set()
        self.join(60)
        assert not self.failed, self.failed[:3]
        return self.sent


def _follow(root, broker, topic, *extra):
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONFAULTHANDLER": "1"}
    return subprocess.Popen([*TRIB, "ingest", str(root), "--kafka", broker.bootstrap, "--topic", topic,
                             "--app-id", "feed", "--time-field", "ts", "--follow", "--commit-interval", "500ms",
                             "--commit-every", "400", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)


def _catch_up(root, broker, topic) -> None:
    r = run_trib("ingest", str(root), "--kafka", broker.bootstrap, "--topic", topic, "--app-id", "feed",
                 "--time-field", "ts")
    assert r.returncode == 0, r.stderr


def test_kill9_at_random_moments_of_follow_runs_with_a_producer_throughout(kafka_broker, tmp_path):
    rng = random.Random(f"kafka-kill-{SEED}")
    print(f"kill delays from random.Random('kafka-kill-{SEED}') (TRIB_KILL_SEED={SEED})")
    topic = f"kill-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, 3)
    root = _table(tmp_path)
    producer = Producer(kafka_broker, topic, 3)
    producer.start()
    hits, versions = 0, []
    try:
        for trial in range(TRIALS):
            p = _follow(root, kafka_broker, topic)
            delay = rng.uniform(0.3, 2.5)  # start-up is ~0.3 s; commits every 0.5 s or 400 records
            time.sleep(delay)
            hit = p.poll() is None
            if hit:
                p.send_signal(signal.SIGKILL)
            p.wait(60)
            err = p.stderr.read()
            p.stderr.close()
            assert hit, f"trial {trial}: the follow run ended by itself ({p.returncode}): {err[-2000:]}"
            hits += 1
            log = json.loads(run_trib("log", str(root), "--json", check=True).stdout)
            versions.append(max((c["version"] for c in log["commits"]), default=0))
            print(f"trial {trial}: kill -9 {delay:.2f} s in; log at version {versions[-1]}, "
                  f"{producer.sent} records produced so far")
    finally:
        sent = producer.stop()
    _catch_up(root, kafka_broker, topic)
    ids = _ids(root)
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} records committed twice"
    assert ids == list(range(sent)), f"{sent - len(ids)} records lost"
    assert hits == TRIALS and versions[-1] > versions[0], versions  # the kills landed between real commits
    v = run_trib("verify", str(root))
    assert v.returncode == 0, v.stdout


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_a_signal_ends_a_follow_run_with_a_last_commit_and_exit_0(kafka_broker, tmp_path, sig):
    topic = f"sig-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, 3)
    root = _table(tmp_path)
    producer = Producer(kafka_broker, topic, 3)
    producer.start()
    try:
        p = _follow(root, kafka_broker, topic, "--commit-interval", "1h", "--commit-every", "1000000000")
        time.sleep(3)
        p.send_signal(sig)
        assert p.wait(60) == 0, p.stderr.read()
        p.stderr.close()
        # Everything it read is committed in that one last commit.
        log = json.loads(run_trib("log", str(root), "--json", check=True).stdout)
        assert len(log["commits"]) == 1 and log["commits"][0]["records"] > 0
    finally:
        sent = producer.stop()
    _catch_up(root, kafka_broker, topic)
    assert _ids(root) == list(range(sent))
    assert run_trib("verify", str(root)).returncode == 0


def test_lost_commit_replies_on_s3_lose_and_duplicate_nothing(kafka_broker, tmp_path, s3_server, s3_root):
    """The S3 server's replies to commit PUTs are dropped after the write landed: the outcome is
    settled by reading the log (exit 12 at worst, then a rerun), never guessed."""
    from faultproxy import FaultProxy

    topic = f"s3-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, 3)
    for p in range(3):
        kafka_broker.produce(topic, [{"id": i, "ts": T0 + i * 1000} for i in range(p, 3000, 3)], partition=p)
    with FaultProxy(s3_server["endpoint_url"], drop_commit_replies=5) as proxy:
        env = {"TRIB_S3_ENDPOINT_URL": proxy.url, "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
        run_trib("table", "create", s3_root, "--layout", "{yyyy}_{MM}_{dd}/{HH}", "--partition",
                 "dt={yyyy}{MM}{dd}{HH}", check=True, env=env)
        codes = []
        for _ in range(10):
            r = run_trib("ingest", s3_root, "--kafka", kafka_broker.bootstrap, "--topic", topic, "--app-id", "feed",
                         "--time-field", "ts", "--commit-every", "250", env=env)
            codes.append(r.returncode)
            if r.returncode == 0:
                break
            assert r.returncode == 12, r.stderr
        assert codes[-1] == 0 and len(proxy.dropped) == 5, (codes, proxy.dropped)
        from tributary_read.io.storage import open_storage
        from tributary_read.table.config import Table

        t = Table.load(s3_root, {**s3_server})
        ids: list[int] = []
        storage = open_storage(s3_root, {**s3_server})
        for f in t.log.state().files.values():
            ids += [json.loads(line)["id"] for line in storage.read(f.path).splitlines() if line.strip()]
        assert sorted(ids) == list(range(3000))
        assert run_trib("verify", s3_root, env=env).returncode == 0
