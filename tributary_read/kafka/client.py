"""The Kafka client trib reads through: confluent-kafka (librdkafka), imported on first use.

Settings come from three places, later ones winning: trib's defaults, the
``[kafka]`` table of trib.toml, and ``--kafka-option key=value``. trib's
defaults that a setting may not undo are the ones exactly-once rests on:
offsets are stored in the table, so the client never commits or stores them
on its own (``enable.auto.commit``, ``enable.auto.offset.store``), and an
offset the broker no longer holds is an error, never a silent jump to the
earliest or latest record (``auto.offset.reset=error``).

What is relied on from the broker (docs/kafka.md): fetching from an offset
returns the records from there in order; an end-of-partition event when a
fetch reaches the end; ``offsets_for_times`` for ``--start <instant>``;
low/high watermarks only as hints (a broker has been seen reporting a high
watermark of 0 for a partition holding records), so a bounded run decides
that a partition is done only from an end-of-partition event.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Iterable, Mapping

from tributary_read.errors import InvalidInputError, StorageError, missing_extra
from tributary_read.kafka.offsets import TopicPartition
from tributary_read.secret import is_secret

#: The settings exactly-once depends on: refused if a user sets them otherwise.
FIXED = {"enable.auto.commit": "false", "enable.auto.offset.store": "false", "auto.offset.reset": "error",
         "enable.partition.eof": "true"}
DEFAULTS = {"session.timeout.ms": "45000", "socket.timeout.ms": "30000", "fetch.wait.max.ms": "200",
            "queued.max.messages.kbytes": "65536"}
#: How long metadata calls may take before the broker counts as unreachable.
METADATA_TIMEOUT_S = 20.0


def kafka():
    try:
        import confluent_kafka
    except ImportError:
        raise missing_extra("confluent-kafka", "kafka") from None
    return confluent_kafka


def parse_options(pairs: Iterable[str]) -> dict[str, str]:
    """``key=value`` settings given on the command line; secrets are refused (trib.toml's [kafka] takes them)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidInputError(f"bad Kafka client setting {pair!r}: give key=value",
                                    kafka_option="Kafka client setting")
        if is_secret(key):
            raise InvalidInputError(f"Kafka client setting {key.strip()} holds a secret: put it in the [kafka] "
                                    "table of trib.toml, not on a command line", kafka_option="Kafka client setting")
        out[key.strip()] = value
    return out


def client_config(bootstrap: str, app_id: str, config: Mapping[str, Any] | None = None,
                  options: Mapping[str, str] | None = None) -> dict[str, str]:
    """The consumer's settings: defaults < trib.toml ``[kafka]`` < ``--kafka-option``."""
    host, sep, port = bootstrap.rpartition(":")
    if not bootstrap or (sep and not port.isdigit()):
        raise InvalidInputError(f"bad Kafka address {bootstrap!r}: give HOST:PORT[,HOST:PORT...]", kafka="Kafka address")
    conf = dict(DEFAULTS)
    conf.update({str(k): _text(v) for k, v in (config or {}).items()})
    conf.update(options or {})
    for key, value in FIXED.items():
        if key in conf and conf[key].lower() != value:
            raise InvalidInputError(f"Kafka client setting {key}={conf[key]} is refused: trib keeps the offsets "
                                    f"in the table and needs {key}={value}", kafka_option="Kafka client setting")
    conf.update(FIXED)
    conf["bootstrap.servers"] = bootstrap
    conf.setdefault("group.id", app_id)  # only for lag tools: never read back
    conf.setdefault("client.id", f"trib-{app_id}")
    return conf


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


#: librdkafka's codes for "the broker does not answer" (the client retries on its own meanwhile).
DOWN = ("_TRANSPORT", "_ALL_BROKERS_DOWN", "_RESOLVE")


class Errors(list):
    """The client's error callbacks (connection refused, resolve failures): what ``unavailable`` says.

    ``down_since`` is when the broker stopped answering (monotonic seconds), None while it
    answers: the run clears it once a fetch or a probe gets through again.
    """

    down_since: float | None = None

    def __call__(self, e) -> None:
        text = getattr(e, "str", None)
        self.append(text() if callable(text) else str(e))
        del self[:-5]
        name = getattr(e, "name", lambda: "")()
        if name in DOWN and self.down_since is None:
            self.down_since = time.monotonic()


