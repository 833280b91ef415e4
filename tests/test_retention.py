"""Retention: ``trib expire`` (a table that can shrink) and log retention, through the CLI.

Each source holds records 40 days old (5 hourly partitions: expired by
``--older-than 30d``) and records 1-3 hours old (3 partitions: kept).

The CLI runs in this process (``invoke_trib``): each command still opens the
table afresh from storage, as a new process would.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from conftest import invoke_trib
from helpers import LAYOUT, PARTITION, put, snapshot

from tributary_read.table.layout import Layout
from tributary_read.read.listing import scan
from tributary_read.table.manifest import Transaction
from tributary_read.io.storage import open_storage
from tributary_read.table.config import Table
from tributary_read.write.writer import TableWriter

pytestmark = pytest.mark.unit

H = 3_600_000
OLD_DIRS = 5
NEW_DIRS = 3


def mixed_records(first_id: int = 0, n: int = 200, old: bool = True) -> list[dict]:
    now = int(time.time() * 1000)
    return [{"id": i, "ts": now - ((40 * 24 + i % OLD_DIRS) * H if old and i % 2 == 0 else (1 + i % NEW_DIRS) * H)}
            for i in range(first_id, first_id + n)]


def make_mixed_source(path: Path, first_id: int = 0, n: int = 200, old: bool = True) -> Path:
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in mixed_records(first_id, n, old))
    return path


def append(root, app: str, first_id: int = 0, old: bool = True) -> None:
    """One commit of mixed records, in process: setup only (the CLI ingest is tested elsewhere)."""
    w = TableWriter(Table.load(str(root)))
    recs = mixed_records(first_id, 200, old)
    for r in recs:
        w.write(json.dumps(r).encode(), r["ts"])
    w.commit(Transaction(app, {"src": recs[-1]["id"]}))


def trib_ok(*args) -> str:
    p = invoke_trib(*args)
    assert p.returncode == 0, f"trib {' '.join(args)} exited {p.returncode}: {p.stderr}"
    return p.stdout


def trib_json(*args) -> dict:
    return json.loads(trib_ok(*args, "--json"))


def create(root, *extra) -> None:
    trib_ok("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, *extra)


def ingest(root, src: Path, app: str = "etl") -> None:
    trib_ok("ingest", str(root), "--source", str(src), "--app-id", app, "--time-field", "ts")


def files(root, *extra) -> list[str]:
    """The manifest's files: every one (``--all``), or those of the bound in ``extra``."""
    bound = {"--since-version", "--until-version", "--start", "--end"} & set(extra)
    return [f["path"] for f in trib_json("files", str(root), "--mode", "manifest", *(extra if bound else ("--all", *extra)))["files"]]


def is_old(path: str) -> bool:
    """An expired partition: 40 days ago, so its directory is far below the cutoff."""
    p = Layout(LAYOUT, PARTITION).parse(path.rsplit("/", 1)[0])
    return p.end_ms < time.time() * 1000 - 35 * 24 * H


def test_expire_dry_run_changes_nothing(tmp_path):
    root = tmp_path / "t"
    create(root)
    ingest(root, make_mixed_source(tmp_path / "s.jsonl"))
    before = snapshot(root)
    out = trib_json("expire", str(root), "--older-than", "30d", "--grace", "0s", "--dry-run")
    assert out["dry_run"] and out["version"] is None
    assert len(out["directories"]) == OLD_DIRS and all(is_old(f["path"]) for f in out["removed"])
    assert snapshot(root) == before


