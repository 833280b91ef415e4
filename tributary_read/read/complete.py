"""The complete input of partitions: every file, delivered earlier or now, a restate recomputes them from.

A restate job (tributary_read/etl/restate.py) recomputes each output partition its new input
touches from *all* of that partition's input, not from the new files alone. What "all" is depends
on how the input is tracked, and is decided here, once:

* files a trib writer committed: the table's state at the version the run's plan (or window) read
  up to (:func:`~tributary_read.read.resolve.partition_files`), so a file compacted since it was
  delivered is read as what replaced it;
* files other tools wrote (a plain directory, or the listing part of a ``both`` table): what the
  consumer's ledger will hold once the run's plan is acked (:meth:`Consumer.after`), each file up to
  the end that was delivered (a line still being written is not read; a file that grew is read up to
  the range this plan delivers). A file the plan takes as changed (rewritten, removed: a restate job's
  consumer takes such changes) is read as it is now, or not at all.

Files ``trib consumer skip`` left out of a plan stay out of every complete input: they count as
delivered, unread. A file that lands after the plan was made waits for the next plan, which restates
its partition again: the recompute reads a consistent set, never half of one.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from tributary_read.errors import InvalidInputError
from tributary_read.read.fileset import ResolvedFile
from tributary_read.read.growth import readable
from tributary_read.read.ledger import present_files
from tributary_read.table.layout import PartitionDir


def delivered_in(consumer, plan, directories: Mapping[str, PartitionDir]) -> list[ResolvedFile]:
    """The files a listing ``consumer`` holds as delivered in ``directories`` once ``plan`` is acked (None: as
    it holds them now), each up to its delivered end (``valid_length`` where that is before the file's size)."""
    state = consumer.after(plan) if plan is not None else consumer.current()
    if state is None or state.mode not in ("listing", "both"):
        return []
    out: list[ResolvedFile] = []
    for d, part in directories.items():
        if d in state.ledger:
            entry = state.ledger[d]
        elif d in state.sealed:
            entry = state.sealed.segment(d)
            if entry is None:  # a seal an older trib wrote: a digest, no file list
                raise InvalidInputError(
                    f"partition {d} of {state.table} was sealed by an older trib with a digest only, so the files "
                    f"consumer {consumer.name} delivered there are not known and it cannot be recomputed exactly; "
                    "a restate job may read its input again from the start (each partition is recomputed, "
                    f"never doubled): {consumer.reset_command('to-earliest')}")
        else:
            continue
        ranges = entry.get("ranges") or {}
        for name, fp in present_files(entry):
            end = ranges[name][0] if name in ranges else readable(fp)
            out.append(ResolvedFile(f"{d}/{name}", fp[0], dict(part.values), mtime_ms=fp[1],
                                    valid_length=None if end == fp[0] else end))
    return out


def complete_files(source, directories: Mapping[str, PartitionDir], *, consumer=None, plan=None,
                   version: int | None = None, skips: Iterable[str] = ()) -> list[ResolvedFile]:
    """Every file of input ``source`` in ``directories`` that a restate recomputes them from, sorted by path.

    A consumer input passes its ``consumer`` and pending ``plan`` (None: what it has delivered, for a
    backfill); a manifest window, and a backfill of a table, pass the table ``version`` to read. ``skips``:
    paths ``trib consumer skip`` left out, left out here too.
    """
    files: list[ResolvedFile] = []
    if plan is not None and plan.versions is not None:
        version = plan.versions[1]
    if version is not None and source.table is not None:
        from tributary_read.read.resolve import partition_files

        files += partition_files(source.table, version, directories)
    if consumer is not None and (plan is None or plan.mode != "manifest"):  # a manifest plan has no ledger
        files += delivered_in(consumer, plan, directories)
    skipped = set(skips)
    return sorted((f for f in files if f.path not in skipped), key=lambda f: f.path)
