"""``trib iceberg sync``: keep an Iceberg table equal to a trib table, every commit registered once; or, with
``--consumer``, register a landing zone's Parquet files (other tools write them) as its consumer delivers them.

Thin over :mod:`tributary_read.iceberg.mirror` and :mod:`tributary_read.iceberg.landing`, which own them;
docs/iceberg.md.
"""

from __future__ import annotations

import click

from tributary_read.errors import InvalidInputError

from .context import TribState, emit, json_option, parse_duration_ms, pass_state


@click.group()
def iceberg() -> None:
    """Mirror a Parquet trib table, or a landing zone of Parquet files, into Iceberg: each commit or file registered
    once, no data rewritten."""


@iceberg.command()
@click.argument("root")
@click.option("--table", "name", required=True, metavar="NS.NAME",
              help="The Iceberg table (namespace.name); created on first use.")
@click.option("--catalog", "catalog_uri", metavar="URI",
              help="sqlite:///PATH, postgresql://USER@HOST:PORT/DB or a Hive metastore thrift://HOST:PORT "
                   "(default: $TRIB_ICEBERG_CATALOG, else a SQLite catalog under ~/.local/state/trib/iceberg).")
@click.option("--partition-by", "partition_by", metavar="hour(COL)|day(COL)",
              help="Also partition a new Iceberg table by this transform of the timestamp column COL (identity "
                   "on the layout's keys stays); fixed at creation (docs/iceberg.md).")
@click.option("--consumer", help="ROOT is a landing zone other tools write Parquet into: register the files this "
                                 "durable consumer delivers, one snapshot per plan, each file once.")
@click.option("--layout", help="With --consumer, a plain directory: its template, e.g. '{yyyy}_{MM}_{dd}/{HH}' "
                               "(recorded by the first run).")
@click.option("--partition", "partition_spec", help="With --consumer: partition spec (default dt=<all tokens>).")
@click.option("--timezone", help="With --consumer: zone of the directory times (default UTC).")
@click.option("--min-age", help="With --consumer: leave files modified within this long for a later run (they may "
                                "still be written; default 1m).")
@click.option("--lookback", help="With --consumer: its lookback horizon (default: stored, else 7d).")
@click.option("--state-dir", help="With --consumer: keep its state in DIR/NAME instead of ROOT/_tributary/consumers.")
@json_option
@pass_state
def sync(state: TribState, root, name, catalog_uri, partition_by, consumer, layout, partition_spec, timezone, min_age,
         lookback, state_dir, as_json) -> None:
    """Bring the Iceberg table up to ROOT's latest version: one snapshot per trib commit, in order.

    \b
    With --consumer: register what the consumer delivers from ROOT, a directory other
    tools write Parquet into, one snapshot per plan; the plan is acked once it committed.
    """
    from tributary_read.iceberg.catalog import default_catalog_uri

    if consumer is not None:
        if partition_by:
            raise InvalidInputError("--partition-by goes with a trib table's mirror; a landing zone's Iceberg table "
                                    "is partitioned by its layout's keys")
        _landing(state, root, name, catalog_uri, consumer, layout, partition_spec, timezone, min_age, lookback,
                 state_dir, as_json)
        return
    given = [flag for flag, v in (("--layout", layout), ("--partition", partition_spec), ("--timezone", timezone),
                                  ("--min-age", min_age), ("--lookback", lookback), ("--state-dir", state_dir)) if v]
    if given:
        raise InvalidInputError(f"{given[0]} goes with --consumer (a landing zone); a trib table's mirror takes its "
                                "commits, not a listing")
    from tributary_read.iceberg.mirror import sync as mirror

    table = state.table(root)
    result = mirror(table, name, catalog_uri or default_catalog_uri(), partition_by)
    added = sum(s["added"] for s in result.snapshots)
    removed = sum(s["removed"] for s in result.snapshots)
    human = (f"{name} is at version {result.version} of {table.uri}: {len(result.snapshots)} snapshots "
             f"({added} files added, {removed} removed)" if result.snapshots
             else f"{name} is at version {result.version} of {table.uri}: nothing to register")
    emit(as_json, result.to_json(), human)


def _landing(state: TribState, root, name, catalog_uri, consumer, layout, partition_spec, timezone, min_age,
             lookback, state_dir, as_json) -> None:
    from tributary_read.iceberg.landing import sync_landing

    from .files import open_source

    src, options = open_source(state, root, layout, partition_spec, timezone)
    result = sync_landing(src, consumer, name, catalog_uri, state_dir=state_dir, options=options,
                          min_age_ms=None if min_age is None else parse_duration_ms(min_age, "--min-age"),
                          lookback_ms=None if lookback is None else parse_duration_ms(lookback, "--lookback"))
    now = [p for p in result.plans if p["registered"] == "now"]
    before = [p for p in result.plans if p["registered"] == "before"]
    human = (f"{name}: {len(now)} snapshots ({result.files} files, {sum(p['records'] for p in now)} records) from "
             f"consumer {consumer} of {src.uri}" if now else f"{name}: nothing new from consumer {consumer} of {src.uri}")
    if before:
        human += f"; {len(before)} plans found registered by an earlier run, acked"
    if result.deferred:
        from tributary_read.read.min_age import note

        click.echo(f"trib: {note(result.deferred, result.min_age_ms)}", err=True)
    emit(as_json, result.to_json(), human)
    if result.held_error is not None:  # acked: the rest is registered; the run still ends with its own code
        raise result.held_error
