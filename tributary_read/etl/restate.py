"""A restate job (``[output] mode = "restate"``): is recomputing a partition exact for this job?

A restate run recomputes each output partition its new input touches from that partition's
complete input, and replaces it whole (tributary_read/table/restatement.py). That is exact only
when trib can name, for an output partition, every input file that can hold its records: each
input must be laid out by event time and read as a stream of files trib keeps account of. This
module decides that once, for ``trib etl check`` and for every run (which refuses before it
resolves anything), so the two cannot disagree.

* A consumer or manifest input: the files a run has not read yet, exactly. An ``mtime`` window
  picks files by arrival, and a file that lands in an older partition after its window is never
  offered again, so the partition it feeds would never be recomputed: refused.
* A trib table is laid out by event time (its writers route each record by its time). A plain
  directory is, once the job declares its ``layout``; without one trib cannot tell which files
  feed which partition: refused. A layout that is really by arrival time is caught at run time:
  a row whose time lies outside the partitions the run recomputes refuses the run, nothing
  committed (``restatement.check_rows``).
* On a local file system the output's storage must swap two directories in one step, so that a
  directory reader (Hive, Spark over partitions) never sees a restated partition's old and new files
  together (``restatement.check_storage``, which asks the file system once). A store that cannot
  (S3, HDFS) moves a restated partition into a new directory and its Hive location there
  (table/restate_swap.py): Hive and trib's readers see it whole, a plain directory reader of the
  table's root keeps seeing the old partition. Such a job must keep a ``[hive]`` table.
* A partition holding other tools' data, or reached through a symbolic link, is not recomputed: the
  swap would hide their files, or exchange the link (``restate_swap.obstacle``). A scheduled run holds
  it back, commits the rest and ends with exit 17; its commit records the partition, so every later run
  recomputes it once the obstacle is gone, although the input that touched it was acked
  (:func:`owed`). A backfill refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from tributary_read.errors import InvalidInputError
from tributary_read.etl.spec import InputMode, InputSpec, OutputMode
from tributary_read.table.layout import PartitionDir
from tributary_read.table.restate_swap import Obstacle, logical_dir

#: What every refusal ends with: the way that needs none of this.
_OR_APPEND = 'or keep mode = "append" (the default) for SQL that maps rows to rows'


def is_restate(job) -> bool:
    """Whether ``job`` restates partitions (``[output] mode = "restate"``)."""
    return job.output.mode is OutputMode.RESTATE


def input_layout(spec: InputSpec):
    """The event-time layout of input ``spec``: its trib table's, else the job's ``layout`` for a plain
    directory (None: it has none)."""
    return spec.source().layout


def check(job, output=None) -> None:
    """Refuse a restate job whose output partitions trib cannot recompute exactly (one line, exit 3).

    ``output``: the output table, when the caller has it loaded. An append job passes unchecked.
    """
    if not is_restate(job):
        return
    for i, spec in enumerate(job.inputs):
        where = f"{job.path or job.name}: inputs[{i}] ({spec.view})"
        if spec.mode is InputMode.MTIME:
            raise InvalidInputError(
                f"{where} is an mtime window, which picks files by arrival: a file that lands in an older "
                "partition after its window is never read again, so the output partition it feeds would stay "
                'wrong; a restate job reads mode = "consumer" (or "manifest" on a trib table) inputs, '
                f"{_OR_APPEND}")
        if input_layout(spec) is None:
            raise InvalidInputError(
                f"{where} is a plain directory with no layout, so trib cannot tell which of its files feed "
                "which output partition: give the input's layout (its directories by event time, e.g. "
                f'layout = "yyyy_MM_dd/HH"), {_OR_APPEND}')
    if output is None:
        from tributary_read.table.config import Table

        output = Table.load(job.output.root, job.output.storage_options)
    from tributary_read.table.restate_swap import moves
    from tributary_read.table.restatement import check_storage

    by = str(job.output.restate_by) if job.output.restate_by is not None else None
    check_storage(output.storage, by)
    if moves(output.storage, by) and job.hive is None:
        why, out = (('restate_by = "move"', 'drop restate_by = "move"') if by == "move" else
                    ("it cannot swap directories", "put the output on a local file system"))
        raise InvalidInputError(
            f"{job.path or job.name}: output {output.uri}: a restate moves each recomputed partition into a new "
            f"directory ({why}), which only Hive (its location moved by the sync) and trib's readers follow, so "
            f"other directory readers would see stale partitions: add a [hive] section, {out}, {_OR_APPEND}")


@dataclass(frozen=True)
class Recompute:
    """What a restate run recomputes: the output partitions its new input touches, and what it reads for them."""

    #: output partition directory -> its partition, in time order
    partitions: Mapping[str, PartitionDir]
    #: per input, in the job's order: its partition directories with new (or changed) files
    touched: tuple[tuple[str, ...], ...]
    #: per input: ``(fileset, plan)``, the fileset holding the complete input of ``partitions``
    filesets: tuple
    #: output partition directory -> per input, in the job's order: ``(paths, directories)``, the new or
    #: changed files (relative to the input's root) that feed it, and the input partitions the input's own
    #: restates recomputed that feed it; what the run report names as each restated partition's cause
    #: (tributary_read/etl/restated.py). Empty for a backfill: no file caused it.
    causes: Mapping[str, tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]] = field(default_factory=dict)
    #: output partitions held back for what lies in them (:func:`obstacles`): the commit records them for
    #: the next run (:func:`owed`)
    held: tuple[str, ...] = ()
    #: output partitions recomputed because the job's last run held them back (:func:`owed`)
    owed: tuple[str, ...] = ()


def touched_dirs(layout, files, restated=()) -> dict[str, PartitionDir]:
    """The partitions of ``layout`` that ``files`` (new, or changed since delivered) lie in, and the
    directories an input's own restates recomputed (``restated``: one emptied has no file left)."""
    out: dict[str, PartitionDir] = {d: layout.parse(d) for d in restated}
    for f in files:
        d = logical_dir(f.path)
        if d in out:
            continue
        p = layout.try_parse(d)
        if p is None:  # a reader never returns such a file; if one did, its partition is unknown: refuse
            raise InvalidInputError(f"{f.path} lies in no partition of the layout {layout.directory!r}, so the "
                                    "output partition it feeds is unknown; nothing was committed")
        out[d] = p
    return out


