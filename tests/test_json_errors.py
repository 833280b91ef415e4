"""``--json`` failures: stdout ends with one error object, stderr keeps its one line (README, *Exit codes*).

Every command that has ``--json`` is found by walking the click tree, so a new one fails
:func:`test_every_json_command_has_a_failing_case` until it has a case here. Each case is a real
failure of that command (bad input, a missing table, or its command line refused) run through the
root group, as a scheduler sees it.
"""

from __future__ import annotations

import json

import click
import pytest
from conftest import invoke_trib
from helpers import LAYOUT, PARTITION

import tributary_read.errors as errors
from tributary_read.cli.context import json_option
from tributary_read.cli.main import TribGroup, cli

pytestmark = pytest.mark.unit

NO_ROOT = "/nonexistent/trib-json-errors"


def _json_commands() -> list[str]:
    """Paths (``consumer ack``) of every command with a ``--json`` option."""
    out = []

    def walk(cmd, path):
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), [*path, name])
        elif any(p.name == "as_json" for p in cmd.params):
            out.append(" ".join(path))
    walk(cli, [])
    return sorted(out)


@pytest.fixture
def a_file(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("x")
    return str(f)


@pytest.fixture
def script(tmp_path):
    f = tmp_path / "q.sql"
    f.write_text("SELECT 1;\n")
    return str(f)


#: command path -> (its arguments after the path, the exit code). ``{file}``: an existing file where a
#: directory is wanted (click refuses it: exit 2); ``{script}``: a one-statement SQL file.
CASES: dict[str, tuple[list[str], int]] = {
    "clean": ([NO_ROOT], 4),
    "compact": ([NO_ROOT], 4),
    "consumer ack": ([NO_ROOT, "c", "p"], 4),
    "consumer list": ([NO_ROOT], 4),
    "consumer replay": ([NO_ROOT, "c", "--partition", "dt=2024010100"], 4),
    "consumer reset": ([NO_ROOT, "c"], 3),
    "consumer show": ([NO_ROOT, "c"], 4),
    "consumer skip": ([NO_ROOT, "c", "f"], 4),
    "dead-letters list": ([NO_ROOT], 4),
    "dead-letters replay": ([NO_ROOT], 3),
    "demo": (["--hive-dir", "{file}"], 2),
    "doctor": (["--conf", "spark.ssl.keyPassword=x"], 3),
    "etl check": ([NO_ROOT + ".toml"], 3),
    "etl run": ([NO_ROOT + ".toml", "--schedule-time", "2024-01-01T00:00Z"], 3),
    "etl submit": ([NO_ROOT + ".toml", "--schedule-time", "2024-01-01T00:00Z"], 3),
    "etl stream": ([NO_ROOT + ".toml", "--available-now"], 3),
    "expire": ([NO_ROOT, "--older-than", "1d"], 4),
    "files": ([NO_ROOT, "--all"], 4),
    "hive create-table": ([], 3),
    "hive down": (["--dir", "{file}"], 2),
    "hive status": (["--dir", "{file}"], 2),
    "hive up": (["--dir", "{file}"], 2),
    "iceberg sync": ([NO_ROOT, "--table", "db.t"], 4),
    "ingest": ([NO_ROOT, "--app-id", "a", "--source", "{file}", "--time-field", "ts"], 4),
    "log": ([NO_ROOT], 4),
    "metrics": ([NO_ROOT], 4),
    "partitions commit": ([NO_ROOT], 4),
    "partitions configure": ([NO_ROOT], 4),
    "partitions sync": ([NO_ROOT], 4),
    "recover": ([NO_ROOT, "--app-id", "a"], 4),
    "report lateness": ([NO_ROOT], 4),
    "spark down": (["--dir", "{file}"], 2),
    "spark status": (["--dir", "{file}"], 2),
    "spark up": (["--dir", "{file}"], 2),
    "sql": (["-f", "{script}", "--var", "novalue"], 3),
    "table create": ([NO_ROOT, "--layout", "{yyyy", "--partition", "dt={yyyy}"], 3),
    "table set": ([NO_ROOT, "--tracking", "both"], 4),
    "table show": ([NO_ROOT], 4),
    "udfs jar": (["--no-such-option"], 2),
    "udfs register": (["--metastore", "thrift://127.0.0.1:9"], 3),
    "udfs spark-args": (["--no-such-option"], 2),
    "verify": ([NO_ROOT], 4),
}

_CLASSES = {c.__name__ for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.TributaryError)}


