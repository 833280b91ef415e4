"""The OpenLineage events of one Kafka ingest (docs/observability.md): the topics it read, the table it committed to.

* The job is the app id; one input per topic, named as the OpenLineage naming spec names a Kafka topic
  (namespace ``kafka://{host:port}`` of the first bootstrap server, name the topic), with the records the
  run consumed from it (tombstones and dead letters included: every offset read) and the bytes of their
  values; the output is the table, as for a file (:mod:`tributary_read.write.ingest_lineage`).
* The run id is ``run_id("ingest", "{app}\\0kafka\\0{topics}", n)``, ``n`` a 48-bit SHA-256 of the start
  offsets of every partition the run reads (``{"kafka:topic/p": offset}``, as the commits key them).
  A retry that starts where a failed try started is the same run; a run after one that committed starts
  further on, and is a new run; workers that split the topics' partitions start at different partitions,
  so they are different runs (the base version would make the workers of one app one run, and a retry
  after another worker's commit a new one). A partition the table has never seen starts where the start
  policy resolves it (earliest, latest, an instant): with ``latest``, a retry after new records arrived is a
  new run.
* START once every partition's start is known; COMPLETE after the run's last commit. A follow run that a
  signal stopped ends normally (its last commit, exit 0): COMPLETE; a bounded run stopped by a signal:
  ABORT. FAIL, with the error, when it raised, with the commits it made before (records counted from their
  offsets; bytes unknown, so left out).
* A killed run: as for a file, its outbox entry names its writer, and the next Kafka ingest of the app sends
  its FAIL with its writer's commits. Only an ingest that reads one of the dead run's partitions ends it (a
  worker of the app on other partitions may still be running, on another host), and it does so when it
  starts, before its own START.

Nothing here fails an ingest, and with no transport configured nothing is built, read or imported.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from tributary_read.kafka.offsets import TopicPartition
from tributary_read.lineage.event import facet
from tributary_read.write.ingest_lineage import RunLineage, ingest_event, with_statistics

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.kafka.ingest import KafkaIngestResult, KafkaStart


class KafkaLineage(RunLineage):
    """The events of one ingest of ``topics`` from ``bootstrap`` into ``table`` for ``app_id``; hooks for
    ``ingest_kafka()`` (``on_start``, ``on_commit``), then :meth:`finished` or :meth:`failed`."""

    kind = "kafka"

    def __init__(self, table, app_id: str, bootstrap: str, topics: Sequence[str], warn: Callable[[str], None],
                 follow: bool = False, env: Mapping[str, str] | None = None,
                 hive: Mapping[str, str | None] | None = None):
        super().__init__(table, app_id, warn, env, hive)
        self.bootstrap, self.topics, self.follow = bootstrap, tuple(topics), follow

    def on_start(self, start: KafkaStart) -> None:
        """The FAIL of a killed earlier run on these partitions, then START and the in-flight entry."""
        self.start = start  # which partitions this run reads: the killed runs it may end
        self.recover()
        self._began(start, starts=dict(start.starts), bootstrap=self.bootstrap, topics=list(self.topics))

    def finished(self, result: KafkaIngestResult) -> None:
        """After the run's last commit: COMPLETE (also for a follow run stopped by a signal), or ABORT for a
        bounded run stopped by one."""
        rows: dict[str, int] = {}
        size: dict[str, int] = {}
        for tp, p in result.partitions.items():
            topic = tp.rpartition("/")[0]
            rows[topic] = rows.get(topic, 0) + p["records"]
            size[topic] = size.get(topic, 0) + p.get("bytes", 0)
        self._end("ABORT" if result.stopped_by and not self.follow else "COMPLETE", None, rows=rows, size=size)

    def _ends_entry(self, facts: Mapping[str, Any]) -> bool:
        mine = set(self.start.starts) if self.start is not None else set()
        return super()._ends_entry(facts) and bool(mine & set(facts.get("starts") or {}))

    def _consumed(self, commits: Sequence) -> dict:
        return {"rows": _rows(commits, self.start.starts)}

    def _event(self, event_type: str, commits: Sequence, *, rows: Mapping[str, int] | None = None,
               size: Mapping[str, int] | None = None, error: str | None = None) -> dict:
        st = self.start
        assert st is not None  # events are built once the run started
        return build(event_type, self.table, self.app_id, self.bootstrap, self.topics, st.starts, commits,
                     rows=rows, size=size, error=error, hive=self.hive)

    def _killed(self, event: dict, facts: Mapping[str, Any]) -> dict:
        """The terminal event of a run that died: FAIL, with the commits its writer made after its start (workers
        of the app commit side by side: every commit of the app after it is looked at)."""
        commits, error = self._dead_commits(facts, consecutive=False)
        starts = {k: int(v) for k, v in (facts.get("starts") or {}).items()}
        return build("FAIL", self.table, self.app_id, str(facts.get("bootstrap") or self.bootstrap),
                     tuple(facts.get("topics") or self.topics), starts, commits, rows=_rows(commits, starts),
                     error=error, hive=self.hive)


def build(event_type: str, table, app_id: str, bootstrap: str, topics: Sequence[str], starts: Mapping[str, int],
          commits: Sequence, *, rows: Mapping[str, int] | None = None, size: Mapping[str, int] | None = None,
          error: str | None = None, hive: Mapping[str, Any] | None = None) -> dict:
    """A Kafka ingest's event: each topic as an input (START: no statistics yet), the table and ``commits`` as
    output."""
    ns = f"kafka://{first_server(bootstrap)}"
    inputs = [with_statistics(event_type, {"namespace": ns, "name": t,
                                           "facets": {"dataSource": facet("dataSource", name=ns, uri=ns)}},
                              (rows or {}).get(t, 0), (size or {}).get(t))
              for t in topics]
    return ingest_event(event_type, table, app_id, f"kafka\0{','.join(topics)}", start_number(starts), inputs,
                        commits, error=error, hive=hive)


def first_server(bootstrap: str) -> str:
    """``host:port`` of the first bootstrap server (a listener name before ``://`` dropped)."""
    first = bootstrap.split(",")[0].strip()
    return first.split("://", 1)[1] if "://" in first else first


def start_number(starts: Mapping[str, int]) -> int:
    """A stable 48-bit number for the start offsets of a run's partitions (the run id's; see the module)."""
    text = json.dumps(dict(sorted(starts.items())), separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:6], "big")


def _rows(commits: Sequence, starts: Mapping[str, int]) -> dict[str, int]:
    """Per topic, the offsets that ``commits`` hold past where the run started (their last offset per partition,
    less the start; a partition the run found only later is not counted)."""
    last: dict[str, int] = {}
    for c in commits:
        for k, v in (c.transaction.offsets.items() if c.transaction is not None else ()):
            last[k] = max(v, last.get(k, v))
    rows: dict[str, int] = {}
    for k, v in last.items():
        tp = TopicPartition.from_key(k)
        if tp is not None and k in starts:
            rows[tp.topic] = rows.get(tp.topic, 0) + max(0, v - starts[k] + 1)
    return rows
