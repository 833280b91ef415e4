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
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime
from typing import Any, Callable, Mapping

from tributary_read.errors import AlreadyCommittedError, InvalidInputError, TributaryError, UntrackedDataError
from tributary_read.etl.job import InputMode, InputSpec, Job
from tributary_read.etl.lock import JobLock, lock_path
from tributary_read.etl.report import STEPS, InputReport, RunReport, Step, iso_z
from tributary_read.faults import crash_point
from tributary_read.read.window import Schedule, TimeWindow
from tributary_read.table.manifest import Transaction

#: The offsets key of an ETL transaction (the aligned schedule time, epoch ms).
SCHEDULE_KEY = "schedule_time_ms"

Progress = Callable[[str], None]


# -- the schedule time -------------------------------------------------------------------
def schedule_time_ms(value: str | int | datetime, job: Job) -> tuple[int, int]:
    """(aligned, given) epoch ms: ``value`` floored to the job's period in its zone.

    ISO-8601 with an offset (``2024-01-01T05:00:00Z``, ``+02:00``) or epoch ms,
    read by the one instant parser (:mod:`tributary_read.timespec`): a time
    without an offset is refused, as in every front end. A cron job started a
    few seconds late still names its hour: the run for 05:00:07 is the run for
    05:00, one transaction per period (:meth:`Schedule.run_time`).
    """
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidInputError(f"schedule time {value.isoformat()} has no UTC offset: give an aware datetime",
                                    schedule_time="schedule time")
        given = int(value.timestamp() * 1000)
    else:
        from tributary_read.read.window import _instant

        given = _instant(value, job.tz, "schedule_time", "schedule time")
    return Schedule(job.period_ms, tz=job.tz).run_time(given), given


def window_for(job: Job, spec: InputSpec, schedule_ms: int) -> TimeWindow:
    """The window an mtime or manifest input reads in the run of ``schedule_ms``: the job's :class:`Schedule`."""
    return job.schedule(spec).window(schedule_ms)


def check_not_ahead(job: Job, schedule_ms: int, now_ms: int) -> None:
    """Refuse a run whose data cannot all be there yet.

    A run commits its schedule time once: a later rerun finds the commit and
    reads nothing more. So an mtime or manifest window that ends after now (its
    files may still arrive) would lose them for good; a consumer loses nothing
    (what arrives later is the next run's), but a time more than a period ahead
    is a typo, not a schedule.
    """
    def refuse(msg: str) -> InvalidInputError:
        return InvalidInputError(msg, schedule_time="the schedule time")

    if schedule_ms - job.period_ms > now_ms:
        raise refuse(f"the schedule time {iso_z(schedule_ms)} is more than a period ahead of the clock "
                     f"({iso_z(now_ms)})")
    for spec in job.inputs:
        if spec.mode is InputMode.CONSUMER:
            continue
        end = window_for(job, spec, schedule_ms).end_ms + 1
        if end > now_ms:
            raise refuse(f"the window of input {spec.view} ends at {iso_z(end)}, after now ({iso_z(now_ms)}): its "
                         "files may still arrive, and a committed hour is never read again; run it later "
                         "(or give the input a lag)")


def transaction_for(job: Job, schedule_ms: int, inputs: Mapping[str, Mapping] | None = None) -> Transaction:
    meta: dict[str, Any] = {"schedule_time": iso_z(schedule_ms)}
    if inputs is not None:
        meta["inputs"] = {k: dict(v) for k, v in inputs.items()}
    return Transaction(job.app_id, {SCHEDULE_KEY: schedule_ms}, meta)


# -- finding the transaction -------------------------------------------------------------
def find_commit(table, app_id: str, schedule_ms: int):
    """The commit of ``(app_id, schedule_ms)`` in ``table``'s log, or None.

    The table state answers a new hour and a rerun of the latest at once; only
    a rerun of an older hour (a backfill) reads the job's commits
    (:meth:`~tributary_read.table.log.ManifestLog.find_transaction`).
    """
    return table.log.find_transaction(transaction_for_lookup(app_id, schedule_ms))


def transaction_for_lookup(app_id: str, schedule_ms: int) -> Transaction:
    return Transaction(app_id, {SCHEDULE_KEY: schedule_ms})


