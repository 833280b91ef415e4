"""Read-side bad input: one clear stderr line, a non-zero exit, and no state changes.

The CLI runs in this process (``invoke_trib``): the error mapping is the root group's own, the same
code a real ``trib`` runs (tests/test_exit_codes.py keeps the real processes).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import invoke_trib
from helpers import one_line_error, snapshot
from tributary_read import FileEntry, Layout, Table, TableConfig

pytestmark = pytest.mark.unit

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
PARTITION = "dt={yyyy}{MM}{dd}{HH}"
T0 = 1_592_956_800_000


@pytest.fixture
def plain(tmp_path) -> Path:
    root = tmp_path / "logs"
    p = root / "2020_06_24/00/a.log"
    p.parent.mkdir(parents=True)
    p.write_bytes(b"x\n")
    os.utime(p, ns=(T0 * 1_000_000,) * 2)
    return root


@pytest.fixture
def consumed(plain) -> tuple[Path, str]:
    """A listing consumer with one acked plan and one pending plan."""
    args = ("--layout", LAYOUT, "--lookback", "100000d", "--json")
    first = json.loads(invoke_trib("files", str(plain), "--consumer", "c", *args, check=True).stdout)
    invoke_trib("consumer", "ack", str(plain), "c", first["plan_id"], check=True)
    (plain / "2020_06_24/00/b.log").write_bytes(b"y\n")
    os.utime(plain / "2020_06_24/00/b.log", ns=(T0 * 1_000_000,) * 2)  # older than the default --min-age
    pending = json.loads(invoke_trib("files", str(plain), "--consumer", "c", "--json", check=True).stdout)
    return plain, pending["plan_id"], first["plan_id"]


BAD_WINDOWS = [
    (["--start", "2020-06-24T02:00:00Z", "--end", "2020-06-24T01:00:00Z"], "before its start"),
    (["--start", str(T0 + 1), "--end", str(T0)], "before its start"),
    (["--start", "yesterday"], "unparsable --start 'yesterday'"),
    (["--end", "2020-06-31T00:00:00"], "unparsable --end"),
    (["--start", "1592956800"], "looks like epoch seconds"),
    (["--schedule-time", "soon", "--period", "1h"], "unparsable --schedule-time"),
    (["--schedule-time", "2020-06-24T01:05:00Z"], "needs --period"),
    (["--schedule-time", "2020-06-24T01:05:00Z", "--period", "1x"], "--period '1x' is not a duration"),
    (["--schedule-time", "2020-06-24T01:05:00Z", "--period", "1h", "--lag", "-5m"], "is not a duration"),
    (["--start", str(T0), "--schedule-time", "2020-06-24T01:05:00Z", "--period", "1h"], "not both"),
    (["--period", "1h"], "go with --schedule-time"),
    (["--partitions", "dt>>2020"], "bad partition condition"),
    (["--partitions", "hour>=01"], "unknown partition key 'hour'"),
    (["--mode", "manifest", "--all"], "needs a trib table"),
    (["--since-version", "3"], "need --mode manifest"),
]


@pytest.mark.parametrize("args,needle", BAD_WINDOWS, ids=[n for _, n in BAD_WINDOWS])
def test_bad_windows_and_ranges(plain, args, needle):
    before = snapshot(plain)
    one_line_error(invoke_trib("files", str(plain), "--layout", LAYOUT, *args), 3, needle)
    assert snapshot(plain) == before


def test_bad_roots_and_layout_flags(plain, tmp_path):
    one_line_error(invoke_trib("files", str(tmp_path / "nope"), "--all"), 4, "no directory")
    one_line_error(invoke_trib("files", str(plain), "--all", "--partition", PARTITION), 3, "give --layout too")
    one_line_error(invoke_trib("files", str(plain), "--all", "--layout", "{yyyy}/{HH}"), 3, "contiguous run")
    one_line_error(invoke_trib("files", str(plain), "--partitions", "dt>=1"), 3, "needs a layout")
    one_line_error(invoke_trib("files", str(plain), "--consumer", "c"), 3, "needs a layout")
    assert not (plain / "_tributary").exists()


def test_consumer_option_misuse(plain):
    before = snapshot(plain)
    for args, needle in ((["--consumer", "c", "--start", str(T0)], "cannot be combined with --consumer"),
                         (["--consumer", "c", "--partitions", "dt>=1"], "cannot be combined"),
                         (["--lookback", "7d"], "goes with --consumer"),
                         (["--min-age", "0s", "--all"], "--min-age goes with --consumer"),  # a zero is given too
                         (["--consumer", "c", "--since-version", "0"], "--since-version cannot be combined"),
                         (["--consumer", "c", "--lookback", "0s"], "must be positive"),
                         (["--consumer", "c", "--lookback", "week"], "is not a duration"),
                         (["--consumer", "../x"], "bad consumer name")):
        one_line_error(invoke_trib("files", str(plain), "--layout", LAYOUT, *args), 3, needle)
    assert snapshot(plain) == before


def test_unknown_consumer(plain):
    before = snapshot(plain)
    for cmd in (["ack", str(plain), "ghost", "0-0123456789ab"], ["show", str(plain), "ghost"],
                ["reset", str(plain), "ghost", "--to-earliest"]):
        one_line_error(invoke_trib("consumer", *cmd), 4, "no consumer 'ghost'")
    assert snapshot(plain) == before
    assert json.loads(invoke_trib("consumer", "list", str(plain), "--json").stdout)["consumers"] == []


def test_unknown_plan_ids(consumed):
    root, pending, _ = consumed
    before = snapshot(root)
    one_line_error(invoke_trib("consumer", "ack", str(root), "c", "latest"), 3, "is not a plan id")
    one_line_error(invoke_trib("consumer", "ack", str(root), "c", "1-0123456789ab"), 3,
                          f"no plan 1-0123456789ab (the pending plan is {pending})")
    one_line_error(invoke_trib("consumer", "ack", str(root), "c", "9-0123456789ab"), 3, "no plan")
    assert snapshot(root) == before


def test_acking_a_stale_plan(consumed):
    root, pending, _ = consumed
    invoke_trib("consumer", "reset", str(root), "c", "--discard-plan", "--execute", check=True)
    before = snapshot(root)
    one_line_error(invoke_trib("consumer", "ack", str(root), "c", pending), 5, "discarded plan", "new plan")
    assert snapshot(root) == before
    fresh = json.loads(invoke_trib("files", str(root), "--consumer", "c", "--json", check=True).stdout)
    assert fresh["plan_id"] != pending and [f["path"] for f in fresh["files"]] == ["2020_06_24/00/b.log"]


def test_acking_an_old_plan_after_a_newer_ack(consumed):
    root, pending, first = consumed
    invoke_trib("consumer", "ack", str(root), "c", pending, check=True)
    before = snapshot(root)
    one_line_error(invoke_trib("consumer", "ack", str(root), "c", first), 5, "was made at version 0")
    assert snapshot(root) == before


@pytest.mark.parametrize("damage", ["garbage", "truncated", "wrong_field", "wrong_version"])
def test_corrupt_consumer_state(consumed, damage):
    root, pending, _ = consumed
    state = sorted((root / "_tributary/consumers/c").glob("state-*.json"))[-1]
    doc = json.loads(state.read_bytes())
    if damage == "garbage":
        state.write_bytes(b"\x00\xffnot json")
    elif damage == "truncated":
        state.write_bytes(state.read_bytes()[:50])
    elif damage == "wrong_field":
        doc["ledger"]["2020_06_24/00"]["n"] = "big"
        state.write_text(json.dumps(doc))
    else:
        doc["version"] = 7
        state.write_text(json.dumps(doc))
    before = snapshot(root)
    for args in (["files", str(root), "--consumer", "c"], ["consumer", "show", str(root), "c"],
                 ["consumer", "ack", str(root), "c", pending]):
        one_line_error(invoke_trib(*args), 6, "corrupt", state.name, f"trib consumer reset file://{root} c --to-earliest --execute")
    listed = json.loads(invoke_trib("consumer", "list", str(root), "--json").stdout)["consumers"]
    assert "corrupt" in listed[0]["error"]
    assert snapshot(root) == before
    # The way out: reset starts over without reading the broken state (so the layout is given again).
    invoke_trib("consumer", "reset", str(root), "c", "--to-earliest", "--execute", check=True)
    plan = json.loads(invoke_trib("files", str(root), "--consumer", "c", "--layout", LAYOUT, "--lookback", "100000d",
                               "--json", check=True).stdout)
    assert len(plan["files"]) == 2


def test_corrupt_pending_plan(consumed):
    root, pending, _ = consumed
    plan = sorted((root / "_tributary/consumers/c").glob("plan-*.json"))[-1]
    plan.write_bytes(b"{}")
    before = snapshot(root)
    one_line_error(invoke_trib("files", str(root), "--consumer", "c"), 6, "corrupt", plan.name)
    one_line_error(invoke_trib("consumer", "ack", str(root), "c", pending), 6, "corrupt")
    assert snapshot(root) == before


def test_consumer_mode_and_version_misuse(tmp_path):
    t = Table.create(str(tmp_path / "m"), TableConfig(layout=Layout(LAYOUT, PARTITION)))
    t.log.commit([FileEntry("2020_06_24/01/p.jsonl", 1, 1, {"dt": "2020062401"})])
    plan = json.loads(invoke_trib("files", t.uri, "--consumer", "c", "--json", check=True).stdout)
    invoke_trib("consumer", "ack", t.uri, "c", plan["plan_id"], check=True)
    before = snapshot(t.storage.root)
    one_line_error(invoke_trib("files", t.uri, "--consumer", "c", "--mode", "mtime"), 3, "tracks versions")
    one_line_error(invoke_trib("consumer", "reset", t.uri, "c", "--to-version", "9"), 3, "between 0 and")
    one_line_error(invoke_trib("consumer", "reset", t.uri, "c", "--to-version", "0", "--to-latest"), 3,
                          "one target, not several")
    assert snapshot(t.storage.root) == before
