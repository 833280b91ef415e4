"""``trib table``: create and inspect tables."""

from __future__ import annotations

from dataclasses import replace

import click

from tributary_read.io.formats import COMPRESSIONS, FORMATS
from tributary_read.table.layout import Layout
from tributary_read.io.storage import open_storage
from tributary_read.table.config import (
    DEFAULT_FINAL_AFTER_MS, DEFAULT_MAX_BAD_FRACTION, Protocol, RollPolicy, Table, TableConfig, Tracking,
    parse_fraction, parse_size,
)
from tributary_read.timespec import format_duration_ms
from tributary_read.read.tracking import find_foreign

from .context import Duration, TribState, emit, json_option, key_values, pass_state


@click.group()
def table() -> None:
    """Create and inspect tables."""


@table.command("create")
@click.argument("root")
@click.option("--layout", required=True, help="Directory template, e.g. '{yyyy}_{MM}_{dd}/{HH}'.")
@click.option("--partition", required=True, help="Hive partition spec, e.g. 'dt={yyyy}{MM}{dd}{HH}'.")
@click.option("--format", "fmt", type=click.Choice(list(FORMATS)), default="jsonl", show_default=True)
@click.option("--compression", type=click.Choice(list(COMPRESSIONS)),
              help="Default: snappy for parquet (as Spark and Hive write it), none for text formats.")
@click.option("--timezone", default="UTC", show_default=True, help="Zone of the directory times.")
@click.option("--protocol", type=click.Choice(Protocol.values()),
              help="rename (default): files stay hidden until their commit, so Hive and Spark reading the "
                   "directories never see a killed writer's bytes. direct: final names at once, no rename "
                   "(faster; for tables only trib's readers read).")
@click.option("--roll-size", default="128M", show_default=True, help="Roll a file at this size.")
@click.option("--roll-records", type=int, default=0, show_default=True, help="Roll after N records (0 = off).")
@click.option("--roll-inactivity", type=Duration(), default="60s", show_default=True,
              help="Roll a file idle this long.")
@click.option("--tracking", type=click.Choice(Tracking.values()),
              help="How readers find files: both (default: trib-written files by the manifest, files other tools "
                   "write, now or later, by listing), manifest (only trib writes here: fastest), or listing.")
@click.option("--checkpoint-interval", type=int, default=100, show_default=True)
@click.option("--log-retention", type=Duration(), default="30d", show_default=True,
              help="Keep commit files this long (older ones below a checkpoint: removed by `trib clean`).")
@click.option("--max-bad-fraction", default=str(DEFAULT_MAX_BAD_FRACTION), show_default=True,
              help="trib ingest's default limit on records it cannot place (0.01 or 1%): over it, a run fails "
                   "(exit 3) before committing them.")
@click.option("--final-after", type=Duration(), default=format_duration_ms(DEFAULT_FINAL_AFTER_MS),
              show_default=True,
              help="trib ingest's default wait before a source's unterminated last line counts as complete.")
@json_option
@pass_state
def create(state: TribState, root, layout, partition, fmt, compression, timezone, protocol,
           roll_size, roll_records, roll_inactivity, checkpoint_interval, log_retention, tracking,
           max_bad_fraction, final_after, as_json) -> None:
    """Create a table at ROOT (which may already hold data written by other tools)."""
    config = TableConfig(
        layout=Layout(layout, partition, timezone),
        format=fmt,
        compression=compression or "",  # empty: the format's default
        protocol=protocol,  # None: the table layer decides (a new table hides uncommitted files)
        roll=RollPolicy(parse_size(roll_size), roll_records, roll_inactivity / 1000),
        checkpoint_interval=checkpoint_interval,
        log_retention_ms=log_retention,
        max_bad_fraction=parse_fraction(max_bad_fraction, "--max-bad-fraction"),
        final_after_ms=final_after,
    )
    if tracking is not None:  # else the table layer's default (TableConfig.tracking)
        config = replace(config, tracking=tracking)
    config.layout.check_one_to_one()  # Table.create's rule, asked before the directory is scanned
    root_uri, options = state.resolve(root)
    found, outside = find_foreign(open_storage(root_uri, options), config.layout)
    t = Table.create(root_uri, config, options)
    chosen = t.config.tracking
    msg = f"created table {t.uri}, tracking {chosen}, protocol {t.config.protocol}"
    if found and chosen == "both":
        msg += (f": it already holds {len(found)} files written by other tools (e.g. {found[0]}); consumers and "
                "--mode auto read those by listing and trib-written files by the manifest")
    emit(as_json, {"root": t.uri, **t.config.to_json(), "foreign_files": len(found), "outside_layout": outside},
         msg)
    if found and chosen == "manifest":
        click.echo(f"trib: warning: {len(found)} files written by other tools (e.g. {found[0]}) are not tracked "
                   f"by the manifest: runs that would leave them unread exit 13 (unless --allow-untracked); "
                   f"to read them too: trib table set {root} --tracking both", err=True)
    if outside:
        click.echo(f"trib: warning: {outside} files lie outside the layout's partition directories; no read "
                   f"returns them (is --layout right?)", err=True)


@table.command("set")
@click.argument("root")
@click.option("--tracking", type=click.Choice(Tracking.values()),
              help="manifest: trib-written files only; listing: files other tools write only; both.")
@click.option("--protocol", type=click.Choice(Protocol.values()),
              help="How later writers make files visible: rename (hidden until committed) or direct.")
