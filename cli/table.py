"""``trib table``: create and inspect tables."""

from __future__ import annotations

import click

from tributary_read.formats import COMPRESSIONS, FORMATS
from tributary_read.layout import Layout
from tributary_read.table import PROTOCOLS, RollPolicy, Table, TableConfig, parse_size

from .context import Duration, TribState, emit, json_option, pass_state


@click.group()
def table() -> None:
    """Create and inspect tables."""


@table.command("create")
@click.argument("root")
@click.option("--layout", required=True, help="Directory template, e.g. '{yyyy}_{MM}_{dd}/{HH}'.")
@click.option("--partition", required=True, help="Hive partition spec, e.g. 'dt={yyyy}{MM}{dd}{HH}'.")
@click.option("--format", "fmt", type=click.Choice(list(FORMATS)), default="jsonl", show_default=True)
@click.option("--compression", type=click.Choice(list(COMPRESSIONS)), default="none", show_default=True)
@click.option("--timezone", default="UTC", show_default=True, help="Zone of the directory times.")
@click.option("--protocol", type=click.Choice(PROTOCOLS), default="direct", show_default=True,
              help="direct: final names, no rename (object stores). rename: hidden until committed.")
@click.option("--roll-size", default="128M", show_default=True, help="Roll a file at this size.")
@click.option("--roll-records", type=int, default=0, show_default=True, help="Roll after N records (0 = off).")
@click.option("--roll-inactivity", type=Duration(), default="60s", show_default=True,
              help="Roll a file idle this long.")
@click.option("--checkpoint-interval", type=int, default=100, show_default=True)
@json_option
@pass_state
def create(state: TribState, root, layout, partition, fmt, compression, timezone, protocol,
           roll_size, roll_records, roll_inactivity, checkpoint_interval, as_json) -> None:
    """Create a table at ROOT (which may already hold data written by other tools)."""
    config = TableConfig(
        layout=Layout(layout, partition, timezone),
        format=fmt,
        compression=compression,
        protocol=protocol,
        roll=RollPolicy(parse_size(roll_size), roll_records, roll_inactivity / 1000),
        checkpoint_interval=checkpoint_interval,
    )
    root_uri, options = state.resolve(root)
    t = Table.create(root_uri, config, options)
    emit(as_json, {"root": t.uri, **t.config.to_json()}, f"created table {t.uri}")


@table.command("show")
@click.argument("root")
@json_option
@pass_state
def show(state: TribState, root, as_json) -> None:
    """Print a table's properties and latest version."""
    t = state.table(root)
    latest = t.log.latest_version()
    data = {"root": t.uri, "latest_version": latest, **t.config.to_json()}

    def human():
        c = t.config
        click.echo(f"table     {t.uri}")
        click.echo(f"layout    {c.layout.directory}  ->  {c.layout.partition}  ({c.layout.timezone})")
        click.echo(f"format    {c.format} / {c.compression}, protocol {c.protocol}")
        click.echo(f"version   {latest}")
    emit(as_json, data, human)
