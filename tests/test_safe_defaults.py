"""Issue 19, safe defaults: data other tools write is never left behind by a run that exits 0.

The trap (Why 2): a raw table made on an empty directory before its feed starts
tracked the manifest only, so every file Flume, rsync or a Spark job dropped in
later was never delivered, with a warning and exit 0. Now a new table tracks
``both``; ``--tracking manifest`` is the explicit fast choice, and a run on such
a table that would leave untracked files of its scope unread exits 13
(``UntrackedDataError``) unless it opts out (``--allow-untracked``,
``allow_untracked = true``). Real files, the real CLI in subprocesses.
"""

from __future__ import annotations

import json
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import run_trib
from helpers import one_line_error, put, source_users
from tributary_read.table.config import Table
from tributary_read.table.layout import Layout

pytestmark = pytest.mark.integration

LAYOUT = "{yyyy}_{MM}_{dd}/{HH}"
PARTITION = "dt={yyyy}{MM}{dd}{HH}"
LAY = Layout(LAYOUT, PARTITION)
H = 3_600_000
NOW = int(time.time() * 1000)
T0 = NOW - NOW % H - 36 * H  # inside a consumer's 7-day lookback


def hour_dir(ms: int) -> str:
    return LAY.for_time(ms).path


def iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def create(root: Path, *extra: str):
    proc = run_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, *extra)
    assert proc.returncode == 0, proc.stderr
    return proc


def drop(root: Path, hour: int, n: int, tag: str = "") -> list[str]:
    """What another tool leaves in hour ``hour``'s directory: ``n`` files of its own naming."""
    paths = [f"{hour_dir(T0 + hour * H)}/FlumeData{tag}.{hour}.{i}.log" for i in range(n)]
    for i, p in enumerate(paths):
        put(root, p, T0 + hour * H + (i + 1) * 60_000, f"event {hour}.{i}\n".encode())
    return paths


def consumer_run(root: Path, *extra: str):
    return run_trib("files", str(root), "--consumer", "etl", "--json", *extra)


# -- the Why-2 trap --------------------------------------------------------------------------
def test_a_table_made_before_its_feed_delivers_every_file_once(tmp_path):
    root = tmp_path / "raw"
    root.mkdir()
    proc = create(root)  # an empty directory, no --tracking: the raw table made before its feed starts
    assert "tracking both" in proc.stdout and proc.stderr == ""
    dropped, delivered = [], Counter()
    for run in range(8):  # hourly runs; the other tool writes the new hour and, now and then, a late file
        dropped += drop(root, run, 3)
        if run % 3 == 2:
            dropped += drop(root, run - 2, 1, tag="-late")
        proc = consumer_run(root)
        assert proc.returncode == 0 and "untracked" not in proc.stderr, proc.stderr
        doc = json.loads(proc.stdout)
        delivered.update(f["path"] for f in doc["files"])
        ack = run_trib("consumer", "ack", str(root), "etl", doc["plan_id"])
        assert ack.returncode == 0, ack.stderr
    assert sorted(delivered) == sorted(dropped) and set(delivered.values()) == {1}  # each once, none lost
    assert json.loads(consumer_run(root).stdout)["files"] == []


# -- explicit manifest tracking: refuse, or opt out ---------------------------------------------
def test_manifest_consumer_over_untracked_files_exits_13_unless_allowed(tmp_path):
    root = tmp_path / "raw"
    create(root, "--tracking", "manifest")
    drop(root, 0, 2)
    line = one_line_error(consumer_run(root), 13, "2 files in the table are not tracked",
                    f"trib table set file://{root} --tracking both", "--allow-untracked")
    assert "allow_untracked=True" not in line  # the CLI's flag, not the library's parameter
    assert not list((root / "_tributary").glob("consumers/etl/plan-*"))  # a refused plan is not saved
    proc = consumer_run(root, "--allow-untracked")
    assert proc.returncode == 0 and "2 files in the table are not tracked" in proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["files"] == [] and doc["untracked"]["count"] == 2
    # The pending plan was made with the opt-out; a run without it is still refused.
    one_line_error(consumer_run(root), 13, "--allow-untracked")
    # The fix the message names: the consumer then delivers them.
    assert run_trib("table", "set", str(root), "--tracking", "both").returncode == 0
    assert run_trib("consumer", "reset", str(root), "etl", "--discard-plan", "--execute").returncode == 0
    doc = json.loads(consumer_run(root).stdout)
    assert len(doc["files"]) == 2 and "untracked" not in doc