#: librdkafka's own log lines (a line per reconnect attempt while a broker is down) go here, not to
#: stderr: trib says once that the broker does not answer, and -v shows them.
LOG = logging.getLogger("tributary_read.kafka.librdkafka")
LOG.addHandler(logging.NullHandler())


def open_consumer(conf: Mapping[str, str], errors: Errors | None = None):
    return kafka().Consumer({**conf, "error_cb": errors if errors is not None else Errors(), "logger": LOG})


def partitions(consumer, topics: Iterable[str], bootstrap: str, errors: Errors | None = None,
               timeout_s: float = METADATA_TIMEOUT_S) -> list[TopicPartition]:
    """Every partition of ``topics``; a topic the broker does not have is bad input, a broker
    that does not answer within ``timeout_s`` is unavailable (StorageError, exit 7)."""
    ck = kafka()
    deadline = time.monotonic() + timeout_s
    out: list[TopicPartition] = []
    for topic in topics:
        while True:
            try:
                md = consumer.list_topics(topic, timeout=max(0.5, deadline - time.monotonic()))
            except ck.KafkaException as e:
                if time.monotonic() >= deadline:
                    raise unavailable(bootstrap, errors, e, timeout_s) from None
                time.sleep(0.2)
                continue
            t = md.topics.get(topic)
            err = t.error if t is not None else None
            if t is None or (err is not None and err.code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART) \
                    or (err is None and not t.partitions):
                if time.monotonic() < deadline and err is not None and err.retriable():
                    time.sleep(0.2)
                    continue
                raise InvalidInputError(f"topic {topic!r} does not exist on {bootstrap}", topic="topic")
            if err is not None:
                if err.retriable() and time.monotonic() < deadline:
                    time.sleep(0.2)
                    continue
                raise StorageError(f"Kafka {bootstrap}: topic {topic!r}: {err.str()}")
            out.extend(TopicPartition(topic, p) for p in t.partitions)
            break
    return sorted(out)


def unavailable(bootstrap: str, errors: Errors | None, e: BaseException | None, timeout_s: float) -> StorageError:
    seen: list[str] = errors or []
    why = seen[-1] if seen else (_said(e) if e is not None else "no answer")
    return StorageError(f"Kafka broker {bootstrap} did not answer within {timeout_s:g}s ({why}); check the "
                        "address and that the broker runs, then run again: nothing was committed")


def _said(e: BaseException) -> str:
    """A KafkaException's own words (its KafkaError's ``str()``), not the error object's repr."""
    first = e.args[0] if e.args else None
    text = getattr(first, "str", None)
    return text() if callable(text) else str(e)


def watermarks(consumer, tp: TopicPartition, timeout_s: float = 10.0, cached: bool = False) -> tuple[int, int] | None:
    """(low, high) as the broker reports them, or None: hints only (see the module's docstring).
    ``cached``: as the last fetch response said, without asking (never blocks)."""
    ck = kafka()
    try:
        return consumer.get_watermark_offsets(ck.TopicPartition(tp.topic, tp.partition), timeout=timeout_s,
                                              cached=cached)
    except ck.KafkaException:
        return None


def offsets_for_time(consumer, tps: list[TopicPartition], ms: int, timeout_s: float = 20.0) -> dict[TopicPartition, int]:
    """The first offset at or after ``ms`` per partition (the end when none is that late)."""
    ck = kafka()
    asked = [ck.TopicPartition(tp.topic, tp.partition, ms) for tp in tps]
    got = consumer.offsets_for_times(asked, timeout=timeout_s)
    out = {}
    for tp, r in zip(tps, got):
        if r.error is not None:
            raise StorageError(f"Kafka: cannot find the offset of {iso_ms(ms)} in {tp}: {r.error}")
        out[tp] = r.offset
    return out


def iso_ms(ms: int) -> str:
    from tributary_read.timespec import iso

    return iso(ms)
