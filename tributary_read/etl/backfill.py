"""``trib etl run JOB --restate START/END``: recompute a restate job's output partitions on demand.

After a fix to the SQL, a backfill recomputes every output partition that the interval of event time
covers, from the complete input of each (tributary_read/etl/restate.py), as one restate commit, and
mounts them in Hive. Downstream restate jobs see the restate like any other and recompute what it feeds.

It reads what the job's inputs hold now, and moves no consumer: a plan pending for the next scheduled
run stays pending, and the files it names are read by that run, which restates their partitions again.
A listing input gives the files its consumer has delivered (a file not delivered yet may still be
being written); a trib table gives its latest version.

Its transaction is its own (``etl-restate:JOB``), with the interval and the call's time as offsets:
each call commits once (a second call after another fix recomputes again), and a scheduled run's
recovery, which reads the job's last scheduled commit, never takes it for one. It holds the job's
lock, so it never overlaps a scheduled run. It sends the OpenLineage events a scheduled run sends, as a
run of its own (tributary_read/etl/lineage_step.py).
"""

from __future__ import annotations

import time
from typing import Callable

from tributary_read.errors import InvalidInputError
from tributary_read.etl.record import backfill_transaction
from tributary_read.etl.report import InputReport, RunReport
from tributary_read.etl.restated import restated


def parse_interval(text: str, layout) -> tuple[int, int]:
    """``START/END`` (two instants: ISO 8601 with an offset, or epoch ms), or one partition of the output
    (its directory, ``2026_11_28/06``, or its value, ``dt=2026112806``): ``[start_ms, end_ms)``."""
    from tributary_read.read.window import parse_instant

    text = text.strip()
    words = "the restate interval"  # the CLI's --restate (cli/flags.py)
    if "/" in text and not layout.try_parse(text):
        a, _, b = text.partition("/")
        try:
            start, end = (parse_instant(x.strip(), layout.tz, what) for x, what in ((a, "its start"), (b, "its end")))
        except InvalidInputError as e:
            raise InvalidInputError(f"{words} {text!r}: {e}", restate_interval=words) from None
        if start >= end:
            raise InvalidInputError(f"{words} {text!r}: the start must be before the end", restate_interval=words)
        return start, end
    p = layout.try_parse(text) or _by_value(layout, text)
    if p is None:
        raise InvalidInputError(f"{words} {text!r}: give START/END (ISO 8601 with an offset, or epoch ms) or one "
                                f"partition of the output, as its directory ({layout.directory}) or its value ({layout.partition})",
                                restate_interval=words)
    return p.start_ms, p.end_ms


def _by_value(layout, text: str):
    """The partition whose value spec (``dt=2026112806``) is ``text``, or None."""
    from tributary_read.table.layout import PartitionMapper

    key, sep, value = text.partition("=")
    if not sep:
        return None
    d = PartitionMapper(layout).directory({key.strip(): value.strip()})
    return layout.try_parse(d) if d is not None else None


def backfill(job, interval: str, *, spark=None, progress: Callable[[str], None] | None = None,
             verbose: bool = False, drop_removed_input: bool = False) -> RunReport:
    """Recompute the output partitions of restate job ``job`` that ``interval`` covers (module docstring).

    ``drop_removed_input``: recompute a partition some of whose input is gone (retention) from the rest,
    knowingly; else it is refused (:func:`~tributary_read.etl.restate.recompute_all`)."""
    from tributary_read.etl import lineage_step, restate
    from tributary_read.etl.lock import JobLock, lock_path
    from tributary_read.etl.run import _release, _Run
    from tributary_read.table.config import Table
    from tributary_read.table.restatement import covering

    job.needs("run")
    if not restate.is_restate(job):
        raise InvalidInputError(f"a backfill recomputes the partitions of a restate job; job {job.name} appends: "
                                'set [output] mode = "restate" (its next runs then recompute what late data touches)')
    if spark is None:
        from tributary_read.etl.remote import check

        check(job)
    output = Table.load(job.output.root, job.output.storage_options)
    restate.check(job, output)
    start, end = parse_interval(interval, output.layout)
    partitions = {p.path: p for p in covering(output.layout, start, end)}
    now = int(time.time() * 1000)
    run = _Run(job, now, now, output, spark, False, progress or (lambda _msg: None))
    run.verbose, run.backfill = verbose, (start, end)
    try:
        with JobLock(lock_path(job.name, output, job.lock_dir), job.name) as run.lock, lineage_step.failing(run):
            return _execute(run, start, end, partitions, drop_removed_input)
    finally:
        if spark is None:
            _release(run.spark)


def _execute(run, start: int, end: int, partitions, drop_removed: bool) -> RunReport:
    from dataclasses import replace

    from tributary_read.etl import commit_step, hive_step, lineage_step, restate, sync_step
    from tributary_read.etl.runs import count_restated

    job = run.job
    base = run.output.log.latest_version()
    run.say(f"{job.name}: recomputing {len(partitions)} partition(s) of {run.output.uri} "
            f"({next(iter(partitions))} .. {list(partitions)[-1]})")
    run.recompute = run._step("resolve", lambda: restate.recompute_all(run, partitions, drop_removed))
    filesets = list(run.recompute.filesets)
    run.inputs = [InputReport(spec.view, fs.root, str(spec.mode), len(fs.files), fs.bytes,
                              paths=tuple(f.path for f in fs.files))
                  for spec, (fs, _) in zip(job.inputs, filesets)]
    txn = backfill_transaction(job.name, start, end, run.t)
    lineage_step.started(run)
    if all(not fs.files for fs, _ in filesets):  # no input, and no partition holding records (recompute_all)
        for s in ("read", "commit", "sync", "ack"):
            run._skip(s, "no input file feeds these partitions, and none of them holds records: nothing to do")
        lineage_step.completed_without_commit(run)
        return run._report(txn, False, None)
    run._step("read", lambda: commit_step.read(run, filesets, False))
    if job.hive is not None:
        run.hive_table = hive_step.before_commit(run, filesets, False)
    lineage_step.keep(run)  # what a backfill killed after its commit leaves for the next one to send
    result = run._step("commit", lambda: commit_step.commit(run, txn, base, False, filesets))
    run.out = replace(run.out, files=len(result.files), records=result.records,
                      partitions=tuple(sorted(result.partitions)), version=result.version,
                      restated=restated(result.commit))
    count_restated(run.output, job.name, result.version, run.out.restated)  # trib metrics' restated totals
    if job.hive is not None:
        created = hive_step.after_commit(run, result.version, run.hive_table)
        run.hive = run._step("sync", lambda: sync_step.sync(run, result.commit, created))
    else:
        run._skip("sync", "no [hive] section")
    run._skip("ack", "a backfill moves no consumer")
    from tributary_read.iceberg.auto import after_commit

    run.iceberg = after_commit(run.output, result.version)  # a restate: one overwrite snapshot in the mirror
    lineage_step.completed(run)
    return run._report(txn, False, result.version)
