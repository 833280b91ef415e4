"""The lazy root group: what each run imports, and that laziness hides nothing.

A fresh interpreter per case (``sys.modules`` after a real ``trib`` run) is the
only honest way to see what a start-up imports; everything else is in-process.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner
from conftest import REPO
from helpers import LAYOUT, PARTITION

import tributary_read.cli
from tributary_read.cli.main import COMMANDS, LazyGroup, cli

pytestmark = pytest.mark.unit

#: Never loaded by a run that needs none of them: Hive, the writer, the local
#: services, pyarrow.compute and the optional client libraries.
HEAVY = ("tributary_read.hive", "tributary_read.services", "tributary_read.write", "pyarrow.compute",
         "pyspark", "pyhive", "thrift", "boto3", "botocore")

_PROBE = """
import json, runpy, sys
out, sys.argv = sys.argv[1], ["trib", *sys.argv[2:]]
code = None
try:
    runpy.run_module("tributary_read.cli.main", run_name="__main__", alter_sys=True)
except SystemExit as e:
    code = e.code
with open(out, "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def _modules_after(tmp_path, *args: str) -> set[str]:
    """The modules a real ``trib ARGS`` run has imported when it exits (it must exit 0)."""
    out = tmp_path / "modules.json"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(out), *args], capture_output=True, text=True,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert result["code"] in (0, None), (result["code"], proc.stderr)
    return set(result["modules"])


def _cli_modules(modules: set[str]) -> set[str]:
    """The CLI modules loaded besides ``main`` (which ran as ``__main__``)."""
    return {m.rsplit(".", 1)[1] for m in modules if m.startswith("tributary_read.cli.")} - {"main"}


def _heavy(modules: set[str], prefixes=HEAVY) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_version_and_help_import_no_command_and_no_pyarrow(tmp_path, args):
    modules = _modules_after(tmp_path, *args)
    assert _heavy(modules, (*HEAVY, "pyarrow", "tributary_read.table", "tributary_read.read",
                            "tributary_read.io")) == []
    assert _cli_modules(modules) == {"context"}


def test_a_command_loads_only_its_own_module(tmp_path):
    modules = _modules_after(tmp_path, "files", "--help")
    assert _heavy(modules) == []
    assert _cli_modules(modules) == {"context", "files"}


def test_files_and_consumer_runs_import_no_hive_writer_or_compute(tmp_path):
    root = str(tmp_path / "t")
    created = CliRunner().invoke(cli, ["table", "create", root, "--layout", LAYOUT, "--partition", PARTITION])
    assert created.exit_code == 0, created.output
    window = ["--start", "2020-06-17T00:00Z", "--end", "2020-06-17T03:00Z"]
    for args in (["files", root, "--json", *window], ["files", root, "--consumer", "c", "--json"],
                 ["consumer", "list", root, "--json"], ["log", root, "--json"], ["verify", root, "--json"]):
        modules = _modules_after(tmp_path, *args)
        assert _heavy(modules) == [], args
        assert "tributary_read.cli.ingest" not in modules


def test_every_lazy_entry_resolves_to_its_command_with_its_help_line():
    for name, (target, line) in COMMANDS.items():
        module_name, _, attr = target.partition(":")
        cmd = getattr(importlib.import_module(module_name), attr)
        assert isinstance(cmd, click.Command), target
        assert cmd.name == name, target
        assert not cmd.hidden
        assert cmd.get_short_help_str(10_000) == line, f"COMMANDS[{name!r}] help line differs from {target}"


def test_lazy_map_names_every_top_level_command():
    """A command defined in cli/ but missing from COMMANDS would silently vanish from trib."""
    commands, sub = set(), set()
    for info in pkgutil.iter_modules(tributary_read.cli.__path__):
        module = importlib.import_module(f"tributary_read.cli.{info.name}")
        for value in vars(module).values():
            if isinstance(value, click.Command) and value is not cli:
                commands.add(value)
                if isinstance(value, click.Group):
                    sub.update(value.commands.values())
    assert {c.name for c in commands - sub} == set(COMMANDS)


def test_help_table_is_what_an_eager_group_prints():
    """``trib --help`` from the map's lines is byte-for-byte the table the real commands give."""
    eager = click.Group("trib", params=cli.params, callback=cli.callback, context_settings=cli.context_settings,
                        help=cli.help)
    for name, (target, _) in COMMANDS.items():
        module_name, _, attr = target.partition(":")
        eager.add_command(getattr(importlib.import_module(module_name), attr), name)
    lazy = LazyGroup("trib", params=cli.params, callback=cli.callback, context_settings=cli.context_settings,
                     help=cli.help, lazy_commands=COMMANDS)
    runner = CliRunner()
    for width in (40, 80, 120):
        lazy_help = runner.invoke(lazy, ["--help"], terminal_width=width, prog_name="trib")
        eager_help = runner.invoke(eager, ["--help"], terminal_width=width, prog_name="trib")
        assert lazy_help.exit_code == 0 and eager_help.exit_code == 0
        assert lazy_help.stdout == eager_help.stdout
    for name in COMMANDS:
        assert f"\n  {name} " in lazy_help.stdout


def test_help_and_version_through_the_entry_point():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert result.stdout.startswith("Usage: trib [OPTIONS] COMMAND [ARGS]...")
    for name, (_, line) in COMMANDS.items():
        assert any(row.split()[:1] == [name] for row in result.stdout.splitlines()), name
    version = CliRunner().invoke(cli, ["--version"])
    assert version.exit_code == 0
    assert version.stdout == f"trib, version {tributary_read.__version__}\n"


def test_unknown_command_is_a_usage_error():
    result = CliRunner().invoke(cli, ["nosuch"])
    assert result.exit_code == 2
    assert result.stderr == "trib: error: No such command 'nosuch'. (see 'trib --help')\n"