def recompute(run, filesets) -> Recompute:
    """The output partitions that this run's new input touches, and each input's complete input for them.

    ``filesets``: the resolve step's ``(fileset, plan)`` per input (the new files). An input partition
    feeds every output partition whose span it intersects (table/restatement.py), and an output
    partition is recomputed from every input partition whose span intersects it, read whole
    (:func:`tributary_read.read.complete.complete_files`).
    """
    from tributary_read.table.restatement import affected, needed

    sources = _sources(run.job)
    touched = []
    causes: dict[str, list[tuple[list[str], list[str]]]] = {}
    for i, (src, (fs, plan)) in enumerate(zip(sources, filesets)):
        changed = [*fs.files, *((*plan.conflicts, *plan.beyond_horizon) if plan is not None else ())]
        upstream = fs.stats.get("restated", ())
        touched.append(touched_dirs(src.layout, changed, upstream))
        by_dir: dict[str, list[str]] = {}
        for f in changed:
            by_dir.setdefault(logical_dir(f.path), []).append(f.path)
        for d, p in touched[-1].items():
            for o in affected(run.output.layout, [p]):
                paths, dirs = causes.setdefault(o, [([], []) for _ in sources])[i]
                paths.extend(by_dir.get(d, ()))
                if d in upstream:
                    dirs.append(d)
    late = owed(run)
    partitions = affected(run.output.layout, [*(p for t in touched for p in t.values()), *late.values()])
    blocked = obstacles(run.output, partitions)
    if blocked:  # held back before any work, the rest recomputed; the commit records them for the next run
        run.held.extend(_held_lines(blocked, "held back, the rest committed", "and the next run recomputes it"))
        partitions = {d: p for d, p in partitions.items() if d not in blocked}
    completes = [_complete(spec, src, partitions, plan, rep.skips)
                 for spec, src, (fs, plan), rep in zip(run.job.inputs, sources, filesets, run.inputs)]
    forgotten = _forgotten(run, sources, filesets, partitions, completes)
    if forgotten:  # held back, the rest recomputed: the run ends with exit 17 naming them (run_job)
        run.held.extend(forgotten.values())
        partitions = {d: p for d, p in partitions.items() if d not in forgotten}
        keep = [set(needed(src.layout, partitions.values())) for src in sources]
        completes = [[f for f in files if logical_dir(f.path) in k] for k, files in zip(keep, completes)]
    out = [(replace(fs, files=tuple(files)), plan) for (fs, plan), files in zip(filesets, completes)]
    return Recompute(partitions, tuple(tuple(t) for t in touched), tuple(out),
                     {o: tuple((tuple(p), tuple(d)) for p, d in c) for o, c in causes.items()}, tuple(blocked),
                     tuple(d for d in late if d in partitions))