def _error_object(p) -> dict:
    """The failure's error object: stdout's last line, whatever came before it; checked against stderr."""
    assert p.returncode != 0
    lines = p.stdout.rstrip("\n").splitlines()
    assert lines, (p.stdout, p.stderr)
    obj = json.loads(lines[-1])
    assert list(obj) == ["error"] and sorted(obj["error"]) == ["class", "exit_code", "message"], obj
    err = obj["error"]
    assert err["exit_code"] == p.returncode
    assert p.stderr.count("\n") == 1 and p.stderr == f"trib: error: {err['message']}\n", p.stderr
    assert err["class"] in _CLASSES | {"UsageError"}, err
    assert (err["class"] == "UsageError") == (p.returncode == 2), err
    return err


def test_every_json_command_has_a_failing_case():
    assert _json_commands() == sorted(CASES)


@pytest.mark.parametrize("command", sorted(CASES))
def test_a_failure_under_json_ends_stdout_with_its_error_object(command, a_file, script):
    args, code = CASES[command]
    args = [{"{file}": a_file, "{script}": script}.get(a, a) for a in args]
    p = invoke_trib(*command.split(), *args, "--json")
    assert p.returncode == code, (p.returncode, p.stderr)
    _error_object(p)
    plain = invoke_trib(*command.split(), *args)  # without --json: stdout stays empty, stderr is the same
    assert (plain.returncode, plain.stdout, plain.stderr) == (code, "", p.stderr)


@pytest.mark.parametrize("command", sorted(CASES))
def test_a_usage_error_under_json_is_an_error_object_too(command):
    """--json before the refused token (parsed) and after it (only in argv: click stopped first)."""
    for args in (["--json", "--no-such-option"], ["--no-such-option", "--json"]):
        p = invoke_trib(*command.split(), *args)
        assert p.returncode == 2
        err = _error_object(p)
        assert err["class"] == "UsageError" and "--no-such-option" in err["message"]


def test_the_flag_from_the_environment_counts_and_a_json_less_command_prints_none(tmp_path):
    p = invoke_trib("files", NO_ROOT, "--all", env={"TRIB_FILES_AS_JSON": "1"})
    assert _error_object(p)["class"] == "NoSuchTableError"
    p = invoke_trib("nosuch", "--json")  # the root has no --json: a usage error, no object
    assert (p.returncode, p.stdout) == (2, "")
    p = invoke_trib("files", NO_ROOT, "--all", "--", "--json")  # after --: an argument, not the flag
    assert p.returncode != 0 and p.stdout == ""


def test_a_success_keeps_its_json(tmp_path):
    root = str(tmp_path / "t")
    p = invoke_trib("table", "create", root, "--layout", LAYOUT, "--partition", PARTITION, "--json")
    assert p.returncode == 0 and "error" not in json.loads(p.stdout)
    p = invoke_trib("table", "show", root, "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["root"]
    again = invoke_trib("table", "create", root, "--layout", LAYOUT, "--partition", PARTITION, "--json")
    assert _error_object(again)["class"] == "TableExistsError"


def test_output_printed_before_a_failure_stays_and_the_error_object_is_last():
    """A command that streams JSON lines, then fails: its lines stay, the error object comes last."""

    @click.command("stream")
    @json_option
    def stream(as_json):
        for i in range(3):
            click.echo(json.dumps({"progress": i}))
        raise errors.StorageError("the disk is full")

    group = TribGroup("trib", lazy_commands={})
    group.add_command(stream)
    from click.testing import CliRunner

    r = CliRunner().invoke(group, ["stream", "--json"], catch_exceptions=False)
    lines = r.stdout.splitlines()
    assert [json.loads(line) for line in lines[:3]] == [{"progress": i} for i in range(3)]
    assert json.loads(lines[-1]) == {"error": {"class": "StorageError", "exit_code": 7,
                                               "message": "the disk is full"}}
    assert (r.exit_code, r.stderr) == (7, "trib: error: the disk is full\n")


def test_a_landing_zone_sync_under_json_ends_with_its_error_object():
    """``trib iceberg sync --consumer``, the landing-zone path of a command cased above, fails the same way."""
    p = invoke_trib("iceberg", "sync", NO_ROOT, "--consumer", "c", "--table", "db.t", "--json")
    assert p.returncode == 4 and _error_object(p)["class"] == "NoSuchTableError"
    p = invoke_trib("iceberg", "sync", NO_ROOT, "--table", "db.t", "--min-age", "0s", "--json")
    assert p.returncode == 3 and "--min-age goes with --consumer" in _error_object(p)["message"]
