"""Late files in partitions a consumer sealed (past its lookback) are delivered exactly; nothing stops the whole
consumer.

A seal used to keep only a digest of its partition's files, so an old-mtime file copied into it (``cp -p``,
``rsync -t``) could not be told apart: the plan stopped with exit 14, ``--allow-beyond-horizon`` lost the file
and the replay the message named delivered the partition's files again. Now the seal names the segment of the
files it delivered, read only when the directory's listing no longer matches the digest: a new file is
delivered once whatever its mtime, and a removed or rewritten one holds back its partition alone (the rest is
delivered and acked; the ack exits 17 naming every held partition). Everything goes through the CLI on real
files, old mtimes set with os.utime.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from conftest import invoke_trib
from helpers import one_line_error, put

pytestmark = pytest.mark.unit

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
H = 3_600_000
T = 1_704_067_200_000  # 2024-01-01T00:00:00Z: every partition here is far past the 7-day lookback
P0, P1, P2, P3 = (f"2024_01_01/0{h}" for h in range(4))


def cli(*args: str, code: int = 0):
    p = invoke_trib(*args)
    assert p.returncode == code, (args, p.returncode, p.stdout, p.stderr)
    return p


def plan(root: Path | str, *args: str) -> dict:
    return json.loads(cli("files", str(root), "--consumer", "c", "--json", *args).stdout)


def ack(root: Path | str, doc: dict, code: int = 0):
    return cli("consumer", "ack", str(root), "c", doc["plan_id"], code=code)


def paths(doc: dict) -> list[str]:
    return sorted(f["path"] for f in doc["files"])


def state(root: Path) -> dict:
    return json.loads(max((root / "_tributary/consumers/c").glob("state-*.json")).read_text())


def sealed_history(tmp_path: Path, hours: int = 3) -> Path:
    """``hours`` hourly partitions of 2024-01-01, two line files each, delivered and sealed by one plan."""
    root = tmp_path / "raw"
    for h in range(hours):
        put(root, f"2024_01_01/0{h}/a.log", T + h * H + 1, b"1\n2\n")
        put(root, f"2024_01_01/0{h}/b.log", T + h * H + 2, b"3\n")
    first = plan(root, "--layout", LAYOUT)
    assert len(first["files"]) == 2 * hours
    ack(root, first)
    assert set(state(root)["sealed"]) == {f"2024_01_01/0{h}" for h in range(hours)}
    return root


def test_a_late_old_mtime_file_in_a_sealed_partition_is_delivered_once(tmp_path):
    root = sealed_history(tmp_path)
    put(root, f"{P1}/late.log", T - 30 * 24 * H, b"4\n5\n")  # copied in with an old mtime (cp -p)
    doc = plan(root)
    assert paths(doc) == [f"{P1}/late.log"] and doc["held"] == [] and doc["beyond_horizon"] == []
    ack(root, doc)
    assert all(s.get("seg") for s in state(root)["sealed"].values())  # each seal names its files' segment
    assert paths(plan(root, "--full-scan")) == []  # once
    ack(root, plan(root, "--full-scan"))
    put(root, f"{P1}/late2.log", T - 30 * 24 * H, b"6\n")  # a second one, same old mtime: once too
    doc = plan(root)
    assert paths(doc) == [f"{P1}/late2.log"]
    ack(root, doc)
    assert paths(plan(root, "--full-scan")) == []


def test_removed_and_rewritten_files_hold_only_their_partitions(tmp_path):
    root = sealed_history(tmp_path, hours=4)
    (root / P0 / "a.log").unlink()  # removed
    put(root, f"{P1}/b.log", T + H + 99, b"9\n")  # rewritten in place: same size, other bytes, new mtime
    put(root, f"{P0}/new.log", T - 24 * H)  # new beside the removed one: waits with its partition
    put(root, f"{P2}/late.log", T - 24 * H)  # new in a partition that did not change otherwise
    doc = plan(root, "--full-scan")  # an in-place rewrite leaves its directory's mtime alone
    assert paths(doc) == [f"{P2}/late.log"]
    assert {h["path"]: h["changes"] for h in doc["held"]} == {
        P0: ["a.log was removed after it was delivered"], P1: [doc["held"][1]["changes"][0]]}
    assert doc["held"][1]["changes"][0].startswith("b.log ")

    # The rest is acked; the ack ends with its own code, one line naming every held partition.
    line = one_line_error(ack_p := invoke_trib("consumer", "ack", str(root), "c", doc["plan_id"]), 17,
                          f"{P0} (a.log was removed after it was delivered)", f"{P1} (b.log ",
                          f"--partition {P0},{P1} --execute")
    assert "acked" in ack_p.stdout and "--redeliver" not in line
    show = json.loads(cli("consumer", "show", str(root), "c", "--json").stdout)
    assert show["pending"] is None and [h["path"] for h in show["held"]] == [P0, P1]

    # Held until resolved: the next run reports them again, delivers what else arrived, exits 17 again.
    put(root, f"{P3}/later.log", T - 24 * H)
    doc = plan(root)
    assert paths(doc) == [f"{P3}/later.log"] and [h["path"] for h in doc["held"]] == [P0, P1]
    ack(root, doc, code=17)

    # Resolved by replay, both at once: nothing delivered again, the held partition's new file once.
    cli("consumer", "replay", str(root), "c", "--partition", P0, "--partition", P1, "--execute")
    doc = plan(root)
    assert paths(doc) == [f"{P0}/new.log"] and doc["held"] == []
    ack(root, doc)
    doc = plan(root, "--full-scan")
    assert paths(doc) == [] and doc["held"] == []
    ack(root, doc)
    assert json.loads(cli("consumer", "show", str(root), "c", "--json").stdout)["held"] == []


def test_replay_repeats_nothing_unless_asked_and_its_preview_counts_what_it_repeats(tmp_path):
    root = sealed_history(tmp_path)
    cli("consumer", "replay", str(root), "c", "--partition", P1, "--execute")
    assert paths(plan(root, "--full-scan")) == []  # what was delivered is not delivered again
    before = state(root)["version"]
    r = json.loads(cli("consumer", "replay", str(root), "c", "--partition", P1, "--json").stdout)
    assert r["applied"] is False and r["repeats"] == {"files": 0, "bytes": 0} and "no change to take" in r["effect"]

    # Asked by name: the preview says how many files and bytes it delivers again, and changes nothing.
    p = cli("consumer", "replay", str(root), "c", "--partition", P1, "--partition", P2, "--redeliver")
    assert "repeating 4 files (12 bytes) already delivered" in p.stdout and "add --execute" in p.stderr
    r = json.loads(cli("consumer", "replay", str(root), "c", "--partition", P1, "--partition", P2,
                       "--redeliver", "--json").stdout)
    assert r["repeats"] == {"files": 4, "bytes": 12} and r["applied"] is False
    assert state(root)["version"] == before  # the previews wrote nothing
    cli("consumer", "replay", str(root), "c", "--partition", P1, "--partition", P2, "--redeliver", "--execute")
    doc = plan(root)
    assert paths(doc) == [f"{d}/{n}.log" for d in (P1, P2) for n in "ab"]


def test_a_state_written_before_seals_kept_their_files_still_loads(tmp_path):
    """A state of the earlier format (a seal is a digest only, no ``held``) loads; a late file is still
    delivered exactly where the digest can tell it, each seal gains its files as it is next listed, and a
    change the digest cannot tell apart holds that partition only, its way out counting what it repeats."""
    root = sealed_history(tmp_path)
    path = max((root / "_tributary/consumers/c").glob("state-*.json"))
    doc = json.loads(path.read_text())
    for s in doc["sealed"].values():
        s.pop("seg", None)
    doc.pop("held", None)
    path.write_text(json.dumps(doc))
    assert json.loads(cli("consumer", "show", str(root), "c", "--json").stdout)["sealed_directories"] == 3

    put(root, f"{P1}/late.log", T - 30 * 24 * H)  # old mtime: told by the digest (one file added)
    (root / P2 / "a.log").unlink()  # which files are new cannot be told from a digest
    doc = plan(root, "--full-scan")
    assert paths(doc) == [f"{P1}/late.log"]
    assert [(h["path"], h["exact"]) for h in doc["held"]] == [(P2, False)]
    line = one_line_error(invoke_trib("consumer", "ack", str(root), "c", doc["plan_id"]), 17,
                          f"{P2} (", "kept only a digest", f"--partition {P2} --redeliver")
    assert "--execute" not in line  # no way out that could repeat or lose data is offered as a command to run
    sealed = state(root)["sealed"]
    assert sealed[P0].get("seg") and sealed[P1].get("seg") and not sealed[P2].get("seg")  # listed: migrated

    one_line_error(invoke_trib("consumer", "replay", str(root), "c", "--partition", P2, "--execute"), 3,
                   "cannot be taken as it is", "--redeliver")
    p = cli("consumer", "replay", str(root), "c", "--partition", P2, "--redeliver")
    assert "repeating up to 1 file (2 bytes) already delivered" in p.stdout
    # Or acknowledge it: reported, not delivered; from then on its files are kept.
    doc = plan(root, "--allow-beyond-horizon")
    assert paths(doc) == [] and [b["path"] for b in doc["beyond_horizon"]] == [f"{P2}/b.log"]
    ack(root, doc)
    assert state(root)["sealed"][P2].get("seg")
    put(root, f"{P2}/late.log", T - 30 * 24 * H)
    doc = plan(root)
    assert paths(doc) == [f"{P2}/late.log"] and doc["held"] == []


@pytest.mark.s3
def test_on_s3_every_plan_lists_a_sealed_partition_and_a_rewrite_holds_it_alone(s3_root, s3_server):
    """No directory mtimes on S3: each plan lists every partition, which is what makes a rewrite seen at once
    (a PUT moves LastModified); the seal's files are read only for the partition whose listing changed."""
    from tributary_read.io.storage import open_storage

    st = open_storage(s3_root, s3_server)
    for h in range(2):
        st.write(f"2024_01_01/0{h}/a.log", b"1\n")
    doc = plan(s3_root, "--layout", LAYOUT, "--min-age", "0s")
    assert paths(doc) == [f"{P0}/a.log", f"{P1}/a.log"]
    ack(s3_root, doc)
    st.write(f"{P0}/a.log", b"22\n")  # rewritten
    st.write(f"{P1}/late.log", b"3\n")
    doc = plan(s3_root, "--min-age", "0s")  # not a full scan
    assert paths(doc) == [f"{P1}/late.log"] and [h["path"] for h in doc["held"]] == [P0]
    one_line_error(invoke_trib("consumer", "ack", s3_root, "c", doc["plan_id"]), 17, f"{P0} (a.log ")
    cli("consumer", "replay", s3_root, "c", "--partition", P0, "--execute")
    doc = plan(s3_root, "--min-age", "0s")
    assert paths(doc) == [] and doc["held"] == []


