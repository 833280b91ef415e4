"""A table's layout cannot drift: a hand-edited ``_tributary/table.json`` is refused, not obeyed.

Before, changing the layout's zone, directory or partition template or the format in table.json
was accepted: the next ingest filed the same event hour somewhere else (``…/19/`` beside
``…/10/``, ``day=`` beside ``dt=``), exit 0, and ``trib verify`` said ok. Unknown keys were
ignored. Now every command that opens the table refuses it with one line (exit 6) naming the
key, both values and the way out, and nothing committed changes; ``trib table set`` keeps
changing what it may change. In-process CLI (``invoke_trib``) over real files: no JVM.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import invoke_trib
from helpers import LAYOUT, PARTITION, make_source, snapshot

pytestmark = pytest.mark.unit

PROPS = Path("_tributary/table.json")
#: Every kind of command that opens a table: writers, manifest and listing readers, upkeep, table.json's own.
COMMANDS = [("ingest", "{root}", "--source", "{src2}", "--app-id", "b", "--time-field", "ts"),
            ("files", "{root}", "--all"), ("files", "{root}", "--mode", "mtime", "--all"),
            ("files", "{root}", "--consumer", "c"), ("verify", "{root}"), ("log", "{root}"),
            ("clean", "{root}", "--dry-run"), ("compact", "{root}", "--dry-run"), ("table", "show", "{root}"),
            ("table", "set", "{root}", "--tracking", "manifest")]


def _edit(root: Path, fn) -> None:
    p = root / PROPS
    d = json.loads(p.read_text())
    fn(d)
    p.write_text(json.dumps(d, indent=2))


@pytest.fixture
def table(tmp_path):
    """A table with two commits of real data, and a second source for an ingest that must not land."""
    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    invoke_trib("ingest", str(root), "--source", str(make_source(tmp_path / "a.jsonl", 40)), "--app-id", "a",
                "--time-field", "ts", "--commit-every", "20", check=True)
    make_source(tmp_path / "b.jsonl", 40, seed=8)
    return root


def _run_all(root: Path, tmp_path: Path):
    for argv in COMMANDS:
        yield argv, invoke_trib(*(a.format(root=root, src2=tmp_path / "b.jsonl") for a in argv))


@pytest.mark.parametrize("key,edit,was", [
    ("layout.timezone", lambda d: d["layout"].update(timezone="Asia/Tokyo"), "'UTC'"),
    ("layout.directory", lambda d: d["layout"].update(directory="{yyyy}/{MM}/{dd}/{HH}"), f"'{LAYOUT}'"),
    ("layout.partition", lambda d: d["layout"].update(partition="day={yyyy}{MM}{dd}{HH}"), f"'{PARTITION}'"),
    ("file_format", lambda d: d.update(file_format="csv"), "'jsonl'"),
    ("compression", lambda d: d.update(compression="gzip"), "'none'"),
])
def test_an_edited_layout_or_format_is_refused_by_every_command(table, tmp_path, key, edit, was):
    _edit(table, edit)
    before = snapshot(table)
    for argv, p in _run_all(table, tmp_path):
        assert p.returncode == 6, (argv, p.returncode, p.stdout, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in p.stderr, (argv, p.stderr)
        assert f"says {key}" in lines[0] and f"written with {was}" in lines[0] and f"restore {key} to {was}" in \
            lines[0], (argv, lines[0])
    assert snapshot(table) == before  # nothing committed, nothing written, table.json as it was


def test_restoring_table_json_is_the_way_out_and_table_set_still_changes_what_it_may(table, tmp_path):
    good = (table / PROPS).read_text()
    _edit(table, lambda d: d["layout"].update(timezone="Europe/Paris"))
    assert invoke_trib("files", str(table), "--all").returncode == 6
    (table / PROPS).write_text(good)  # what the message says to do
    for argv, p in _run_all(table, tmp_path):
        assert p.returncode == 0, (argv, p.stderr)
    # the change table set made (tracking) is recorded where the next check looks, and accepted
    assert json.loads((table / PROPS).read_text())["tracking"] == "manifest"
    p = invoke_trib("table", "set", str(table), "--protocol", "direct", "--compact", "min_files=3")
    assert p.returncode == 0, p.stderr
    assert invoke_trib("files", str(table), "--all").returncode == 0
    assert invoke_trib("verify", str(table)).returncode == 0
    dirs = {str(f.parent.relative_to(table)) for f in table.rglob("part-*") if "_tributary" not in f.parts}
    assert dirs and all(re.fullmatch(r"[0-9]{4}_[0-9]{2}_[0-9]{2}/[0-9]{2}", d) for d in dirs), dirs


@pytest.mark.parametrize("edit,named", [
    (lambda d: d.update(trackng="both"), "'trackng'"),
    (lambda d: d["layout"].update(zone="Asia/Tokyo"), "'layout.zone'"),
])
def test_an_unknown_key_in_table_json_is_refused(table, edit, named):
    _edit(table, edit)
    before = snapshot(table)
    for argv in (("files", str(table), "--all"), ("table", "show", str(table)), ("verify", str(table))):
        p = invoke_trib(*argv)
        assert p.returncode == 6 and len(p.stderr.strip().splitlines()) == 1, (argv, p.stderr)
        assert f"unknown key {named}" in p.stderr, p.stderr
    assert snapshot(table) == before


def test_a_table_made_before_commits_recorded_their_layout_is_checked_by_its_files_then_pinned(table, tmp_path):
    """An existing table (no pin, no ``settings`` in its commits) still opens; a changed partition
    template is caught by what its committed files say, and its next commit pins the settings."""
    (table / "_tributary/placement.json").unlink()
    for c in (table / "_tributary/log").glob("*.json"):
        d = json.loads(c.read_text())
        d.pop("settings", None)
        c.write_text(json.dumps(d))
    assert invoke_trib("files", str(table), "--all").returncode == 0
    good = (table / PROPS).read_text()
    _edit(table, lambda d: d["layout"].update(partition="day={yyyy}{MM}{dd}{HH}"))
    for argv in (("files", str(table), "--all"), ("verify", str(table)), ("clean", str(table), "--dry-run")):
        p = invoke_trib(*argv)
        assert p.returncode == 6 and "is in partition dt=" in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
    (table / PROPS).write_text(good)
    invoke_trib("ingest", str(table), "--source", str(tmp_path / "b.jsonl"), "--app-id", "b", "--time-field", "ts",
                check=True)
    assert (table / "_tributary/placement.json").exists()
    _edit(table, lambda d: d["layout"].update(timezone="Asia/Tokyo"))  # now caught, though no file says a zone
    p = invoke_trib("table", "show", str(table))
    assert p.returncode == 6 and "says layout.timezone 'Asia/Tokyo'" in p.stderr, p.stderr


def test_an_empty_table_takes_the_settings_of_its_first_commit(tmp_path):
    """Nothing committed yet, nothing to drift from: the first commit pins what table.json says then."""
    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    _edit(root, lambda d: d["layout"].update(timezone="Europe/Berlin"))
    invoke_trib("ingest", str(root), "--source", str(make_source(tmp_path / "a.jsonl", 10)), "--app-id", "a",
                "--time-field", "ts", check=True)
    pinned = json.loads((root / "_tributary/placement.json").read_text())["settings"]
    assert pinned["layout"]["timezone"] == "Europe/Berlin"
    assert invoke_trib("verify", str(root)).returncode == 0


def test_what_the_drift_message_calls_settable_is_what_table_set_sets():
    """The drift line tells the user what ``trib table set`` may change (placement.SETTABLE); it is kept
    equal to the command's options, and none of them touches a pinned setting."""
    from cli.table import set_ as table_set
    from tributary_read.table.manifest import Placement
    from tributary_read.table.placement import SETTABLE

    options = {p.name for p in table_set.params if p.name not in ("as_json", "root")}
    named = {"tracking": "tracking", "protocol": "protocol", "max_bad_fraction": "ingest's",
             "final_after": "ingest's", "compact": "compact's", "iceberg": "Iceberg mirror",
             "iceberg_catalog": "Iceberg mirror", "iceberg_partition_by": "Iceberg mirror",
             "no_iceberg": "Iceberg mirror"}
    assert options == set(named), options  # a new option of `table set` must be named in SETTABLE
    assert all(word in SETTABLE for word in named.values())
    pinned = {k.rpartition(".")[2] for k in Placement("d", "p", "UTC", "jsonl", "none").fields()}
    assert not options & (pinned | {"format", "file_format", "layout"})
