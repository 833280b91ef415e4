"""One run of a job for one schedule time: resolve, read + SQL, commit, sync, ack.

The output's commit is the run's only point of no return. Its transaction is
``(etl:JOB, schedule_time_ms)``, and its meta records which consumer plans the
run read. Everything else follows from that:

* before the commit, a crash leaves nothing that matters: a consumer returns
  the same pending plan to the rerun, so it reads the same files (data files a
  crashed write left are orphans for ``trib clean``);
* a run that finds its transaction already committed skips to the sync and
  acks the plans recorded in the commit, never the plans it would make now;
* a later run first acks the plans a committed-but-unacked earlier run left
  pending (only the job's last commit can have any), so those files are never
  read twice, even when the crashed hour is never rerun.

Acks and Hive syncs are idempotent, so the steps after the commit simply run
again. Crash points (``tributary_read.faults``) mark each gap for kill -9 tests.

"Is this transaction committed?" is asked once, here, at the start
(:func:`find_commit`, with the log version it was asked at); the commit then
builds on that version, so a concurrent copy that commits in between is found
by the commit itself (:mod:`~tributary_read.etl.commit_step`). Each step lives
in its own module: resolve_step, commit_step (read + commit), sync_step, ack_step.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime
from typing import Any, Callable, Mapping

from tributary_read.errors import InvalidInputError
from tributary_read.etl import ack_step, commit_step, hive_step, lineage_step, resolve_step, sync_step
from tributary_read.etl.job import InputSpec, Job
from tributary_read.etl.lock import JobLock, lock_path
from tributary_read.etl.runs import recorded
from tributary_read.etl.record import SCHEDULE_KEY, InputRecord, RunRecord, find_commit, with_held
from tributary_read.etl.record import transaction_for as _transaction
from tributary_read.iceberg.auto import after_commit
from tributary_read.etl.report import STEPS, InputReport, OutputReport, RunReport, Step, iso_z
from tributary_read.etl.restated import restated
from tributary_read.faults import crash_point
from tributary_read.etl.schedule import (
    _instant_ms,
    check_interval,
    check_not_ahead,
    job_zones,
    schedule_time_ms,
    window_for,
)
from tributary_read.read.window import TimeWindow
from tributary_read.table.manifest import Transaction

__all__ = ["SCHEDULE_KEY", "check_interval", "check_not_ahead", "committed_run", "find_commit", "hive_table_definition", "iso_z", "job_zones",
           "recorded_inputs", "run_job",
           "schedule_time_ms", "transaction_for", "window_for"]

Progress = Callable[[str], None]


def transaction_for(job: Job, schedule_ms: int, inputs: RunRecord | Mapping[str, Mapping] | None = None
                    ) -> Transaction:
    """The run's transaction; ``inputs``: its record (or the record's dict form, view -> fields)."""
    record = inputs if isinstance(inputs, RunRecord) or inputs is None else RunRecord.from_json(inputs)
    return _transaction(job.app_id, schedule_ms, iso_z(schedule_ms), record)


# -- finding the transaction -------------------------------------------------------------
def committed_run(table, job_name: str, schedule_time: str | int | datetime):
    """The commit of job ``job_name``'s run for ``schedule_time`` in its output ``table``, or None.

    For a reader that has the output table and the job's name but not its file (a sensor waiting for
    the run): ``schedule_time`` must be the run's exact (aligned) time, as a scheduler's interval end is.
    """
    from tributary_read.etl.job import app_id

    ms = _instant_ms(schedule_time, None, "schedule_time", "schedule time")
    return find_commit(table, app_id(job_name), ms)


def recorded_inputs(t: Transaction | None) -> dict[str, dict]:
    """The ``inputs`` a run recorded in its transaction's meta, in their dict form (see :class:`RunRecord`)."""
    return RunRecord.of(t).to_json()


