"""Reading and maintenance never follow links, crash on odd names, or return paths that do not exist.

Every test drives the real CLI on real files: symbolic links made with
``os.symlink``, names that are not UTF-8 made with ``os.open`` on bytes, a real
rename-protocol crash window, a tampered consumer plan. Window tiling is pure
arithmetic and is checked in-process across real DST transitions.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from conftest import run_trib
from helpers import LAYOUT, PARTITION, make_source, snapshot

from tributary_read.read.window import TimeWindow

pytestmark = pytest.mark.integration

H = 3_600_000


def _table(tmp_path: Path, name: str, n: int = 300, *extra: str) -> Path:
    root = tmp_path / name
    run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, *extra, check=True)
    src = make_source(tmp_path / f"{name}.jsonl", n, hours=3)
    run_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts", check=True)
    return root


def _committed(root: Path) -> list[str]:
    return [f["path"] for f in json.loads(run_trib("files", str(root), "--all", "--json", check=True).stdout)["files"]]


def _links(root: Path, other: Path) -> list[str]:
    """The three links of the issue: into a partition, to another table's partition, a loop."""
    part = _committed(root)[0].rsplit("/", 1)[0]
    os.symlink(part, root / "latest")
    os.symlink(other / _committed(other)[0].rsplit("/", 1)[0], root / "other")
    os.symlink(root, root / "x")
    os.symlink(root, root / part.split("/")[0] / "loop")
    return ["latest", "other", "x", f"{part.split('/')[0]}/loop"]


def _no_link_path(paths, links) -> None:
    bad = [p for p in paths if any(p == ln or p.startswith(ln + "/") for ln in links)]
    assert not bad, f"paths through a symbolic link: {bad[:3]}"


def test_clean_and_verify_never_go_through_symlinks(tmp_path):
    root, other = _table(tmp_path, "t"), _table(tmp_path, "o")
    links = _links(root, other)
    before, before_other = snapshot(root), snapshot(other)

    c = run_trib("clean", str(root), "--older-than", "0s", "--json")
    assert c.returncode == 0, c.stderr
    assert json.loads(c.stdout)["deleted"] == []
    assert snapshot(root) == before and snapshot(other) == before_other  # nothing committed deleted
    assert run_trib("verify", str(other)).returncode == 0

    v = run_trib("verify", str(root), "--json")
    assert v.returncode == 0, v.stderr
    doc = json.loads(v.stdout)
    assert sorted(u["path"] for u in doc["unlisted"]) == sorted(links)
    assert all("symbolic link" in u["reason"] for u in doc["unlisted"])
    _no_link_path([o["path"] for o in doc["orphans"] + doc["untracked"]], links)
    assert "left alone: latest" in run_trib("verify", str(root)).stdout


def test_readers_return_no_path_through_a_link(tmp_path):
    root, other = _table(tmp_path, "t"), _table(tmp_path, "o")
    links = _links(root, other)
    committed = _committed(root)
    for args in (["--mode", "mtime", "--all"], ["--mode", "mtime", "--start", "0", "--end", "9999999999999"],
                 ["--mode", "mtime", "--partitions", "dt>=2020062400"]):
        p = run_trib("files", str(root), *args, "--json")
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        assert sorted(f["path"] for f in doc["files"]) == sorted(committed)
        assert {s["path"] for s in doc["skipped"]} >= {"latest", "other", "x"}
    plan = run_trib("files", str(root), "--consumer", "c", "--mode", "mtime", "--json")
    assert plan.returncode == 0, plan.stderr
    _no_link_path([f["path"] for f in json.loads(plan.stdout)["files"]], links)
    # A linked file is a link too: reported, not returned.
    os.symlink("/etc/hostname", root / committed[0].rsplit("/", 1)[0] / "evil.jsonl")
    doc = json.loads(run_trib("files", str(root), "--all", "--mode", "mtime", "--json", check=True).stdout)
    assert all(not f["path"].endswith("evil.jsonl") for f in doc["files"])
    assert any(s["path"].endswith("evil.jsonl") for s in doc["skipped"])


def test_names_that_are_not_utf8_are_reported_not_a_crash(tmp_path):
    root = _table(tmp_path, "t")
    part = _committed(root)[0].rsplit("/", 1)[0]
    os.close(os.open(os.fsencode(root / part) + b"/bad\xff.jsonl", os.O_CREAT | os.O_WRONLY, 0o644))
    os.makedirs(os.fsencode(root / part.split("/")[0]) + b"/0\xfe", exist_ok=True)
    files = run_trib("files", str(root), "--all", "--mode", "mtime", "--json")
    assert files.returncode == 0, files.stderr
    doc = json.loads(files.stdout)
    assert sorted(f["path"] for f in doc["files"]) == sorted(_committed(root))
    bad = {s["path"]: s["reason"] for s in doc["skipped"]}
    assert bad[f"{part}/bad\\xff.jsonl"] == "name is not valid UTF-8"
    plan = run_trib("files", str(root), "--consumer", "c", "--mode", "mtime", "--json")
    assert plan.returncode == 0, plan.stderr
    assert "name is not valid UTF-8" in plan.stdout
    before = snapshot(os.fsencode(root))
    v = run_trib("verify", str(root), "--json")
    assert v.returncode == 0, v.stderr
    assert {u["path"] for u in json.loads(v.stdout)["unlisted"]} == {f"{part}/bad\\xff.jsonl",
                                                                     f"{part.split('/')[0]}/0\\xfe"}
    c = run_trib("clean", str(root), "--older-than", "0s")
    assert c.returncode == 0, c.stderr
    assert snapshot(os.fsencode(root)) == before


