"""``trib report lateness``: how late a table's data arrives, and what a naive schedule misses."""

from __future__ import annotations

import click

from tributary_read.errors import InvalidInputError

from .context import TribState, emit, json_option, parse_duration_ms, pass_state


@click.group()
def report() -> None:
    """Reports on a table's data: lateness (HTML with charts, or --json)."""


def _since(text: str | None, tz=None) -> int | None:
    """An instant (ISO-8601, epoch ms) or a duration back from now (7d); ``tz``, the table's, words a refusal."""
    if text is None:
        return None
    import time

    from tributary_read.read.window import parse_instant

    if text.strip()[-1:].isalpha() and text.strip()[:1].isdigit():  # 7d, 12h, 30m: a unit says duration
        try:
            return int(time.time() * 1000) - parse_duration_ms(text)
        except InvalidInputError:
            pass  # 2024-01-01T05:00:00Z ends in a letter too
    return parse_instant(text, tz, what="--since")


@report.command("lateness")
@click.argument("root")
@click.option("--since", help="Only partitions that end after this: ISO-8601, epoch ms, or a duration ago (7d).")
@click.option("--lag", "lags", multiple=True, metavar="DURATION",
              help="Also evaluate a naive job running this long after each partition's end (repeatable; "
                   "0s, 5m, 10m, 30m, 1h and 6h are always shown).")
@click.option("--out", type=click.Path(dir_okay=False), help="Write the HTML report here (default: no HTML).")
@click.option("--files", "with_files", is_flag=True, help="--json: list every file's arrival and delay too.")
@click.option("--layout", help="Plain directory: its template, e.g. '{yyyy}_{MM}_{dd}/{HH}'.")
@click.option("--partition", "partition_spec", help="Plain directory: partition spec (default dt=<all tokens>).")
@click.option("--timezone", help="Plain directory: zone of the directory times (default UTC).")
@json_option
@pass_state
def lateness(state: TribState, root, since, lags, out, with_files, layout, partition_spec, timezone, as_json) -> None:
    """Arrival delay per partition, what a naive job with each lag would miss, and the lag to choose."""
    from tributary_read.cli.files import open_source
    from tributary_read.report.lateness import format_duration, lateness as build

    lag_ms = [parse_duration_ms(x, "--lag") for x in lags]
    src, _ = open_source(state, root, layout, partition_spec, timezone)
    rep = build(src, lags_ms=lag_ms, since_ms=_since(since, src.layout.tz if src.layout else None))
    if out:
        from pathlib import Path

        from tributary_read.report.html import render

        page = render(rep)
        tmp = Path(out).with_name(Path(out).name + ".tmp")
        tmp.write_text(page, encoding="utf-8")
        tmp.replace(out)
    data = rep.to_json(files=with_files)
    data["report"] = str(out) if out else None

    def human() -> None:
        click.echo(f"{data['files']} files in {len(data['partitions'])} partitions of {data['table']}; "
                   f"{data['late_files']} landed after their partition ended"
                   + (f", the worst {format_duration(data['delay_ms']['max'])} late" if data["delay_ms"] else ""))
        click.echo("a naive job reading each partition at its end + lag misses:")
        for m in data["missed"]:
            rec = "" if m["records"] is None else f", {m['records']} records"
            click.echo(f"  lag {m['lag']:>6}: {m['files']} files ({100 * m['share_files']:.1f}%), "
                       f"{m['bytes']} bytes{rec}")
        for key, rec in data["recommended_lag"].items():
            if rec:
                click.echo(f"to catch {key[1:]}% of files: lag {rec['lag']}")
        click.echo(data["consumer"])
        for n in data["notes"]:
            click.echo(f"note: {n}")
        if out:
            click.echo(f"report: {out}")
    emit(as_json, data, human)


COMMANDS = [report]
