"""Kafka positions in the table's commits: the only place a run resumes from.

Each commit of a Kafka ingest carries, in its one transaction, the partitions
it covers: ``offsets`` maps ``kafka:{topic}/{partition}`` to the last offset
included (the log's convention for every source), and ``meta["kafka"]`` holds
the same as ``{topic: {partition: next offset}}``, Kafka's own convention, for
people and lag tools reading ``trib log``. A partition's first commit also says
where reading began (``meta["kafka_start"]``: earliest, latest or an instant),
and a commit that skipped a retention gap says how many offsets it skipped
(``meta["kafka_skipped"]``).

Every commit also carries how many partitions each topic had when the app
first read it (``meta["kafka_partitions"]``, carried unchanged from commit to
commit). A partition numbered past that count was added to the topic after the
app's first run: every record it holds came later than where the app began, so
it starts at its earliest offset whatever ``--start`` says (``--start`` is the
app's first run's choice, not a new partition's). Partitions are numbered from 0
and a topic's count only grows, so the number alone tells.

Each commit also carries the newest event time read so far from each of the
worker's partitions (``meta["kafka_event_ms"]``, history included) and their
minimum, the worker's event-time watermark (``meta["event_watermark_ms"]``), which
the partition commit waits for on the event clock (Flink's partition-time
trigger): an hour is complete once every partition has passed it. A partition
that has never held a record does not hold the watermark back.

Resuming reads nothing but the table: the app's ``high`` offsets (the greatest
offset any of its commits carried, per key, kept through checkpoints and log
retention). With fencing (one process per partition, see
``ManifestLog.commit``'s ``claims``) a partition's offsets only rise, so the
highest is the latest. The consumer group's committed offsets are written for
lag tools and never read back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, NamedTuple, Sequence

from tributary_read.errors import InvalidInputError
from tributary_read.table.state import AppState
from tributary_read.table.manifest import EVENT_WATERMARK, Transaction

PREFIX = "kafka:"


class TopicPartition(NamedTuple):
    """One partition of a topic. A named tuple: the ingest loop looks one up in several
    dicts per record, and a tuple's hash and equality are C code (a dataclass's are Python)."""

    topic: str
    partition: int

    @property
    def key(self) -> str:
        return f"{PREFIX}{self.topic}/{self.partition}"

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}"

    @classmethod
    def from_key(cls, key: str) -> TopicPartition | None:
        if not key.startswith(PREFIX):
            return None
        topic, _, p = key[len(PREFIX):].rpartition("/")
        return cls(topic, int(p)) if topic and p.isdigit() else None


def resume_offsets(app: AppState | None) -> dict[TopicPartition, int]:
    """The next offset to read per partition this app ever committed, from the table alone."""
    if app is None:
        return {}
    last = dict(app.high) if app.high is not None else {}
    for k, v in app.transaction.offsets.items():  # a state from an old checkpoint has no ``high``
        last[k] = max(v, last.get(k, v))
    out = {}
    for k, v in last.items():
        tp = TopicPartition.from_key(k)
        if tp is not None:
            out[tp] = v + 1
    return out


def known_partitions(app: AppState | None) -> dict[str, int]:
    """Per topic, how many partitions it had when the app first read it (see the module's docstring).

    An app committed before commits carried the count: one more than the highest partition its
    offsets name, per topic. A partition below that which the app never committed then takes the
    start policy (another worker's partition, as before), one above it the earliest offset.
    """
    if app is None:
        return {}
    raw = app.transaction.meta.get(PARTITION_COUNTS)
    if isinstance(raw, dict):
        return {t: n for t, n in raw.items() if isinstance(t, str) and isinstance(n, int) and not isinstance(n, bool)}
    return partition_counts(resume_offsets(app))


def added_later(known: Mapping[str, int], tps: Iterable[TopicPartition]) -> list[TopicPartition]:
    """The partitions of ``tps`` added to their topic after the app first read it."""
    return [tp for tp in tps if tp.topic in known and tp.partition >= known[tp.topic]]


def added_note(names: Sequence[str], start: str = "where to start") -> str:
    """One line saying that partitions (``topic/p``) were added after the app's first run and start at their
    earliest offset. ``start``: the front end's name for the first run's start choice."""
    what = f"partition {names[0]} was" if len(names) == 1 else f"partitions {', '.join(names)} were"
    return (f"{what} added after this app first read the topic: reading from the earliest offset "
            f"({start} applies to the app's first run only)")


def partition_counts(tps: Iterable[TopicPartition]) -> dict[str, int]:
    """Per topic, how many partitions ``tps`` (all of the topics' partitions) make."""
    out: dict[str, int] = {}
    for tp in tps:
        out[tp.topic] = max(out.get(tp.topic, 0), tp.partition + 1)
    return out


#: the commit meta key of :func:`known_partitions`
PARTITION_COUNTS = "kafka_partitions"


@dataclass
class Positions:
    """What a run has read since its last commit: the transaction of the next commit."""

    app_id: str
    #: next offset to read, per assigned partition (from the table, or the start policy)
    next: dict[TopicPartition, int]
    #: how a partition the table had never seen was started (recorded in its first commit)
    started: dict[TopicPartition, str] = field(default_factory=dict)
    skipped: dict[TopicPartition, int] = field(default_factory=dict)
    touched: set[TopicPartition] = field(default_factory=set)
    #: the newest event time written from each partition, the log's history included
    event_ms: dict[TopicPartition, int] = field(default_factory=dict)
    #: per topic, its partition count when the app first read it (:func:`known_partitions`)
    known: dict[str, int] = field(default_factory=dict)

    def advance(self, tp: TopicPartition, offset: int) -> None:
        self.next[tp] = offset + 1
        self.touched.add(tp)

    def skip_gap(self, tp: TopicPartition, to: int) -> int:
        """Jump over offsets that retention deleted (``--on-gap skip``); returns how many."""
        n = to - self.next[tp]
        self.skipped[tp] = self.skipped.get(tp, 0) + n
        self.next[tp] = to
        self.touched.add(tp)
        return n

    def transaction(self) -> Transaction:
        tps = sorted(self.touched)
        meta: dict = {"kafka": {}}
        for tp in tps:
            meta["kafka"].setdefault(tp.topic, {})[str(tp.partition)] = self.next[tp]
        started = {tp.key: self.started[tp] for tp in tps if tp in self.started}
        if started:
            meta["kafka_start"] = started
        skipped = {tp.key: self.skipped[tp] for tp in tps if tp in self.skipped}
        if skipped:
            meta["kafka_skipped"] = skipped
        if self.known:
            meta[PARTITION_COUNTS] = dict(sorted(self.known.items()))
        times = {tp.key: ms for tp, ms in sorted(self.event_ms.items()) if tp in self.next}
        if times:
            meta["kafka_event_ms"] = times
            meta[EVENT_WATERMARK] = min(times.values())
        return Transaction(self.app_id, {tp.key: self.next[tp] - 1 for tp in tps}, meta)

    def committed(self) -> None:
        """After a landed commit: what it recorded is no longer to record."""
        for tp in self.touched:
            self.started.pop(tp, None)
            self.skipped.pop(tp, None)
        self.touched.clear()


def event_times(log, app_id: str, assigned: Iterable[TopicPartition], latest: int | None = None,
                max_commits: int = 256) -> dict[TopicPartition, int]:
    """The newest event time each of ``assigned`` had reached, from the app's latest commit that
    covers any of them (a commit carries its worker's whole history, so one commit answers).

    Walks back over other workers' commits of the app, at most ``max_commits`` of them; what is
    not found (log retention, a partition that never held a record) does not hold the watermark back.
    """
    keys = {tp.key: tp for tp in assigned}
    v = log.latest_version() if latest is None else latest
    oldest = log.oldest_version()
    seen = 0
    while v >= max(oldest, 1) and seen < max_commits:
        c = log.read_commit(v)
        v -= 1
        t = c.transaction if c is not None else None
        if t is None or t.app_id != app_id:
            continue
        seen += 1
        if keys.keys() & t.offsets.keys():
            times = t.meta.get("kafka_event_ms") or {}
            return {keys[k]: int(ms) for k, ms in times.items()
                    if k in keys and isinstance(ms, int) and not isinstance(ms, bool)}
    return {}


def claims(assigned: Iterable[TopicPartition]) -> frozenset[str]:
    """The offset keys a worker owns: any other commit of its app that carries one fences it."""
    return frozenset(tp.key for tp in assigned)


def select(all_partitions: Iterable[TopicPartition], partitions: Iterable[int] | None = None,
           worker: tuple[int, int] | None = None) -> list[TopicPartition]:
    """This worker's partitions: ``--partitions 0,1,2`` (of every topic), or ``--worker i/N``
    (every N-th of the sorted list, from the i-th: the same split on every machine)."""
    tps = sorted(all_partitions)
    if partitions is not None:
        wanted = set(partitions)
        known = {tp.partition for tp in tps}
        missing = sorted(wanted - known)
        if missing:
            raise InvalidInputError(f"partitions {', '.join(map(str, missing))} do not exist "
                                    f"(the topics have {', '.join(map(str, sorted(known)))})",
                                    partitions="partitions")
        tps = [tp for tp in tps if tp.partition in wanted]
    if worker is not None:
        i, n = worker
        tps = tps[i::n]
    return tps


def parse_worker(text: str) -> tuple[int, int]:
    """``i/N`` with 0 <= i < N."""
    i, sep, n = text.partition("/")
    if not sep or not i.strip().isdigit() or not n.strip().isdigit() or int(n) < 1 or int(i) >= int(n):
        raise InvalidInputError(f"bad worker {text!r}: give i/N with 0 <= i < N, e.g. 0/3", worker="worker")
    return int(i), int(n)


def parse_partitions(text: str) -> list[int]:
    try:
        out = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        out = []
    if not out or any(p < 0 for p in out):
        raise InvalidInputError(f"bad partitions {text!r}: give numbers such as 0,1,2", partitions="partitions")
    return out


def gap_summary(gaps: Mapping[TopicPartition, tuple[int, int]]) -> str:
    return ", ".join(f"{tp} offsets {lo}..{hi - 1} ({hi - lo})" for tp, (lo, hi) in sorted(gaps.items()))