# -- the run -----------------------------------------------------------------------------
def run_job(job: Job, schedule_time: str | int | datetime, *, spark=None, dry_run: bool = False,
            progress: Progress | None = None, full_sync: bool = False, verbose: bool = False,
            interval_start: str | int | datetime | None = None) -> RunReport:
    """Run ``job`` for ``schedule_time`` (see the module docstring); ``dry_run`` resolves and reports only.

    ``spark``: an existing SparkSession (else one is built from the job's
    ``[spark]`` section when the run needs one). Runs of one job never
    overlap: a second concurrent run raises ConcurrentRunError. ``full_sync``:
    sync the whole Hive table, not only the commit's partitions (docs/etl.md). A consumer input whose
    plan held partitions back (a file it delivered there changed) is committed and acked without them;
    the run then raises PartitionsHeldError (exit 17) carrying the report. ``verbose``: keep
    Spark's task-failure traces on the console (``-v``); else a failed task ends in trib's one line.
    ``interval_start``: a scheduler's data interval starts here and ends at ``schedule_time``; the run is
    refused unless that is exactly one period (:func:`check_interval`).
    """
    job.needs("run")
    if spark is None:  # a job a Spark Connect server cannot run is refused before anything is resolved
        from tributary_read.etl.remote import check

        check(job)
    if interval_start is not None:
        check_interval(job, interval_start, schedule_time)
    aligned, given = schedule_time_ms(schedule_time, job)
    if not dry_run:
        check_not_ahead(job, aligned, int(time.time() * 1000))
    from tributary_read.table.config import Table

    output = Table.load(job.output.root, job.output.storage_options)
    from tributary_read.etl.restate import check as restatable

    restatable(job, output)  # a restate job trib cannot recompute exactly is refused before anything runs
    run = _Run(job, aligned, given, output, spark, dry_run, progress or (lambda _msg: None), full_sync)
    run.verbose = verbose
    try:
        if dry_run:  # reads only: it may watch a run in progress
            return run.execute()
        lock = run.lock = JobLock(lock_path(job.name, output, job.lock_dir), job.name)
        with lock, recorded(output, job.name, aligned) as e, lineage_step.failing(run):
            report = e.done(run.execute())
    finally:
        if spark is None:
            _release(run.spark)
    if run.held:  # committed and acked, the rest delivered: still its own exit code, every held partition named
        from tributary_read.errors import PartitionsHeldError

        raise PartitionsHeldError("; ".join(run.held), report=report)
    return report


def _release(spark) -> None:
    """End a Spark Connect session the run opened (a classic session ends with this process)."""
    from tributary_read.spark import is_connect

    if spark is not None and is_connect(spark):
        from tributary_read.spark.session import end_connect_session

        end_connect_session(spark)


def hive_table_definition(job: Job, schedule_time: str | int | datetime | None = None, *, spark=None):
    """The Hive table for ``job``'s output, its columns from the job's SQL (``trib hive create-table``).

    Once the output has commits, their recorded columns (what its files hold; no input needed, as for a
    table dropped later), unless ``schedule_time`` is given. Else the SQL is analysed over the views of
    a dry run at ``schedule_time`` (default: now): the files the next run would read (a consumer's
    unread files), or the inputs' ``schema``. Nothing is committed or acked; no file is read beyond
    what Spark's schema inference needs.
    """
    if job.hive is None:
        raise InvalidInputError(f"{job.path or job.name} has no [hive] section: name the Hive table")
    when = schedule_time if schedule_time is not None else int(time.time() * 1000)
    aligned, given = schedule_time_ms(when, job)
    from tributary_read.table.config import Table

    output = Table.load(job.output.root, job.output.storage_options)
    return hive_step.definition_from_sql(_Run(job, aligned, given, output, spark, True, lambda _msg: None),
                                         explicit=schedule_time is not None)


