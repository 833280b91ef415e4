"""Run a compaction: rewrite each group, commit one replace, set the originals aside, reveal the outputs.

The order is the data-safety argument:

1. Every output is written under a hidden staged name and read back
   (:func:`tributary_read.write.rewrite.rewrite`): nothing a reader can see.
2. One replace commit names the outputs, their sources and the files they
   replace; the log refuses it if any of those left the table meanwhile (a
   second compaction, ``trib expire``: a conflict, so nothing is resurrected)
   or if records in and out differ. Before that commit every output is an
   orphan this run deletes on failure; once it was attempted nothing deletes
   them (a conflict or an unknown outcome leaves them to ``trib clean``, as any writer's).
3. The replaced files move to ``_tributary/replaced`` (Hive and Spark
   directory readers stop counting them), then the outputs are renamed into
   place (they start counting those): a crash between leaves fewer rows for a
   moment, never twice as many, and any trib reader or the next compaction
   finishes the step.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from tributary_read.compact.plan import CompactPlan
from tributary_read.faults import crash_point
from tributary_read.table.config import Table
from tributary_read.table.manifest import Commit, FileEntry
from tributary_read.table.log import COMPACTED_MARKER
from tributary_read.table.renames import finish_compactions, finish_replace
from tributary_read.write.rewrite import Rewritten, output_names, rewrite
from tributary_read.write.names import new_writer_id

#: A compaction's commit may wait this long for lost races before giving up (ingest keeps committing).
COMMIT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class CompactResult:
    plan: CompactPlan
    version: int | None
    outputs: tuple[FileEntry, ...]
    dry_run: bool
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "version": self.version, **self.plan.to_json(),
                "outputs": [{"path": f.path, "size": f.size, "records": f.records} for f in self.outputs],
                "seconds": round(self.seconds, 3)}


def compact(table: Table, plan: CompactPlan, *, dry_run: bool = False,
            progress: Callable[[int, int, Rewritten], None] | None = None,
            on_commit: Callable[[Commit], None] | None = None, spark: Any = None,
            options: Mapping[str, str] | None = None) -> CompactResult:
    """Carry out ``plan`` (see the module docstring); with ``dry_run``, only report it.

    ``on_commit``: called once the outputs are in place, with the replace commit (the table's
    partition commit refreshes Hive's statistics of the partitions it rewrote). ``spark``: a
    SparkSession whose executors rewrite the groups, one task each (``options``: the storage
    options they open the table with); the commit is still this process's, once.
    """
    t0 = time.perf_counter()
    if dry_run:
        return CompactResult(plan, None, (), True, time.perf_counter() - t0)
    finish_unfinished(table)
    if not plan.groups:
        return CompactResult(plan, None, (), False, time.perf_counter() - t0)
    st = table.storage
    writer = new_writer_id()
    done: list[Rewritten] = []
    try:
        if spark is not None:
            from tributary_read.spark.rewrite import rewrite_on_executors

            done = rewrite_on_executors(spark, table, [(i, g.inputs, g.span) for i, g in enumerate(plan.groups, 1)],
                                        writer_id=writer, options=options)
        for i, g in enumerate(plan.groups, 1):
            if spark is None:
                done.append(rewrite(table, g.inputs, writer_id=writer, seq=i, span=g.span))
            if progress is not None:
                progress(i, len(plan.groups), done[i - 1])
        outputs = [replace(rw.entry, sources=g.sources) for rw, g in zip(done, plan.groups)]
        replaced = [f for g in plan.groups for f in g.inputs]
        crash_point("compact.before_commit")
    except BaseException:
        _discard(table, plan, writer)  # no commit was attempted: these are this run's own orphans
        raise
    # From here the commit has been attempted: whatever it raises (a conflict, an unknown outcome),
    # the outputs stay, orphans for trib clean after its grace period, as any writer's.
    commit = table.log.commit(outputs, removed=replaced, replace=True, base_version=plan.version,
                              writer=f"compact-{writer}", timeout_s=COMMIT_TIMEOUT_S)
    crash_point("compact.after_commit")
    finish_replace(table, commit.files, commit.removed)
    for f in commit.files:
        st.set_mtime(f.path, max(s.mtime_ms or 0 for s in f.sources))  # plain tools see a time in the span
    if on_commit is not None:
        on_commit(commit)
    return CompactResult(plan, commit.version, commit.files, False, time.perf_counter() - t0)


def finish_unfinished(table: Table) -> list[str]:
    """Finish compactions that stopped after their commit (replaced files set aside, then the
    compacted ones revealed), so Hive never counts both and never neither for long.

    The marker remembers the version everything was finished through: only later replaces'
    inputs are looked at again (a table remembers a month of them).
    """
    st = table.storage
    try:
        since = int(json.loads(st.read(COMPACTED_MARKER)).get("finished", 0))
    except FileNotFoundError:
        return []  # never compacted
    except (ValueError, TypeError, AttributeError):
        since = 0
    state = table.log.state()
    moved = finish_compactions(table, state, since=since)
    if state.version > since:
        st.replace(COMPACTED_MARKER, json.dumps({"finished": state.version}).encode() + b"\n")
    return moved


def _discard(table: Table, plan: CompactPlan, writer: str) -> None:
    """Delete this run's staged outputs, by name: those of a task that failed on an executor too."""
    for i, g in enumerate(plan.groups, 1):
        try:
            table.storage.delete(output_names(table, g.inputs, writer_id=writer, seq=i, span=g.span)[1])
        except Exception:  # noqa: BLE001 - best effort: a leftover is an orphan for trib clean
            pass