def owed(run) -> dict[str, PartitionDir]:
    """The output partitions the job's last scheduled run held back for what lay in them (other tools' files,
    a symbolic link): recomputed by this run, as the input that touched them was acked with that run's plan."""
    from tributary_read.etl.record import held_partitions

    last = run.output.log.last_transaction(run.job.app_id)
    held = held_partitions(last.transaction) if last is not None else ()
    return {d: p for d in held if (p := run.output.layout.try_parse(d)) is not None}


def obstacles(output, partitions: Mapping[str, PartitionDir]) -> dict[str, Obstacle]:
    """The partitions among ``partitions`` of ``output`` that cannot be restated now, each with its
    :class:`~tributary_read.table.restate_swap.Obstacle`. The output's state is read only when a name
    found there is not one trib's writers give (a committed file is trib's whatever its name)."""
    from tributary_read.table.restate_swap import names_by_dir, obstacle

    found = {d: o for d in partitions if (o := obstacle(output.storage, d)) is not None}
    if any(o.names for o in found.values()):
        committed = names_by_dir(output.log.state().files.values())
        again = {d: o if o.link else obstacle(output.storage, d, committed.get(d, ())) for d, o in found.items()}
        found = {d: o for d, o in again.items() if o is not None}
    return found


def _held_lines(blocked: Mapping[str, Obstacle], done: str, then: str) -> list[str]:
    """One line per kind of obstacle, naming its partitions (the first few) and the way out."""
    from tributary_read.table.restatement import named

    foreign = [o.describe() for o in blocked.values() if not o.link]
    linked = [o.describe() for o in blocked.values() if o.link]
    out = []
    if foreign:
        out.append(f"files trib did not write lie in output partition {named(foreign)}, and a restate's directory "
                   f"swap would hide them from directory readers: {done}; move them out of the table {then}")
    if linked:
        out.append(f"output partition {named(linked)}, so a restate's directory swap would exchange the link, not "
                   f"the data: {done}; make it a real directory {then}")
    return out


def _forgotten(run, sources, filesets, partitions, completes) -> dict[str, str]:
    """Output partitions to hold back, each with the line that says why: it holds records, yet none of its
    input was delivered before this run and the consumers saw nothing of it change or go.

    Its records then came from input files the consumers no longer know: a partition past the lookback
    that an input's retention emptied (the consumer forgets it) and that a late file reached since.
    Recomputing it from the late file alone would drop them without a word. A consumer's first plan, and
    a window input, have nothing to compare with: not judged. The output's state is read only when some
    partition is in doubt.
    """
    from tributary_read.table.restatement import needed

    def known(p) -> bool:
        for src, (fs, plan), files in zip(sources, filesets, completes):
            if plan is None or plan.base_version == 0:
                return True
            feed = needed(src.layout, [p])
            new = {f.path for f in fs.files if not f.offset}  # a file that grew was delivered before
            seen = {logical_dir(c.path) for c in (*plan.conflicts, *plan.beyond_horizon)}
            if any(logical_dir(f.path) in feed and f.path not in new for f in files) or (
                    (seen | set(fs.stats.get("restated", ()))) & set(feed)):
                return True
        return False

    doubtful = [d for d, p in partitions.items() if not known(p)]
    held = _records_by_partition(run.output) if doubtful else {}
    job = run.job.path or run.job.name
    return {d: (f"output partition {d} holds {held[d]} record(s) computed from input files that are no longer "
                "there (an input's retention removed them?), and this run would recompute it from its new "
                "files alone: held back, the rest committed; restore those input files and the next run "
                "recomputes it from all of them, losing nothing (to drop what the removed files gave instead, "
                f"knowingly: trib etl run {job} --restate {d} replaces its {held[d]} record(s) with what the "
                "input holds now)")
            for d in doubtful if held.get(d)}


def _records_by_partition(output) -> dict[str, int]:
    """The records each partition of ``output`` holds now, by directory (a partition absent holds none)."""
    out: dict[str, int] = {}
    for f in output.log.state().files.values():
        d = logical_dir(f.path)
        out[d] = out.get(d, 0) + (f.records or 0)
    return out


