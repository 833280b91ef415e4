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
  Only the run that resolved them knows them: a run that finds its commit already made (a rerun)
  says ``inputs: null`` (not known) rather than guess.
"""

from __future__ import annotations

from typing import Any, Mapping

from tributary_read.etl.record import BACKFILL_PREFIX
from tributary_read.etl.report import iso_z

#: Input paths named per input and restated partition (the count says how many there were).
MAX_PATHS = 10


def restated(commit, run=None) -> tuple[dict[str, Any], ...]:
    """The partitions ``commit`` recomputed, each with its records before and after and its cause.

    ``run``: the run that made ``commit`` (its resolved input names the files that caused each
    partition); None, or a run that did not resolve (a rerun), leaves them unknown.
    """
    if commit is None or not commit.restated:
        return ()
    txn = commit.transaction
    backfill = txn is not None and txn.app_id.startswith(BACKFILL_PREFIX)
    recompute = getattr(run, "recompute", None) if run is not None else None
    views = [spec.view for spec in run.job.inputs] if recompute is not None else []
    out = []
    for r in commit.restated:
        d: dict[str, Any] = {"partition": r.directory, "records_before": r.records_before,
                             "records_after": r.records_after}
        if backfill:
            d.update(cause="backfill", interval={"start": iso_z(txn.offsets["start_ms"]),
                                                 "end": iso_z(txn.offsets["end_ms"])})
        else:
            d.update(cause="input", inputs=None if recompute is None else _inputs(views, recompute.causes.get(
                r.directory)))
        out.append(d)
    return tuple(out)


def _inputs(views: list[str], causes) -> list[dict[str, Any]]:
    """Per input view that fed the partition something new: its files (the first few) and their count, and
    the partitions of the input that its own restates recomputed."""
    out = []
    for view, (paths, dirs) in zip(views, causes or ()):
        if not paths and not dirs:
            continue
        d: dict[str, Any] = {"view": view, "files": sorted(paths)[:MAX_PATHS], "files_total": len(paths)}
        if dirs:
            d["restated"] = sorted(dirs)
        out.append(d)
    return out


def cause_text(entry: Mapping[str, Any]) -> str:
    """What caused one restated partition, for the text report: ``raw: 2026_11_28/06/late.jsonl and 2 more``,
    ``backfill START/END``; "" when not known (a rerun)."""
    if entry.get("cause") == "backfill":
        return f"backfill {entry['interval']['start']}/{entry['interval']['end']}"
    out = []
    for i in entry.get("inputs") or ():
        if i["files"]:
            more = i["files_total"] - 1
            out.append(f"{i['view']}: {i['files'][0]}" + (f" and {more} more" if more else ""))
        if i.get("restated"):
            out.append(f"{i['view']}: restated {', '.join(i['restated'])}")
    return "; ".join(out)


def totals(entries) -> Mapping[str, int]:
    """Partitions, records before and records after of :func:`restated`'s ``entries`` (the metrics' counts)."""
    entries = list(entries)
    return {"partitions": len(entries), "records_before": sum(e["records_before"] for e in entries),
            "records_after": sum(e["records_after"] for e in entries)}