def test_expire_records_one_commit_and_everyone_agrees(any_root, tmp_path):
    """The defect: deleting an expired hour by hand left `trib files` returning it and verify exiting 9."""
    root = any_root
    create(root)
    ingest(root, make_mixed_source(tmp_path / "s.jsonl"))
    all_files = files(root)
    old = [p for p in all_files if is_old(p)]
    assert len(old) == OLD_DIRS and len(all_files) == OLD_DIRS + NEW_DIRS

    out = trib_json("expire", str(root), "--older-than", "30d")
    assert out["version"] == 2 and sorted(f["path"] for f in out["removed"]) == sorted(old)
    assert out["deleted"] == []  # inside the default 24h grace: nothing deleted yet
    log = trib_json("log", str(root))["commits"]
    assert [(c["version"], c["operation"]) for c in log] == [(1, "append"), (2, "expire")]
    assert log[1]["removed"] == OLD_DIRS

    # Readers: full state, a range through the expire commit, and a range that ends before it.
    live = sorted(set(all_files) - set(old))
    assert files(root) == live
    assert files(root, "--since-version", "0", "--until-version", "2") == live
    assert files(root, "--since-version", "0", "--until-version", "1") == live
    hist = trib_json("files", str(root), "--mode", "manifest", "--since-version", "0", "--until-version", "1")
    assert sorted(s["path"] for s in hist["skipped"]) == sorted(old)  # said, not silently dropped
    # A commit-time window holding only the ingest commit: the later expire still decides.
    c1 = log[0]["timestamp_ms"]
    assert files(root, "--start", str(c1), "--end", str(c1)) == live

    # verify: removed files are neither missing nor orphans while they wait for the grace.
    v = trib_json("verify", str(root))
    assert v["ok"] and v["orphans"] == [] and sorted(r["path"] for r in v["removed"]) == sorted(old)

    storage = open_storage(str(root))
    trib_json("clean", str(root), "--older-than", "1h")
    assert all(storage.exists(p) for p in old), "clean deleted removed files inside the grace period"
    cleaned = trib_json("clean", str(root), "--older-than", "0s")
    assert sorted(d["path"] for d in cleaned["expired_deleted"]) == sorted(old)
    assert cleaned["deleted"] == []  # none of them counted as orphans
    assert not any(storage.exists(p) for p in old) and all(storage.exists(p) for p in live)
    # The partition directories are gone, which is what `partitions sync --drop` looks for.
    listed = scan(storage, Layout(LAYOUT, PARTITION)).partitions
    assert sorted(listed) == sorted({p.rsplit("/", 1)[0] for p in live})

    v = invoke_trib("verify", str(root), "--json")
    assert v.returncode == 0, v.stdout
    assert json.loads(v.stdout)["removed"] == []
    assert trib_json("expire", str(root), "--older-than", "30d")["version"] is None  # nothing left to expire


def test_expire_grace_zero_deletes_at_once_and_late_data_stays_live(tmp_path):
    root = tmp_path / "t"
    create(root)
    append(root, "etl")
    old = [p for p in files(root) if is_old(p)]
    out = trib_json("expire", str(root), "--older-than", "30d", "--grace", "0s")
    assert sorted(d["path"] for d in out["deleted"]) == sorted(old)
    assert not any((root / p).exists() for p in old)
    assert not (root / old[0]).parent.exists()
    # A late record for an expired hour is committed again: it is live until the next expire.
    ingest(root, make_mixed_source(tmp_path / "late.jsonl", first_id=1000, n=2), app="late")
    late = [p for p in files(root) if is_old(p)]
    assert len(late) == 1 and (root / late[0]).exists()
    assert invoke_trib("verify", str(root)).returncode == 0


def test_consumers_agree_after_expire(tmp_path):
    root = tmp_path / "t"
    create(root)
    append(root, "a")
    # "early" delivers everything before the expire; "late" never ran before it.
    plan = trib_json("files", str(root), "--consumer", "early")
    trib_ok("consumer", "ack", str(root), "early", plan["plan_id"])
    delivered = {f["path"] for f in plan["files"]}
    append(root, "b", first_id=1000)  # version 2, old + new
    v2_old = {p for p in files(root, "--since-version", "1") if is_old(p)}
    assert len(v2_old) == OLD_DIRS
    trib_ok("expire", str(root), "--older-than", "30d", "--grace", "0s")
    append(root, "c", first_id=2000, old=False)  # version 4

    early = trib_json("files", str(root), "--consumer", "early")
    got = {f["path"] for f in early["files"]}
    assert not got & delivered, "re-delivered files"
    assert not any(is_old(p) for p in got), "delivered files that the expire removed (and deleted)"
    assert {s["path"] for s in early["skipped"]} == v2_old  # missed data is reported, not silent
    assert all((root / p).exists() for p in got)

    late = trib_json("files", str(root), "--consumer", "late")
    assert sorted(f["path"] for f in late["files"]) == files(root)
    assert not any(is_old(f["path"]) for f in late["files"])