def recompute_all(run, partitions: Mapping[str, PartitionDir], drop_removed: bool = False) -> Recompute:
    """A backfill's recompute of ``partitions`` (tributary_read/etl/backfill.py): each input's complete input
    for them as it stands, with no plan.

    Refused, nothing committed, where it would drop records without a word: a partition that holds records
    and would be recomputed from no input file at all (an input's retention removed it, or the interval
    lies before it); and, unless ``drop_removed``, one that holds records while some of its input that the
    inputs still know of is gone (:func:`_removed`: a file the consumer delivered, or one a trib table
    expired). Input that nothing remembers any more (a consumer that forgot a partition retention emptied)
    cannot be told from input that never was (docs/etl.md).
    """
    from tributary_read.read.fileset import FileSet, origin
    from tributary_read.table.restatement import affected, named

    blocked = obstacles(run.output, partitions)
    if blocked:
        raise InvalidInputError("; ".join(_held_lines(blocked, "nothing was committed", "and run the backfill again")))
    sources = _sources(run.job)
    out = []
    fed: set[str] = set()
    gone: dict[str, set[str]] = {}  # output partition -> its input files that are gone
    for spec, src in zip(run.job.inputs, sources):
        files = _complete(spec, src, partitions, None)
        removed = _removed(src, partitions, files)
        files = [f for f in files if f.path not in removed]  # never handed to Spark: it could not read them
        for path in removed:
            for o in affected(run.output.layout, [src.layout.parse(logical_dir(path))]):
                gone.setdefault(o, set()).add(path)
        for d in touched_dirs(src.layout, files).values():
            fed.update(affected(run.output.layout, [d]))
        out.append((FileSet("restate", tuple(files), **origin(src.storage, src.table, src.layout)), None))
    holding = _records_by_partition(run.output)
    held = [d for d in partitions if d not in fed and holding.get(d)]
    if held:
        raise InvalidInputError(
            f"no input file feeds {named(held)} of {run.output.uri} any more, which hold records: "
            "recomputing would empty them (an input's retention removed their files?); nothing was committed: "
            "give an interval whose input is still there")
    partial = [d for d in partitions if gone.get(d) and holding.get(d)]
    if partial and not drop_removed:
        records, lost = sum(holding[d] for d in partial), len(set().union(*(gone[d] for d in partial)))
        raise InvalidInputError(
            f"{named(partial)} of {run.output.uri} hold {records} record(s) computed in part from {lost} input "
            "file(s) that are gone now (an input's retention removed them?): recomputed from the rest they would "
            "lose what those files gave; nothing was committed: restore the files and rerun, "
            "or, to recompute them from the rest knowingly, say so by dropping the removed input",
            drop_removed_input="dropping the removed input")
    return Recompute(dict(partitions), tuple(() for _ in sources), tuple(out))


def _removed(src, partitions: Mapping[str, PartitionDir], files) -> set[str]:
    """The input files of ``partitions`` that ``src`` still knows of and that are gone: of ``files`` (what the
    consumer delivered there), those no longer on storage; and the files a trib table's ``trib expire``
    removed there (its state remembers them for 30 days)."""
    from tributary_read.table.restatement import needed

    state = src.table.log.state() if src.table is not None else None
    by_dir: dict[str, set[str]] = {}
    for f in files:
        if state is None or f.path not in state.files:  # a table's live files are its log's, not a listing's
            by_dir.setdefault(logical_dir(f.path), set()).add(f.path)
    out: set[str] = set()
    for d, paths in by_dir.items():  # one listing per directory, not one request per file
        out |= paths - {i.path for i in src.storage.list(d, recursive=False)}
    if state is not None:
        need = needed(src.layout, partitions.values())
        out |= {p for p, r in state.removed.items() if r.by is None and r.restated is None and logical_dir(p) in need}
    return out


def _sources(job) -> list:
    return [s.source() for s in job.inputs]


def _complete(spec: InputSpec, src, partitions: Mapping[str, PartitionDir], plan, skips=()) -> list:
    """Input ``spec``'s complete input for output ``partitions``: with the run's ``plan`` (a consumer), as
    delivered once it is acked; without, as the consumer has delivered it, or a table's latest version."""
    from tributary_read.read.complete import complete_files
    from tributary_read.read.consumer import Consumer
    from tributary_read.table.restatement import needed

    need = needed(src.layout, partitions.values())
    consumer = Consumer(src, spec.consumer, spec.state_dir, spec.storage_options) if spec.consumer else None
    version = src.table.log.latest_version() if plan is None and src.table is not None else None
    return complete_files(src, need, consumer=consumer, plan=plan, version=version, skips=skips)