class _Run:
    """One run's state, shared by the step modules (each takes the run as its first argument)."""

    def __init__(self, job: Job, aligned: int, given: int, output, spark, dry_run: bool, progress: Progress,
                 full_sync: bool = False):
        self.job, self.t, self.given, self.output = job, aligned, given, output
        self.spark, self.dry_run, self.say, self.full_sync = spark, dry_run, progress, full_sync
        self.steps: list[Step] = []
        self.inputs: list[InputReport] = []
        self.input_columns: dict[str, list] = {}  # view -> its columns as Spark read them (lineage's schema)
        self.recovered: list = []
        self.acked: list = []
        self.held: list[str] = []  # one line per input whose acked plan held partitions back (ack_step)
        self.out = OutputReport(output.uri, job.output.time_column)
        self.hive = None
        self.hive_table = None  # the Hive table's check (dry run) or before the commit
        self.query_df = None  # the SQL, analysed over this run's views (commit_step.query)
        self.count_frames: list = []  # (input index, its DataFrame): inputs the write's job counts (commit_step)
        self.verbose = False
        self.lock: JobLock | None = None  # held while the run runs (not by a dry run)
        #: a restate job's partitions to recompute and their complete input (etl/restate.py; resolve_step)
        self.recompute = None
        #: a backfill's interval of event time, ``[start_ms, end_ms)`` (etl/backfill.py); None: a scheduled run
        self.backfill: tuple[int, int] | None = None
        self.iceberg = None  # what the output's Iceberg mirror did after the commit (iceberg.auto)

    def window(self, spec: InputSpec) -> TimeWindow:
        """A window input's window for this run (:func:`window_for`)."""
        return window_for(self.job, spec, self.t)

    def _step(self, name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        try:
            value = fn()
        except BaseException:
            self.steps.append(Step(name, "failed", time.perf_counter() - t0))
            raise
        self.steps.append(Step(name, "done", time.perf_counter() - t0))
        return value

    def _skip(self, name: str, reason: str) -> None:
        self.steps.append(Step(name, "skipped", 0.0, reason))

    def execute(self) -> RunReport:
        job = self.job
        when = iso_z(self.t)
        base = self.output.log.latest_version()  # the commit builds on the version the question was asked at
        committed = find_commit(self.output, job.app_id, self.t)
        if committed is not None:
            self.say(f"{job.name} @ {when}: already committed as version {committed.version}; "
                     "going on after the commit")
            record = RunRecord.of(committed.transaction)
            self._committed(committed, record)
            for s in ("resolve", "read", "commit"):
                self._skip(s, f"transaction already committed as version {committed.version}")
            txn, already = committed.transaction, True
        else:
            ack_step.recover(self)
            self.say(f"{job.name} @ {when}: resolving {len(job.inputs)} input(s)")
            filesets = self._step("resolve", lambda: resolve_step.resolve(self))
            record = RunRecord(tuple(resolve_step.record(self, spec, fs, plan)
                                     for spec, (fs, plan) in zip(job.inputs, filesets)))
            txn = transaction_for(job, self.t, record)
            if self.recompute is not None:  # partitions held back for what lies in them: the next run's to recompute
                txn = with_held(txn, self.recompute.held, self.recompute.owed)
            if self.dry_run:
                if job.hive is not None:  # what the real run would refuse, before it commits
                    self.hive_table = hive_step.check(self, filesets)
                if self.recompute is not None:  # the partitions the run would recompute
                    self.out = replace(self.out, partitions=tuple(self.recompute.partitions))
                return self._report(txn, False, None, dry=True)
            lineage_step.started(self)
            empty = all(not fs.files for fs, _ in filesets)
            if self.recompute is not None:  # a restate reads each touched partition's complete input
                empty, filesets = not self.recompute.partitions, list(self.recompute.filesets)
            if empty:
                # Nothing arrived: no Spark, no SQL (an empty jsonl input has no columns to
                # query), but the hour is still committed, so its plans are acked exactly once.
                self._skip("read", "no input files")
                self.inputs = [replace(r, records=0) for r in self.inputs]
            else:
                # inputs are counted by the write's own Spark job, unless a kept lineage event needs
                # their counts before the commit (lineage_step.keep)
                how = "with-write" if not lineage_step.enabled(self) else True
                if self.recompute is not None:  # the views hold complete partitions: the report counts new files
                    how = False
                records = self._step("read", lambda: commit_step.read(self, filesets, how))
                self.inputs = [replace(r, records=n) for r, n in zip(self.inputs, records)]
            if job.hive is not None:  # nothing committed yet: the table is there and matches, or is to be made
                self.hive_table = hive_step.before_commit(self, filesets, empty)
            lineage_step.keep(self)
            result = self._step("commit", lambda: commit_step.commit(self, txn, base, empty, filesets))
            committed, already = result.commit, result.already_committed
            for (i, _), n in zip(self.count_frames, result.counts):  # counted with the write
                self.inputs[i] = replace(self.inputs[i], records=n)
            if already:  # a concurrent duplicate committed first: go on with its commit and its record
                record = RunRecord.of(committed.transaction)
                self._committed(committed, record)
            else:
                self.out = replace(self.out, files=len(result.files), records=result.records,
                                   partitions=tuple(sorted(result.partitions)), version=result.version,
                                   restated=restated(result.commit))
            crash_point("etl.after_commit")
        if self.dry_run:
            self._skip("sync", "dry run")
            self._skip("ack", "dry run")
            return self._report(txn, already, committed.version, dry=True)
        if job.hive is not None:
            # made only now, from what was committed: a run that failed before its commit made no table
            created = hive_step.after_commit(self, committed.version, self.hive_table)
            self.say(f"{job.name} @ {when}: syncing partitions to Hive table {job.hive.table}")
            full = sync_step.wants_full_sync(job, self.t, self.full_sync) or created  # a new table: every partition
            self.hive = self._step("sync", lambda: sync_step.sync(self, committed, full))
        else:
            self._skip("sync", "no [hive] section")
        crash_point("etl.before_ack")
        plans = record.plans
        if plans:
            self._step("ack", lambda: ack_step.ack(self, plans))
        else:
            self._skip("ack", "no consumer inputs")
        self.iceberg = after_commit(self.output, committed.version)  # the output's Iceberg mirror, if it has one
        lineage_step.completed(self)
        return self._report(txn, already, committed.version)

    def _report(self, txn: Transaction, already: bool, version: int | None, dry: bool = False) -> RunReport:
        if dry:
            for s in STEPS:
                if not any(x.name == s for x in self.steps):
                    self._skip(s, "dry run")
        order = {s: i for i, s in enumerate(STEPS)}
        steps = tuple(sorted(self.steps, key=lambda s: order[s.name]))
        return RunReport(self.job.name, self.t, self.given, txn, dry, already, version, tuple(self.inputs),
                         self.out, self.hive, tuple(self.acked), tuple(self.recovered), steps,
                         self.job.sql_path, self.job.sql, self.hive_table, self.iceberg)

    def _committed(self, commit, record: RunRecord) -> None:
        """The report's inputs and output for a commit found in the log (a rerun, or a duplicate's).

        Its writer may have died between the commit and its renames (``rename``
        protocol): they are finished here, before the sync mounts the partitions,
        so Hive counts every committed row.
        """
        from tributary_read.table.renames import roll_forward_commit

        roll_forward_commit(self.output, commit)
        by_view = {i.view: i for i in self.inputs}
        self.inputs = [by_view.get(r.view) or _input_report(r) for r in record.inputs]
        from tributary_read.spark.write import WriteResult

        r = WriteResult.of_commit(commit)
        self.out = replace(self.out, files=len(r.files), records=r.records, partitions=r.partitions,
                           version=commit.version, restated=restated(commit))


def _input_report(r: InputRecord) -> InputReport:
    """What a report can say of an input it did not resolve: what the commit recorded."""
    return InputReport(r.view, r.table, r.mode, r.files, None, consumer=r.consumer, plan_id=r.plan_id)
