"""Root group and error mapping: one line per error, exit code from the error class.

The root group is lazy (click's LazyGroup pattern): :data:`COMMANDS` names each
command's module and the line ``trib --help`` shows for it, so a run imports
only the command it runs. ``trib --version`` and ``trib --help`` load no
command module at all, and ``trib files`` never loads Hive or the writer: a
scheduler starts trib many times an hour, and start-up was most of a run.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import threading


@contextlib.contextmanager
def _plain_sigint():
    """While modules load, Ctrl-C ends the process the plain way.

    Killed by SIGINT (exit 130 in a shell, no traceback): a KeyboardInterrupt
    raised inside an import can surface as an unrelated error, e.g. a
    RuntimeError from a class body. Nothing has been read or written yet.
    """
    swap = (signal.getsignal(signal.SIGINT) is signal.default_int_handler
            and threading.current_thread() is threading.main_thread())
    if swap:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        yield
    finally:
        if swap and signal.getsignal(signal.SIGINT) is signal.SIG_DFL:
            signal.signal(signal.SIGINT, signal.default_int_handler)


with _plain_sigint():
    import click

    from tributary_read import __version__
    from tributary_read.exits import INTERRUPTED, Terminated, error_object, exit_line, one_line

    from tributary_read.cli.context import JSON_ASKED, JSON_EMITTED, TribState

#: command name -> ("module:attribute", the line ``trib --help`` shows for it).
#: The line is the command's own short help (its docstring's first sentence),
#: repeated here so that ``trib --help`` imports no command module;
#: tests/test_cli_lazy.py checks that every entry resolves and its line matches.
COMMANDS: dict[str, tuple[str, str]] = {
    "clean": ("tributary_read.cli.maintenance:clean",
              "Delete orphans and expired files older than the grace period; trim the log."),
    "compact": ("tributary_read.cli.compact:compact",
                "Merge small files of closed partitions into large ones, as one replace commit no reader counts twice."),
    "consumer": ("tributary_read.cli.consumer:consumer",
                 "Durable consumers: exactly-once delivery across scheduled runs."),
    "dead-letters": ("tributary_read.cli.dead_letters:dead_letters",
                     "List the records ingest could not place, and replay them exactly once."),
    "demo": ("tributary_read.cli.demo:demo",
             "Replay a day of late-arriving logs; run the hourly job naive and trib's way, and count each hour's "
             "distinct users naive, append and restate; compare; report lateness."),
    "doctor": ("tributary_read.cli.doctor:doctor",
               "Run one tiny task on a Spark master's executors: their Python, pyarrow and trib."),
    "etl": ("tributary_read.cli.etl:etl",
            "Scheduled incremental ETL: inputs -> Spark SQL -> one exactly-once commit -> Hive partitions."),
    "expire": ("tributary_read.cli.maintenance:expire",
               "Remove whole partitions older than --older-than from the table, in one commit."),
    "files": ("tributary_read.cli.files:files",
              "Print the exact files of ROOT for this run, one per line."),
    "hive": ("tributary_read.cli.hive:hive",
             "Run a local Hive metastore + HiveServer2 (Spark Thrift Server) on 127.0.0.1."),
    "iceberg": ("tributary_read.cli.iceberg:iceberg",
                "Mirror a Parquet trib table, or a landing zone of Parquet files, into Iceberg: each commit or file "
                "registered once, no data rewritten."),
    "ingest": ("tributary_read.cli.ingest:ingest",
               "Append a file's, a log directory's or Kafka topics' new records to ROOT, exactly once."),
    "log": ("tributary_read.cli.maintenance:log",
            "List commits: version, time, app, files, records, offsets."),
    "metrics": ("tributary_read.cli.metrics:metrics",
                "Print Prometheus metrics for tables, their consumers and ETL jobs."),
    "partitions": ("tributary_read.cli.partitions:partitions",
                   "Mount a table's partition directories as Hive partitions; commit partitions after writes."),
    "recover": ("tributary_read.cli.maintenance:recover",
                "Print the app's last committed transaction (and finish its pending renames)."),
    "report": ("tributary_read.cli.report:report",
               "Reports on a table's data: lateness (HTML with charts, or --json)."),
    "spark": ("tributary_read.cli.spark:spark",
              "Run a local Spark Connect server on 127.0.0.1: a warm Spark for trib etl run."),
    "sql": ("tributary_read.cli.sql:sql",
            "Run a Hive SQL script on Spark, with the mtime-window filter and trib's UDFs in place."),
    "table": ("tributary_read.cli.table:table", "Create and inspect tables."),
    "udfs": ("tributary_read.cli.udfs:udfs",
             "The hive_udfs jar: seed 002's mtime-window path filter and trib's Hive UDFs."),
    "verify": ("tributary_read.cli.maintenance:verify",
               "Check every committed file exists with its recorded size; list orphans."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported when resolved, not when listed."""

    def __init__(self, *args, lazy_commands: dict[str, tuple[str, str]] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_commands and cmd_name not in self.commands:
            self.add_command(self._load(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def _load(self, cmd_name: str) -> click.Command:
        module_name, _, attr = self.lazy_commands[cmd_name][0].partition(":")
        with _plain_sigint():
            cmd = getattr(importlib.import_module(module_name), attr)
        if not isinstance(cmd, click.Command):
            raise TypeError(f"{module_name}:{attr} is not a click command")
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command table from :data:`COMMANDS`'s lines: listing imports nothing."""
        names = [n for n in self.list_commands(ctx) if n in self.lazy_commands or not self.commands[n].hidden]
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            # A stand-in command shortens the line exactly as the real one would.
            if name in self.commands:
                cmd = self.commands[name]
            else:
                cmd = click.Command(name, help=self.lazy_commands[name][1])
            rows.append((name, cmd.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


class TribGroup(LazyGroup):
    """The root group: it maps every failure to one stderr line and an exit code.

    The mapping lives in :meth:`main` rather than around it, so the console
    script and click's ``CliRunner`` (the tests) run the very same code.
    """

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, *,
             owns_process: bool = False, **extra):
        """Run trib (always standalone): one stderr line per failure, the exit code of its class.

        ``owns_process``: the console script, whose Spark (if it started one) is its own to stop
        before the last line; a caller in a process that shares its Spark (a test) keeps it.
        """
        argv = sys.argv[1:] if args is None else list(args)
        verbose = _verbose(argv)
        asked, emitted = JSON_ASKED.set(False), JSON_EMITTED.set(False)
        try:
            # Non-standalone click returns (not raises) the code of ctx.exit(n).
            rv = super().main(args=argv, prog_name=prog_name or "trib", complete_var=complete_var,
                              standalone_mode=False, **extra)
            if isinstance(rv, int) and rv:
                sys.exit(rv)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.UsageError as e:
            where = e.ctx.command_path if e.ctx else "trib"
            has_json = e.ctx is not None and any(p.name == "as_json" for p in e.ctx.command.params)
            _fail(f"trib: error: {one_line(e.format_message())} (see '{where} --help')", e.exit_code,
                  "UsageError", has_json and _json_wanted(argv))
        except click.ClickException as e:
            _fail(f"trib: error: {one_line(e.format_message())}", e.exit_code, type(e).__name__, _json_wanted(argv))
        except click.Abort:
            _fail("trib: aborted", INTERRUPTED, "Abort", _json_wanted(argv))
        except (KeyboardInterrupt, Terminated, Exception) as e:  # noqa: BLE001 - last resort: still one line
            if verbose and isinstance(e, Exception) and not isinstance(e, BrokenPipeError):
                _print_traceback()
            from .flags import FLAGS  # the flags where the library names its parameters

            if owns_process and "pyspark" in sys.modules and isinstance(e, Exception):
                from tributary_read.spark.session import end_before_last_line

                end_before_last_line()  # so that trib's line is the last one
            line, code = exit_line(e, FLAGS)
            _fail(line, code, type(e).__name__, _json_wanted(argv))
        finally:
            JSON_ASKED.reset(asked)
            JSON_EMITTED.reset(emitted)
        sys.exit(0)


def _json_wanted(argv: list[str]) -> bool:
    """The failing command was asked for ``--json`` (parsed, or on its command line: an error may come
    before click reaches the flag, a usage error or a bad value of an option given before it) and has
    not printed its JSON document already (that document carries the outcome: stdout stays one)."""
    asked = JSON_ASKED.get() or "--json" in (argv[:argv.index("--")] if "--" in argv else argv)
    return asked and not JSON_EMITTED.get()


def _fail(line: str | None, code: int, cls: str, as_json: bool) -> None:
    """End the process: under ``--json`` the error object is stdout's last line; stderr's line as always."""
    if line and as_json:
        try:
            click.echo(error_object(line, code, cls))
        except (BrokenPipeError, OSError):  # stdout's reader went away: stderr still gets the line
            pass
    if line:
        click.echo(line, err=True)
    sys.exit(code)


@click.group("trib", cls=TribGroup, lazy_commands=COMMANDS,
             context_settings={"auto_envvar_prefix": "TRIB", "help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks and debug detail.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="trib.toml with [storage] options and [tables.NAME] aliases (default ./trib.toml).")
@click.option("-o", "--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
              help="Storage option, e.g. endpoint_url=http://host:9000, region=…, kerb_ticket=…, user=…")
@click.option("--principal", metavar="NAME@REALM",
              help="Kerberos principal to log in as from --keytab; trib renews its ticket (env TRIB_PRINCIPAL, "
                   "or [hive] principal in trib.toml).")
@click.option("--keytab", type=click.Path(dir_okay=False),
              help="Keytab holding the principal's key (env TRIB_KEYTAB, or [hive] keytab in trib.toml).")
@click.version_option(__version__, prog_name="trib")
@click.pass_context
def cli(ctx: click.Context, verbose: bool, quiet: bool, config_path: str | None,
        storage_options: tuple[str, ...], principal: str | None, keytab: str | None) -> None:
    """Exact incremental loads on Hive/Spark: atomic manifest commits, exact file sets."""
    opts = {}
    for item in storage_options:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--storage-option")
        opts[key.strip()] = value
    ctx.obj = state = TribState(verbose=verbose, quiet=quiet, config_path=config_path, storage_options=opts)
    import tributary_read.kerberos as kerberos

    # Read only when a Kerberos connection opens: a run without one never loads trib.toml for it.
    kerberos.configure(principal, keytab, config=lambda: state.config.get("hive") or {})
    if verbose:
        _log_to_stderr()


def _log_to_stderr() -> None:
    """-v: the library's log records (librdkafka's lines among them) on stderr, once per process."""
    import logging

    log = logging.getLogger("tributary_read")
    if not any(getattr(h, "trib_cli", False) for h in log.handlers):
        h = logging.StreamHandler()
        h.setFormatter(logging.Formatter("trib: %(name)s: %(message)s"))
        h.trib_cli = True  # type: ignore[attr-defined]
        log.addHandler(h)
        log.setLevel(logging.DEBUG)


def _verbose(argv: list[str]) -> bool:
    if os.environ.get("TRIB_VERBOSE", "").lower() in ("1", "true", "yes"):
        return True
    return any(a in ("-v", "--verbose") for a in argv)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: maps every failure to one stderr line and an exit code."""
    cli.main(args=argv, prog_name="trib", owns_process=True)


def _print_traceback() -> None:
    import traceback  # only with -v: not worth loading on every start

    traceback.print_exc()


if __name__ == "__main__":  # pragma: no cover
    main()
