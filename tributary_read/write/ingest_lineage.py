"""The OpenLineage events of one ingest (docs/observability.md): the source it read, the table it committed to.

* The job is the app id; the input the source file (namespace ``file``, its absolute path) with the
  records and bytes the run consumed; the output the table, with the version of the run's last commit,
  the statistics summed over its commits and the partitions they touched.
* One run id per (app, source, start offset): a retry that starts where the failed try started is the
  same run; a run after one that committed part of the source starts further on, and is a new run.
* START once the run knows where it starts; COMPLETE after its last commit (ABORT when a signal stopped
  it: its commits stand and are its output); FAIL, with the error, when it raised (with the commits it
  made before). An ingest that committed nothing completes with the table as output, zero statistics
  and no version.
* Before its first commit a run keeps an entry in the table's outbox (``_tributary/lineage/APP/``):
  written once, never updated, as the log already records the rest: each commit carries the writer id
  the entry names. A run killed with -9 leaves the entry, and the next ingest of the app sends the dead
  run's terminal event: FAIL with a message that it was killed (not ABORT, which says someone stopped
  it on purpose), with the commits of its writer as output, found from the log after the version it
  started at. Then it drops the entry: once, or twice when a kill lands between the send and the drop.
* A terminal event that could not be sent replaces the entry, and the next ingest of the app sends it.

Nothing here fails an ingest: with no transport configured nothing is built, read or imported, and
every error is one warning line (:class:`~tributary_read.lineage.transport.Emitter`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from tributary_read.lineage.event import dataset, facet, iso_ms, run_event, run_id, table_output
from tributary_read.lineage.outbox import Outbox
from tributary_read.lineage.transport import Emitter
from tributary_read.lineage.runs import alive, in_flight, namespace, now_ms, running, warn_error

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.write.ingest import IngestResult, IngestStart

KILLED = ("killed: the ingest ended without a terminal event (kill -9, out of memory, a lost host); "
          "the commits it made stand; found by the next ingest of the app")


class RunLineage:
    """What the events of any ingest share (a file's, Kafka topics'): the outbox entry of the run in flight, the
    commits it made, its terminal event, and the events earlier runs of the app left. A subclass names its
    source: :meth:`_event`, :meth:`_killed`, :meth:`_consumed`, and which in-flight entries it may end
    (:meth:`_ends_entry`).

    ``hive``: keyword arguments of :func:`~tributary_read.lineage.event.dataset` naming the table in Hive.
    """

    kind = "file"  # in the entry of a run in flight: which kind of ingest may end it after a kill

    def __init__(self, table, app_id: str, warn: Callable[[str], None], env: Mapping[str, str] | None = None,
                 hive: Mapping[str, str | None] | None = None):
        self.table, self.app_id, self.warn = table, app_id, warn
        self.sender = Emitter(warn, env)
        self.hive = dict(hive or {})
        self.start: Any = None  # once told where the run starts
        self.key: str | None = None  # this run's outbox key
        self.commits: list = []

    @property
    def enabled(self) -> bool:
        return self.sender.enabled

    # -- hooks -----------------------------------------------------------------
    def recover(self) -> None:
        """Send what earlier runs of the app left: kept terminal events, and those of runs killed mid-way."""
        if not self.enabled:
            return
        box = Outbox(self.table.storage)
        try:
            for key in box.keys(self.app_id):
                entry = box.get(self.app_id, key)
                if entry is None:
                    continue
                facts = in_flight(entry)
                if facts is not None:
                    if not self._ends_entry(facts) or alive(facts):
                        continue  # another kind of run, or another ingest of the app, still running
                    entry = self._killed(entry["event"], facts)
                entry["eventTime"] = iso_ms(now_ms())
                if self.sender.send(entry):
                    box.drop(self.app_id, key)
                elif facts is not None:
                    box.put(self.app_id, key, entry)  # the dead run's event, found: keep it as sent
        except Exception as e:  # noqa: BLE001 - lineage never fails the ingest
            warn_error(self.warn, "the events of earlier runs", e)

    def _began(self, start, /, **facts: Any) -> None:
        """START, and the outbox entry (``facts``: what a later run needs to end this one) that stands for this
        run until it ends."""
        self.start = start
        if not self.enabled:
            return
        try:
            ev = self._event("START", [])
            self.sender.send(ev)
            self.key = f"{now_ms():013d}-{ev['run']['runId']}"
            Outbox(self.table.storage).put(self.app_id, self.key, running(
                ev, kind=self.kind, base=start.base_version, writer=start.writer_id, **facts))
        except Exception as e:  # noqa: BLE001
            warn_error(self.warn, "START", e)

    def on_commit(self, commit) -> None:
        self.commits.append(commit)

    def failed(self, e: BaseException) -> None:
        """The run raised: ABORT for a signal, else FAIL with the error; the commits made so far are its output."""
        from tributary_read.exits import Terminated

        stopped = isinstance(e, (KeyboardInterrupt, Terminated))
        consumed = self._consumed(self.commits) if self.start is not None else {}
        self._end("ABORT" if stopped else "FAIL", None if stopped else f"{type(e).__name__}: {e}", **consumed)

    # -- events ----------------------------------------------------------------
    def _end(self, event_type: str, error: str | None, rows: Any = None, size: Any = None) -> None:
        if not self.enabled or self.start is None:
            return  # a run that never started (a refused option, an unreadable table) is no run
        try:
            ev = self._event(event_type, self.commits, rows=rows, size=size, error=error)
            box = Outbox(self.table.storage)
            if self.sender.send(ev):
                if self.key is not None:
                    box.drop(self.app_id, self.key)
            else:
                box.put(self.app_id, self.key or f"{now_ms():013d}-{ev['run']['runId']}", ev)
        except Exception as e:  # noqa: BLE001
            warn_error(self.warn, event_type, e)

    def _dead_commits(self, facts: Mapping[str, Any], consecutive: bool = True) -> tuple[list, str]:
        """The commits a killed run made (its writer's, after its base version), and the FAIL's message."""
        try:
            return _commits_of(self.table, self.app_id, facts.get("writer"), int(facts.get("base") or 0),
                               consecutive), KILLED
        except Exception as e:  # noqa: BLE001 - e.g. log retention removed them: still end the run, once
            return [], f"{KILLED}; its commits could not be read from the log: {type(e).__name__}: {e}"

    def _ends_entry(self, facts: Mapping[str, Any]) -> bool:
        return facts.get("kind", "file") == self.kind

    def _event(self, event_type: str, commits: Sequence, *, rows: Any = None, size: Any = None,
               error: str | None = None) -> dict:
        """The run's event: ``rows`` and ``size`` what it consumed (as the subclass counts them; None: unknown)."""
        raise NotImplementedError

    def _killed(self, event: dict, facts: Mapping[str, Any]) -> dict:
        raise NotImplementedError

    def _consumed(self, commits: Sequence) -> dict:
        raise NotImplementedError


class IngestLineage(RunLineage):
    """The events of one ingest of the file ``source`` into ``table`` for ``app_id``; hooks for ``ingest()``."""

    def __init__(self, table, app_id: str, source: str, warn: Callable[[str], None],
                 env: Mapping[str, str] | None = None, hive: Mapping[str, str | None] | None = None):
        super().__init__(table, app_id, warn, env, hive)
        self.path = os.path.abspath(source)

    def on_start(self, start: IngestStart) -> None:
        """START, and the outbox entry that stands for this run until it ends."""
        self._began(start, source=start.source, start=start.start_offset, start_position=start.start_position,
                    path=self.path)

    def finished(self, result: IngestResult) -> None:
        """After the run's last commit: COMPLETE, or ABORT when a signal stopped it."""
        self._end("ABORT" if result.stopped_by else "COMPLETE", None, rows=result.records,
                  size=result.consumed_bytes)

    def _consumed(self, commits: Sequence) -> dict:
        st = self.start
        return _consumed(commits, st.source, st.start_offset, st.start_position)

    def _event(self, event_type: str, commits: Sequence, *, rows: int | None = None, size: int | None = None,
               error: str | None = None) -> dict:
        st = self.start
        assert st is not None  # events are built once the run started
        return build(event_type, self.table, self.app_id, self.path, st.source, st.start_offset, commits,
                     rows=rows, size=size, error=error, hive=self.hive)

    def _killed(self, event: dict, facts: Mapping[str, Any]) -> dict:
        """The terminal event of a run that died: FAIL, with the commits its writer made after its start."""
        commits, error = self._dead_commits(facts)
        source, start = str(facts.get("source")), int(facts.get("start") or 0)
        return build("FAIL", self.table, self.app_id, str(facts.get("path") or event["inputs"][0]["name"]),
                     source, start, commits, error=error, hive=self.hive,
                     **_consumed(commits, source, start, facts.get("start_position")))


def build(event_type: str, table, app_id: str, path: str, source: str, start_offset: int, commits: Sequence, *,
          rows: int | None = None, size: int | None = None, error: str | None = None,
          hive: Mapping[str, Any] | None = None) -> dict:
    """An ingest's event: the source as input (START: no statistics yet), the table and ``commits`` as output."""
    src = with_statistics(event_type, dataset(Path(path).as_uri()), rows, size)
    return ingest_event(event_type, table, app_id, source, start_offset, [src], commits, error=error, hive=hive)


def ingest_event(event_type: str, table, app_id: str, identity: str, number: int, inputs: Sequence[dict],
                 commits: Sequence, *, error: str | None = None, hive: Mapping[str, Any] | None = None) -> dict:
    """Any ingest's event: job ``app_id``, run id from (app, ``identity``, ``number``), the table as output
    (none at START) with ``commits``."""
    out = [] if event_type == "START" else [table_output(table, commits, **(hive or {}))]
    return run_event(event_type, run=run_id("ingest", f"{app_id}\0{identity}", number), namespace=namespace(),
                     job=app_id, event_ms=now_ms(), inputs=inputs, outputs=out, error=error)


def with_statistics(event_type: str, src: dict, rows: int | None, size: int | None) -> dict:
    """``src`` with the records and bytes the run consumed from it (at START nothing yet; None: unknown)."""
    if event_type != "START":
        stats = {k: v for k, v in (("rowCount", rows), ("size", size)) if v is not None}
        src["inputFacets"] = {"inputStatistics": facet("inputStatistics", **stats)}
    return src


def _consumed(commits: Sequence, source: str, start_offset: int, start_position: int | None) -> dict:
    """The records and bytes of the source that ``commits`` hold: from their last transaction's offset and
    position, less where the run started (bytes unknown for a log from before positions)."""
    from tributary_read.write.sources import SourceOffsets

    t = commits[-1].transaction if commits else None
    if t is None:
        return {"rows": 0, "size": 0}
    if source not in t.offsets:
        return {"rows": None, "size": None}
    committed = SourceOffsets(t.app_id, source, t)  # the one reader of a transaction's offsets and positions
    pos = committed.position
    return {"rows": committed.last_offset - start_offset + 1,
            "size": pos - start_position if pos is not None and start_position is not None else None}


def _commits_of(table, app_id: str, writer: str | None, base: int, consecutive: bool = True) -> list:
    """The commits ``writer`` made for ``app_id`` after version ``base``: one run's. ``consecutive``: they are
    consecutive among the app's (runs of an app follow one another), so the scan ends at the app's first commit
    by another writer after them; else (workers of one app commit side by side) it reads to the app's last."""
    app = table.log.state().apps.get(app_id)
    if writer is None or app is None or app.version <= base:
        return []
    out: list = []
    for c in table.log.commits(since=base, until=app.version):
        if c.transaction is None or c.transaction.app_id != app_id:
            continue
        if c.writer == writer:
            out.append(c)
        elif consecutive:
            break  # a later run of the app (runs follow one another): the dead run's commits are behind
    return out
