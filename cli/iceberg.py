"""``trib iceberg sync``: keep an Iceberg table equal to a trib table, every commit registered once.

Thin over :mod:`tributary_read.iceberg.mirror`, which owns the mirror; docs/iceberg.md.
"""

from __future__ import annotations

import click

from .context import TribState, emit, json_option, pass_state


@click.group()
def iceberg() -> None:
    """Mirror a Parquet trib table into an Iceberg table: every commit registered once, no data rewritten."""


@iceberg.command()
@click.argument("root")
@click.option("--table", "name", required=True, metavar="NS.NAME",
              help="The Iceberg table (namespace.name); created on first use.")
@click.option("--catalog", "catalog_uri", metavar="URI",
              help="sqlite:///PATH (default: $TRIB_ICEBERG_CATALOG, else a SQLite catalog under "
                   "~/.local/state/trib/iceberg).")
@click.option("--partition-by", "partition_by", metavar="hour(COL)|day(COL)",
              help="Also partition a new Iceberg table by this transform of the timestamp column COL (identity "
                   "on the layout's keys stays); fixed at creation (docs/iceberg.md).")
@json_option
@pass_state
def sync(state: TribState, root, name, catalog_uri, partition_by, as_json) -> None:
    """Bring the Iceberg table up to ROOT's latest version: one snapshot per trib commit, in order."""
    from tributary_read.iceberg.catalog import default_catalog_uri
    from tributary_read.iceberg.mirror import sync as mirror

    table = state.table(root)
    result = mirror(table, name, catalog_uri or default_catalog_uri(), partition_by)
    added = sum(s["added"] for s in result.snapshots)
    removed = sum(s["removed"] for s in result.snapshots)
    human = (f"{name} is at version {result.version} of {table.uri}: {len(result.snapshots)} snapshots "
             f"({added} files added, {removed} removed)" if result.snapshots
             else f"{name} is at version {result.version} of {table.uri}: nothing to register")
    emit(as_json, result.to_json(), human)
