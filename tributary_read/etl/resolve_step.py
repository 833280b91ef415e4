"""Step 1, resolve: which files each input reads this run, and the record its commit will keep.

A consumer input gets its pending plan (the same plan a crashed run had, so a
rerun reads the same files); a window input resolves the schedule's window.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tributary_read.errors import InvalidInputError, UndeliveredDataError
from tributary_read.etl.job import InputMode, InputSpec
from tributary_read.etl.record import InputRecord
from tributary_read.etl.restate import is_restate
from tributary_read.etl.report import InputReport, Left
from tributary_read.read import min_age

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.etl.run import _Run


def resolve(run: _Run) -> list[tuple[Any, Any]]:
    """``(fileset, plan)`` per input, in the job's order; appends each input's report to ``run.inputs``."""
    out = []
    run.recompute = None
    for spec in run.job.inputs:
        try:
            out.append(_resolve_one(run, spec))
        except UndeliveredDataError as e:  # the opt-out is a key of the job file here
            raise type(e)(f"input {spec.view}: " + e.reword(
                {"allow_untracked": "allow_untracked = true in its [[inputs]]",
                 "allow_beyond_horizon": "allow_beyond_horizon = true in its [[inputs]]",
                 "allow_changed": "allow_changed = true in its [[inputs]]"})) from None
        except InvalidInputError as e:  # a consumer another job owns, a restated input: name the key that fixes it
            raise type(e)(f"input {spec.view}: " + e.reword(
                {"consumer": "consumer = \"...\" of its own in its [[inputs]]",
                 "restated": "say restated = \"read\" in its [[inputs]] to read their new files as new rows"}
            )) from None
    if is_restate(run.job):  # the output partitions the new input touches, and their complete input
        from tributary_read.etl.restate import recompute

        run.recompute = recompute(run, out)
    return out


def _resolve_one(run: _Run, spec: InputSpec):
    from tributary_read.read.selection import ReadRequest, select

    src = spec.source()
    if spec.mode is InputMode.CONSUMER:
        held = next((r for r in run.recovered if r.view == spec.view and r.would_ack), None)
        if held is not None:  # dry run: that plan is acked first, and the next one made only then
            run.inputs.append(InputReport(
                spec.view, src.uri, str(spec.mode), 0, 0, consumer=spec.consumer, note=(
                    f"pending plan {held.plan_id} was committed by the run of {held.schedule_time}: "
                    "the run acks it first, then plans what arrived since")))
            return _empty_fileset(src), None
        window = None
        request = ReadRequest(mode=spec.tracking, consumer=spec.consumer, state_dir=spec.state_dir,
                              lookback_ms=spec.lookback_ms, min_age_ms=spec.min_age_ms,
                              full_scan_every_ms=spec.full_scan_every_ms, allow_untracked=spec.allow_untracked,
                              owner={"job": run.job.name, "output": run.output.uri},
                              initial_position=spec.initial_position,
                              # a restate job recomputes what a changed file (or a partition changed beyond the
                              # horizon) feeds from the files as they are now: nothing is held back
                              allow_beyond_horizon=spec.allow_beyond_horizon or is_restate(run.job),
                              allow_changed=spec.allow_changed or is_restate(run.job),
                              max_files=spec.max_files, restatements=_takes_restatements(run, spec))
    else:
        window = run.window(spec)
        request = ReadRequest(mode=str(spec.mode), window=window, allow_untracked=spec.allow_untracked,
                              restatements=_takes_restatements(run, spec))
    chosen = select(src, request, options=spec.storage_options)
    fs, plan = chosen.fileset, chosen.plan
    skips: tuple[str, ...] = ()
    if plan is not None:  # files `trib consumer skip` left out of the plan: read the rest, ack it whole
        from tributary_read.read.consumer import Consumer

        skips = Consumer(src, spec.consumer, spec.state_dir, spec.storage_options).skipped(plan)
        if skips:
            fs = replace(fs, files=tuple(f for f in fs.files if f.path not in skips))
            run.say(f"input {spec.view}: {len(skips)} planned file(s) skipped by `trib consumer skip` "
                    f"(e.g. {skips[0]}): not read, acked with plan {plan.plan_id}")
    if spec.layout is not None and hasattr(fs, "layout") and getattr(fs, "layout", None) is None:
        fs = replace(fs, layout=spec.layout)
    run.inputs.append(InputReport(
        spec.view, fs.root, str(spec.mode), len(fs.files), fs.bytes,
        records=_known_records(fs.files), consumer=spec.consumer if plan is not None else None,
        plan_id=plan.plan_id if plan is not None else None,
        window=window.to_json() if window is not None else None,
        late_files=tuple(_late(run, src.layout, fs.files)),
        beyond_horizon=tuple(b.path for b in plan.beyond_horizon) if plan is not None else (),
        skipped=len(fs.skipped), paths=tuple(f.path for f in fs.files),
        untracked=fs.untracked.to_json() if fs.untracked is not None else None,
        left=left_of(fs, plan, skips, is_restate(run.job)),
        backlog=plan.stats.get("backlog") if plan is not None else None, skips=skips,
        deferred=plan.deferred if plan is not None else 0))
    if fs.untracked is not None:
        run.say(f"input {spec.view}: {fs.untracked.message()}")
    if plan is not None and plan.deferred:  # never a silent "0 files" (tributary_read.read.min_age)
        run.say(f"input {spec.view}: {min_age.note(plan.deferred, plan.min_age_ms)}")
    if plan is not None and plan.conflicts and is_restate(run.job):
        c = plan.conflicts[0]
        run.say(f"input {spec.view}: {len(plan.conflicts)} delivered files changed since (e.g. {c.path}: "
                f"{c.reason}): the output partitions they feed are recomputed")
    elif plan is not None and plan.conflicts:
        c = plan.conflicts[0]
        run.say(f"warning: input {spec.view}: {len(plan.conflicts)} delivered files changed since and are not "
                f"read again (allow_changed = true; e.g. {c.path}: {c.reason})")
    if plan is not None and plan.beyond_horizon and is_restate(run.job):
        run.say(f"input {spec.view}: {len(plan.beyond_horizon)} files of partitions that changed beyond the lookback "
                f"horizon (e.g. {plan.beyond_horizon[0].path}): the output partitions they feed are recomputed")
    elif plan is not None and plan.beyond_horizon:
        run.say(f"warning: input {spec.view}: {len(plan.beyond_horizon)} files of partitions that changed beyond "
                f"the lookback horizon are not read (allow_beyond_horizon; e.g. {plan.beyond_horizon[0].path})")
    return fs, plan


def _takes_restatements(run: _Run, spec: InputSpec) -> bool:
    """Whether the input's restated partitions are read: a restate job recomputes what they feed; an append
    job reads their new files as new rows only where the input says ``restated = "read"``."""
    return is_restate(run.job) or spec.restated == "read"


def left_of(fs, plan, skips: tuple[str, ...] = (), restate: bool = False) -> tuple[Left, ...]:
    """What an input saw and did not read this run, and why: the report names it, never silence.

    ``restate``: the run recomputes what changed files feed from them as they are now: none is left.
    """

    out = []
    if skips:
        out.append(Left(len(skips), "of the plan were skipped with `trib consumer skip` (missing or unreadable)",
                        False, skips[0]))
    if plan is not None:
        if plan.deferred:
            out.append(Left(plan.deferred, min_age.why(plan.min_age_ms), True))
        held = int(plan.stats.get("held_files", 0))
        if held:
            out.append(Left(held, "end in a line still being written; their complete lines were read", True))
        backlog = plan.stats.get("backlog")
        if backlog and backlog["files"]:
            out.append(Left(backlog["files"], f"({backlog['bytes']} bytes in {backlog['partitions']} partitions) "
                            "are past max_files: the oldest partitions are read first", True,
                            backlog["oldest_partition"]))
        if plan.conflicts and not restate:
            out.append(Left(len(plan.conflicts), "changed after an earlier run read them, acknowledged by "
                            "allow_changed", False, plan.conflicts[0].path))
        if plan.beyond_horizon and not restate:
            out.append(Left(len(plan.beyond_horizon), "lie in partitions that changed past the lookback, "
                            "acknowledged by allow_beyond_horizon", False, plan.beyond_horizon[0].path))
        if plan.held:
            out.append(Left(sum(len(h.changes) for h in plan.held), f"changed after an earlier run read them, in "
                            f"{len(plan.held)} partition(s) held back until `trib consumer replay` (their other "
                            "files wait too; the run exits 17)", False, plan.held[0].path))
    if fs.untracked is not None and fs.untracked.unit == "files":
        out.append(Left(fs.untracked.count, "were written by other tools and are not tracked by the manifest, "
                        "allowed by allow_untracked", False, (fs.untracked.examples or (None,))[0]))
    if fs.skipped:
        out.append(Left(len(fs.skipped), f"cannot be read as the layout says ({fs.skipped[0].reason})", False,
                        fs.skipped[0].path))
    return tuple(out)


def _late(run: _Run, layout, files) -> list[str]:
    """Files whose partition ended before this run's period began: data arriving late."""
    if layout is None:
        return []
    start = run.t - run.job.period_ms
    late = []
    for f in files:
        d = f.path.rpartition("/")[0]
        p = layout.try_parse(d) if d else None
        if p is not None and p.end_ms <= start:
            late.append(f.path)
    return late


def record(run: _Run, spec: InputSpec, fs, plan) -> InputRecord:
    """What the commit's transaction meta keeps of an input (what a rerun needs to ack it)."""
    if plan is not None:
        skips = next((r.skips for r in run.inputs if r.view == spec.view), ())
        return InputRecord(spec.view, fs.root, str(spec.mode), len(fs.files), spec.consumer, plan.plan_id,
                           spec.state_dir or None, skipped=skips)
    window = None
    if spec.mode is not InputMode.CONSUMER:
        w = run.window(spec)
        window = (w.start_ms, w.end_ms)
    return InputRecord(spec.view, fs.root, str(spec.mode), len(fs.files), window=window)


def _empty_fileset(src):
    from tributary_read.read.fileset import FileSet, origin

    return FileSet("consumer", (), {}, **origin(src.storage, src.table, src.layout))


def _known_records(files) -> int | None:
    """The records of a file list when every file's count is known (manifest entries), else None."""
    total = 0
    for f in files:
        if f.records is None:
            return None
        total += f.records
    return total
