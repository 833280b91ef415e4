"""Durable consumers: stable plans, atomic acks, ledgers bounded by the horizon, directory skipping."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import pytest

from conftest import run_trib
from helpers import put
from tributary_read import FileEntry, Layout, Table, TableConfig
from tributary_read.read.consumer import Consumer, list_consumers
from tributary_read.errors import (CommitConflictError, PendingPlanError,
                                   StalePlanError, TributaryError)
from tributary_read.read.resolve import Source
from tributary_read.io.storage import open_storage

pytestmark = pytest.mark.integration

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
PARTITION = "dt={yyyy}{MM}{dd}{HH}"
H = 3_600_000
DAY = 24 * H
T0 = 1_592_956_800_000  # 2020-06-24T00:00:00Z


def hour_dir(ms: int) -> str:
    return f"{datetime.fromtimestamp(ms / 1000, timezone.utc):%Y_%m_%d/%H}"


def age_dirs(root: Path, ms: int) -> None:
    """Give every directory an old mtime, as if nothing had changed in them for a while."""
    for d, _, _ in os.walk(root):
        if "_tributary" not in d:
            os.utime(d, ns=(ms * 1_000_000, ms * 1_000_000))


def cli_plan(root, name, *extra) -> dict:
    proc = run_trib("files", str(root), "--consumer", name, "--json", *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def cli_ack(root, name, plan_id, *extra) -> dict:
    proc = run_trib("consumer", "ack", str(root), name, plan_id, "--json", *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def names(doc) -> list[str]:
    return [f["path"] for f in doc["files"]]


@pytest.fixture
def table(tmp_path) -> Table:
    t = Table.create(str(tmp_path / "m"), TableConfig(layout=Layout(LAYOUT, PARTITION), tracking="manifest"))
    for v in range(1, 4):
        t.log.commit([FileEntry(f"2020_06_24/0{v}/part-{v}.jsonl", 10, 1, {"dt": f"202006240{v}"})])
    return t


def test_manifest_consumer_returns_the_same_plan_until_acked(table):
    a = cli_plan(table.uri, "etl")
    b = cli_plan(table.uri, "etl")
    assert a["plan_id"] == b["plan_id"] and a["files"] == b["files"] and len(a["files"]) == 3
    assert a["tracking"] == "manifest" and (a["since_version"], a["until_version"]) == (0, 3)
    assert cli_ack(table.uri, "etl", a["plan_id"])["version"] == 1
    empty = cli_plan(table.uri, "etl")
    assert empty["files"] == [] and (empty["since_version"], empty["until_version"]) == (3, 3)
    cli_ack(table.uri, "etl", empty["plan_id"])
    table.log.commit([FileEntry("2020_06_24/09/part-9.jsonl", 10, 1, {"dt": "2020062409"})])
    nxt = cli_plan(table.uri, "etl")
    assert names(nxt) == ["2020_06_24/09/part-9.jsonl"] and nxt["files"][0]["version"] == 4
    # A second consumer is independent of the first.
    assert len(cli_plan(table.uri, "audit")["files"]) == 4


def test_listing_consumer_flow_and_idempotent_ack(tmp_path):
    root = tmp_path / "logs"
    now = int(datetime.now(timezone.utc).timestamp() * 1000)
    put(root, f"{hour_dir(now - 2 * H)}/a.log", now - 2 * H)
    args = ("--layout", LAYOUT)
    p1 = cli_plan(root, "c", *args)
    assert names(p1) == [f"{hour_dir(now - 2 * H)}/a.log"] and p1["tracking"] == "listing"
    assert cli_plan(root, "c", *args)["plan_id"] == p1["plan_id"]
    assert cli_ack(root, "c", p1["plan_id"])["already_acked"] is False
    assert cli_ack(root, "c", p1["plan_id"])["already_acked"] is True  # a retried ack is a no-op
    put(root, f"{hour_dir(now - 2 * H)}/b.log", now - 5 * H)  # late, with an old mtime
    p2 = cli_plan(root, "c")  # the layout is remembered by the consumer
    assert names(p2) == [f"{hour_dir(now - 2 * H)}/b.log"]
    proc = run_trib("files", str(root), "--consumer", "c")
    assert proc.stdout.split() == names(p2) and f"trib consumer ack {root} c {p2['plan_id']}" in proc.stderr


def test_concurrent_planners_share_one_plan(tmp_path):
    root = tmp_path / "logs"
    for h in range(20):
        put(root, f"{hour_dir(T0 + h * H)}/f.log", T0 + h * H)
    src = Source.open(str(root), layout=Layout(LAYOUT, PARTITION))
    ids, errors = [], []

    def go():
        try:
            ids.append(Consumer(src, "c").plan(lookback_ms=100_000 * DAY).plan_id)
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=go) for _ in range(6)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors and len(set(ids)) == 1
    assert len(list((root / "_tributary/consumers/c").glob("plan-*.json"))) == 1


def test_concurrent_acks_of_one_plan_commit_once(tmp_path):
    root = tmp_path / "logs"
    put(root, f"{hour_dir(T0)}/f.log", T0)
    src = Source.open(str(root), layout=Layout(LAYOUT, PARTITION))
    plan = Consumer(src, "c").plan(lookback_ms=100_000 * DAY)
    results = []
    threads = [threading.Thread(target=lambda: results.append(Consumer(src, "c").ack(plan.plan_id)))
               for _ in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(results) == 8 and sum(not r.already_acked for r in results) == 1
    assert sorted(p.name for p in (root / "_tributary/consumers/c").glob("state-*")) == [f"state-{1:020d}.json"]


def test_ack_racing_a_reset_never_loses_a_state(tmp_path):
    root = tmp_path / "logs"
    put(root, f"{hour_dir(T0)}/f.log", T0)
    src = Source.open(str(root), layout=Layout(LAYOUT, PARTITION))
    for _ in range(5):
        c = Consumer(src, "c")
        plan = c.plan(lookback_ms=100_000 * DAY)
        before = plan.base_version
        won, lost = [], []

        def run(fn):
            try:
                won.append(fn())
            except (StalePlanError, CommitConflictError) as e:
                lost.append(e)
        ts = [threading.Thread(target=run, args=(lambda: Consumer(src, "c").ack(plan.plan_id),)),
              threading.Thread(target=run, args=(lambda: Consumer(src, "c").reset("discard-plan", execute=True),))]
        [t.start() for t in ts]
        [t.join() for t in ts]
        # Every success is exactly one new state version; a loser changed nothing.
        assert len(won) + len(lost) == 2 and won
        assert c.current().version == before + len(won)


def test_only_the_last_few_states_are_kept(tmp_path):
    root = tmp_path / "logs"
    root.mkdir()
    src = Source.open(str(root), layout=Layout(LAYOUT, PARTITION))
    c = Consumer(src, "c")
    for k in range(7):
        put(root, f"{hour_dir(T0 + k * H)}/f{k}.log", T0)
        c.ack(c.plan(lookback_ms=100_000 * DAY).plan_id)
    files = sorted(p.name for p in (root / "_tributary/consumers/c").iterdir())
    assert [f for f in files if f.startswith("state-")] == [f"state-{v:020d}.json" for v in (5, 6, 7)]
    assert all(int(f[5:25]) >= 5 for f in files if f.startswith("plan-"))
    assert c.current().delivered_files == 7


def test_reset_variants(table):
    c = Consumer(table, "etl")
    c.ack(c.plan().plan_id)
    assert c.current().manifest_version == 3
    stale = c.plan()
    c.reset("version", to_version=1, execute=True)
    with pytest.raises(StalePlanError, match="reset to version 1"):
        c.ack(stale.plan_id)
    assert [f.version for f in c.plan().files] == [2, 3]
    c.reset("earliest", execute=True)
    assert len(c.plan().files) == 3  # forgets everything: a full-state read (no versions)
    c.reset("latest", execute=True)
    assert c.plan().files == () and c.current().note == "reset to latest"
    first = c.plan()
    with pytest.raises(PendingPlanError):
        c.plan(mode="mtime")
    c.reset("discard-plan", execute=True)
    assert c.plan().plan_id != first.plan_id


def test_pending_plan_made_with_other_options_is_refused_not_replaced(tmp_path):
    root = tmp_path / "logs"
    put(root, f"{hour_dir(T0)}/f.log", T0)
    p = cli_plan(root, "c", "--layout", LAYOUT, "--lookback", "100000d")
    proc = run_trib("files", str(root), "--consumer", "c", "--lookback", "7d")
    assert proc.returncode == 5 and "--discard-plan" in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert cli_plan(root, "c")["plan_id"] == p["plan_id"]


@contextmanager
def read_only(path: Path):
    """Make ``path`` truly read-only: a read-only bind mount as root, else permission bits."""
    if os.geteuid() != 0:
        modes = {d: os.stat(d).st_mode for d, _, _ in os.walk(path)}
        for d in modes:
            os.chmod(d, 0o555)
        try:
            yield
        finally:
            for d, m in modes.items():
                os.chmod(d, m)
        return
    if subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True).returncode:
        pytest.skip("cannot bind-mount here")
    try:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(path)], capture_output=True).returncode:
            pytest.skip("cannot remount read-only here")
        yield
    finally:
        subprocess.run(["umount", str(path)], capture_output=True)


def test_read_only_table_keeps_consumer_state_in_a_state_dir(tmp_path):
    root = tmp_path / "logs"
    put(root, "2020_06_24/00/a.log", T0)
    state = tmp_path / "state"
    args = ("--layout", LAYOUT, "--lookback", "100000d")
    with read_only(root):
        ro = run_trib("files", str(root), *args, "--consumer", "c")
        assert ro.returncode == 7 and "--state-dir" in ro.stderr and len(ro.stderr.splitlines()) == 1
        assert run_trib("files", str(root), "--all", "--layout", LAYOUT).stdout.split() == ["2020_06_24/00/a.log"]
        plan = cli_plan(root, "c", *args, "--state-dir", str(state))
        assert names(plan) == ["2020_06_24/00/a.log"]
        cli_ack(root, "c", plan["plan_id"], "--state-dir", str(state))
        assert sorted(p.name for p in (state / "c").iterdir())[-1] == f"state-{1:020d}.json"
        assert cli_plan(root, "c", "--state-dir", str(state))["files"] == []
    assert not (root / "_tributary").exists()
    # The same state dir refuses to serve a different table under the same consumer name.
    other = tmp_path / "other"
    put(other, "2020_06_24/00/b.log", T0)
    wrong = run_trib("consumer", "show", str(other), "c", "--state-dir", str(state))
    assert wrong.returncode == 3 and "belongs to table" in wrong.stderr


def test_unchanged_directories_are_skipped_and_full_scan_finds_rewrites(tmp_path):
    root = tmp_path / "logs"
    for h in range(24):
        put(root, f"{hour_dir(T0 + h * H)}/f.log", T0 + h * H)
    age_dirs(root, T0 + DAY)
    src = Source.open(str(root), layout=Layout(LAYOUT, PARTITION))
    c = Consumer(src, "c")
    first = c.plan(lookback_ms=100_000 * DAY)
    assert len(first.files) == 24
    c.ack(first.plan_id)
    p = c.plan()
    assert p.files == () and p.stats["unchanged_dirs"] == 24 and p.stats["listed_entries"] == 0
    c.ack(p.plan_id)
    # A new file changes its directory's mtime, so that directory alone is listed.
    put(root, f"{hour_dir(T0 + 3 * H)}/late.log", T0 - 7 * DAY)
    p = c.plan()
    assert [f.path for f in p.files] == [f"{hour_dir(T0 + 3 * H)}/late.log"]
    assert p.stats["unchanged_dirs"] == 23
    c.ack(p.plan_id)
    # An in-place rewrite leaves the directory alone: only a full scan sees it.
    age_dirs(root, T0 + 2 * DAY)
    c.ack(c.plan(full_scan=True).plan_id)  # record the aged directory mtimes
    put(root, f"{hour_dir(T0 + 5 * H)}/f.log", T0 + 5 * H + 1, b"y\n")  # same size, other bytes (growth: a range)
    p = c.plan()
    assert p.files == () and p.conflicts == ()
    c.ack(p.plan_id)
    p = c.plan(full_scan=True)  # a rewrite holds its partition back unless acknowledged; the rest goes on
    assert p.files == () and [(h.path, h.changes[0].split()[0]) for h in p.held] == [(hour_dir(T0 + 5 * H), "f.log")]
    assert [h.path for h in c.ack(p.plan_id).held] == [hour_dir(T0 + 5 * H)]  # the CLI's ack exits 17 on it
    p = c.plan(full_scan=True, allow_changed=True)
    assert p.files == () and [x.path for x in p.conflicts] == [f"{hour_dir(T0 + 5 * H)}/f.log"]
    assert p.conflicts[0].delivered.size == 2 and p.conflicts[0].now.size == 2
    c.ack(p.plan_id)
    assert c.plan(full_scan=True).conflicts == ()  # reported once; the ack acknowledged it


def test_min_age_defers_young_files(tmp_path):
    root = tmp_path / "logs"
    now = T0 + 10 * H
    put(root, f"{hour_dir(T0)}/old.log", now - 10 * 60_000)
    put(root, f"{hour_dir(T0)}/young.log", now - 60_000)
    src = Source.open(str(root), layout=Layout(LAYOUT, PARTITION))
    c = Consumer(src, "c")
    p = c.plan(lookback_ms=100_000 * DAY, min_age_ms=5 * 60_000, now_ms=now)
    assert [f.path.rsplit("/")[-1] for f in p.files] == ["old.log"] and p.deferred == 1
    c.ack(p.plan_id)
    p = c.plan(min_age_ms=5 * 60_000, now_ms=now + 10 * 60_000)
    assert [f.path.rsplit("/")[-1] for f in p.files] == ["young.log"] and p.deferred == 0


def test_ledger_is_bounded_by_the_horizon_and_sealed_partitions_still_report(tmp_path):
    root = tmp_path / "logs"
    for h in range(72):
        put(root, f"{hour_dir(T0 + h * H)}/f.log", T0 + h * H + 1)
    src = Source.open(str(root), layout=Layout(LAYOUT, PARTITION))
    c = Consumer(src, "c")
    now = T0 + 72 * H
    p = c.plan(lookback_ms=DAY, now_ms=now)
    # The first plan delivers what exists (earliest); partitions past the horizon end sealed at once.
    assert len(p.files) == 72 and p.baseline is None
    st = c.ack(p.plan_id, now_ms=now).state
    assert len(st.ledger) == 24 and len(st.sealed) == 48
    now += 12 * H
    p = c.plan(now_ms=now, full_scan=True)
    c.ack(p.plan_id, now_ms=now)
    st = c.current()
    assert len(st.ledger) == 12 and len(st.sealed) == 60  # compacted as the horizon moved
    # A new file in a sealed partition is told exactly, whatever its mtime: the seal kept the partition's files.
    put(root, f"{hour_dir(T0 + 2 * H)}/new.log", now + 1)
    put(root, f"{hour_dir(T0 + 4 * H)}/rsynced.log", T0)
    p = c.plan(now_ms=now + 2, min_age_ms=0)
    assert [f.path for f in p.files] == [f"{hour_dir(T0 + 2 * H)}/new.log", f"{hour_dir(T0 + 4 * H)}/rsynced.log"]
    assert p.beyond_horizon == () and p.held == ()
    c.ack(p.plan_id, now_ms=now + 2)
    # A delivered file removed from a sealed partition holds that partition back, the rest goes on.
    (root / hour_dir(T0 + 5 * H) / "f.log").unlink()
    put(root, f"{hour_dir(T0 + 5 * H)}/g.log", T0)
    put(root, f"{hour_dir(T0 + 6 * H)}/h.log", T0)
    p = c.plan(now_ms=now + 3, min_age_ms=0)
    assert [f.path for f in p.files] == [f"{hour_dir(T0 + 6 * H)}/h.log"]
    assert [(h.path, h.changes) for h in p.held] == [(hour_dir(T0 + 5 * H), ("f.log was removed after it was delivered",))]
    assert c.ack(p.plan_id, now_ms=now + 3).held == p.held
    again = c.plan(now_ms=now + 4, min_age_ms=0)
    assert again.files == () and again.held == p.held  # held until resolved
    c.ack(again.plan_id, now_ms=now + 4)
    c.replay(hour_dir(T0 + 5 * H), execute=True, now_ms=now + 5)
    p = c.plan(now_ms=now + 6, min_age_ms=0)
    assert [f.path for f in p.files] == [f"{hour_dir(T0 + 5 * H)}/g.log"] and p.held == ()
    c.ack(p.plan_id, now_ms=now + 6)
    again = c.plan(now_ms=now + 7, full_scan=True, min_age_ms=0)
    assert again.files == () and again.held == ()
    c.ack(again.plan_id, now_ms=now + 7)
    # A partition deleted by retention just leaves the state.
    shutil.rmtree(root / hour_dir(T0))
    c.ack(c.plan(now_ms=now + 4).plan_id, now_ms=now + 4)
    assert hour_dir(T0) not in c.current().sealed


@pytest.mark.s3
def test_listing_consumer_on_s3(s3_root, s3_server):
    st = open_storage(s3_root, s3_server)
    now = int(datetime.now(timezone.utc).timestamp() * 1000)
    st.write(f"{hour_dir(now - H)}/a.log", b"a")
    src = Source.open(s3_root, s3_server, Layout(LAYOUT, PARTITION))
    c = Consumer(src, "c", options=s3_server)
    p = c.plan(min_age_ms=0)
    assert [f.path for f in p.files] == [f"{hour_dir(now - H)}/a.log"] and p.stats["unchanged_dirs"] == 0
    assert c.plan(min_age_ms=0).plan_id == p.plan_id
    c.ack(p.plan_id)
    st.write(f"{hour_dir(now - 3 * H)}/b.log", b"b")
    st.write(f"{hour_dir(now - 3 * H)}/_SUCCESS", b"")
    p = c.plan(min_age_ms=0)
    assert [f.path for f in p.files] == [f"{hour_dir(now - 3 * H)}/b.log"]
    c.ack(p.plan_id)
    assert c.plan(min_age_ms=0).files == ()
    assert [r["consumer"] for r in list_consumers(src)] == ["c"]


def test_list_and_show(table):
    p = cli_plan(table.uri, "a")
    cli_ack(table.uri, "a", p["plan_id"])
    cli_plan(table.uri, "b")
    doc = json.loads(run_trib("consumer", "list", table.uri, "--json").stdout)
    rows = {r["consumer"]: r for r in doc["consumers"]}
    assert rows["a"]["version"] == 1 and rows["a"]["manifest_version"] == 3 and rows["a"]["pending"] is None
    assert rows["b"]["version"] == 0 and rows["b"]["pending"]["files"] == 3
    show = run_trib("consumer", "show", table.uri, "a")
    assert show.returncode == 0 and "table version 3" in show.stdout
    assert run_trib("consumer", "list", table.uri).stdout.count("\n") == 3


def test_errors_are_tributary_errors(table):
    with pytest.raises(TributaryError):
        Consumer(table, "bad name")
