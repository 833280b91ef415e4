"""Shared CLI plumbing: the typed state object, ``--json`` output, argument parsing."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import click

from tributary_read.exits import Terminated, raise_on_sigterm  # noqa: F401 - the commands import them from here

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


def json_option(f: Callable) -> Callable:
    """Add ``--json`` to a command: machine-readable output on stdout."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")(f)


def emit(as_json: bool, data: Any, human: Callable[[], None] | str | None = None) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))
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
