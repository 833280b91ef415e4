"""``trib etl run|submit``: the scheduled incremental ETL (docs/etl.md)."""

from __future__ import annotations

import click

from .context import Duration, TribState, emit, json_option, pass_state, raise_on_sigterm

_schedule_help = ("The run's schedule time: ISO-8601 (2024-01-01T05:00:00Z; no offset = UTC) or epoch ms, e.g. "
                  "Airflow's {{ data_interval_end }}. Floored to the job's period: one run per period.")
_schedule = click.option("--schedule-time", required=True, help=_schedule_help)
_interval = click.option(
    "--interval-start", default=None,
    help="A scheduler's data interval start (Airflow's {{ data_interval_start }}), its end being --schedule-time: "
         "the run is refused (exit 3) unless the interval is exactly one of the job's periods.")


@click.group()
def etl() -> None:
    """Scheduled incremental ETL: inputs -> Spark SQL -> one exactly-once commit -> Hive partitions.

    \b
    trib etl run JOB.toml --schedule-time 2024-01-01T05:00:00Z [--dry-run] [--json]
    trib etl check JOB.toml   (the job file, and where its SQL runs; starts no Spark)
    trib etl stream JOB.toml [--trigger 30s | --available-now]   (a [stream] job)
    trib etl submit JOB.toml --schedule-time ... [--run]   (the spark-submit line for a cluster)
    """


def _load(state: TribState, job_file: str):
    from tributary_read.etl.job import Job

    return Job.load(job_file, state.config, state.storage_options)


@etl.command("check")
@click.argument("job_file", metavar="JOB.toml")
@json_option
@pass_state
def check(state: TribState, job_file, as_json) -> None:
    """Check JOB.toml and where its SQL would run, starting no Spark (exit 3 naming what to fix).

    A job on a Spark Connect server ([spark] remote, $TRIB_SPARK_REMOTE or $SPARK_REMOTE) is refused
    here when something it needs takes a classic driver.
    """
    from tributary_read.etl.remote import check as where

    from tributary_read.etl.restate import check as restatable

    job = _load(state, job_file)
    url = where(job) if job.stream is None else None  # trib etl stream runs its driver here
    restatable(job)
    if url:
        from tributary_read.secret import redacted_url

        url = redacted_url(url)  # printed: a token in it stays in the job file or the environment
    master = job.spark.master or "from the environment"
    runs_on = f"the Spark Connect server {url}" if url else f"a classic driver ({master})"
    writes = ("; each run recomputes the output partitions its new input touches" if job.output.mode == "restate"
              else "")
    emit(as_json, {"job": job.name, "ok": True, "remote": url, "master": None if url else job.spark.master,
                   "mode": str(job.output.mode)},
         f"ok: job {job.name}: its SQL runs on {runs_on}{writes}")


@etl.command("run")
@click.argument("job_file", metavar="JOB.toml")
@click.option("--schedule-time", default=None, help=_schedule_help)
@click.option("--restate", "restate", default=None, metavar="START/END",
              help="A restate job only, instead of --schedule-time: recompute every output partition this interval "
                   "of event time covers (START/END, ISO-8601 with an offset or epoch ms; or one partition, "
                   "2024_01_01/05 or dt=2024010105) from its complete input, in one commit, e.g. after a fix to the SQL. Moves no "
                   "consumer; downstream restate jobs recompute what it feeds.")
@click.option("--drop-removed-input", is_flag=True,
              help="With --restate: recompute partitions some of whose input files are gone (an input's "
                   "retention removed them) from the rest, knowingly dropping what those files gave; without it "
                   "such a backfill is refused, nothing committed.")
@_interval
@click.option("--dry-run", is_flag=True,
              help="Print the plan (inputs, files, SQL, output, transaction) and check the [hive] table (exit 3 "
              "where the run would refuse); run no query, write nothing.")
