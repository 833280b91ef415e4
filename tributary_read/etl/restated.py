"""The partitions a restate commit recomputed, and what caused each: one answer for every reader.

The run report's ``output.restated`` (``trib etl run --json``), the OpenLineage COMPLETE event's
output facet, the run book behind ``trib metrics`` and the Airflow operator's asset events all take
:func:`restated`, so they never disagree on which partitions a run restated or why.

* The records before and after come from the commit (its ``restated``, what the log keeps).
* ``cause`` is ``"backfill"`` for a commit of ``trib etl run JOB --restate START/END`` (its transaction
  is the backfill's, its interval in the offsets): no input file caused it, a fix to the SQL did.
* Else ``"input"``: new or changed files of the inputs (late, rewritten, removed) that feed the
  partition, named per input view (at most :data:`MAX_PATHS`, with their count, so a report over
  thousands of late files stays small), and the input partitions an input's own restates recomputed.
  The run that resolved them records them in its commit (:func:`recorded`, each partition's
  ``inputs`` in the log), so a rerun that finds the commit made names the same causes; a commit of a
  trib from before it says ``inputs: null`` (not known) rather than guess.
"""

from __future__ import annotations

from typing import Any, Mapping

from tributary_read.etl.record import BACKFILL_PREFIX, OWED_KEY, held_partitions
from tributary_read.etl.report import iso_z
from tributary_read.table.manifest import RestateInput

#: Input paths named per input and restated partition (the count says how many there were).
MAX_PATHS = 10


def restated(commit) -> tuple[dict[str, Any], ...]:
    """The partitions ``commit`` recomputed, each with its records before and after and its cause (as the
    commit recorded it: the same for the run that made it and for any later reader)."""
    if commit is None or not commit.restated:
        return ()
    txn = commit.transaction
    backfill = txn is not None and txn.app_id.startswith(BACKFILL_PREFIX)
    owed = set(held_partitions(txn, OWED_KEY))
    out = []
    for r in commit.restated:
        d: dict[str, Any] = {"partition": r.directory, "records_before": r.records_before,
                             "records_after": r.records_after}
        if backfill:
            d.update(cause="backfill", interval={"start": iso_z(txn.offsets["start_ms"]),
                                                 "end": iso_z(txn.offsets["end_ms"])})
        else:
            d.update(cause="input", inputs=None if r.inputs is None else [i.to_json() for i in r.inputs])
            if r.directory in owed:  # its input came with an earlier run, which held it back
                d["held_back"] = True
        out.append(d)
    return tuple(out)


def recorded(run) -> Mapping[str, tuple[RestateInput, ...]] | None:
    """What caused each partition a scheduled restate run recomputes, as its commit keeps it (directory ->
    per input view that fed it something new: its files, the first :data:`MAX_PATHS`, their count, and the
    input partitions its own restates recomputed). None for a backfill (its cause is the interval, in its
    transaction) and for a run that restates nothing."""
    recompute = getattr(run, "recompute", None)
    if recompute is None or getattr(run, "backfill", None) is not None:
        return None
    views = [spec.view for spec in run.job.inputs]
    return {d: _inputs(views, recompute.causes.get(d)) for d in recompute.partitions}


def _inputs(views: list[str], causes) -> tuple[RestateInput, ...]:
    """Per input view that fed the partition something new: its files (the first few) and their count, and
    the partitions of the input that its own restates recomputed."""
    out = []
    for view, (paths, dirs) in zip(views, causes or ()):
        if paths or dirs:
            out.append(RestateInput(view, tuple(sorted(paths)[:MAX_PATHS]), len(paths), tuple(sorted(dirs))))
    return tuple(out)


def cause_text(entry: Mapping[str, Any]) -> str:
    """What caused one restated partition, for the text report: ``raw: 2026_11_28/06/late.jsonl and 2 more``,
    ``backfill START/END``; "" when not known (a commit of an older trib)."""
    if entry.get("cause") == "backfill":
        return f"backfill {entry['interval']['start']}/{entry['interval']['end']}"
    out = []
    for i in entry.get("inputs") or ():
        if i["files"]:
            more = i["files_total"] - 1
            out.append(f"{i['view']}: {i['files'][0]}" + (f" and {more} more" if more else ""))
        if i.get("restated"):
            out.append(f"{i['view']}: restated {', '.join(i['restated'])}")
    if entry.get("held_back"):
        out.append("held back by the job's last run")
    return "; ".join(out)


def totals(entries) -> Mapping[str, int]:
    """Partitions, records before and records after of :func:`restated`'s ``entries`` (the metrics' counts)."""
    entries = list(entries)
    return {"partitions": len(entries), "records_before": sum(e["records_before"] for e in entries),
            "records_after": sum(e["records_after"] for e in entries)}