@pytest.mark.parametrize("mode", ["auto", "manifest"])
def test_manifest_window_reads_refuse_only_untracked_files_in_their_window(tmp_path, mode):
    root = tmp_path / "raw"
    create(root, "--tracking", "manifest")
    drop(root, 0, 2)  # modified in [T0, T0 + 1h)
    inside = ("--start", iso(T0), "--end", iso(T0 + H))
    one_line_error(run_trib("files", str(root), "--mode", mode, *inside), 13,
             "2 files in the table modified in the read's window are not tracked", "--allow-untracked")
    proc = run_trib("files", str(root), "--mode", mode, "--json", "--allow-untracked", *inside)
    assert proc.returncode == 0 and json.loads(proc.stdout)["untracked"]["count"] == 2
    assert "are not tracked by the table's manifest" in proc.stderr
    # A window the files were not modified in would not have returned them: not this read's data.
    proc = run_trib("files", str(root), "--mode", mode, "--json", "--start", iso(T0 + 2 * H), "--end", iso(NOW))
    assert proc.returncode == 0 and "untracked" not in json.loads(proc.stdout) and proc.stderr == ""


def test_etl_run_over_untracked_files_exits_13_unless_the_input_allows_it(tmp_path):
    raw, out = tmp_path / "raw", tmp_path / "events"
    create(raw, "--tracking", "manifest")
    create(out, "--format", "parquet")
    drop(raw, 0, 2)
    (tmp_path / "etl.sql").write_text("SELECT * FROM raw\n")
    job = textwrap.dedent("""\
        [job]
        name = "hourly"
        sql = "etl.sql"

        [[inputs]]
        table = "raw"
        view = "raw"
        mode = "consumer"
        {extra}
        [output]
        table = "events"
        time_column = "ts"
        """)
    (tmp_path / "job.toml").write_text(job.format(extra=""))
    at = iso(T0 + 2 * H)
    line = one_line_error(run_trib("etl", "run", str(tmp_path / "job.toml"), "--schedule-time", at, "-q"), 13,
                    "input raw: 2 files in the table are not tracked", "--tracking both",
                    "allow_untracked = true")
    assert "--allow-untracked" not in line  # the job file's key, not a flag of `trib etl run`
    assert Table.load(str(out)).log.latest_version() == 0  # nothing committed
    (tmp_path / "job.toml").write_text(job.format(extra="allow_untracked = true\n"))
    # The manifest holds nothing: the run commits the empty hour without Spark, and says what it left.
    proc = run_trib("etl", "run", str(tmp_path / "job.toml"), "--schedule-time", at, "--json")
    assert proc.returncode == 0, proc.stderr
    (inp,) = json.loads(proc.stdout)["inputs"]
    assert inp["files"] == 0 and inp["untracked"]["count"] == 2
    assert "input raw: warning: 2 files in the table are not tracked" in proc.stderr
    (tmp_path / "job.toml").write_text(job.format(extra='allow_untracked = "yes"\n'))
    one_line_error(run_trib("etl", "run", str(tmp_path / "job.toml"), "--schedule-time", at), 3,
             "allow_untracked must be true or false")


def test_a_report_is_not_a_run_it_notes_untracked_files(tmp_path):
    root = tmp_path / "raw"
    create(root, "--tracking", "manifest")
    drop(root, 0, 2)
    proc = run_trib("report", "lateness", str(root), "--json")
    assert proc.returncode == 0, proc.stderr
    assert "2 files in the table are not tracked" in proc.stdout + proc.stderr