@click.option("--full-sync", is_flag=True,
              help="Sync the whole Hive table (list it and the metastore), not only the partitions of the commit.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
@json_option
@pass_state
def run(state: TribState, job_file, schedule_time, restate, drop_removed_input, interval_start, dry_run, full_sync,
        quiet, as_json) -> None:
    """Run JOB.toml for one schedule time: resolve, SQL, commit once, sync Hive, ack.

    \b
    A rerun of a committed schedule time skips to the sync and the ack, so a
    scheduler may retry any failed or killed run. A second concurrent run of
    the same job exits 5.
    """
    from tributary_read.etl.run import run_job

    # A scheduler stops a run with SIGTERM: end with one line and exit 143, as
    # `trib ingest` does; a rerun of the same schedule time resumes from the log.
    raise_on_sigterm()
    job = _load(state, job_file)

    def progress(msg: str) -> None:
        if not (quiet or state.quiet):
            click.echo(f"trib etl: {msg}", err=True)

    from tributary_read.errors import InvalidInputError, PartitionsHeldError

    if (schedule_time is None) == (restate is None):  # a usage error (exit 2), as click's for a missing option
        raise click.UsageError("give --schedule-time (a scheduled run) or --restate START/END (a backfill), one of "
                               "them")
    if drop_removed_input and restate is None:
        raise InvalidInputError("--drop-removed-input goes with --restate START/END (a backfill)")
    if restate is not None:
        if dry_run or interval_start is not None or full_sync:
            raise InvalidInputError("--restate takes none of --dry-run, --interval-start and --full-sync")
        from tributary_read.etl.backfill import backfill

        report = backfill(job, restate, progress=progress, verbose=state.verbose,
                          drop_removed_input=drop_removed_input)
        emit(as_json, report.to_json(), lambda: _print_report(report))
        report.raise_error()
        return
    try:
        report = run_job(job, schedule_time, dry_run=dry_run, progress=progress, full_sync=full_sync,
                         verbose=state.verbose, interval_start=interval_start)
    except PartitionsHeldError as e:  # committed and acked without the held partitions: report, then exit 17
        emit(as_json, e.report.to_json(), lambda: _print_report(e.report))
        raise
    emit(as_json, report.to_json(), lambda: _print_report(report))
    report.raise_error()  # the run is committed and reported; only its Iceberg mirror is behind


def _print_report(r) -> None:
    head = f"job {r.job} @ {r.schedule_time}"
    o = r.output
    if r.dry_run:
        click.echo(f"{head}: DRY RUN (no SQL runs, nothing is written)")
        click.echo(f"  transaction: {r.transaction.app_id} {dict(r.transaction.offsets)}"
                   + (f" (already committed as version {r.version})" if r.already_committed else " (not committed)"))
    else:
        what = "already committed" if r.already_committed else "committed"
        click.echo(f"{head}: {what} version {r.version}: {o.files or 0} files, {o.records or 0} records "
                   f"in {len(o.partitions)} partitions of {o.table}")
    if r.iceberg is not None and r.iceberg.error is None:
        click.echo(f"  iceberg: {r.iceberg.setting.table} is at version {r.iceberg.version} "
                   f"({r.iceberg.snapshots} snapshots added)")
    for a in r.recovered:
        verb = "would ack" if a.would_ack else "acked"
        click.echo(f"  {verb} plan {a.plan_id} of {a.consumer} left pending by the run of "
                   f"{a.schedule_time} (version {a.version})")
    for i in r.inputs:
        rec = f", {i.records} records" if i.records is not None else ""
        how = f"consumer {i.consumer} plan {i.plan_id}" if i.consumer else (
            f"window {i.window['start']} .. {i.window['end']}" if i.window else i.mode)
        late = f", {len(i.late_files)} late" if i.late_files else ""
        size = f", {i.bytes} bytes" if i.bytes is not None else ""
        click.echo(f"  input {i.view}: {i.files} files{size}{rec}{late} ({how})")
        for x in i.left:
            click.echo(f"    left: {x.line()}")
        if r.dry_run:
            for p in i.paths[:20]:
                click.echo(f"    {p}")
            if len(i.paths) > 20:
                click.echo(f"    ... and {len(i.paths) - 20} more (use --json for all)")
    if r.dry_run:
        click.echo(f"  sql: {r.sql_path}")
        for line in r.sql.splitlines():
            click.echo(f"    {line}")
        click.echo(f"  output: {o.table} (time column {o.time_column})")
        if o.partitions and o.files is None:  # a restate job's plan; a found commit's partitions are done
            click.echo(f"  recomputes {len(o.partitions)} partition(s): {', '.join(o.partitions[:10])}"
                       + (" ..." if len(o.partitions) > 10 else ""))
        return
    from tributary_read.etl.restated import cause_text

    for x in o.restated:
        why = cause_text(x)
        click.echo(f"  restated {x['partition']}: {x['records_before']} -> {x['records_after']} records"
                   + (f" ({why})" if why else ""))
    if r.hive:
        h = r.hive
        full = " (full sync)" if h.mode == "full" else ""
        click.echo(f"  hive {h.table}: {len(h.added)} partitions added, {len(h.refreshed)} refreshed{full}")
    for a in r.acked:
        click.echo(f"  acked {a.consumer} plan {a.plan_id}" + (" (already acked)" if a.already_acked else "")
                   + (f"; held back: {'; '.join(a.held)}" if a.held else ""))
    steps = ", ".join(f"{s.name} {s.seconds:.1f}s" if s.status == "done" else f"{s.name} skipped"
                      for s in r.steps)
    click.echo(f"  steps: {steps}")


@etl.command("stream")
@click.argument("job_file", metavar="JOB.toml")
@click.option("--trigger", "trigger", type=Duration(), default=None,
              help="A micro-batch every DURATION (e.g. 30s, 5m); default: the job's [stream] trigger.")
@click.option("--available-now", is_flag=True,
              help="Read what the source holds now, in as many batches as its limits say, then stop.")
@click.option("--restart", is_flag=True,
              help="Accept a checkpoint other than the one the table's last batch came from (a lost checkpoint). "
                   "The source must start where that batch ended: docs/streaming.md.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
@json_option
@pass_state
def stream(state: TribState, job_file, trigger, available_now, restart, quiet, as_json) -> None:
    """Run JOB.toml's SQL over its [stream], committing each micro-batch exactly once.

    \b
    Runs until SIGTERM or Ctrl-C (which stop it between two batches, exit 0) or,
    with --available-now, until the source is drained. A restart goes on from
    Spark's checkpoint: the batch Spark runs again is found in the table's log
    and skipped. [hive] mounts each batch's partitions as trib etl run does.
    """
    from tributary_read.etl.stream import session, stream_job
    from tributary_read.write.ingest import stop_on_signals

    job = _load(state, job_file)
    job.needs("stream")

    def progress(msg: str) -> None:
        if not (quiet or state.quiet):
            click.echo(f"trib etl: {msg}", err=True)

    spark = session(job, progress, quiet_failures=not state.verbose)
    with stop_on_signals(restore=False) as stop:
        report = stream_job(job, spark=spark, trigger_ms=trigger, available_now=available_now or None,
                            restart=restart, stop=stop, progress=progress,
                            warn=lambda line: click.echo(f"trib: warning: {line}", err=True))
    emit(as_json, report.to_json(), lambda: _print_stream(report))
    report.raise_error()


def _print_stream(r) -> None:
    end = f", stopped by {r.stopped_by}" if r.stopped_by else ""
    click.echo(f"job {r.job}: {r.batches} batches, {r.records} records committed as {r.query}"
               + (f" (last version {r.version})" if r.version is not None else "") + end)
    if r.skipped:
        click.echo(f"  skipped batches already in the table: {', '.join(map(str, r.skipped))}")
    click.echo(f"  checkpoint: {r.checkpoint}")


@etl.command("submit")
@click.argument("job_file", metavar="JOB.toml")
@_schedule
@_interval
@click.option("--master", help="Spark master (default: the job's [spark] master, else $TRIB_SPARK_MASTER, "
                                "$SPARK_MASTER, local[*]).")
@click.option("--deploy-mode", type=click.Choice(["client", "cluster"]),
              help="client (the driver runs here) or cluster (default: the job's, else client).")
@click.option("--archives", "archive",
              help="A packed Python environment with tributary-read installed (venv-pack/conda-pack .tar.gz), "
                   "shipped as #environment; default: the job's [spark] archives.")
@click.option("--spark-submit", "spark_submit", default=None,
              help="The spark-submit to run (default: $SPARK_HOME/bin/spark-submit, else the one on PATH).")
@click.option("--run", "do_run", is_flag=True,
              help="Run the line instead of printing it: the run's JSON report on stdout, its exit status.")
@json_option
@pass_state
def submit(state: TribState, job_file, schedule_time, interval_start, master, deploy_mode, archive, spark_submit,
           do_run, as_json) -> None:
    """Print (or --run) the spark-submit line that runs JOB.toml on a cluster.

    \b
    --json prints the line as JSON (argv, master, deploy mode, notes). With
    --run, the driver prints the run's report as JSON on stdout, exactly what
    `trib etl run --json` prints, and the exit status is the run's.
    """
    from tributary_read.etl.submit import build_submit, run_submit

    job = _load(state, job_file)
    cmd = build_submit(job, schedule_time, master=master, deploy_mode=deploy_mode, archives=archive,
                       spark_submit=spark_submit, interval_start=interval_start)
    if not as_json:
        for note in cmd.notes:
            click.echo(f"trib etl: note: {note}", err=True)
    if not do_run:
        emit(as_json, cmd.to_json(), cmd.shell())
        return
    if not state.quiet:
        click.echo(f"trib etl: {cmd.shell()}", err=True)
    # The driver prints the run's JSON report; spark-submit mixes it with logs and tracebacks (-v shows them).
    result = run_submit(cmd, capture=not state.verbose)
    if result.report:
        click.echo(result.report, nl=False)
    if result.error:
        click.echo(f"trib: error: {result.error}", err=True)
    if result.code:
        click.get_current_context().exit(result.code)
