"""``trib spark up|status|down``: a local Spark Connect server, the warm Spark ``trib etl run`` can use.

Thin over :mod:`tributary_read.services.spark_connect`, which owns the process and its state.
"""

from __future__ import annotations

import click

from tributary_read.errors import MetastoreError

from .context import emit, json_option

_DIR_HELP = "State dir: spark-connect.json, logs, JVM temp files, warehouse (without the Hive pair)."


def _dir_option(f):
    return click.option("--dir", "dir_", default=".trib/spark", show_default=True,
                        type=click.Path(file_okay=False), help=_DIR_HELP)(f)


@click.group()
def spark() -> None:
    """Run a local Spark Connect server on 127.0.0.1: a warm Spark for trib etl run."""


@spark.command()
@_dir_option
@click.option("--port", default=15002, show_default=True, type=click.IntRange(0, 65535),
              help="gRPC port (0: a free one).")
@click.option("--hive-dir", default=".trib/hive", show_default=True, type=click.Path(file_okay=False),
              help="Where `trib hive up` keeps its pair: when it runs, its metastore is the server's catalog.")
@click.option("--timeout", default=180.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds to wait until the server accepts connections.")
@json_option
def up(dir_, port, hive_dir, timeout, as_json) -> None:
    """Start the server in the background (a running one is reported, not started twice)."""
    from tributary_read.services import spark_connect as sc

    if not sc.alive(sc.load(dir_)):  # stderr, so --json output stays parseable
        click.echo(f"trib: starting a Spark Connect server in {dir_}, up to {timeout:g}s...", err=True)
    s, running = sc.start(dir_, port, hive_dir=hive_dir, timeout=timeout)
    data = {"dir": s.dir, "port": s.port, "pid": s.pid, "remote": s.remote, "metastore_uri": s.metastore_uri,
            "warehouse_dir": s.warehouse_uri, "already_running": running}

    def human() -> None:
        click.echo(f"{'already running' if running else 'started'} from {s.dir}")
        click.echo(f"  Spark Connect  {s.remote}  (pid {s.pid})")
        click.echo(f"  catalog        {s.metastore_uri or 'in-memory (no Hive pair ran at start)'}")
        click.echo("use it:")
        click.echo(f"  export TRIB_SPARK_REMOTE={s.remote}    (or [spark] remote = \"{s.remote}\" in a job)")
        click.echo(f"stop with: trib spark down --dir {dir_}")
    emit(as_json, data, human)


@spark.command()
@_dir_option
@json_option
def status(dir_, as_json) -> None:
    """Show the server's pid, port and liveness; exit 8 unless it runs."""
    from tributary_read.services import spark_connect as sc

    st = sc.status(dir_)

    def human() -> None:
        if st["pid"] is None:
            click.echo("Spark Connect  NOT RUNNING  never started or stopped")
        else:
            click.echo(f"Spark Connect  {'alive' if st['alive'] else 'NOT RUNNING'}  {st['remote']} (pid {st['pid']})")
    emit(as_json, {"dir": dir_, **st}, human)
    if not st["alive"]:
        raise click.exceptions.Exit(MetastoreError.exit_code)


@spark.command()
@_dir_option
@json_option
def down(dir_, as_json) -> None:
    """Stop the server `up` started from DIR (SIGTERM, then SIGKILL); a no-op if none runs."""
    from tributary_read.services import spark_connect as sc

    was = sc.stop(dir_)
    emit(as_json, {"dir": dir_, "was_alive": was, "stopped": True},
         "stopped the Spark Connect server" if was else "stopped (nothing was running)")


COMMANDS = [spark]
