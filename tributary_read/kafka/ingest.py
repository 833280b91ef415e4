"""Exactly-once ingest of Kafka topics into a table (Tributary-Sink-HDFS, Kafka2Hive's Q1-Q3).

Each commit holds the data files and, in the same atomic manifest, the next
offset of every partition it covers (:mod:`tributary_read.kafka.offsets`). A
run starts from the table alone: the app's committed offsets, or, for a
partition the table has never seen, ``start`` (recorded in that partition's
first commit; a partition added to its topic after the app's first run starts
at its earliest offset, :func:`offsets.known_partitions`). Whatever instant a run dies at, its uncommitted files are never
referenced and the next run reads the same records again, so every record
lands once. Partitions are assigned explicitly, never through group
rebalancing; several workers split them (``partitions`` / ``worker``) and each
commit fences the partitions its worker claims.

Bounded (default): read every assigned partition up to its end as found when
the run started, commit, return. A partition counts as done only at an
end-of-partition event at or past that end, never from the watermark alone.
``follow``: read until stopped, committing every ``commit_interval_s`` or
``commit_every`` records, and notice new partitions within a minute.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from tributary_read.choice import Choice
from tributary_read.faults import crash_point
from tributary_read.errors import (
    BadRecordError, InvalidInputError, SchemaConflictError, SourceGapError, SourceMismatchError, StorageError,
    TimeOutOfRangeError, TimeUnitError,
)
from tributary_read.kafka import client as kc
from tributary_read.kafka.records import Record
from tributary_read.kafka.offsets import (
    Positions, TopicPartition, added_later, added_note, claims, event_times, gap_summary, known_partitions,
    partition_counts, resume_offsets, select,
)
from tributary_read.table.config import RollPolicy, Table
from tributary_read.table.renames import roll_forward
from tributary_read.write.ingest import FROM_TABLE, FromTable, StopRequest, TimeSpec
from tributary_read.write.pacing import CommitPacer
from tributary_read.write.json_batch import JsonBatch, LineBatch
from tributary_read.write.lines import BadRecordLimit, LineRecords, OnBadRecord, bad_record_reason, take_in_bulk
from tributary_read.write.writer import TableWriter

#: How often a follow run looks for partitions added to its topics.
METADATA_REFRESH_S = 30.0
#: How long that look may block the loop: a broker that does not answer it is an outage, which the
#: loop rides out (commits go on, SIGTERM is heard) within ``--broker-timeout``, not this call.
METADATA_PROBE_S = 2.0


class OnGap(Choice):
    """A committed offset the broker no longer holds (retention deleted it): stop, or skip the gap."""

    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class KafkaSource:
    """Where and what to read. ``start``: earliest, latest, or an ISO-8601 instant."""

    bootstrap: str
    topics: tuple[str, ...]
    config: dict = field(default_factory=dict)
    start: str = "earliest"
    partitions: tuple[int, ...] | None = None
    worker: tuple[int, int] | None = None
    #: how long the broker may not answer before the run gives up (the client reconnects meanwhile)
    broker_timeout_s: float = 120.0


@dataclass(frozen=True)
class KafkaStart:
    """Where a run starts, told to ``on_start`` before the first record is read (lineage: the run's id, and
    what a later run needs to tell what a killed one committed: its writer id is on each of its commits)."""

    starts: dict  # "kafka:topic/p" -> the first offset to read, for every partition the run reads
    base_version: int  # the table version the run read its state at
    writer_id: str


@dataclass(frozen=True)
class KafkaIngestResult:
    app_id: str
    topics: tuple[str, ...]
    records: int
    tombstones: int
    dead_letters: int
    commits: int
    files: int
    rolled_forward: int
    #: per partition ("topic/p"): {"from": first offset read, "next": next offset to read, "records": n,
    #: "bytes": of the values read}
    partitions: dict
    skipped: dict
    stopped_by: str | None = None
    #: the run's dead letters against the bad-record limit (:meth:`BadRecordLimit.report`); None: none
    bad_records: dict | None = None
    #: partitions added to the topics after the app's first run, started at their earliest offset
    added_partitions: tuple[str, ...] = ()

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        d["topics"] = list(self.topics)
        d["added_partitions"] = list(self.added_partitions)
        return d


def ingest_kafka(
    table: Table,
    source: KafkaSource,
    app_id: str,
    *,
    time_spec: TimeSpec | None,
    follow: bool = False,
    commit_every: int = 100_000,
    commit_interval_s: float = 60.0,
    columns: Sequence[str] = (),
    on_gap: OnGap | str = OnGap.FAIL,
    protocol: str | None = None,
    roll: RollPolicy | None = None,
    on_bad_record: OnBadRecord | str = OnBadRecord.DEAD_LETTER,
    max_bad_fraction: float | None | FromTable = FROM_TABLE,
    on_commit: Callable[[object], None] | None = None,
    stop: StopRequest | None = None,
    progress: Callable[[str], None] | None = None,
    on_start: Callable[[KafkaStart], None] | None = None,
) -> KafkaIngestResult:
    """Append the records of ``source``'s topics not yet committed for ``app_id``.

    Args:
        time_spec: where a record's event time comes from in its value; None: the Kafka
            record timestamp (``--time-source kafka``).
        follow: keep reading until ``stop`` is set; else stop at the ends found at the start.
        commit_every / commit_interval_s: commit after this many records or seconds, whichever
            comes first (the interval applies to follow runs).
        on_gap: ``skip`` jumps over offsets the broker no longer holds and records how many in
            the commit; the default stops with SourceGapError naming them.
        progress: called with a one-line status (records/s, lag per partition) now and then.
        on_start: called with the :class:`KafkaStart` once the run knows where each partition starts.
    """
    if not app_id or any(c.isspace() for c in app_id):
        raise InvalidInputError("the app id must be a non-empty word", app_id="the app id")
    CommitPacer(commit_every, commit_interval_s, follow)  # refuses a bad pace before the broker is asked
    on_gap = OnGap.parse(on_gap, "on_gap")
    on_bad_record = OnBadRecord.parse(on_bad_record, "on_bad_record")
    if time_spec is not None:
        time_spec.check()
    record = Record(table, time_spec, columns)
    if isinstance(max_bad_fraction, FromTable):
        max_bad_fraction = table.config.max_bad_fraction
    limit = BadRecordLimit(max_bad_fraction if on_bad_record is OnBadRecord.DEAD_LETTER else None,
                           ",".join(source.topics), unit="offset")
    conf = kc.client_config(source.bootstrap, app_id, source.config)
    run = _Run(table, source, app_id, conf, record, limit, on_bad_record, on_gap, follow, commit_every,
               commit_interval_s, protocol, roll, on_commit, stop, progress, on_start)
    return run.go()


class _Run:
    def __init__(self, table, source, app_id, conf, record, limit, on_bad_record, on_gap, follow, commit_every,
                 commit_interval_s, protocol, roll, on_commit, stop, progress, on_start=None):
        self.table, self.source, self.app_id, self.conf = table, source, app_id, conf
        self.record, self.limit, self.on_bad_record, self.on_gap = record, limit, on_bad_record, on_gap
        self.follow, self.commit_every, self.commit_interval_s = follow, commit_every, commit_interval_s
        self.protocol, self.roll, self.on_commit, self.stop, self.progress = protocol, roll, on_commit, stop, progress
        self.on_start = on_start
        self.read = self.tombstones = self.dead = self.commits = self.files = 0
        self.first: dict[TopicPartition, int] = {}
        self.counts: dict[TopicPartition, int] = {}
        self.sizes: dict[TopicPartition, int] = {}  # bytes of the values read
        self._skipped_total: dict[TopicPartition, int] = {}
        self._probed, self._noted_down = 0.0, False  # broker outages: the last probe, whether it was said
        self.added: list[TopicPartition] = []  # partitions added after the app's first run (started earliest)
        self.batch: JsonBatch | LineBatch | None = None  # parses a run of values in bulk (JSON values)

    def go(self) -> KafkaIngestResult:
        ck = kc.kafka()
        self.errors = kc.Errors()
        consumer = self._consumer_for_group = kc.open_consumer(self.conf, self.errors)
        writer = None
        try:
            state = self.table.log.state()
            app = state.apps.get(self.app_id)
            rolled = 0
            if app is not None:
                last = self.table.log.read_commit(app.version)
                rolled = len(roll_forward(self.table, last.files)) if last else 0
            self.base = state.version
            every = kc.partitions(consumer, self.source.topics, self.source.bootstrap, self.errors)
            assigned = select(every, self.source.partitions, self.source.worker)
            if not assigned:
                raise InvalidInputError("this worker has no partitions: more workers than partitions",
                                        worker="worker")
            self.pos = Positions(self.app_id, {})
            self.pos.event_ms = event_times(self.table.log, self.app_id, assigned, state.version)
            # Topics the app reads for the first time are counted now; the others keep their first count.
            self.pos.known = {**partition_counts(every), **known_partitions(app)}
            self._start(consumer, assigned, resume_offsets(app), added_later(known_partitions(app), assigned))
            self.claims = claims(assigned)
            self.assigned = list(assigned)
            # Bounded: the ends as the run finds them (hints: done only at an end-of-partition event past them).
            self.ends = {} if self.follow else {tp: (kc.watermarks(consumer, tp) or (0, 0))[1] for tp in assigned}
            self.done: set[TopicPartition] = set()
            writer = TableWriter(self.table, protocol=self.protocol, roll=self.roll)
            field_time = self.record.bulk_field_time()
            self.batch = None if field_time is None else (
                JsonBatch(writer, field_time) if self.record.rows else LineBatch(writer, field_time))
            if self.on_start is not None:
                self.on_start(KafkaStart({tp.key: self.pos.next[tp] for tp in assigned}, self.base, writer.writer_id))
            if "latest" in self.pos.started.values():
                # "latest" resolves to another offset on every run: commit where it began before reading a
                # record, or a run that fails before its first commit (a flood of bad records, a crash) would
                # leave the next run to start later still, past the records this one read.
                self._commit(writer)
            self._assign(consumer, ck, assigned)
            self._loop(consumer, ck, writer)
        except BaseException:
            if writer is not None:
                writer.abort()  # only a batch whose commit was never attempted
            raise
        finally:
            consumer.close()
        stopped = None
        if self.stop is not None and self.stop.signum is not None:
            import signal

            stopped = signal.Signals(self.stop.signum).name
        return KafkaIngestResult(
            self.app_id, tuple(self.source.topics), self.read, self.tombstones, self.dead, self.commits, self.files,
            rolled, {str(tp): {"from": self.first.get(tp, self.pos.next[tp]), "next": self.pos.next[tp],
                               "records": self.counts.get(tp, 0), "bytes": self.sizes.get(tp, 0)}
             for tp in sorted(self.pos.next)},
            {str(tp): n for tp, n in sorted(self._skipped_total.items())}, stopped, self.limit.report(self.read),
            tuple(str(tp) for tp in sorted(self.added)))

    # -- positions ---------------------------------------------------------------------
    def _start(self, consumer, assigned: list[TopicPartition], committed: dict[TopicPartition, int],
               added: list[TopicPartition]) -> None:
        """Where each of ``assigned`` starts: its committed offset; a partition ``added`` to its topic
        after the app first read it, its earliest offset; any other, the ``start`` policy."""
        new = [tp for tp in assigned if tp not in committed]
        for tp in assigned:
            if tp in committed:
                self.pos.next[tp] = committed[tp]
        if not new:
            return
        # A partition's first commit records where it started, even when the run reads nothing
        # from it: the next run must not resolve "latest" again and skip what came in between.
        self.pos.touched.update(new)
        later = [tp for tp in new if tp in set(added)]
        if later:
            self._earliest(consumer, later, "earliest")
            self.added.extend(later)
            if self.progress:
                self.progress(added_note([str(tp) for tp in sorted(later)]))
            new = [tp for tp in new if tp not in later]
            if not new:
                return
        start = self.source.start
        if start in ("earliest", "latest"):
            marks = self._earliest(consumer, new, start)
            if start == "latest":
                self.pos.next.update(self._ends(consumer, {tp: max(m) for tp, m in marks.items()}))
            return
        from tributary_read.timespec import parse_instant

        ms = parse_instant(start, None, "start")
        found = kc.offsets_for_time(consumer, new, ms)
        late = {tp: (kc.watermarks(consumer, tp) or (0, 0))[1] for tp in new if found[tp] < 0}
        ends = self._ends(consumer, late)  # nothing that late yet: from the end
        for tp in new:
            self.pos.next[tp] = found[tp] if found[tp] >= 0 else ends[tp]
            self.pos.started[tp] = kc.iso_ms(ms)

    def _earliest(self, consumer, tps: list[TopicPartition], started: str) -> dict[TopicPartition, tuple]:
        """Start ``tps`` at their earliest offsets, recorded as ``started``; returns their watermarks."""
        marks = {}
        for tp in tps:
            m = kc.watermarks(consumer, tp)
            if m is None:
                raise kc.unavailable(self.source.bootstrap, self.errors, None, kc.METADATA_TIMEOUT_S)
            marks[tp] = m
            self.pos.next[tp] = m[0]
            self.pos.started[tp] = started
        return marks

    def _ends(self, consumer, hints: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Each partition's end: read from the broker's hint to an end-of-partition event.

        A high watermark is only a hint (one broker reported 1 for a partition of 100
        records), so the end is where a fetch comes back with nothing more.
        """
        if not hints:
            return {}
        ck = kc.kafka()
        probe = kc.open_consumer({**self.conf, "group.id": f"{self.conf['group.id']}-trib-probe"}, self.errors)
        ends = dict(hints)
        try:
            probe.assign([ck.TopicPartition(tp.topic, tp.partition, off) for tp, off in hints.items()])
            left = set(hints)
            deadline = time.monotonic() + 120
            while left:
                if time.monotonic() > deadline:
                    raise StorageError(f"Kafka {self.source.bootstrap}: no end of partition for "
                                       f"{', '.join(map(str, sorted(left)))} within 120 s")
                for msg in probe.consume(num_messages=1000, timeout=0.5):
                    tp = TopicPartition(msg.topic(), msg.partition())
                    err = msg.error()
                    if err is None:
                        ends[tp] = max(ends[tp], msg.offset() + 1)
                    elif err.code() == ck.KafkaError._PARTITION_EOF:
                        ends[tp] = max(ends[tp], msg.offset())
                        left.discard(tp)
                    elif not err.retriable():
                        raise StorageError(f"Kafka {self.source.bootstrap}: {tp}: {err.str()}")
        finally:
            probe.close()
        return ends

    def _assign(self, consumer, ck, tps: list[TopicPartition]) -> None:
        consumer.assign([ck.TopicPartition(tp.topic, tp.partition, self.pos.next[tp]) for tp in tps])

    # -- the loop ----------------------------------------------------------------------
    def _loop(self, consumer, ck, writer: TableWriter) -> None:
        pace = CommitPacer(self.commit_every, self.commit_interval_s, self.follow)
        tps: dict[tuple[str, int], TopicPartition] = {}
        last_meta = time.monotonic()
        noted = 0
        while True:
            if self.stop is not None and self.stop.signum is not None:
                break
            if not self.follow and len(self.done) == len(self.assigned):
                break
            msgs = consumer.consume(num_messages=1000, timeout=0.5)
            if self.errors.down_since is not None:
                # Only a probe's answer ends an outage: what consume hands back meanwhile may be an
                # error event or records fetched before the broker went away, and the client's next
                # reconnect error (hence the next chance to notice) can be seconds of backoff away.
                self._outage(consumer)
            self._take_all(writer, msgs, tps, pace, consumer, ck)
            now = time.monotonic()
            if self.follow:
                writer.roll_idle()
                if pace.due(now):
                    self._commit(writer)
                    pace.committed(now)
                if now - last_meta >= METADATA_REFRESH_S and self.errors.down_since is None:
                    last_meta = now
                    self._new_partitions(consumer, ck)
            if self.progress and self.errors.down_since is None:
                since = pace.note_due(now)
                if since:
                    self.progress(f"{self.read} records ({(self.read - noted) / since:,.0f}/s); " + self._lag(consumer))
                    noted = self.read
        if self.pos.touched or pace.pending:
            self._commit(writer)

    def _take_all(self, writer: TableWriter, msgs: list, tps: dict, pace: CommitPacer, consumer, ck) -> None:
        """Take a fetched batch in order: each record's offset and counts as it comes, its value in runs
        placed together (:meth:`_place`), a commit wherever the pace says (after the record that fills it).

        A run is placed before anything that reads or moves the positions (an error event, a commit), so
        every commit names exactly the records written before it, as if each were taken alone.
        """
        pos = self.pos
        nxt, touched, counts, sizes, first = pos.next, pos.touched, self.counts, self.sizes, self.first
        run: list = []  # the messages with a value, since the last placement
        values: list[bytes] = []
        run_tps: list[TopicPartition] = []
        for msg in msgs:
            err = msg.error()
            where = (msg.topic(), msg.partition())
            tp = tps.get(where)  # one TopicPartition per partition, not one per record
            if tp is None:
                tp = tps[where] = TopicPartition(*where)
            if err is not None:
                if run:
                    self._place(writer, run, values, run_tps)
                    run, values, run_tps = [], [], []
                self._error(consumer, ck, err, tp, msg)
                continue
            at = nxt.get(tp)
            if at is None:
                continue  # a stray message after an unassign
            off = msg.offset()
            if off < at:
                continue  # a resent message from before a seek
            if tp not in first:
                first[tp] = off
            self.read += 1
            counts[tp] = counts.get(tp, 0) + 1
            nxt[tp] = off + 1  # Positions.advance
            touched.add(tp)
            value = msg.value()
            if value is None:  # a tombstone: nothing to store, its offset still advances
                self.tombstones += 1
            else:
                sizes[tp] = sizes.get(tp, 0) + len(value)
                run.append(msg)
                values.append(value)
                run_tps.append(tp)
            if pace.add():
                if run:
                    self._place(writer, run, values, run_tps)
                    run, values, run_tps = [], [], []
                self._commit(writer)
                pace.committed()
        if run:
            self._place(writer, run, values, run_tps)

    def _place(self, writer: TableWriter, run: list, values: list[bytes], tps: list[TopicPartition]) -> None:
        """Write a run of records (their offsets are taken): JSON values with a time field in bulk where
        :mod:`~tributary_read.write.json_batch` can (the same rows or lines, files and dead letters as one
        by one: :func:`take_in_bulk`), every other record one by one (:meth:`_place_one`)."""
        batch = self.batch
        if batch is not None and len(run) >= LineRecords.MIN_BATCH:
            em = self.pos.event_ms
            low = -1 << 62

            def bulk(start: int, times: list[int]) -> None:
                for tp, ts in zip(tps[start:start + len(times)], times):
                    if ts > em.get(tp, low):
                        em[tp] = ts

            take_in_bulk(batch, values, lambda j: self._place_one(writer, run[j], tps[j]), bulk)
            return
        place = self._place_one
        for msg, tp in zip(run, tps):
            place(writer, msg, tp)

    def _place_one(self, writer: TableWriter, msg, tp: TopicPartition) -> None:
        """Write one record (its offset is taken), or keep it as a dead letter; its value is not None."""
        reason = None
        try:
            rec, ts = self.record.convert(msg)
        except TimeUnitError as e:
            raise TimeUnitError(f"{tp} offset {msg.offset()}: {e}") from None
        except (ValueError, TypeError, OverflowError, RecursionError) as e:
            reason = bad_record_reason(e)
        else:
            try:
                writer.write(rec, ts)
            except (TimeOutOfRangeError, SchemaConflictError) as e:
                reason = str(e)
            else:
                if ts > self.pos.event_ms.get(tp, -1 << 62):
                    self.pos.event_ms[tp] = ts
        if reason is not None:
            off = msg.offset()
            if self.on_bad_record is OnBadRecord.FAIL:
                raise BadRecordError(f"{tp} offset {off}: {reason}") from None
            writer.write_dead_letter(msg.value(), off, reason, str(tp),
                                     extra={"topic": tp.topic, "partition": tp.partition})
            self.limit.add(off, reason, str(tp))
            self.dead += 1

    def _commit(self, writer: TableWriter) -> None:
        self.limit.check(self.read, self.commits, -1)
        txn = self.pos.transaction()
        commit = writer.commit(txn, base_version=self.base, claims=self.claims)
        assert commit is not None
        self.base = commit.version
        self.commits += 1
        self.files += len(commit.files)
        self.pos.committed()
        if self.on_commit:
            self.on_commit(commit)
        crash_point("kafka.after_commit")
        self._group_commit(txn)

    def _group_commit(self, txn) -> None:
        """Best effort, asynchronous: lets kafka-consumer-groups and Burrow see progress. Never read back."""
        ck = kc.kafka()
        tps = [ck.TopicPartition(t, int(p), n) for t, ps in txn.meta.get("kafka", {}).items() for p, n in ps.items()]
        if tps:
            try:
                self._consumer_for_group.commit(offsets=tps, asynchronous=True)
            except Exception:  # noqa: BLE001 - lag reporting must never fail a run whose commit landed
                pass

    def _error(self, consumer, ck, err, tp: TopicPartition, msg) -> None:
        code = err.code()
        if code == ck.KafkaError._PARTITION_EOF:
            if not self.follow and tp in self.pos.next and tp not in self.done \
                    and max(msg.offset(), self.pos.next[tp]) >= self.ends.get(tp, 0):
                self.done.add(tp)
            return
        if code in (ck.KafkaError.OFFSET_OUT_OF_RANGE, ck.KafkaError._AUTO_OFFSET_RESET):
            self._gap(consumer, ck, tp, err)
            return
        if code == ck.KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise InvalidInputError(f"topic partition {tp} does not exist (any more) on {self.source.bootstrap}",
                                    topic="topic")
        if err.fatal() or not err.retriable():
            raise StorageError(f"Kafka {self.source.bootstrap}: {tp}: {err.str()}")

    def _gap(self, consumer, ck, tp: TopicPartition, err) -> None:
        marks = kc.watermarks(consumer, tp)
        nxt = self.pos.next.get(tp, 0)
        if marks is not None and marks[0] <= nxt and marks[1] < nxt:
            # Past the end, not before the start: these are not the records the table's offsets
            # count (the topic was deleted and made again, the broker lost records, another
            # cluster). No skip can be right, whatever ``on_gap`` says.
            raise SourceMismatchError(
                f"{tp}: this app's next offset {nxt} is past the end of the partition (the broker reports "
                f"its end at offset {marks[1]}): the topic was deleted and made again, the broker lost "
                "records, or this is another cluster. Nothing was read, skipped or committed: check the broker "
                "address; to read the topic as new, give it a new app id", kafka="the broker address")
        if marks is None or not (marks[0] > nxt):
            raise StorageError(f"Kafka {self.source.bootstrap}: {tp}: offset {nxt} is out of range "
                               f"({err.str()}); the broker reports offsets {marks} for it")
        low = marks[0]
        if self.on_gap is OnGap.FAIL:
            raise SourceGapError(
                f"{gap_summary({tp: (nxt, low)})} were deleted by the topic's retention before this app read "
                f"them; nothing after offset {nxt - 1} is committed for it. Those records are lost at the source: "
                "skipping the gap goes on from the oldest offset the broker holds (the commit records "
                "how many were skipped)", on_gap="skipping the gap")
        n = self.pos.skip_gap(tp, low)
        self._skipped_total[tp] = self._skipped_total.get(tp, 0) + n
        if self.progress:
            self.progress(f"skipped {n} offsets of {tp} deleted by retention ({nxt}..{low - 1})")
        # Not seek(): after the out-of-range error librdkafka has stopped fetching the partition
        # (auto.offset.reset=error), and a seek in that state fails with _STATE. Assigning it
        # again starts it afresh from ``low``.
        consumer.incremental_unassign([ck.TopicPartition(tp.topic, tp.partition)])
        consumer.incremental_assign([ck.TopicPartition(tp.topic, tp.partition, low)])

    def _outage(self, consumer) -> None:
        """The broker does not answer: wait for the client to reconnect (a probe every 2 s tells, and
        only its answer ends the outage), for at most the broker timeout. Commits go on meanwhile:
        they need only the table."""
        now = time.monotonic()
        down = now - (self.errors.down_since or now)
        if down > self.source.broker_timeout_s:
            raise StorageError(
                f"Kafka {self.source.bootstrap} has not answered for {self.source.broker_timeout_s:g} s "
                f"({self.errors[-1] if self.errors else 'no answer'}); everything read before is committed "
                "and the next run resumes from the table")
        if now - self._probed < 2.0:
            return
        self._probed = now
        if kc.watermarks(consumer, self.assigned[0], timeout_s=1.0) is not None:
            self.errors.down_since = None
            if self._noted_down and self.progress:
                self.progress(f"Kafka broker {self.source.bootstrap} answers again")
            self._noted_down = False
        elif not self._noted_down:
            self._noted_down = True
            if self.progress:
                self.progress(f"Kafka broker {self.source.bootstrap} does not answer; waiting up to "
                              f"{self.source.broker_timeout_s:g} s for it")

    def _new_partitions(self, consumer, ck) -> None:
        try:
            every = kc.partitions(consumer, self.source.topics, self.source.bootstrap, self.errors,
                                  timeout_s=METADATA_PROBE_S)
        except StorageError:
            if self.errors.down_since is None:
                self.errors.down_since = time.monotonic()
            return  # an outage: the loop waits for the broker, within the broker timeout
        now = select(every, self.source.partitions, self.source.worker)
        added = [tp for tp in now if tp not in self.pos.next]
        if not added:
            return
        # Added while this run reads: every record they hold came after it started, so they start at their
        # earliest offset. One that --worker now gives this run may have been another worker's: the table
        # says where that one is.
        self.pos.known = {**partition_counts(every), **self.pos.known}
        committed = resume_offsets(self.table.log.state().apps.get(self.app_id))
        self._start(consumer, added, committed, [tp for tp in added if tp not in committed])
        self.claims = claims(now)
        self.assigned = list(now)
        consumer.incremental_assign([ck.TopicPartition(tp.topic, tp.partition, self.pos.next[tp]) for tp in added])

    def _lag(self, consumer) -> str:
        parts = []
        for tp in self.assigned[:12]:
            marks = kc.watermarks(consumer, tp, cached=True)  # the fetches' own news: a status line never waits
            if marks is not None and marks[1] >= 0:
                parts.append(f"{tp} lag {max(0, marks[1] - self.pos.next.get(tp, 0))}")
        return ", ".join(parts) + (" …" if len(self.assigned) > 12 else "")
