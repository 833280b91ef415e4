"""Shared CLI plumbing: the typed state object, ``--json`` output, argument parsing."""

from __future__ import annotations

import contextvars
import json
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import click

from tributary_read.exits import Terminated, raise_on_sigterm, until_signal  # noqa: F401 - the commands import them from here

if TYPE_CHECKING:  # pragma: no cover
    from tributary_read.table.config import Table


@dataclass
class TribState:
    """What the root group parsed; every command receives it via ``@pass_state``."""

    verbose: bool = False
    quiet: bool = False
    config_path: str | None = None
    #: -o KEY=VALUE overrides, applied over trib.toml and environment variables.
    storage_options: dict[str, str] = field(default_factory=dict)
    _config: dict | None = field(default=None, repr=False)

    @property
    def config(self) -> dict:
        if self._config is None:
            # Imported here: the root group builds a TribState on every run,
            # including ``trib --help``, which must not load pyarrow.
            from tributary_read.table.config import load_config

            self._config = load_config(self.config_path)
        return self._config

    def resolve(self, name: str) -> tuple[str, dict[str, str]]:
        from tributary_read.table.config import resolve_table

        root, options = resolve_table(name, self.config)
        return root, {**options, **self.storage_options}

    def table(self, name: str) -> Table:
        from tributary_read.table.config import Table

        root, options = self.resolve(name)
        return Table.load(root, options)

    def progress_enabled(self) -> bool:
        return not self.quiet and sys.stderr.isatty()


pass_state = click.make_pass_decorator(TribState, ensure=True)


#: The running command was asked for ``--json`` (on its command line or from ``$TRIB_…_JSON``): set while
#: its options are parsed, so that a failure also ends stdout with its error object (``TribGroup.main``).
JSON_ASKED: contextvars.ContextVar[bool] = contextvars.ContextVar("trib_json_asked", default=False)
#: The running command printed its JSON document (:func:`emit`). A failure after it (a sync whose plan was
#: refused, an ingest whose partition commit failed) adds no error object: the document carries the
#: outcome, and stdout stays one document that ``json.loads`` reads.
JSON_EMITTED: contextvars.ContextVar[bool] = contextvars.ContextVar("trib_json_emitted", default=False)


def _note_json(ctx, param, value):
    if value:
        JSON_ASKED.set(True)
    return value


def json_option(f: Callable) -> Callable:
    """Add ``--json`` to a command: machine-readable output on stdout (a failure's too: docs/concepts/exit-codes.md)."""
    return click.option("--json", "as_json", is_flag=True, callback=_note_json,
                        help="Print JSON on stdout (a failure: {\"error\": {...}}, its last line).")(f)


#: How each kind of metastore is written on a command line (the kinds are those of hive/uri.py KINDS).
_METASTORE_FORMS = {
    "hs2": "hs2://HOST:PORT[/DB]?auth=NONE|NOSASL|LDAP|KERBEROS&user=… (HiveServer2; password from "
           "$TRIB_HS2_PASSWORD or password_file=FILE; ssl=true for TLS)",
    "thrift": "thrift://HOST:PORT[?auth=NOSASL|KERBEROS] (a Hive Metastore's own Thrift API)",
    "spark": "spark[?conf.KEY=VALUE…] (a Spark session's catalog)",
}


class MetastoreOption(click.Option):
    """``--metastore``: its help names every kind of metastore, the ones this command takes and why not
    the others, so a new kind shows in every command's help at once.

    The help is written when it is shown, not when the command module loads: naming the kinds
    imports the Hive package, which a command's run need not load.
    """

    def __init__(self, *args, accepts=None, note: str = "", refusals=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.accepts, self.note, self.refusals = accepts, note, dict(refusals or {})

    def get_help_record(self, ctx):
        self.help = metastore_help(self.accepts, self.note, self.refusals)
        return super().get_help_record(ctx)


def metastore_help(accepts=None, note: str = "", refusals=None) -> str:
    """The ``--metastore`` help: ``accepts`` (kind values; default every kind) with their forms, then
    each kind not accepted with the reason in ``refusals``, then ``note``."""
    from tributary_read.hive.uri import KINDS

    kinds = [k.value for k in KINDS]
    accepted = [k for k in kinds if accepts is None or k in accepts]
    text = ", ".join(_METASTORE_FORMS[k] for k in accepted[:-1])
    text = f"{text} or {_METASTORE_FORMS[accepted[-1]]}" if text else _METASTORE_FORMS[accepted[-1]]
    for k in kinds:
        if k not in accepted:
            text += f". Not {_METASTORE_FORMS[k].split('[')[0].split(' (')[0]}: {(refusals or {})[k]}"
    return f"{text}.{' ' + note if note else ''}"


def metastore_option(*, accepts=None, note: str = "", refusals=None, envvar: bool = True):
    """Add ``--metastore`` (default ``$TRIB_METASTORE``) with the one help text (:func:`metastore_help`)."""
    return click.option("--metastore", cls=MetastoreOption, envvar="TRIB_METASTORE" if envvar else None,
                        accepts=accepts, note=note, refusals=refusals)


def emit(as_json: bool, data: Any, human: Callable[[], None] | str | None = None) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))
        JSON_EMITTED.set(True)
    elif callable(human):
        human()
    elif human is not None:
        click.echo(human)


def parse_duration_ms(text: str, what: str = "duration") -> int:
    """The one duration parser (:mod:`tributary_read.timespec`): a unit is required, ``0`` alone aside."""
    from tributary_read.timespec import parse_duration_ms as parse

    return parse(text, what)


class Duration(click.ParamType):
    """A click option holding a duration in ms, parsed by :mod:`tributary_read.timespec`.

    A bad value is the same InvalidInputError (exit 3) as a bad duration in a
    job file, not a usage error: one spelling, one message, one exit code.
    """

    name = "duration"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        return parse_duration_ms(value, param.opts[0] if param is not None and param.opts else "duration")


def echo_capped(lines: list[str], cap: int = 10) -> None:
    """Print at most ``cap`` lines; the full list is one ``--json`` away."""
    for line in lines[:cap]:
        click.echo(line)
    if len(lines) > cap:
        click.echo(f"... and {len(lines) - cap} more (use --json for all)")


def key_values(items, flag: str, key: str = "KEY", *, settings: bool = False) -> dict[str, str]:
    """``KEY=VALUE`` options (``--var``, ``--conf``) as a dict; a malformed one is bad input naming its flag.

    ``settings``: the keys are client settings (Spark conf), so one that holds a secret is
    refused: argv shows in ``ps``, shell history and scheduler logs.
    """
    from tributary_read.errors import InvalidInputError
    from tributary_read.secret import is_secret

    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise InvalidInputError(f"bad {flag} {item!r}: use {flag} {key}=VALUE")
        if settings and is_secret(name):
            raise InvalidInputError(f"{flag} {name.strip()} holds a secret: put it in spark-defaults.conf "
                                    "($SPARK_CONF_DIR) or hive-site.xml, not on a command line")
        out[name.strip()] = value
    return out