def test_rename_crash_between_commit_and_rename_is_rolled_forward_by_readers(tmp_path):
    root = _table(tmp_path, "t", 300, "--protocol", "rename")
    committed = _committed(root)
    # The crash window: the commit landed, the renames did not. Put every file
    # back under its staged name, as the writer left it before renaming.
    state = json.loads((root / "_tributary/log/00000000000000000001.json").read_text())
    for f in state["files"]:
        os.rename(root / f["path"], root / f["staged"])
    assert not any((root / p).exists() for p in committed)

    plan = run_trib("files", str(root), "--consumer", "c", "--json")
    assert plan.returncode == 0, plan.stderr
    got = [f["path"] for f in json.loads(plan.stdout)["files"]]
    assert sorted(got) == sorted(committed) and all((root / p).exists() for p in got)
    for f in state["files"]:  # and again for a plain read, crashed once more
        os.rename(root / f["path"], root / f["staged"])
    out = run_trib("files", str(root), "--all")
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split()) == sorted(committed) and all((root / p).exists() for p in committed)
    assert run_trib("verify", str(root)).returncode == 0
    # Bytes gone under both names: an error, never a missing path in a batch.
    os.remove(root / committed[0])
    gone = run_trib("files", str(root), "--all")
    assert gone.returncode == 9 and gone.stdout == "" and "is missing" in gone.stderr


def test_files_null_separated_for_names_with_newlines(tmp_path):
    root = tmp_path / "plain"
    (root / "2020_06_24" / "01").mkdir(parents=True)
    (root / "2020_06_24" / "01" / "a\nb.log").write_text("x\n")
    (root / "2020_06_24" / "01" / "c.log").write_text("y\n")
    for flag in ("-0", "--null"):
        out = run_trib("files", str(root), "--all", "--layout", LAYOUT, flag)
        assert out.returncode == 0, out.stderr
        assert out.stdout == "2020_06_24/01/a\nb.log\x002020_06_24/01/c.log\x00"
    bad = run_trib("files", str(root), "--all", "--layout", LAYOUT, "-0", "--json")
    assert bad.returncode == 3 and bad.stderr.count("\n") == 1


def test_tampered_plan_path_is_corrupt_state_not_returned(tmp_path):
    root = _table(tmp_path, "t")
    first = run_trib("files", str(root), "--consumer", "c", "--json", check=True)
    assert json.loads(first.stdout)["files"]
    plan_file = next((root / "_tributary/consumers/c").glob("plan-*.json"))
    original = json.loads(plan_file.read_text())
    for path in ("../../etc/passwd", "/etc/passwd", "a/../../x", 7):
        doc = json.loads(json.dumps(original))
        doc["files"][0]["path"] = path
        plan_file.write_text(json.dumps(doc))
        p = run_trib("files", str(root), "--consumer", "c")
        assert p.returncode == 6, (path, p.stderr)
        assert p.stdout == "" and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr


# -- scheduled windows across DST ------------------------------------------------------
ZONES = ["America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata", "Pacific/Chatham"]
PERIODS = [H, 2 * H, 3 * H, 12 * H, 24 * H]


def _transitions(tz, year: int = 2021) -> list[int]:
    t = int(datetime(year, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
    out, prev = [], datetime.fromtimestamp(t / 1000, tz).utcoffset()
    for _ in range(366 * 96):
        t += 15 * 60_000
        off = datetime.fromtimestamp(t / 1000, tz).utcoffset()
        if off != prev:
            out.append(t)
            prev = off
    return out or [int(datetime(year, 3, 28, tzinfo=timezone.utc).timestamp() * 1000)]


@pytest.mark.parametrize("zone", ZONES)
def test_scheduled_windows_tile_across_dst(zone):
    """Every schedule time, minute by minute around each transition, reads a window that
    tiles with its neighbours: no gap, no overlap, each aligned to the local wall clock."""
    tz = ZoneInfo(zone)
    for period in PERIODS:
        for t in _transitions(tz):
            seen: dict[int, TimeWindow] = {}
            s = t - 26 * H
            while s < t + 26 * H:
                w = TimeWindow.previous_period(s, period, 0, tz)
                assert w.end_ms < s <= w.end_ms + 1 + period + 2 * H, (zone, period, s, w)
                seen.setdefault(w.start_ms, w)
                assert seen[w.start_ms] == w
                s += 60_000
            wins = [seen[k] for k in sorted(seen)]
            for a, b in zip(wins, wins[1:]):
                assert b.start_ms == a.end_ms + 1, (zone, period // H, a.to_json(), b.to_json())
            for w in wins:  # boundaries sit on local wall-clock multiples of the period (or on a jump)
                local = datetime.fromtimestamp(w.start_ms / 1000, tz)
                wall = (local.replace(tzinfo=None) - datetime(1970, 1, 1)).total_seconds() * 1000
                jump = datetime.fromtimestamp((w.start_ms - 1) / 1000, tz).utcoffset() != local.utcoffset()
                assert wall % period == 0 or jump, (zone, period // H, w.to_json())