def test_expire_leaves_foreign_files_and_says_so(tmp_path):
    root = tmp_path / "t"
    create(root)
    append(root, "etl")
    old = sorted(p for p in files(root) if is_old(p))
    foreign = put(root, old[0].rsplit("/", 1)[0] + "/flume-0001.log", int(time.time() * 1000) - 40 * 24 * H)
    p = invoke_trib("expire", str(root), "--older-than", "30d", "--grace", "0s")
    assert p.returncode == 0, p.stderr
    assert "left alone" in p.stderr and "flume-0001.log" in p.stderr
    out = trib_json("expire", str(root), "--older-than", "30d", "--grace", "0s")
    assert [k["path"] for k in out["kept"]] == [foreign.relative_to(root).as_posix()]
    assert foreign.exists() and not any((root / q).exists() for q in old)
    trib_ok("clean", str(root), "--older-than", "0s")
    assert foreign.exists()


def test_log_retention_keeps_readers_working(tmp_path):
    root = tmp_path / "t"
    create(root, "--checkpoint-interval", "3")
    for i in range(2):
        append(root, f"a{i}", first_id=1000 * i)
    plan = trib_json("files", str(root), "--consumer", "behind")
    trib_ok("consumer", "ack", str(root), "behind", plan["plan_id"])  # at version 2
    trib_ok("expire", str(root), "--older-than", "30d", "--grace", "0s")  # version 3: a checkpoint folds it
    for i in range(2, 6):
        append(root, f"a{i}", first_id=1000 * i, old=False)
    logdir = root / "_tributary" / "log"
    live = files(root)
    assert len(live) == 6 * NEW_DIRS and not any(is_old(p) for p in live)

    # The default retention (30 days) keeps every commit.
    assert trib_json("clean", str(root))["log"]["commits"] == []
    assert len(list(logdir.glob("*[0-9].json"))) == 7

    out = trib_json("clean", str(root), "--log-retention", "0s")
    assert out["log"]["checkpoint"] == 6 and out["log"]["commits"] == [1, 2, 3, 4, 5]
    assert out["log"]["checkpoints"] == [3]
    assert sorted(p.name for p in logdir.iterdir()) == [
        "00000000000000000006.checkpoint.json", "00000000000000000006.json", "00000000000000000007.json"]

    assert files(root) == live
    assert trib_json("table", "show", str(root))["latest_version"] == 7
    assert [c["version"] for c in trib_json("log", str(root))["commits"]] == [6, 7]
    assert len(files(root, "--since-version", "5")) == 2 * NEW_DIRS  # from the oldest retained commit
    assert invoke_trib("verify", str(root)).returncode == 0
    # Without the checkpoint hint, readers find the checkpoint instead of reading an empty log.
    (root / "_tributary" / "_last_checkpoint").unlink()
    assert files(root) == live
    assert trib_json("table", "show", str(root))["latest_version"] == 7

    # Asking for history the log no longer has is a clear error, never a silent partial answer.
    p = invoke_trib("files", str(root), "--mode", "manifest", "--since-version", "2")
    assert p.returncode == 3 and "log retention" in p.stderr
    p = invoke_trib("files", str(root), "--consumer", "behind")
    assert p.returncode == 3 and "log retention" in p.stderr and "consumer reset" in p.stderr
    trib_ok("consumer", "reset", str(root), "behind", "--to-latest", "--execute")
    assert trib_json("files", str(root), "--consumer", "behind")["files"] == []

    # A new commit after the cleanup appends normally.
    ingest(root, make_mixed_source(tmp_path / "s9.jsonl", first_id=9000), app="a9")  # the CLI this time
    assert trib_json("table", "show", str(root))["latest_version"] == 8
    assert os.path.exists(logdir / "00000000000000000008.json")
