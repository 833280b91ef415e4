"""Root group and error mapping: one line per error, exit code from the error class."""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback

# While the modules load, Ctrl-C ends the process the plain way (killed by
# SIGINT, exit 130 in a shell, no traceback): a KeyboardInterrupt raised inside
# an import can surface as an unrelated error, e.g. a RuntimeError from a class
# body. Nothing has been read or written yet. Restored once loaded, below.
_SIGINT = signal.getsignal(signal.SIGINT)
if _SIGINT is signal.default_int_handler and threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGINT, signal.SIG_DFL)

import click

from tributary_read.errors import TributaryError

from .context import TribState


@click.group(context_settings={"auto_envvar_prefix": "TRIB", "help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks and debug detail.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="trib.toml with [storage] options and [tables.NAME] aliases (default ./trib.toml).")
@click.option("-o", "--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
              help="Storage option, e.g. endpoint_url=http://host:9000, region=…, kerb_ticket=…, user=…")
@click.version_option(package_name="tributary-read", prog_name="trib")
@click.pass_context
def cli(ctx: click.Context, verbose: bool, quiet: bool, config_path: str | None,
        storage_options: tuple[str, ...]) -> None:
    """Exact incremental loads on Hive/Spark: atomic manifest commits, exact file sets."""
    opts = {}
    for item in storage_options:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--storage-option")
        opts[key.strip()] = value
    ctx.obj = TribState(verbose=verbose, quiet=quiet, config_path=config_path, storage_options=opts)


def _register() -> None:
    from . import consumer, files, ingest, maintenance, partitions, table

    cli.add_command(table.table)
    cli.add_command(partitions.partitions)
    cli.add_command(ingest.ingest)
    cli.add_command(files.files)
    cli.add_command(consumer.consumer)
    for cmd in maintenance.COMMANDS:
        cli.add_command(cmd)
    try:
        from . import hive
    except ImportError:  # optional command groups land with their issues
        return
    for cmd in getattr(hive, "COMMANDS", []):
        cli.add_command(cmd)


_register()
if signal.getsignal(signal.SIGINT) is signal.SIG_DFL and _SIGINT is signal.default_int_handler:
    signal.signal(signal.SIGINT, _SIGINT)


def _verbose(argv: list[str]) -> bool:
    if os.environ.get("TRIB_VERBOSE", "").lower() in ("1", "true", "yes"):
        return True
    return any(a in ("-v", "--verbose") for a in argv)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: maps every failure to one stderr line and an exit code."""
    argv = sys.argv[1:] if argv is None else argv
    verbose = _verbose(argv)
    try:
        # Non-standalone click returns (not raises) the code of ctx.exit(n).
        rv = cli.main(args=argv, prog_name="trib", standalone_mode=False)
        if isinstance(rv, int) and rv:
            sys.exit(rv)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.UsageError as e:
        where = e.ctx.command_path if e.ctx else "trib"
        click.echo(f"trib: error: {_one_line(e.format_message())} (see '{where} --help')", err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        click.echo(f"trib: error: {_one_line(e.format_message())}", err=True)
        sys.exit(e.exit_code)
    except click.Abort:
        click.echo("trib: aborted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        click.echo("trib: interrupted", err=True)
        sys.exit(130)
    except TributaryError as e:
        if verbose:
            traceback.print_exc()
        click.echo(f"trib: error: {_one_line(e)}", err=True)
        sys.exit(e.exit_code)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as e:  # noqa: BLE001 - last resort: still one line
        if verbose:
            traceback.print_exc()
        click.echo(f"trib: unexpected {type(e).__name__}: {_one_line(e)} (run with -v for details)", err=True)
        sys.exit(1)
    sys.exit(0)


def _one_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return " ".join(text.split())


if __name__ == "__main__":  # pragma: no cover
    main()
