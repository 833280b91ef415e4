"""Issue 19, item 3: a run on a manifest-tracked table checks its WHOLE scope for untracked files.

The trap: a non-empty manifest answer only probed the partition directories it
touched, so a file Flume, rsync or a Spark job dropped into any other hour of
the run's scope was never seen, and ``trib files``, a consumer and ``trib etl
run`` exited 0 with it left behind ("the next empty answer reports it", which
never comes on a busy table). Now a run that can be refused lists its scope
whatever its answer holds; only ``--allow-untracked`` (the explicit
fast-but-narrow choice) keeps the cheap probe. Real files, the real CLI in
subprocesses.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

from conftest import run_trib
from helpers import one_line_error, put, source_users
from tributary_read import Table, TableWriter
from tributary_read.table.layout import Layout

pytestmark = pytest.mark.integration

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
PARTITION = "dt={yyyy}{MM}{dd}{HH}"
LAY = Layout(LAYOUT, PARTITION)
H = 3_600_000
NOW = int(time.time() * 1000)
T0 = NOW - NOW % H - 36 * H  # event hours: inside a consumer's 7-day lookback
W = NOW - NOW % H - 2 * H  # a whole past hour of commit and modification times: the run's window


def iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def hour_dir(hour: int) -> str:
    return LAY.for_time(T0 + hour * H).path


def manifest_table(root: Path) -> Table:
    proc = run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION,
                    "--tracking", "manifest")
    assert proc.returncode == 0, proc.stderr
    return Table.load(str(root))


def commit_hour(table: Table, hour: int, at: int | None = None, monkeypatch=None) -> list[str]:
    """trib's writer commits one file into event hour ``hour`` (stamped ``at`` by the writer's clock)."""
    if at is not None:
        monkeypatch.setenv("TRIB_CLOCK_SKEW_MS", str(at - int(time.time() * 1000)))
    w = TableWriter(table)
    w.write(json.dumps({"h": hour, "ts": T0 + hour * H}).encode(), T0 + hour * H + 1)
    paths = sorted(e.path for e in w.flush())
    w.commit()
    if at is not None:
        monkeypatch.delenv("TRIB_CLOCK_SKEW_MS")
    return paths


def foreign(root: Path, hour: int, mtime: int, tag: str = "late") -> str:
    """A file another tool drops into event hour ``hour``'s directory, modified at ``mtime``."""
    rel = f"{hour_dir(hour)}/FlumeData.{tag}.{hour}.log"
    put(root, rel, mtime, f'{{"h": {hour}}}\n'.encode())
    return rel


# -- a. a window read whose answer is not empty ---------------------------------------------------
@pytest.mark.parametrize("window", ["start-end", "schedule-time"])
def test_window_read_with_trib_files_refuses_a_foreign_file_in_another_hour(tmp_path, monkeypatch, window):
    root = tmp_path / "raw"
    t = manifest_table(root)
    mine = commit_hour(t, 5, at=W + 30 * 60_000, monkeypatch=monkeypatch)  # trib commits hour 05
    late = foreign(root, 3, W + 40 * 60_000)  # another tool drops a late file into hour 03
    args = (("--start", iso(W), "--end", iso(W + H - 1000)) if window == "start-end"
            else ("--schedule-time", iso(W + H), "--period", "1h"))
    # Before: the answer (hour 05's file) was probed in hour 05 only: exit 0, the late file left behind.
    line = one_line_error(run_trib("files", str(root), *args), 13,
                    "1 files in the table modified in the read's window are not tracked", late,
                    "--tracking both", "--allow-untracked")
    assert "allow_untracked=True" not in line
    # The explicit fast-but-narrow choice: the manifest's answer, probed in the hours it touches only.
    proc = run_trib("files", str(root), "--json", "--allow-untracked", *args)
    assert proc.returncode == 0, proc.stderr
    assert [f["path"] for f in json.loads(proc.stdout)["files"]] == mine
    # A foreign file in an hour of the answer is still found (and warned about) by that probe.
    same = foreign(root, 5, W + 41 * 60_000)
    proc = run_trib("files", str(root), "--json", "--allow-untracked", *args)
    assert proc.returncode == 0 and json.loads(proc.stdout)["untracked"]["examples"] == [same]
    assert "1 files in the partitions of the answer modified in the read's window" in proc.stderr
    one_line_error(run_trib("files", str(root), *args), 13, "2 files in the table modified in the read's window")
    # The fix the message names delivers both.
    assert run_trib("table", "set", str(root), "--tracking", "both").returncode == 0
    proc = run_trib("files", str(root), "--json", *args)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert sorted(f["path"] for f in json.loads(proc.stdout)["files"]) == sorted([*mine, late, same])


