"""``trib partitions sync|commit|configure``: Hive partitions for a table's directories."""

from __future__ import annotations

import time

import click

from tributary_read.errors import InvalidInputError, UnsafePlanError

from .context import Duration, TribState, echo_capped, emit, json_option, metastore_option, pass_state



@click.group()
def partitions() -> None:
    """Mount a table's partition directories as Hive partitions; commit partitions after writes."""


def _target(t, hive_table: str | None, metastore: str | None) -> tuple[str, str]:
    pc = t.config.partition_commit or {}
    hive_table = hive_table or pc.get("hive_table")
    metastore = metastore or pc.get("metastore")
    if not hive_table:
        raise InvalidInputError("give --hive-table db.table (or configure one: trib partitions configure)")
    if not metastore:
        raise InvalidInputError("give --metastore hs2://HOST:PORT, thrift://HOST:PORT or spark (or set $TRIB_METASTORE)")
    return hive_table, metastore


@partitions.command("sync")
@click.argument("table")
@click.option("--hive-table", help="The Hive table, db.table (partitioned by the layout's keys).")
@metastore_option(note="Default: the table's partition-commit metastore.")
@click.option("--drop", is_flag=True, help="Also drop partitions whose directory is gone.")
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@click.option("--batch-size", type=click.IntRange(min=1), help="Partitions per ADD/DROP statement (default 1000).")
@click.option("--max-drop-fraction", type=click.FloatRange(0, 1), default=0.1, show_default=True,
              help="Refuse a plan dropping (or relocating) more than this share of the table's partitions.")
@click.option("--force", is_flag=True, help="Apply a plan a safety rule refused.")
@click.option("--check-locations", is_flag=True,
              help="DESCRIBE every partition to catch relocations made outside trib (slow: ~0.1-0.25 s each).")
@click.option("--no-refresh", is_flag=True, help="Do not refresh statistics of partitions whose files changed.")
@click.option("--location-base", help="Render locations as BASE/DIR (e.g. s3a://bucket/path) instead of ROOT's URI.")
@click.option("--state-dir", help="Keep the sync state here instead of ROOT/_tributary/hive (read-only roots).")
@json_option
@pass_state
def sync_cmd(state: TribState, table, hive_table, metastore, drop, dry_run, batch_size, max_drop_fraction, force,
             check_locations, no_refresh, location_base, state_dir, as_json) -> None:
    """Diff TABLE's partition directories against a Hive table's partitions, then fix the difference.

    Plans add / relocate / drop / refresh first; a listing error aborts before
    any DDL. A second run plans nothing.
    """
    from tributary_read.hive import SyncOptions, open_metastore, sync

    t = state.table(table)
    hive_table, metastore = _target(t, hive_table, metastore)
    pc = t.config.partition_commit or {}
    location_base = location_base or pc.get("location_base")  # mount where the commit policy mounts
    batch_size = batch_size or pc.get("batch_size")
    options = SyncOptions(drop=drop, batch_size=batch_size, max_drop_fraction=max_drop_fraction, force=force,
                          check_locations=check_locations, refresh=not no_refresh, location_base=location_base)
    _, storage_options = state.resolve(table)
    t0 = time.perf_counter()
    with open_metastore(metastore) as ms:
        result = sync(t, ms, hive_table, options, dry_run=dry_run, state_dir=state_dir,
                      storage_options=storage_options)
    seconds = time.perf_counter() - t0
    plan = result.plan
    emit(as_json, {**result.to_json(), "dry_run": dry_run}, lambda: _print_plan(result, dry_run, seconds))
    if plan.refused:
        raise UnsafePlanError(plan.refused)


def _print_plan(result, dry_run: bool, seconds: float) -> None:
    plan = result.plan
    s = plan.summary()
    click.echo(f"{plan.hive_table} via {plan.metastore} ({plan.engine}): add {s['add']}, relocate {s['relocate']}, "
               f"drop {s['drop']}, refresh {s['refresh']}, skipped {s['skipped']} "
               f"({s['directories']} directories, {s['partitions']} partitions)")
    lines = [f"  add       {e.partition}  <- {e.directory}" for e in plan.add]
    lines += [f"  relocate  {e.partition}  {e.previous} -> {e.location}" for e in plan.relocate]
    lines += [f"  drop      {e.partition}  ({e.reason})" for e in plan.drop]
    lines += [f"  refresh   {e.partition}  ({e.reason})" for e in plan.refresh]
    lines += [f"  skipped   {s_.name}: {s_.reason}" for s_ in plan.skipped]
    echo_capped(lines, 20)
    for note in plan.notes:
        click.echo(f"note: {note}")
    if plan.refused:
        click.echo("refused: nothing changed")
    elif dry_run:
        click.echo("dry run: nothing changed")
    elif result.statements:
        click.echo(f"applied: {result.statements} statements, {seconds:.2f}s in all (sync state "
                   f"v{result.state_version})")
    else:
        click.echo("in sync: nothing to do")


