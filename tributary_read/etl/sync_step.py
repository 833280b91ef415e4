"""Step 4, sync: make the Hive table show what the run's commit holds.

Every run mounts the partitions of its commit (or, for a rerun, of the commit
it found in the log), the mechanism ``trib ingest`` uses
(:func:`~tributary_read.hive.commit.mount_commit`): its cost follows what the
commit touched, not the table, so an hourly job's sync stays flat as the table
grows by a partition an hour. New partitions are added; ones that received late
rows get their statistics refreshed. The full sync (list the table, list the
metastore, plan, apply) remains for ``trib partitions sync`` and for the runs
that ask for it: ``--full-sync``, or ``[hive] full_sync_every`` (the runs whose
schedule time falls on a multiple of it, in the job's time zone), which catches
what a commit cannot tell (directories removed or written by hand).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tributary_read.etl.report import HiveReport
from tributary_read.faults import crash_point

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.etl.job import Job
    from tributary_read.etl.run import _Run
    from tributary_read.table.manifest import Commit


def wants_full_sync(job: Job, schedule_ms: int, forced: bool) -> bool:
    """A full sync for this run: asked for, or the schedule time falls on ``full_sync_every``."""
    every = job.hive.full_sync_every if job.hive is not None else None
    if forced or not every:
        return forced
    from tributary_read.read.window import Schedule

    return Schedule(every, tz=job.tz).run_time(schedule_ms) == schedule_ms


def sync(run: _Run, commit: Commit, full: bool) -> HiveReport:
    """Mount ``commit``'s partitions (or, ``full``, sync the whole table) into the job's Hive table."""
    from tributary_read.hive.metastore import open_metastore

    h = run.job.hive
    batch_size, location_base = _mount_options(run.job, run.output)
    from tributary_read.etl.commit_step import session

    ms = open_metastore(h.metastore_uri, spark=session(run) if run.job.catalog else None)
    during = lambda step: crash_point("etl.during_sync") if step == "add" else None  # noqa: E731
    with ms:
        if full:
            return _full(run, ms, batch_size, location_base, during)
        return _mount(run.job, run.output, ms, commit, batch_size, location_base, during)


def mount_commit_of(job: Job, output, commit: Commit, spark=None) -> HiveReport:
    """Mount ``commit``'s partitions into ``job``'s ``[hive]`` table: the sync of ``trib etl stream``'s batches."""
    from tributary_read.hive.metastore import open_metastore

    h = job.hive
    assert h is not None
    with open_metastore(h.metastore_uri, spark=spark) as ms:
        return _mount(job, output, ms, commit, *_mount_options(job, output), None)


def _mount_options(job: Job, output) -> tuple:
    """(batch_size, location_base) of the job's mounts: its ``[hive]``, else the output's partition commit."""
    h = job.hive
    assert h is not None
    pc = output.config.partition_commit or {}
    return h.batch_size or pc.get("batch_size"), h.location_base or pc.get("location_base")


def _mount(job: Job, output, ms, commit: Commit, batch_size, location_base, after_step) -> HiveReport:
    from tributary_read.hive.commit import mount_commit, partitions_of_commit
    from tributary_read.hive.model import TableName

    h = job.hive
    assert h is not None
    parts = partitions_of_commit(output, commit)
    m = mount_commit(output, ms, TableName.parse(h.table), parts, batch_size=batch_size,
                     location_base=location_base, after_step=after_step)
    return HiveReport(h.table, ms.address, m.added, m.refreshed, m.relocated, m.statements, "commit")


def _full(run: _Run, ms, batch_size, location_base, after_step) -> HiveReport:
    from tributary_read.hive.sync import SyncOptions, sync as full_sync

    h = run.job.hive
    options = SyncOptions(batch_size=batch_size, location_base=location_base)
    result = full_sync(run.output, ms, h.table, options, state_dir=h.state_dir,
                       storage_options=run.job.output.storage_options, after_step=after_step)
    plan = result.plan
    if plan.refused:
        from tributary_read.errors import UnsafePlanError

        raise UnsafePlanError(plan.refused)
    return HiveReport(h.table, ms.address, tuple(e.partition for e in plan.add),
                      tuple(e.partition for e in plan.refresh), tuple(e.partition for e in plan.relocate),
                      result.statements, "full")
