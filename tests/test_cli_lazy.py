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
from helpers import LAYOUT, PARTITION, make_source

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


def _modules_after(tmp_path, *args: str, exit_code: int = 0) -> set[str]:
    """The modules a real ``trib ARGS`` run has imported when it exits (with ``exit_code``, 0 by default)."""
    out = tmp_path / "modules.json"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(out), *args], capture_output=True, text=True,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr  # the probe catches SystemExit and records its code
    result = json.loads(out.read_text())
    assert (result["code"] or 0) == exit_code, (result["code"], proc.stderr)
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


#: What a read command (files, verify, log) never loads: pyarrow and the writer (issue 26, item 6).
READ_HEAVY = (*HEAVY, "pyarrow", "tributary_read.io.sinks", "tributary_read.io.parquet_schema",
              "tributary_read.cli.ingest")


def _parquet_rename_table(tmp_path):
    """A rename-protocol Parquet table with one commit, a committed file left under its staged name
    (a writer killed between its commit and its renames), and a foreign file an uploader put there."""
    root = tmp_path / "t"
    runner = CliRunner()
    created = runner.invoke(cli, ["table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION,
                                  "--format", "parquet", "--protocol", "rename"])
    assert created.exit_code == 0, created.output
    source = make_source(tmp_path / "src.jsonl", 60, hours=6)
    ingested = runner.invoke(cli, ["ingest", str(root), "--source", str(source), "--app-id", "a",
                                   "--time-field", "ts"])
    assert ingested.exit_code == 0, ingested.output
    parts = sorted(root.rglob("part-*.parquet"))
    assert len(parts) > 2
    parts[0].rename(parts[0].with_name(f".{parts[0].name}.inprogress"))  # committed, not yet renamed
    (parts[1].parent / "foreign.parquet").write_bytes(parts[1].read_bytes())
    return str(root)


def test_read_commands_on_a_parquet_rename_table_import_no_pyarrow_and_no_writer(tmp_path):
    """trib files, verify and log list and read metadata only: neither pyarrow nor the writer is imported,
    also when files must be rolled forward, a consumer plans, or a foreign file is listed."""
    root = _parquet_rename_table(tmp_path)
    window = ["--start", "2020-06-01T00:00Z", "--end", "2100-01-01T00:00Z"]
    # verify reports the pending roll-forward (exit 9); the first files run finishes it, then verify passes.
    runs = ((9, ["verify", root, "--json"]), (0, ["log", root]), (0, ["log", root, "--json"]),
            (0, ["files", root, *window]), (0, ["files", root, "--json", *window]),
            (0, ["files", root, "--consumer", "c", "--json"]),
            (0, ["files", root, "--schedule-time", "2020-06-24T05:00Z", "--period", "1h", "--lag", "10m"]),
            (0, ["verify", root]))
    for code, args in runs:
        modules = _modules_after(tmp_path, *args, exit_code=code)
        assert _heavy(modules, READ_HEAVY) == [], args


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