@partitions.command("commit")
@click.argument("table")
@click.option("--all", "all_partitions", is_flag=True,
              help="Re-check every partition of the log (mounting each again), not only those not yet handled.")
@click.option("--dry-run", is_flag=True, help="Print what would be committed; change nothing.")
@json_option
@pass_state
def commit_cmd(state: TribState, table, all_partitions, dry_run, as_json) -> None:
    """Apply TABLE's partition-commit policy to its committed partitions (catch-up, or run after writers)."""
    from tributary_read.hive.commit import committer_for

    t = state.table(table)
    committer = committer_for(t)
    if committer is None:
        raise InvalidInputError(f"{t.uri} has no partition-commit policy (set one: trib partitions configure)")
    summary = committer.close(all_partitions=all_partitions, dry_run=dry_run)
    emit(as_json, {**summary, "dry_run": dry_run}, lambda: _print_commit(summary, dry_run))
    if committer.error:
        raise committer.error


def _print_commit(summary: dict, dry_run: bool) -> None:
    verb = "would " if dry_run else ""
    click.echo(f"{verb}mount {len(summary['added'])} partitions, {verb}mark {len(summary['success_files'])} "
               "partitions complete")
    echo_capped([f"  mounted   {p}" for p in summary["added"]] + [f"  relocated {p}" for p in summary["relocated"]]
                + [f"  complete  {d}" for d in summary["success_files"]])


@partitions.command("configure")
@click.argument("table")
@click.option("--policy", "policies", multiple=True, type=click.Choice(["metastore", "success-file"]),
              help="Partition-commit policy; repeat for both.")
@click.option("--hive-table", help="db.table the metastore policy mounts into.")
@metastore_option(envvar=False)
@click.option("--delay", type=Duration(), help="success-file: wait this long after a partition's end (e.g. 1h).")
@click.option("--clock", type=click.Choice(["processing", "event"]),
              help="success-file: wall clock, or the newest partition that received data.")
@click.option("--success-file", help="Name of the marker (default _SUCCESS).")
@click.option("--batch-size", type=click.IntRange(min=1), help="Partitions per ADD statement.")
@click.option("--location-base", help="Render locations as BASE/DIR instead of ROOT's URI.")
@click.option("--off", is_flag=True, help="Remove the policy.")
@json_option
@pass_state
def configure_cmd(state: TribState, table, policies, hive_table, metastore, delay, clock, success_file, batch_size,
                  location_base, off, as_json) -> None:
    """Show or set TABLE's partition-commit policy (stored in its table.json)."""
    from dataclasses import replace

    from tributary_read.hive.commit import CommitPolicy, save_policy
    from tributary_read.hive.uri import MetastoreURI

    t = state.table(table)
    current = CommitPolicy.from_json(t.config.partition_commit)
    changes = {k: v for k, v in dict(policies=tuple(policies) or None, hive_table=hive_table, metastore=metastore,
                                     delay_ms=delay, clock=clock, success_file=success_file, batch_size=batch_size,
                                     location_base=location_base).items() if v is not None}
    if metastore:
        MetastoreURI.parse(metastore)  # an unknown scheme is refused before table.json changes
    if off or changes:
        new = CommitPolicy() if off else replace(current, **changes)
        t = save_policy(t, new)
        current = new
    data = {"root": t.uri, "partition_commit": current.to_json()}
    human = (f"{t.uri}: policies {', '.join(current.policies) or 'none'}"
             + (f", hive table {current.hive_table} via {current.metastore}" if current.hive_table else "")
             + (f", success file {current.success_file} after end + {current.delay_ms} ms ({current.clock} clock)"
                if "success-file" in current.policies else ""))
    emit(as_json, data, human)