@click.option("--max-bad-fraction", help="trib ingest's default limit on records it cannot place (0.01 or 1%).")
@click.option("--final-after", type=Duration(),
              help="trib ingest's default wait before an unterminated last line counts as complete.")
@click.option("--compact", "compact", multiple=True, metavar="KEY=VALUE",
              help="trib compact's setting (repeatable): min_age=1d, target_size=128M, min_files=5, period=1h "
                   "(default: the layout's), retention=7d (docs/compaction.md).")
@click.option("--iceberg", "iceberg", metavar="NS.NAME",
              help="Mirror every later commit into this Iceberg table ('' or --no-iceberg: stop); docs/iceberg.md.")
@click.option("--iceberg-catalog", metavar="URI",
              help="The mirror's catalog: sqlite:///PATH, postgresql://USER@HOST:PORT/DB or a Hive metastore "
                   "thrift://HOST:PORT (default: "
                   "$TRIB_ICEBERG_CATALOG, else a SQLite catalog under ~/.local/state/trib/iceberg), "
                   "recorded as a URI.")
@click.option("--iceberg-partition-by", metavar="hour(COL)|day(COL)",
              help="Also partition the Iceberg table, when the mirror creates it, by this transform of the "
                   "timestamp column COL (as trib iceberg sync --partition-by).")
@click.option("--no-iceberg", is_flag=True, help="Stop mirroring commits into Iceberg (the Iceberg table stays).")
@json_option
@pass_state
def set_(state: TribState, root, tracking, protocol, max_bad_fraction, final_after, compact, iceberg,
         iceberg_catalog, iceberg_partition_by, no_iceberg, as_json) -> None:
    """Change how ROOT's files are tracked, the protocol its writers use, trib ingest's or trib compact's defaults,
    or the Iceberg table it mirrors its commits into."""
    mirror_given = iceberg is not None or no_iceberg
    if tracking is None and protocol is None and max_bad_fraction is None and final_after is None and not compact \
            and not mirror_given:
        raise click.UsageError("give --tracking, --protocol, --max-bad-fraction, --final-after, --compact or --iceberg")
    if no_iceberg and iceberg:
        raise click.UsageError("--no-iceberg stops the mirror: drop --iceberg")
    if iceberg_catalog is not None and not iceberg:
        raise click.UsageError("--iceberg-catalog goes with --iceberg NS.NAME")
    if iceberg_partition_by is not None and not iceberg:
        raise click.UsageError("--iceberg-partition-by goes with --iceberg NS.NAME")
    t = state.table(root)
    old = t.config
    mirror = None
    if mirror_given:  # checked and recorded first: a refused mirror changes nothing else either
        from tributary_read.iceberg.auto import read_setting, save_setting

        before = read_setting(t)
        mirror = save_setting(t, iceberg or None, iceberg_catalog, iceberg_partition_by)
    t = t.set(tracking=tracking, protocol=protocol,
              max_bad_fraction=parse_fraction(max_bad_fraction, "--max-bad-fraction")
              if max_bad_fraction is not None else None,
              final_after_ms=final_after, compact=key_values(compact, "--compact"))
    changed = [f"{k} {a} -> {b}" for k, a, b in (
        ("tracking", old.tracking, t.config.tracking),
        ("protocol", old.protocol, t.config.protocol),
        ("max-bad-fraction", old.max_bad_fraction, t.config.max_bad_fraction),
        ("final-after", format_duration_ms(old.final_after_ms), format_duration_ms(t.config.final_after_ms)),
        ("compact", old.compact.to_json(), t.config.compact.to_json()),
    ) if a != b]
    data = {"root": t.uri, "previous_tracking": old.tracking, "previous_protocol": old.protocol, **t.config.to_json()}
    if mirror_given:
        data["iceberg"] = mirror.to_json() if mirror else None
        if before != mirror:
            changed.append(f"iceberg {_mirror_text(before)} -> {_mirror_text(mirror)}")
    emit(as_json, data, f"table {t.uri}: " + (", ".join(changed) or "unchanged"))
    if mirror and before != mirror:
        click.echo(f"trib: note: the next commit mirrors every version up to it; to register the versions "
                   f"committed so far now: {mirror.catch_up(t.uri)}", err=True)


def _mirror_text(m) -> str:
    by = f", partitioned also by {m.partition_by}" if m and m.partition_by else ""
    return f"{m.table} ({m.catalog}{by})" if m else "none"


@table.command("show")
@click.argument("root")
@json_option
@pass_state
def show(state: TribState, root, as_json) -> None:
    """Print a table's properties and latest version."""
    from tributary_read.iceberg.auto import read_setting

    t = state.table(root)
    latest = t.log.latest_version()
    mirror = read_setting(t)
    data = {"root": t.uri, "latest_version": latest, **t.config.to_json(),
            "iceberg": mirror.to_json() if mirror else None}

    def human():
        c = t.config
        click.echo(f"table     {t.uri}")
        click.echo(f"layout    {c.layout.directory}  ->  {c.layout.partition}  ({c.layout.timezone})")
        click.echo(f"format    {c.format} / {c.compression}")
        click.echo(f"protocol  {c.protocol}: {c.protocol.meaning}")
        click.echo(f"tracking  {c.tracking}")
        click.echo(f"ingest    max bad fraction {c.max_bad_fraction:g}, final after "
                   f"{format_duration_ms(c.final_after_ms)}")
        click.echo(f"version   {latest}")
        if mirror:
            click.echo(f"iceberg   every commit mirrored into {_mirror_text(mirror)}")
    emit(as_json, data, human)