def test_a_file_truncated_in_place_in_a_sealed_partition_is_held_once_it_settles(tmp_path):
    """A truncate leaves its directory's mtime alone, so only a full listing sees it. A full scan that found
    the file still settling (younger than min_age) used to leave the seal skippable and restart the full-scan
    clock: the shrink went unreported until the next periodic scan, a day later. The directory is now listed
    by every plan until the file settles, and the first plan after that holds its partition back (exit 17)."""
    root = tmp_path / "raw"
    for h in range(2):
        put(root, f"2024_01_01/0{h}/a.log", T + h * H + 1, b"1\n2\n")
        os.utime(root / f"2024_01_01/0{h}", ns=((T + h * H + 60_000) * 1_000_000,) * 2)  # skippable by mtime
    ack(root, plan(root, "--layout", LAYOUT))
    a = root / P1 / "a.log"
    dir_mtime = (root / P1).stat().st_mtime_ns
    with open(a, "r+b") as f:  # truncated in place: 4 bytes delivered, 2 left
        f.truncate(2)
    ten_minutes_ago = (int(time.time()) - 600) * 1_000_000_000
    os.utime(a, ns=(ten_minutes_ago, ten_minutes_ago))
    assert (root / P1).stat().st_mtime_ns == dir_mtime

    doc = plan(root, "--full-scan", "--min-age", "1h")  # the full scan finds it still settling: it waits
    assert paths(doc) == [] and doc["held"] == [] and doc["full_scan"]
    ack(root, doc)
    doc = plan(root)  # settled (default min_age 1m), not a full scan: its directory is listed again
    assert doc["full_scan"] is False and paths(doc) == []
    assert [(h["path"], h["changes"]) for h in doc["held"]] == [
        (P1, ["a.log shrank from 4 to 2 bytes after it was delivered"])]
    one_line_error(invoke_trib("consumer", "ack", str(root), "c", doc["plan_id"]), 17,
                   f"{P1} (a.log shrank from 4 to 2 bytes", f"--partition {P1} --execute")