def test_version_range_with_trib_files_refuses_a_foreign_file_in_another_hour(tmp_path):
    root = tmp_path / "raw"
    t = manifest_table(root)
    commit_hour(t, 4)
    time.sleep(0.01)
    mine = commit_hour(t, 5)
    late = foreign(root, 2, int(time.time() * 1000) + 1000)  # modified after commit 1
    one_line_error(run_trib("files", str(root), "--mode", "manifest", "--since-version", "1"), 13,
             "1 files in the table modified in the read's version range are not tracked", late)
    proc = run_trib("files", str(root), "--json", "--mode", "manifest", "--since-version", "1", "--allow-untracked")
    assert proc.returncode == 0 and [f["path"] for f in json.loads(proc.stdout)["files"]] == mine


# -- b. a consumer whose plan is not empty ------------------------------------------------------
def test_consumer_with_new_commits_refuses_foreign_files_in_other_hours(tmp_path):
    root = tmp_path / "raw"
    t = manifest_table(root)
    commit_hour(t, 4)
    first = json.loads(run_trib("files", str(root), "--consumer", "etl", "--json").stdout)
    assert run_trib("consumer", "ack", str(root), "etl", first["plan_id"]).returncode == 0
    mine = commit_hour(t, 6)
    late = foreign(root, 2, int(time.time() * 1000) - 120_000)  # older than the default min_age
    # Before: the plan (hour 06's commit) probed hour 06 only: exit 0, the late file never delivered.
    one_line_error(run_trib("files", str(root), "--consumer", "etl"), 13, "1 files in the table are not tracked", late)
    assert not (root / f"_tributary/consumers/etl/plan-{1:020d}.json").exists()  # a refused plan is not saved
    # A copy that kept its old mtime (rsync -t, cp -p) is the consumer's too: its scope is the whole table.
    kept = foreign(root, 1, T0 + H + 60_000, tag="rsync")
    one_line_error(run_trib("files", str(root), "--consumer", "etl"), 13, "2 files in the table are not tracked")
    # The opt-out: the probe of hour 06 finds nothing to warn about; the plan is saved.
    proc = run_trib("files", str(root), "--consumer", "etl", "--json", "--allow-untracked")
    assert proc.returncode == 0, proc.stderr
    assert [f["path"] for f in json.loads(proc.stdout)["files"]] == mine
    # That plan only probed: a run without the opt-out checks the whole table before reusing it.
    one_line_error(run_trib("files", str(root), "--consumer", "etl"), 13, "2 files in the table are not tracked")
    assert run_trib("table", "set", str(root), "--tracking", "both").returncode == 0
    assert run_trib("consumer", "reset", str(root), "etl", "--discard-plan", "--execute").returncode == 0
    doc = json.loads(run_trib("files", str(root), "--consumer", "etl", "--json").stdout)
    assert sorted(f["path"] for f in doc["files"]) == sorted([*mine, late, kept]) and "untracked" not in doc


# -- c. an ETL run over a manifest window --------------------------------------------------------
def test_etl_window_input_with_trib_files_refuses_a_foreign_file_in_another_hour(tmp_path, monkeypatch):
    raw, out = tmp_path / "raw", tmp_path / "events"
    t = manifest_table(raw)
    assert run_trib("table", "create", str(out), "--layout", LAYOUT, "--partition", PARTITION,
                    "--format", "parquet").returncode == 0
    commit_hour(t, 5, at=W + 30 * 60_000, monkeypatch=monkeypatch)
    late = foreign(raw, 3, W + 40 * 60_000)
    (tmp_path / "etl.sql").write_text("SELECT h, ts FROM raw\n")
    (tmp_path / "job.toml").write_text(textwrap.dedent("""\
        [job]
        name = "hourly"
        sql = "etl.sql"

        [[inputs]]
        table = "raw"
        view = "raw"
        mode = "manifest"
        schema = "h INT, ts BIGINT"

        [output]
        table = "events"
        time_column = "ts"
        """))
    # Before: hour 05's file was read and committed, exit 0, the late file left behind.
    line = one_line_error(run_trib("etl", "run", str(tmp_path / "job.toml"), "--schedule-time", iso(W + H), "-q"), 13,
                    "input raw: 1 files in the table modified in the read's window are not tracked", late,
                    "allow_untracked = true")
    assert "--allow-untracked" not in line
    assert Table.load(str(out)).log.latest_version() == 0  # nothing committed


def test_one_owner_decides_the_scope():
    """Callers pass what they read; only tracking.py turns it into a scope and decides how much to list."""
    users = source_users
    assert users(r"\bversion_span\(|\bPROBE_DIRS\b|\b_probe\(") == {"tributary_read/read/tracking.py"}
    assert users(r"\bchecks_completely\(") == {"tributary_read/read/tracking.py", "tributary_read/read/consumer.py",
                                                "tributary_read/read/consumer_tracking.py"}
