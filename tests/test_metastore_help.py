"""Every ``--metastore`` option's help names every kind of metastore (issue 29, item 6.1).

The kinds come from :data:`tributary_read.hive.uri.KINDS`, so a new kind fails this test until the one
help text (``cli/context.py`` :func:`metastore_help`) writes it; a command that takes only some kinds
still names the others, with why not.
"""

from __future__ import annotations

import click
import pytest

from tributary_read.cli.context import MetastoreOption
from tributary_read.cli.main import cli
from tributary_read.hive.uri import KINDS

pytestmark = pytest.mark.unit


def _metastore_options():
    """(command path, its --metastore option, a context for its help) of every command that has one."""
    out = []

    def walk(cmd, path, parent):
        ctx = click.Context(cmd, info_name=path[-1] if path else "trib", parent=parent)
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), [*path, name], ctx)
        for p in cmd.params:
            if "--metastore" in getattr(p, "opts", ()):
                out.append((" ".join(path), p, ctx))
    walk(cli, [], None)
    return out


def _written(kind) -> str:
    """How a kind is written: its example's scheme (``hs2://``, ``thrift://``) or whole name (``spark``)."""
    example = KINDS[kind].example
    return example.split("://")[0] + "://" if "://" in example else example


def test_every_metastore_option_names_every_kind():
    found = _metastore_options()
    assert {path for path, _, _ in found} >= {"partitions sync", "partitions configure", "hive create-table", "sql",
                                               "udfs register"}
    for path, opt, ctx in found:
        assert isinstance(opt, MetastoreOption), f"trib {path}: --metastore without the one help (metastore_option)"
        help_text = opt.get_help_record(ctx)[1]
        missing = [k.value for k in KINDS if _written(k) not in help_text]
        assert not missing, f"trib {path} --metastore help does not name {missing}: {help_text}"


def test_the_help_shows_on_the_command_line():
    from click.testing import CliRunner

    out = CliRunner().invoke(cli, ["hive", "create-table", "--help"], terminal_width=400).output
    assert "thrift://HOST:PORT" in out and "hs2://HOST:PORT" in out and "spark[?conf." in out