def test_one_owner_decides_the_refusal():
    """Front ends pass the opt-out down; only tracking.py decides (refuse_untracked) and raises."""
    users = source_users
    assert users(r"(?<!class )\bUntrackedDataError\(") == {"tributary_read/read/tracking.py"}
    assert users(r"\brefuse_untracked\(") == {"tributary_read/read/tracking.py", "tributary_read/read/resolve.py",
                                               "tributary_read/read/consumer.py"}
    assert users(r"\bcheck_untracked\(") == {"tributary_read/read/tracking.py", "tributary_read/read/resolve.py",
                                              "tributary_read/read/consumer_tracking.py"}
    # A new table's tracking is the table layer's default; no front end picks one.
    fronts = ("cli/", "tributary_read/etl/", "tributary_read/spark/", "tributary_read/write/")
    assert not {n for n in users(r"Tracking\.(MANIFEST|BOTH|LISTING)|DEFAULT_TRACKING") if n.startswith(fronts)}


# -- issue 33: uncommitted bytes stay hidden; an old table keeps its protocol --------------------
def _hidden_and_visible(root: Path) -> tuple[list[str], list[str]]:
    files = [p for p in root.rglob("*") if p.is_file() and "_tributary" not in p.parts]
    return ([p.name for p in files if p.name.startswith(".")], [p.name for p in files if not p.name.startswith(".")])


def test_a_new_table_keeps_a_writers_uncommitted_bytes_hidden(tmp_path):
    from conftest import invoke_trib
    from tributary_read.write.writer import TableWriter

    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    show = invoke_trib("table", "show", str(root), check=True).stdout
    assert "protocol  rename: files stay hidden until their commit" in show, show
    w = TableWriter(Table.load(str(root)))
    w.write(b'{"id": 1}', T0)
    w.flush()  # bytes on disk, durable, not committed: what a kill -9 here would leave
    hidden, visible = _hidden_and_visible(root)
    assert len(hidden) == 1 and hidden[0].endswith(".inprogress") and visible == []
    w.commit()
    hidden, visible = _hidden_and_visible(root)
    assert hidden == [] and len(visible) == 1


@pytest.mark.parametrize("stored", ["direct", None], ids=["direct", "no-key"])
def test_a_table_created_before_keeps_its_protocol_until_set(tmp_path, stored):
    from conftest import invoke_trib
    from tributary_read.table.config import PROPERTIES
    from tributary_read.write.writer import TableWriter

    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    doc = json.loads((root / PROPERTIES).read_text())
    if stored is None:
        del doc["protocol"]  # a table.json from before protocols were stored
    else:
        doc["protocol"] = stored
    (root / PROPERTIES).write_text(json.dumps(doc))
    show = json.loads(invoke_trib("table", "show", str(root), "--json", check=True).stdout)
    assert show["protocol"] == "direct"
    assert "protocol  direct: files appear under their final names before their commit" in \
        invoke_trib("table", "show", str(root), check=True).stdout
    w = TableWriter(Table.load(str(root)))
    w.write(b'{"id": 1}', T0)
    w.flush()
    assert _hidden_and_visible(root)[1]  # direct, as before: final names at once
    w.commit()
    # The migration: later writers hide their files; the direct commit reads as it was written.
    out = invoke_trib("table", "set", str(root), "--protocol", "rename", check=True).stdout
    assert "protocol direct -> rename" in out
    w = TableWriter(Table.load(str(root)))
    w.write(b'{"id": 2}', T0)
    w.flush()
    hidden, visible = _hidden_and_visible(root)
    assert len(hidden) == 1 and len(visible) == 1
    w.commit()
    files = json.loads(invoke_trib("files", str(root), "--all", "--mode", "manifest", "--json", check=True).stdout)
    assert sum(f["records"] for f in files["files"]) == 2
    one_line_error(invoke_trib("table", "set", str(root)), 2, "give --tracking, --protocol")


def test_one_owner_decides_a_writers_protocol():
    """ingest, the Spark writer and the ETL ask the table (Table.protocol_for); no front end picks a default."""
    assert source_users(r"\bDEFAULT_PROTOCOL\b") == {"tributary_read/table/config.py"}
    assert source_users(r"config\.protocol\b") <= {"tributary_read/table/config.py", "cli/table.py"}
    assert {"tributary_read/write/writer.py", "tributary_read/spark/write.py"} <= \
        source_users(r"\.protocol_for\(")
    assert not source_users(r"Protocol\.DIRECT") - {"tributary_read/table/config.py"}
