"""The listing consumer's ledger on storage: a small state naming one immutable segment per directory.

Real files through the library and the CLI: an ack writes segments only for the
directories whose files changed, a plan reads only the segments it compares, a
damaged or missing segment is a one-line corrupt-state error (exit 6) with the
way out, and pruning never removes a segment a retained state names.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conftest import invoke_trib
from helpers import one_line_error, put
from tributary_read.read import ledger_store
from tributary_read.read.consumer import Consumer
from tributary_read.read.ledger_store import SegmentedLedger
from tributary_read.read.resolve import Source
from tributary_read.table.layout import Layout

pytestmark = pytest.mark.unit

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
LAY = Layout(LAYOUT, "dt={yyyy}{MM}{dd}{HH}")
H = 3_600_000
NOW = int(time.time() * 1000)
T0 = NOW - NOW % H - 48 * H


def state_doc(root: Path) -> dict:
    return json.loads(max((root / "_tributary/consumers/c").glob("state-*.json")).read_text())


def segments(root: Path) -> set[str]:
    return {p.name for p in (root / "_tributary/consumers/c/ledger").glob("*.json")}


def fill(root: Path, hours: range, per: int = 3) -> None:
    for h in hours:
        for i in range(per):
            put(root, f"{LAY.for_time(T0 + h * H).path}/f{i}.log", T0 + h * H + i)


def test_an_ack_writes_only_the_segments_of_changed_directories(tmp_path):
    root = tmp_path / "logs"
    fill(root, range(24))
    c = Consumer(Source.open(str(root), layout=LAY), "c")
    p = c.plan()
    c.ack(p.plan_id)
    doc = state_doc(root)
    assert len(doc["ledger"]) == 24 and all(set(e) == {"mtime_ms", "listed_ms", "seg", "n"}
                                            for e in doc["ledger"].values())
    assert {e["seg"] for e in doc["ledger"].values()} == segments(root)
    first = segments(root)
    # One new file in one hour: the next ack adds one segment; the other 23 are named again, not rewritten.
    put(root, f"{LAY.for_time(T0 + 5 * H).path}/late.log", NOW - 120_000)
    c = Consumer(Source.open(str(root), layout=LAY), "c")
    st = c.current()
    assert isinstance(st.ledger, SegmentedLedger) and not st.ledger._cache  # nothing read yet
    p = c.plan(full_scan=True)
    assert [f.path for f in p.files] == [f"{LAY.for_time(T0 + 5 * H).path}/late.log"]
    mtimes = {n: os.stat(root / "_tributary/consumers/c/ledger" / n).st_mtime_ns for n in first}
    c.ack(p.plan_id)
    assert len(segments(root) - first) == 1
    assert all(os.stat(root / "_tributary/consumers/c/ledger" / n).st_mtime_ns == m for n, m in mtimes.items())
    assert Consumer(Source.open(str(root), layout=LAY), "c").show()["ledger_files"] == 73
    # An incremental plan reads only the segments of the directories it compares.
    put(root, f"{LAY.for_time(T0 + 7 * H).path}/later.log", NOW - 120_000)
    os.utime(root / LAY.for_time(T0 + 7 * H).path, ns=((NOW - 100_000) * 1_000_000,) * 2)
    c = Consumer(Source.open(str(root), layout=LAY), "c")
    p = c.plan()
    assert [f.path for f in p.files] == [f"{LAY.for_time(T0 + 7 * H).path}/later.log"]
    assert set(c.current().ledger._cache) <= {LAY.for_time(T0 + 7 * H).path}


@pytest.mark.parametrize("damage", ["missing", "garbage", "other_directory"])
def test_a_damaged_segment_is_a_corrupt_state_with_the_way_out(tmp_path, damage):
    root = tmp_path / "logs"
    fill(root, range(3))
    invoke_trib("files", str(root), "--consumer", "c", "--layout", LAYOUT, "--json", check=True)
    plan = json.loads(invoke_trib("files", str(root), "--consumer", "c", "--layout", LAYOUT, "--json").stdout)
    invoke_trib("consumer", "ack", str(root), "c", plan["plan_id"], check=True)
    doc = state_doc(root)
    d0, d1 = sorted(doc["ledger"])[:2]
    seg = root / "_tributary/consumers/c/ledger" / doc["ledger"][d0]["seg"]
    if damage == "missing":
        seg.unlink()
    elif damage == "garbage":
        seg.write_bytes(b"\x00not json")
    else:
        seg.write_bytes((root / "_tributary/consumers/c/ledger" / doc["ledger"][d1]["seg"]).read_bytes())
    put(root, f"{d0}/new.log", NOW - 120_000)
    os.utime(root / d0, ns=((NOW - 100_000) * 1_000_000,) * 2)
    line = one_line_error(invoke_trib("files", str(root), "--consumer", "c", "--layout", LAYOUT), 6,
                          "corrupt consumer ledger segment", seg.name)
    assert "Traceback" not in line
    invoke_trib("consumer", "reset", str(root), "c", "--to-earliest", "--execute", check=True)
    again = json.loads(invoke_trib("files", str(root), "--consumer", "c", "--layout", LAYOUT, "--json").stdout)
    assert len(again["files"]) == 10


def test_prune_keeps_every_segment_a_retained_state_names(tmp_path, monkeypatch):
    root = tmp_path / "logs"
    fill(root, range(2))
    c = Consumer(Source.open(str(root), layout=LAY), "c")
    c.ack(c.plan().plan_id)
    monkeypatch.setattr(ledger_store, "SEGMENT_GRACE_MS", -1)  # every unreferenced segment is old enough
    stray = root / "_tributary/consumers/c/ledger/0123456789abcdef0123456789abcdef.json"
    stray.write_text('{"dir": "x", "files": {}}')  # an ack that wrote its segments and died before its state
    for k in range(5):
        put(root, f"{LAY.for_time(T0 + (2 + k) * H).path}/g.log", NOW - 120_000)
        c = Consumer(Source.open(str(root), layout=LAY), "c")
        c.ack(c.plan(full_scan=True).plan_id)
    named = set()
    for state in (root / "_tributary/consumers/c").glob("state-*.json"):
        named |= {e["seg"] for e in json.loads(state.read_text())["ledger"].values()}
    assert named <= segments(root) and not stray.exists()
    assert len(segments(root)) == len(named)  # nothing unreferenced is left once past the grace period


def test_a_state_of_the_old_format_is_read_and_rewritten_segmented(tmp_path):
    """Upgrading: a state whose ledger holds its files inline still loads; the next ack writes segments."""
    root = tmp_path / "logs"
    fill(root, range(2))
    c = Consumer(Source.open(str(root), layout=LAY), "c")
    c.ack(c.plan().plan_id)
    path = max((root / "_tributary/consumers/c").glob("state-*.json"))
    doc = json.loads(path.read_text())
    st = c.current()
    doc["ledger"] = {d: dict(st.ledger[d]) for d in st.ledger}  # inline, as trib wrote it before
    path.write_text(json.dumps(doc))
    for f in (root / "_tributary/consumers/c/ledger").glob("*.json"):
        f.unlink()
    c = Consumer(Source.open(str(root), layout=LAY), "c")
    assert not isinstance(c.current().ledger, SegmentedLedger)
    put(root, f"{LAY.for_time(T0 + 3 * H).path}/n.log", NOW - 120_000)
    p = c.plan(full_scan=True)
    assert [f.path for f in p.files] == [f"{LAY.for_time(T0 + 3 * H).path}/n.log"]
    c.ack(p.plan_id)
    assert all("seg" in e for e in state_doc(root)["ledger"].values()) and len(segments(root)) == 3
