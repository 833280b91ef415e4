"""``trib metrics``: lag and freshness of tables, their consumers and ETL jobs, for Prometheus."""

from __future__ import annotations

import click

from .context import TribState, emit, json_option, pass_state, raise_on_sigterm, until_signal


@click.command("metrics")
@click.argument("roots", nargs=-1, required=True, metavar="ROOT...")
@click.option("--state-dir", "state_dirs", multiple=True,
              help="Also read the consumers kept in this directory (repeatable).")
@click.option("--list", "listing", is_flag=True,
              help="Also list the tables of listing consumers to count their pending files (a listing each; "
                   "writes nothing). Without it they show only their ack and plan times.")
@click.option("--textfile", "textfile", metavar="DIR",
              help="Write DIR/trib.prom atomically (node_exporter's textfile collector) instead of printing.")
@click.option("--serve", "serve", metavar="HOST:PORT",
              help="Serve /metrics until stopped, read afresh at each scrape (HOST defaults to 127.0.0.1).")
@json_option
@pass_state
def metrics(state: TribState, roots, state_dirs, listing, textfile, serve, as_json) -> None:
    """Print Prometheus metrics for tables, their consumers and ETL jobs."""
    from tributary_read.errors import InvalidInputError
    from tributary_read.metrics.collect import read_tables
    from tributary_read.metrics import exposition

    tables = [state.resolve(r) for r in roots]
    last: list = []

    def collect():
        reading = read_tables(tables, state_dirs, listing=listing)
        if serve:  # each scrape: the tables that could be read, and a line for each that could not
            for where, e in reading.errors.items():
                click.echo(f"trib metrics: {where}: {e}", err=True)
        elif all(root in reading.errors for root, _ in tables):  # nothing to print: an error is the outcome
            _fail(reading.errors)
        last[:] = [reading]
        return reading.samples

    if serve:
        host, _, port = serve.rpartition(":")
        if not port.isdigit():
            raise InvalidInputError(f"--serve {serve!r}: give HOST:PORT or :PORT")
        raise_on_sigterm()
        exposition.serve(host or "127.0.0.1", int(port), collect)
        click.echo(f"trib metrics: serving http://{host or '127.0.0.1'}:{port}/metrics", err=True)
        until_signal()
    if textfile:
        path = exposition.write_textfile(textfile, collect)
        emit(as_json, {"textfile": path}, f"wrote {path}")
    elif as_json:
        emit(True, [s.to_json() for s in collect()])
    else:
        click.echo(exposition.text(collect), nl=False)
    if last and last[0].errors:  # printed what could be read; the exit code says the rest could not be
        _fail(last[0].errors)


def _fail(errors) -> None:
    """A line for each error but the first, which ends the command (its line, its exit code)."""
    for where, e in list(errors.items())[1:]:
        click.echo(f"trib metrics: {where}: {e}", err=True)
    raise next(iter(errors.values()))