def recorded_inputs(t: Transaction | None) -> dict[str, dict]:
    """The ``inputs`` a run recorded in its transaction's meta (view -> table, consumer, plan_id, ...)."""
    inputs = (t.meta or {}).get("inputs") if t is not None else None
    return {str(k): dict(v) for k, v in inputs.items() if isinstance(v, dict)} if isinstance(inputs, dict) else {}


# -- the run -----------------------------------------------------------------------------
def run_job(job: Job, schedule_time: str | int | datetime, *, spark=None, dry_run: bool = False,
            progress: Progress | None = None) -> RunReport:
    """Run ``job`` for ``schedule_time`` (see the module docstring); ``dry_run`` resolves and reports only.

    ``spark``: an existing SparkSession (else one is built from the job's
    ``[spark]`` section when the run needs one). Runs of one job never
    overlap: a second concurrent run raises ConcurrentRunError.
    """
    aligned, given = schedule_time_ms(schedule_time, job)
    if not dry_run:
        check_not_ahead(job, aligned, int(time.time() * 1000))
    from tributary_read.table.config import Table

    output = Table.load(job.output.root, job.output.storage_options)
    run = _Run(job, aligned, given, output, spark, dry_run, progress or (lambda _msg: None))
    if dry_run:  # reads only: it may watch a run in progress
        return run.execute()
    with JobLock(lock_path(job.name, output, job.lock_dir), job.name):
        return run.execute()


