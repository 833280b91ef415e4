"""``trib compact``: merge small files into large ones, committed so that no reader counts a record twice."""

from __future__ import annotations

import time

import click

from .context import Duration, TribState, emit, json_option, pass_state, raise_on_sigterm


@click.command()
@click.argument("root")
@click.option("--partitions", help="Only these partitions, e.g. 'dt>=2024010100,dt<2024010200' "
                                   "(the syntax of trib files); default: every closed one.")
@click.option("--min-age", type=Duration(), default=None,
              help="Leave partitions with a file modified more recently [default: the table's compact.min_age, "
                   "1d]; 0s also compacts partitions still being written.")
@click.option("--target-size", default=None, help="Size of a compacted file [default: compact.target_size, 128M].")
@click.option("--min-files", type=click.IntRange(min=2), default=None,
              help="Leave a partition's period with fewer small files alone [default: compact.min_files, 5].")
@click.option("--dry-run", is_flag=True, help="Show the plan (partitions, files in and out, bytes); change nothing.")
@click.option("--spark", "on_spark", is_flag=True,
              help="Rewrite on Spark executors, a task per compacted file (the commit stays here, once).")
@click.option("--master", envvar="TRIB_SPARK_MASTER",
              help="With --spark: the master (default: $TRIB_SPARK_MASTER, $SPARK_MASTER, local[*]).")
@json_option
@pass_state
def compact(state: TribState, root, partitions, min_age, target_size, min_files, dry_run, on_spark, master,
            as_json) -> None:
    """Merge small files of closed partitions into large ones, as one replace commit no reader counts twice.

    Readers of new data skip the commit (its records were delivered in the
    originals); mtime readers take a compacted file by the mtime span of the
    files it merged, never by its own mtime. The replaced files move to
    _tributary/replaced, where readers behind the compaction still find them,
    until `trib clean` deletes them after compact.retention (docs/compaction.md).
    """
    from tributary_read.compact.plan import plan_compaction
    from tributary_read.compact.run import compact as run_compact
    from tributary_read.read.partition_filter import PartitionFilter

    raise_on_sigterm()  # a scheduler's stop ends the run like Ctrl-C: one line, exit 143, nothing half-made left visible
    t = state.table(root)
    values = {k: v for k, v in (("min_age", f"{min_age}ms" if min_age is not None else None),
                                ("target_size", target_size), ("min_files", min_files)) if v is not None}
    settings = t.config.compact.with_values(values)
    pf = PartitionFilter.parse(partitions, t.layout) if partitions else None
    plan = plan_compaction(t, partitions=pf, settings=settings, now_ms=int(time.time() * 1000))

    def progress(i: int, n: int, rw) -> None:
        if not state.quiet:
            click.echo(f"trib compact: {i}/{n} {rw.entry.path}: {len(rw.inputs)} files, {rw.records_read} records",
                       err=True)

    spark = None
    if on_spark and plan.groups and not dry_run:
        from tributary_read.spark.session import sql_session

        spark = sql_session(master, {"spark.ui.enabled": "false"}, "trib-compact", udfs=False)  # no user SQL
    committer = None
    if not dry_run and t.config.partition_commit:  # the table's partition commit: Hive's stats refreshed
        from tributary_read.hive.commit import committer_for  # only then: its import is a small run's cost

        committer = committer_for(t)
    try:
        result = run_compact(t, plan, dry_run=dry_run, progress=progress,
                             on_commit=committer.on_commit if committer else None, spark=spark,
                             options=state.resolve(root)[1])
    finally:
        committed = committer.close() if committer else None
    mirror = None
    if result.version and not dry_run:  # the Iceberg mirror replaces the same files in one snapshot
        from tributary_read.iceberg.auto import after_commit

        mirror = after_commit(t, result.version)

    def human():
        verb = "would merge" if dry_run else "merged"
        click.echo(f"{verb} {plan.files} files into {len(plan.groups)} in {plan.partitions} partitions "
                   f"({sum(g.bytes for g in plan.groups)} bytes, {sum(g.records for g in plan.groups)} records)"
                   + (f"; committed version {result.version}" if result.version else ""))
    emit(as_json, {**result.to_json(), **({"partition_commit": committed} if committed else {}),
                   **({"iceberg": mirror.to_json()} if mirror else {})}, human)
    if plan.held[0]:  # "merged 0 files" alone would read as nothing to do
        from tributary_read.read.min_age import compaction_note

        click.echo(f"trib: {compaction_note(*plan.held, settings.min_age_ms)}", err=True)
    if committer and committer.error:  # the compaction is committed; only Hive's statistics are behind
        raise type(committer.error)(f"compaction committed (version {result.version}), but refreshing the "
                                    f"partitions in Hive failed: {committer.error}; catch up with: "
                                    f"trib partitions commit {root}")
    if mirror:  # the compaction is committed; only the Iceberg mirror is behind
        mirror.raise_error()