class _Run:
    def __init__(self, job: Job, aligned: int, given: int, output, spark, dry_run: bool, progress: Progress):
        self.job, self.t, self.given, self.output = job, aligned, given, output
        self.spark, self.dry_run, self.say = spark, dry_run, progress
        self.steps: list[Step] = []
        self.inputs: list[InputReport] = []
        self.recovered: list[dict] = []
        self.acked: list[dict] = []
        self.out: dict[str, Any] = {"table": output.uri, "time_column": job.output.time_column}
        self.hive: dict[str, Any] | None = None

    # -- steps ---------------------------------------------------------------------
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
        committed = find_commit(self.output, job.app_id, self.t)
        version = committed.version if committed is not None else None
        if committed is not None:
            self.say(f"{job.name} @ {when}: already committed as version {version}; going on after the commit")
            recorded = recorded_inputs(committed.transaction)
            self._committed_inputs(committed, recorded)
            for s in ("resolve", "read", "commit"):
                self._skip(s, f"transaction already committed as version {version}")
            txn = committed.transaction
        else:
            self._recover()
            self.say(f"{job.name} @ {when}: resolving {len(job.inputs)} input(s)")
            filesets = self._step("resolve", self._resolve)
            recorded = {spec.view: self._record(spec, fs, plan) for spec, (fs, plan) in zip(job.inputs, filesets)}
            txn = transaction_for(job, self.t, recorded)
            if self.dry_run:
                return self._report(txn, False, None, dry=True)
            if all(not fs.files for fs, _ in filesets):
                # Nothing arrived: no Spark, no SQL (an empty jsonl input has no columns to
                # query), but the hour is still committed, so its plans are acked exactly once.
                self._skip("read", "no input files")
                self.inputs = [replace(r, records=0) for r in self.inputs]
                result = self._step("commit", lambda: self._commit_empty(txn))
            else:
                records = self._step("read", lambda: self._read(filesets))
                self.inputs = [replace(r, records=n) for r, n in zip(self.inputs, records)]
                result = self._step("commit", lambda: self._commit(txn))
            if result is None:  # a concurrent duplicate committed first
                committed = find_commit(self.output, job.app_id, self.t)
                if committed is None:
                    raise TributaryError(f"the transaction of {when} was reported committed but is not in the log")
                version = committed.version
                recorded = recorded_inputs(committed.transaction)
                self._committed_inputs(committed, recorded)
            else:
                version = result.version
                self.out.update(files=len(result.files), records=result.records,
                                partitions=sorted(result.partitions), version=version)
            crash_point("etl.after_commit")
        if self.dry_run:
            self._skip("sync", "dry run")
            self._skip("ack", "dry run")
            return self._report(txn, committed is not None, version, dry=True)
        if job.hive is not None:
            self.say(f"{job.name} @ {when}: syncing partitions to Hive table {job.hive.table}")
            self._step("sync", self._sync)
        else:
            self._skip("sync", "no [hive] section")
        crash_point("etl.before_ack")
        plans = [(v, r) for v, r in recorded.items() if r.get("plan_id")]
        if plans:
            self._step("ack", lambda: self._ack(plans))
        else:
            self._skip("ack", "no consumer inputs")
        return self._report(txn, committed is not None, version)

    def _report(self, txn: Transaction, already: bool, version: int | None, dry: bool = False) -> RunReport:
        if dry:
            for s in STEPS:
                if not any(x.name == s for x in self.steps):
                    self._skip(s, "dry run")
        order = {s: i for i, s in enumerate(STEPS)}
        steps = tuple(sorted(self.steps, key=lambda s: order[s.name]))
        return RunReport(self.job.name, self.t, self.given, txn, dry, already, version, tuple(self.inputs),
                         self.out, self.hive, tuple(self.acked), tuple(self.recovered), steps,
                         self.job.sql_path, self.job.sql)

    # -- 0: acks a crashed earlier run left undone ----------------------------------------
    def _recover(self) -> None:
        """Ack the plans the job's last commit recorded but never acked (see the module docstring)."""
        last = self.output.log.last_transaction(self.job.app_id)
        if last is None:
            return
        rec = recorded_inputs(last.transaction)
        for view, r in rec.items():
            if not r.get("plan_id"):
                continue
            c = self._consumer_for(view, r)
            pending = c.pending() if c.exists() else None
            if pending is None or pending.plan_id != r["plan_id"]:
                continue
            at = iso_z(last.transaction.offsets.get(SCHEDULE_KEY, 0))
            entry = {"view": view, "consumer": c.name, "plan_id": r["plan_id"], "schedule_time": at,
                     "version": last.version}
            if self.dry_run:
                entry["would_ack"] = True
            else:
                self.say(f"acking plan {r['plan_id']} of consumer {c.name}, committed at version {last.version} "
                         f"by the run of {at} (it ended before its ack)")
                c.ack(r["plan_id"])
            self.recovered.append(entry)

    # -- 1: resolve ---------------------------------------------------------------------
    def _resolve(self) -> list[tuple[Any, Any]]:
        out = []
        for spec in self.job.inputs:
            try:
                out.append(self._resolve_one(spec))
            except UntrackedDataError as e:  # the opt-out is a key of the job file here
                raise type(e)(f"input {spec.view}: " + e.reword(
                    {"allow_untracked": "allow_untracked = true in its [[inputs]]"})) from None
        return out

    def _source(self, spec: InputSpec):
        from tributary_read.read.resolve import Source

        return Source.open(spec.root, spec.storage_options, spec.layout)

    def _resolve_one(self, spec: InputSpec):
        from tributary_read.read.fileset import origin

        src = self._source(spec)
        if spec.mode is InputMode.CONSUMER:
            from tributary_read.read.consumer import Consumer

            held = next((r for r in self.recovered if r["view"] == spec.view and r.get("would_ack")), None)
            if held is not None:  # dry run: that plan is acked first, and the next one made only then
                self.inputs.append(InputReport(
                    spec.view, src.uri, str(spec.mode), 0, 0, consumer=spec.consumer, note=(
                        f"pending plan {held['plan_id']} was committed by the run of {held['schedule_time']}: "
                        "the run acks it first, then plans what arrived since")))
                return _empty_fileset(src), None
            c = Consumer(src, spec.consumer, spec.state_dir, spec.storage_options)
            plan = c.plan(mode=spec.tracking, lookback_ms=spec.lookback_ms, min_age_ms=spec.min_age_ms,
                          full_scan_every_ms=spec.full_scan_every_ms, allow_untracked=spec.allow_untracked)
            fs = plan.fileset(origin(src.storage, src.table, src.layout))
            window = None
        else:
            from tributary_read.read.resolve import resolve

            window = window_for(self.job, spec, self.t)
            plan = None
            fs = resolve(src, mode=str(spec.mode), window=window, allow_untracked=spec.allow_untracked)
        if spec.layout is not None and hasattr(fs, "layout") and getattr(fs, "layout", None) is None:
            fs = replace(fs, layout=spec.layout)
        self.inputs.append(InputReport(
            spec.view, fs.root, str(spec.mode), len(fs.files), fs.bytes,
            records=_known_records(fs.files), consumer=spec.consumer if plan is not None else None,
            plan_id=plan.plan_id if plan is not None else None,
            window=window.to_json() if window is not None else None,
            late_files=tuple(self._late(src.layout, fs.files)),
            beyond_horizon=tuple(b.path for b in plan.beyond_horizon) if plan is not None else (),
            skipped=len(fs.skipped), paths=tuple(f.path for f in fs.files),
            untracked=fs.untracked.to_json() if fs.untracked is not None else None))
        if fs.untracked is not None:
            self.say(f"input {spec.view}: {fs.untracked.message()}")
        if plan is not None and plan.beyond_horizon:
            self.say(f"warning: input {spec.view}: {len(plan.beyond_horizon)} files beyond the lookback horizon "
                     f"are not read (e.g. {plan.beyond_horizon[0].path}); raise its lookback to read such files")
        return fs, plan

    def _late(self, layout, files) -> list[str]:
        """Files whose partition ended before this run's period began: data arriving late."""
        if layout is None:
            return []
        start = self.t - self.job.period_ms
        late = []
        for f in files:
            d = f.path.rpartition("/")[0]
            p = layout.try_parse(d) if d else None
            if p is not None and p.end_ms <= start:
                late.append(f.path)
        return late

    def _record(self, spec: InputSpec, fs, plan) -> dict:
        """What the commit's transaction meta keeps of an input (what a rerun needs to ack it)."""
        r: dict[str, Any] = {"table": fs.root, "mode": str(spec.mode), "files": len(fs.files)}
        if plan is not None:
            r.update(consumer=spec.consumer, plan_id=plan.plan_id)
            if spec.state_dir:
                r["state_dir"] = spec.state_dir
        elif spec.mode is not InputMode.CONSUMER:
            w = window_for(self.job, spec, self.t)
            r["window"] = [w.start_ms, w.end_ms]
        return r

    def _committed_inputs(self, commit, recorded: Mapping[str, dict]) -> None:
        """The report's inputs and output for a transaction found in the log."""
        by_view = {i.view: i for i in self.inputs}
        self.inputs = []
        for view, r in recorded.items():
            prev = by_view.get(view)
            self.inputs.append(prev or InputReport(view, r.get("table", ""), r.get("mode", ""), r.get("files", 0),
                                                   None, consumer=r.get("consumer"), plan_id=r.get("plan_id")))
        files = [e for e in commit.files]
        self.out.update(files=len(files), records=sum(e.records or 0 for e in files),
                        partitions=sorted({e.path.rpartition("/")[0] for e in files}), version=commit.version)

    # -- 2: read ------------------------------------------------------------------------
    def _session(self):
        if self.spark is None:
            from tributary_read.spark.session import sql_session

            self.say(f"{self.job.name}: starting Spark ({self.job.spark.master or 'from the environment'})")
            self.spark = sql_session(self.job.spark.master, self.job.spark.conf, f"trib-etl-{self.job.name}",
                                     catalog=self.job.catalog, udfs=False)
        return self.spark

    def _read(self, filesets) -> list[int | None]:
        from tributary_read.spark.read import read_files

        spark = self._session()
        counts = []
        for spec, (fs, _plan), rep in zip(self.job.inputs, filesets, self.inputs):
            self.say(f"{self.job.name}: input {spec.view}: {len(fs.files)} files, {fs.bytes} bytes")
            kw: dict[str, Any] = {}
            if spec.schema is not None:
                kw["schema"] = spec.schema
            if spec.hive_table is not None:
                kw["hive_table"] = spec.hive_table
                if self.job.hive is not None:
                    kw["metastore"] = self.job.hive.metastore
            options = dict(spec.read_options)
            if spec.format is not None:
                options["format"] = spec.format
            if options:
                kw["options"] = options
            try:
                df = read_files(spark, fs, **kw)
            except InvalidInputError as e:
                i = self.job.inputs.index(spec)
                hint = f" (give inputs[{i}].schema in the job file)" if not fs.files and spec.schema is None else ""
                raise InvalidInputError(f"input {spec.view}: {e}{hint}") from None
            df.createOrReplaceTempView(spec.view)
            n = rep.records
            if n is None and self.job.count_inputs:
                n = df.count()
            counts.append(n)
        return counts

    # -- 3: commit ------------------------------------------------------------------------
    def _commit(self, txn: Transaction):
        from tributary_read.spark.write import write

        spark = self._session()
        from pyspark.errors import AnalysisException

        try:
            df = spark.sql(self.job.sql)
        except AnalysisException as e:  # a parse error too: the SQL file is the input to fix
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise InvalidInputError(f"{self.job.sql_path}: {first}") from None
        crash_point("etl.before_commit")
        self.say(f"{self.job.name}: running the SQL and committing to {self.output.uri}")
        try:
            return write(df, self.output, time_column=self.job.output.time_column, transaction=txn,
                         time_unit=self.job.output.times)
        except AlreadyCommittedError as e:
            self.say(f"{self.job.name}: another run committed {iso_z(self.t)} first (version {e.version}); "
                     "its files stand, this copy's are orphans for `trib clean`")
            return None

    def _commit_empty(self, txn: Transaction):
        """A commit of no files that records the transaction (the same shape ``write`` returns)."""
        from tributary_read.spark.write import WriteResult

        crash_point("etl.before_commit")
        return WriteResult.of_commit(self.output.log.commit([], txn))

    # -- 4: sync --------------------------------------------------------------------------
    def _sync(self) -> None:
        from tributary_read.hive.metastore import open_metastore
        from tributary_read.hive.sync import SyncOptions, sync

        h = self.job.hive
        pc = self.output.config.partition_commit or {}
        options = SyncOptions(batch_size=h.batch_size or pc.get("batch_size"),
                              location_base=h.location_base or pc.get("location_base"))
        with open_metastore(h.metastore_uri, spark=self._session() if self.job.catalog else None) as ms:
            result = sync(self.output, ms, h.table, options, state_dir=h.state_dir,
                          storage_options=self.job.output.storage_options,
                          after_step=lambda step: crash_point("etl.during_sync") if step == "add" else None)
        plan = result.plan
        if plan.refused:
            from tributary_read.errors import UnsafePlanError

            raise UnsafePlanError(plan.refused)
        self.hive = {"table": h.table, "metastore": ms.address, "added": [e.partition for e in plan.add],
                     "refreshed": [e.partition for e in plan.refresh],
                     "relocated": [e.partition for e in plan.relocate], "statements": result.statements}

    # -- 5: ack ---------------------------------------------------------------------------
    def _consumer_for(self, view: str, r: Mapping[str, Any]):
        from tributary_read.read.consumer import Consumer
        from tributary_read.read.resolve import Source

        spec = next((s for s in self.job.inputs if s.view == view), None)
        options = spec.storage_options if spec is not None else {}
        layout = spec.layout if spec is not None else None
        root = r.get("table") or (spec.root if spec else None)
        if root is None:
            raise TributaryError(f"the commit records input {view!r} without its table; ack it by hand")
        return Consumer(Source.open(root, options, layout), r["consumer"], r.get("state_dir"), options)

    def _ack(self, plans) -> None:
        """Ack each recorded plan; acking one twice is a no-op.

        A stale plan (the consumer moved past it: acked earlier and followed by
        later plans, or reset by hand) has nothing left to ack here; it is
        reported, not raised, because the output's commit already stands.
        """
        from tributary_read.errors import StalePlanError

        for view, r in plans:
            c = self._consumer_for(view, r)
            entry = {"view": view, "consumer": c.name, "plan_id": r["plan_id"]}
            try:
                entry["already_acked"] = c.ack(r["plan_id"]).already_acked
            except StalePlanError as e:
                self.say(f"warning: input {view}: {e}")
                entry.update(already_acked=True, stale=True)
            self.acked.append(entry)


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
